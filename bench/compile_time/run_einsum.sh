#!/usr/bin/env bash
# Compile-time benchmark of typed einsum instantiations (issue 4: "each
# distinct einsum instantiation adds under 1 s to a TU's compile time with
# GCC -O2; measure with a generated TU of 20 equations").
#
#   bench/compile_time/run_einsum.sh          # from the repo root (or anywhere)
#   RUNS=5 NS="0 20" STATES=head bench/compile_time/run_einsum.sh
#   INTO=1 bench/compile_time/run_einsum.sh   # einsum_into<...>(out, ...) TUs
#
# For N in $NS (default 0 1 5 10 20) gen_einsum_tu.py writes a TU with N
# distinct typed einsum instantiations (N = 0: the same includes and one
# trivial function). Each TU is compiled $RUNS times (default 3), serially,
# with
#
#   g++ -std=c++20 -O2 -I<include> -c        clang++-14 -std=c++20 -O2 -I<include> -c
#
# round-robin over N (so a slow spell of a shared machine is spread over all
# N instead of landing on one), timed by /usr/bin/time when present (wall,
# CPU = user + sys, peak RSS), else by bash's `time` (no RSS). Medians are
# reported, (t(N) - t(0)) / N: seconds per instantiation, and the marginal
# cost between consecutive N (CPU time): the first float and the first double
# instantiation also pay for the engine they share (kernels, planner), so
# (t(1) - t(0)) / 1 is far above the cost of one more equation.
#
# Header states ($STATES, default "worktree head"):
#   worktree  a copy of include/ taken when the script starts (concurrent
#             edits cannot mix two versions of the headers in one run)
#   head      include/ of the committed HEAD (`git archive HEAD include`;
#             the work tree is not touched)
# When include/ has no uncommitted changes, only one is measured.
#
# Last, clang -ftime-trace of the N = 0 and largest-N TUs (first state
# measured; head by default) summarised by summarize_trace.py.
#
# Outputs (under $OUT, default build/compile_time_einsum/): raw.csv (every
# run), results.md (tables and trace summary), trace.md, tu_*.json; and
# results.md is copied to bench/results/compile_time_einsum.md ($RESULT).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
out="${OUT:-${root}/build/compile_time_einsum}"
result="${RESULT:-${root}/bench/results/compile_time_einsum.md}"
runs="${RUNS:-3}"
ns="${NS:-0 1 5 10 20}"
states="${STATES:-worktree head}"
gxx="${GXX:-g++}"
clangxx="${CLANGXX:-clang++-14}"
into="${INTO:-0}"
mkdir -p "${out}"
cd "${out}"
case " ${ns} " in *" 0 "*) ;; *) ns="0 ${ns}" ;; esac # the baseline is always needed

# Header snapshots: worktree/include and head/include.
if [[ " ${states} " == *" worktree "* && " ${states} " == *" head "* ]] &&
  git -C "${root}" diff --quiet HEAD -- include &&
  [ -z "$(git -C "${root}" ls-files --others --exclude-standard -- include)" ]; then
  echo "== include/ has no uncommitted changes: measuring HEAD only"
  states="head"
fi
rm -rf worktree head
for s in ${states}; do
  mkdir -p "${s}"
  case "${s}" in
    worktree) cp -r "${root}/include" worktree/include ;;
    head) git -C "${root}" archive HEAD include | tar -x -C head ;;
    *) echo "run_einsum.sh: unknown state ${s}" >&2 && exit 2 ;;
  esac
done
tree_hash() { (cd "$1" && find include -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12); }

echo "== generating TUs in ${out}"
gen_flags=()
[ "${into}" = 1 ] && gen_flags=(--into)
for n in ${ns}; do python3 "${here}/gen_einsum_tu.py" "${n}" "${gen_flags[@]}" -o "tu_${n}.cpp"; done

declare -A compiler=([g++]="${gxx}" [clang++]="${clangxx}")
flags=(-std=c++20 -O2 -c)
have_time=0
[ -x /usr/bin/time ] && have_time=1

# compile_once <state> <cc> <n> <run>: one timed compile -> raw.csv.
failures=0
declare -A failed
compile_once() {
  local s="$1" cc="$2" n="$3" r="$4" wall usr sys rss cpu status=ok start
  local log="fail_${s}_${cc}_${n}.txt"
  if [ "${have_time}" = 1 ]; then
    /usr/bin/time -f "%e %U %S %M" -o time.txt "${compiler[$cc]}" "${flags[@]}" -I"${out}/${s}/include" \
      "tu_${n}.cpp" -o "tu_${s}_${cc}_${n}.o" 2>"${log}" || status=fail
    read -r wall usr sys rss < <(tail -n 1 time.txt)
  else
    start="$(date +%s.%N)"
    "${compiler[$cc]}" "${flags[@]}" -I"${out}/${s}/include" "tu_${n}.cpp" -o "tu_${s}_${cc}_${n}.o" 2>"${log}" ||
      status=fail
    wall="$(python3 -c "print(f'{$(date +%s.%N) - ${start}:.2f}')")" usr="${wall}" sys=0 rss=""
  fi
  cpu="$(python3 -c "print(f'{${usr} + ${sys}:.2f}')")"
  echo "${s},${cc},${n},${r},${wall},${cpu},${rss},${status}" >>raw.csv
  printf '  %-8s %-7s N=%-3s run %d: wall %6.2f s  cpu %6.2f s  %8s KB  %s\n' "${s}" "${cc}" "${n}" "${r}" \
    "${wall}" "${cpu}" "${rss:--}" "${status}"
  if [ "${status}" = fail ]; then
    grep -m 2 'error' "${log}" | sed 's/^/      /' || true
    failed["${s},${cc},${n}"]=1
    failures=$((failures + 1))
  else
    rm -f "${log}"
  fi
}

{
  echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(lscpu | sed -n 's/^Model name: *//p' | head -n 1)," \
    "$(nproc) cores (shared machine; load average at start: $(cut -d' ' -f1-3 /proc/loadavg));" \
    "$("${gxx}" --version | head -n 1); $("${clangxx}" --version | head -n 1)."
  echo "Flags: \`${flags[*]}\`; ${runs} runs per TU, serial, round-robin over N; medians of wall-clock time."
  echo "TUs: \`gen_einsum_tu.py N${gen_flags[*]:+ ${gen_flags[*]}}\` for N in ${ns}."
  for s in ${states}; do
    case "${s}" in
      worktree) echo "- \`worktree\`: include/ as in the work tree at the start (sha256 $(tree_hash worktree))," \
        "uncommitted changes: $(git -C "${root}" status --porcelain -- include | awk '{print $2}' | paste -sd' ' -)" ;;
      head) echo "- \`head\`: include/ of HEAD $(git -C "${root}" rev-parse --short HEAD) (sha256 $(tree_hash head))" ;;
    esac
  done
  echo
} >header.md

echo "state,compiler,n,run,wall_s,cpu_s,max_rss_kb,status" >raw.csv
for s in ${states}; do
  for cc in g++ clang++; do
    echo "== ${s}: $("${compiler[$cc]}" --version | head -n 1)"
    for ((r = 1; r <= runs; r++)); do
      for n in ${ns}; do
        [ -n "${failed["${s},${cc},${n}"]:-}" ] && continue
        compile_once "${s}" "${cc}" "${n}" "${r}"
      done
    done
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>header.md
echo >>header.md

python3 - <<'EOF' >tables.md
import csv, statistics
from collections import defaultdict
wall, cpu, rss = defaultdict(list), defaultdict(list), defaultdict(list)
failed, order = set(), []
for row in csv.DictReader(open("raw.csv")):
    key = (row["state"], row["compiler"], int(row["n"]))
    if key not in order:
        order.append(key)
    if row["status"] != "ok":
        failed.add(key)
        continue
    wall[key].append(float(row["wall_s"]))
    cpu[key].append(float(row["cpu_s"]))
    if row["max_rss_kb"]:
        rss[key].append(int(row["max_rss_kb"]))
W = {k: statistics.median(v) for k, v in wall.items()}
C = {k: statistics.median(v) for k, v in cpu.items()}
R = {k: max(v) / 1024 for k, v in rss.items()}
print("| compiler | headers | N | median wall s | median CPU s | peak MB | (wall - baseline)/N s | (CPU - baseline)/N s"
      " | marginal CPU s per instantiation |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
prev = {}
for key in sorted(order, key=lambda k: (k[1] != "g++", k[0] != "head", k[2])):
    s, cc, n = key
    base = (s, cc, 0)
    if key in failed or key not in W:
        print(f"| {cc} | {s} | {n} | fails | fails | | | | |")
        continue
    per = lambda T: "" if n == 0 or base not in T else f"{(T[key] - T[base]) / n:.3f}"
    p = prev.get((s, cc))
    marginal = f"{(C[key] - C[p]) / (n - p[2]):.3f} ({p[2]} -> {n})" if p and n else ""
    prev[(s, cc)] = key
    mb = f"{R[key]:.0f}" if key in R else "-"
    print(f"| {cc} | {s} | {n if n else '0 (baseline)'} | {W[key]:.2f} | {C[key]:.2f} | {mb} | {per(W)} | {per(C)}"
          f" | {marginal} |")
if failed:
    print("\n`fails`: the TU does not compile with those headers; first error in fail_<state>_<compiler>_<N>.txt.")
EOF
cat tables.md

nmax="$(echo "${ns}" | tr ' ' '\n' | sort -n | tail -n 1)"
tstate="$(echo "${states}" | tr ' ' '\n' | grep -m 1 head || echo "${states}" | cut -d' ' -f1)"
trace_md=""
echo "== ${clangxx} -ftime-trace, ${tstate} headers, N=0 and N=${nmax}"
if "${clangxx}" "${flags[@]}" -I"${out}/${tstate}/include" tu_0.cpp -o tu_0.o -ftime-trace -ftime-trace-granularity=0 &&
  "${clangxx}" "${flags[@]}" -I"${out}/${tstate}/include" "tu_${nmax}.cpp" -o "tu_${nmax}.o" \
    -ftime-trace -ftime-trace-granularity=0; then
  python3 "${here}/summarize_trace.py" tu_0.json "tu_${nmax}.json" --labels "N=0,N=${nmax}" -o trace.md
  trace_md=trace.md
  cat trace.md
else
  failures=$((failures + 1))
fi

{
  echo "# Compile time of typed einsum instantiations"
  echo
  cat header.md tables.md
  if [ -n "${trace_md}" ]; then
    echo
    echo "## \`${clangxx} -ftime-trace\`, ${tstate} headers (one run each)"
    echo
    sed 's/^## /### /' "${trace_md}"
  fi
} >results.md
mkdir -p "$(dirname "${result}")"
cp results.md "${result}"
echo "== written: ${out}/{raw.csv,results.md,trace.md} and ${result}"
if [ "${failures}" -gt 0 ]; then
  echo "run_einsum.sh: ${failures} compile(s) failed; see fail_*.txt in ${out}" >&2
  exit 1
fi
