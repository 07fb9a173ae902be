#!/usr/bin/env bash
# Compile-time benchmark of the heterogeneous (unrolled) scan_layers
# (include/xshard/scan/scan_layers_unrolled.hpp): a TU with N distinct layer
# types calling scan_layers and scan_layers_vjp should grow linearly in N,
# and 64 layers compile in under 60 s.
#
#   bench/compile_time/run_scan_layers.sh          # from the repo root (or anywhere)
#   RUNS=5 NS="0 8 32 64 128" bench/compile_time/run_scan_layers.sh
#   COMPARE=0 DEPTH=0 bench/compile_time/run_scan_layers.sh   # the main table only
#
# For N in $NS (default 0 8 32 64) gen_scan_layers_tu.py writes a TU with N
# distinct layer types (N = 0: the same includes, no stack). Experiments:
#
#   full     scan_layers + scan_layers_vjp, headers `new`
#   forward  scan_layers only (gen_scan_layers_tu.py --forward-only), headers
#            `new` and `old` ($COMPARE, default 1)
#
# Header states:
#   new  a copy of include/ taken when the script starts (concurrent edits
#        cannot mix two versions of the headers in one run)
#   old  the same copy with scan/scan_layers_unrolled.hpp as of $OLD_REV
#        (default a8d806d: the recursive-lambda forward, which has no
#        scan_layers_vjp), read with `git show` (the work tree is not touched)
#
# Each TU is compiled $RUNS times (default 3), serially, with
#
#   g++ -std=c++20 -O2 -I<include> -c        clang++-14 -std=c++20 -O2 -I<include> -c
#
# round-robin over N (so a slow spell of a shared machine is spread over all
# N instead of landing on one), timed by /usr/bin/time when present (wall,
# CPU = user + sys, peak RSS), else by bash's `time` (no RSS). Medians are
# reported, with (CPU(N) - CPU(0)) / N, the marginal CPU seconds per layer
# between consecutive N, and the least-squares slope of CPU over the N > 0
# points (the per-layer cost; the first layer also pays for the einsum and
# layer code every stack shares, so (CPU(N) - CPU(0)) / N overstates it at
# small N). CPU time is far steadier than wall clock on a shared machine.
#
# Last ($DEPTH, default 1), the smallest -ftemplate-depth with which
# `g++ -fsyntax-only` accepts each TU of the smallest and largest N > 0
# (bisection): flat in N when the unrolling does not recurse.
#
# Outputs (under $OUT, default build/compile_time_scan_layers/): raw.csv
# (every run), results.md, the TUs; results.md is copied to
# bench/results/compile_time_scan_layers.md ($RESULT).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
out="${OUT:-${root}/build/compile_time_scan_layers}"
result="${RESULT:-${root}/bench/results/compile_time_scan_layers.md}"
runs="${RUNS:-3}"
ns="${NS:-0 8 32 64}"
gxx="${GXX:-g++}"
clangxx="${CLANGXX:-clang++-14}"
old_rev="${OLD_REV:-a8d806d}"
compare="${COMPARE:-1}"
depth="${DEPTH:-1}"
header=xshard/scan/scan_layers_unrolled.hpp
mkdir -p "${out}"
cd "${out}"
case " ${ns} " in *" 0 "*) ;; *) ns="0 ${ns}" ;; esac # the baseline is always needed

# Header snapshots: new/include and old/include.
rm -rf new old
mkdir -p new
cp -r "${root}/include" new/include
if [ "${compare}" = 1 ]; then
  mkdir -p old
  cp -r "${root}/include" old/include
  git -C "${root}" show "${old_rev}:include/${header}" >"old/include/${header}"
fi
tree_hash() { (cd "$1" && find include -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12); }

# Experiments: "<kind>:<state>".
experiments="full:new"
[ "${compare}" = 1 ] && experiments="${experiments} forward:new forward:old"

echo "== generating TUs in ${out}"
for n in ${ns}; do
  python3 "${here}/gen_scan_layers_tu.py" "${n}" -o "tu_full_${n}.cpp"
  python3 "${here}/gen_scan_layers_tu.py" "${n}" --forward-only -o "tu_forward_${n}.cpp"
done

declare -A compiler=([g++]="${gxx}" [clang++]="${clangxx}")
flags=(-std=c++20 -O2 -c)
have_time=0
[ -x /usr/bin/time ] && have_time=1

# compile_once <kind> <state> <cc> <n> <run>: one timed compile -> raw.csv.
failures=0
declare -A failed
compile_once() {
  local kind="$1" s="$2" cc="$3" n="$4" r="$5" wall usr sys rss cpu status=ok start
  local log="fail_${kind}_${s}_${cc}_${n}.txt" obj="tu_${kind}_${s}_${cc}_${n}.o"
  if [ "${have_time}" = 1 ]; then
    /usr/bin/time -f "%e %U %S %M" -o time.txt "${compiler[$cc]}" "${flags[@]}" -I"${out}/${s}/include" \
      "tu_${kind}_${n}.cpp" -o "${obj}" 2>"${log}" || status=fail
    read -r wall usr sys rss < <(tail -n 1 time.txt)
  else
    start="$(date +%s.%N)"
    "${compiler[$cc]}" "${flags[@]}" -I"${out}/${s}/include" "tu_${kind}_${n}.cpp" -o "${obj}" 2>"${log}" ||
      status=fail
    wall="$(python3 -c "print(f'{$(date +%s.%N) - ${start}:.2f}')")" usr="${wall}" sys=0 rss=""
  fi
  cpu="$(python3 -c "print(f'{${usr} + ${sys}:.2f}')")"
  echo "${kind},${s},${cc},${n},${r},${wall},${cpu},${rss},${status}" >>raw.csv
  printf '  %-7s %-3s %-7s N=%-3s run %d: wall %6.2f s  cpu %6.2f s  %8s KB  %s\n' "${kind}" "${s}" "${cc}" "${n}" \
    "${r}" "${wall}" "${cpu}" "${rss:--}" "${status}"
  if [ "${status}" = fail ]; then
    grep -m 2 'error' "${log}" | sed 's/^/      /' || true
    failed["${kind},${s},${cc},${n}"]=1
    failures=$((failures + 1))
  else
    rm -f "${log}"
  fi
}

{
  echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(lscpu | sed -n 's/^Model name: *//p' | head -n 1)," \
    "$(nproc) cores (shared machine; load average at start: $(cut -d' ' -f1-3 /proc/loadavg));" \
    "$("${gxx}" --version | head -n 1); $("${clangxx}" --version | head -n 1)."
  echo "Flags: \`${flags[*]}\`; ${runs} runs per TU, serial, round-robin over N; medians."
  echo "TUs: \`gen_scan_layers_tu.py N\` (full: scan_layers + scan_layers_vjp) and" \
    "\`gen_scan_layers_tu.py N --forward-only\` (forward) for N in ${ns}."
  echo "- \`new\`: include/ as in the work tree at the start (sha256 $(tree_hash new)); HEAD" \
    "$(git -C "${root}" rev-parse --short HEAD), uncommitted changes under include/:" \
    "$(git -C "${root}" status --porcelain -- include | awk '{print $2}' | paste -sd' ' -)"
  if [ "${compare}" = 1 ]; then
    echo "- \`old\`: the same with \`include/${header}\` of ${old_rev} (the recursive-lambda forward;" \
      "no scan_layers_vjp, so forward TUs only)"
  fi
  echo
} >header.md

echo "kind,state,compiler,n,run,wall_s,cpu_s,max_rss_kb,status" >raw.csv
for e in ${experiments}; do
  kind="${e%%:*}" s="${e##*:}"
  for cc in g++ clang++; do
    echo "== ${kind} ${s}: $("${compiler[$cc]}" --version | head -n 1)"
    for ((r = 1; r <= runs; r++)); do
      for n in ${ns}; do
        [ -n "${failed["${kind},${s},${cc},${n}"]:-}" ] && continue
        compile_once "${kind}" "${s}" "${cc}" "${n}" "${r}"
      done
    done
  done
done
echo "load average at end of the timed runs: $(cut -d' ' -f1-3 /proc/loadavg)" >>header.md
echo >>header.md

python3 - <<'EOF' >tables.md
import csv, statistics
from collections import defaultdict
wall, cpu, rss = defaultdict(list), defaultdict(list), defaultdict(list)
failed, order = set(), []
for row in csv.DictReader(open("raw.csv")):
    key = (row["kind"], row["state"], row["compiler"], int(row["n"]))
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
groups = []
for k in order:
    if k[:3] not in groups:
        groups.append(k[:3])
kind_order = {"full": 0, "forward": 1}
groups.sort(key=lambda g: (kind_order.get(g[0], 9), g[1] != "new", g[2] != "g++"))

print("| TU | headers | compiler | N | median wall s | median CPU s | peak MB | (CPU - baseline)/N s"
      " | marginal CPU s per layer |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|")
slopes = []
for g in groups:
    kind, s, cc = g
    keys = sorted((k for k in order if k[:3] == g), key=lambda k: k[3])
    prev = None
    for key in keys:
        n = key[3]
        base = (kind, s, cc, 0)
        if key in failed or key not in C:
            print(f"| {kind} | {s} | {cc} | {n} | fails | fails | | | |")
            continue
        per = "" if n == 0 or base not in C else f"{(C[key] - C[base]) / n:.3f}"
        marginal = f"{(C[key] - C[prev]) / (n - prev[3]):.3f} ({prev[3]} -> {n})" if prev and n else ""
        prev = key
        mb = f"{R[key]:.0f}" if key in R else "-"
        print(f"| {kind} | {s} | {cc} | {n if n else '0 (baseline)'} | {W[key]:.2f} | {C[key]:.2f} | {mb} | {per}"
              f" | {marginal} |")
    pts = [(k[3], C[k]) for k in keys if k[3] > 0 and k in C]
    if len(pts) >= 2:
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
        icpt = my - slope * mx
        worst = max(abs(y - (icpt + slope * x)) for x, y in pts)
        nmax = max(x for x, _ in pts)
        slopes.append((kind, s, cc, slope, icpt, worst, nmax, C[(kind, s, cc, nmax)]))
print()
print("Per-layer slope: least-squares fit CPU(N) = a + b N over the N > 0 points (medians); the largest residual"
      " says how far the points are from a line.")
print()
print("| TU | headers | compiler | slope b, CPU s per layer | a, CPU s | largest residual s | CPU s at largest N |")
print("|---|---|---|---:|---:|---:|---:|")
for kind, s, cc, slope, icpt, worst, nmax, cmax in slopes:
    print(f"| {kind} | {s} | {cc} | {slope:.3f} | {icpt:.2f} | {worst:.2f} | {cmax:.2f} (N={nmax}) |")
if failed:
    print("\n`fails`: the TU does not compile with those headers; first error in fail_<kind>_<state>_<compiler>_<N>.txt.")
EOF
cat tables.md

# Smallest -ftemplate-depth that g++ -fsyntax-only accepts, by bisection.
depth_md=""
if [ "${depth}" = 1 ]; then
  min_depth() { # <include dir> <tu>
    local lo=1 hi=4096 mid
    "${gxx}" -std=c++20 -fsyntax-only -ftemplate-depth="${hi}" -I"$1" "$2" 2>/dev/null || {
      echo "fails"
      return
    }
    while [ $((hi - lo)) -gt 1 ]; do
      mid=$(((lo + hi) / 2))
      if "${gxx}" -std=c++20 -fsyntax-only -ftemplate-depth="${mid}" -I"$1" "$2" 2>/dev/null; then hi="${mid}"; else lo="${mid}"; fi
    done
    echo "${hi}"
  }
  nonzero="$(echo "${ns}" | tr ' ' '\n' | sort -n | awk '$1 > 0')"
  nmin="$(echo "${nonzero}" | head -n 1)" nmax="$(echo "${nonzero}" | tail -n 1)"
  echo "== smallest -ftemplate-depth (${gxx} -fsyntax-only), N=${nmin} and N=${nmax}"
  {
    echo "| TU | headers | N=${nmin} | N=${nmax} |"
    echo "|---|---|---:|---:|"
    for e in ${experiments}; do
      kind="${e%%:*}" s="${e##*:}"
      echo "| ${kind} | ${s} | $(min_depth "${out}/${s}/include" "tu_${kind}_${nmin}.cpp") |" \
        "$(min_depth "${out}/${s}/include" "tu_${kind}_${nmax}.cpp") |"
    done
  } >depth.md
  depth_md=depth.md
  cat depth.md
fi

{
  echo "# Compile time of the heterogeneous scan_layers (unrolled at compile time)"
  echo
  cat header.md tables.md
  if [ -n "${depth_md}" ]; then
    echo
    echo "## Instantiation depth: smallest \`-ftemplate-depth\` accepted by \`${gxx} -fsyntax-only\`"
    echo
    cat "${depth_md}"
  fi
} >results.md
mkdir -p "$(dirname "${result}")"
cp results.md "${result}"
echo "== written: ${out}/{raw.csv,results.md} and ${result}"
if [ "${failures}" -gt 0 ]; then
  echo "run_scan_layers.sh: ${failures} compile(s) failed; see fail_*.txt in ${out}" >&2
  exit 1
fi
