#!/usr/bin/env bash
# Compile-time benchmark of the typed sharding engine.
#
#   bench/compile_time/run.sh            # from anywhere; writes build/compile_time/
#   RUNS=5 NS="10 100" DEVICES="4 256" bench/compile_time/run.sh
#
# 1. Count: for N in $NS (default 10 25 50 100) a TU with N distinct typed
#    shardings (gen_sharding_tu.py: 2..64-device meshes, each pair checked by
#    `static_assert(hlo_sharding<M, S>() == "...")`), plus a baseline TU that
#    only includes <xshard/xshard.hpp>.
# 2. Devices: for D in $DEVICES (default 4 16 64 256 1024) a TU with
#    $SCALE_N (default 10) shardings of D-device meshes (spec "None, y").
# Each TU is compiled $RUNS times (default 3) with
#
#   g++ -std=c++20 -O2 -fsyntax-only        clang++-14 -std=c++20 -fsyntax-only
#
# and timed by /usr/bin/time: wall clock, and CPU (user + sys), which is far
# steadier than wall clock on a shared machine. Medians are reported.
#
# The TUs are compiled against a copy of include/ taken when the script
# starts (so concurrent edits cannot mix two versions of the headers in one run).
#
# Outputs (under $OUT, default build/compile_time/):
#   raw.csv       every run: experiment,compiler,n,devices,run,wall_s,cpu_s,max_rss_kb,status
#   results.csv   medians per experiment, compiler, N (or D)
#   results.md    the tables: seconds per N, ms per sharding over the
#                 baseline and per step of N, and ms per sharding per D
#   trace.md      clang++-14 -ftime-trace of the largest N (Total* events and
#                 self time per template) and the top g++ -ftime-report timers
#   gcc-time-report.txt  the full g++ -ftime-report of the largest N
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
out="${OUT:-${root}/build/compile_time}"
runs="${RUNS:-3}"
ns="${NS:-10 25 50 100}"
devices="${DEVICES:-4 16 64 256 1024}"
scale_n="${SCALE_N:-10}"
gxx="${GXX:-g++}"
clangxx="${CLANGXX:-clang++-14}"
mkdir -p "${out}"
cd "${out}"

# Compile against a snapshot of include/ so that every TU of one run sees the
# same headers, even while the headers are being edited.
rm -rf include
cp -r "${root}/include" include
inc=(-I"${out}/include")
declare -A flags=(
  [gcc]="-std=c++20 -O2 -fsyntax-only"
  [clang]="-std=c++20 -fsyntax-only"
)
declare -A compiler=([gcc]="${gxx}" [clang]="${clangxx}")

echo "== generating TUs in ${out}"
python3 "${here}/gen_sharding_tu.py" 0 -o tu_0.cpp
for n in ${ns}; do python3 "${here}/gen_sharding_tu.py" "${n}" -o "tu_${n}.cpp"; done
for d in ${devices}; do python3 "${here}/gen_sharding_tu.py" "${scale_n}" --devices "${d}" -o "dev_${d}.cpp"; done

# measure <experiment> <cc> <n> <devices> <file>: $runs timed compiles -> raw.csv.
# A TU that does not compile is recorded once as status "fail" (its first
# error in fail_<cc>_<file>.txt) and not retried.
failures=0
measure() {
  local exp="$1" cc="$2" n="$3" d="$4" file="$5" r wall usr sys rss cpu status
  for ((r = 1; r <= runs; r++)); do
    status=ok
    # shellcheck disable=SC2086  # flags are word lists on purpose
    if ! /usr/bin/time -f "%e %U %S %M" -o time.txt "${compiler[$cc]}" ${flags[$cc]} "${inc[@]}" "${file}" \
      2>"fail_${cc}_${file%.cpp}.txt"; then
      status=fail
    fi
    read -r wall usr sys rss < <(tail -n 1 time.txt)
    cpu="$(python3 -c "print(f'{${usr} + ${sys}:.2f}')")"
    echo "${exp},${cc},${n},${d},${r},${wall},${cpu},${rss},${status}" >>raw.csv
    printf '  %-7s %-5s %-14s run %d: wall %6.2f s  cpu %6.2f s  %7d KB  %s\n' "${exp}" "${cc}" "${file}" "${r}" \
      "${wall}" "${cpu}" "${rss}" "${status}"
    if [ "${status}" = fail ]; then
      grep -m 2 -E 'error|note: .*(limit|steps)' "fail_${cc}_${file%.cpp}.txt" | sed 's/^/      /' || true
      failures=$((failures + 1))
      return
    fi
    rm -f "fail_${cc}_${file%.cpp}.txt"
  done
}

# What was measured: the headers are not committed yet, so record a hash of include/.
{
  echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(lscpu | sed -n 's/^Model name: *//p' | head -n 1)," \
    "$(nproc) cores; $("${gxx}" --version | head -n 1); $("${clangxx}" --version | head -n 1);" \
    "include/ sha256 $(find include -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12) (snapshot in ${out}/include);" \
    "${runs} runs per TU. <xshard/xshard.hpp> includes the layers:" \
    "$(grep -o '^#include "[a-z_]*/' include/xshard/xshard.hpp | cut -d'"' -f2 | tr -d / | sort -u | paste -sd, -)."
  echo
} >header.md

echo "experiment,compiler,n,devices,run,wall_s,cpu_s,max_rss_kb,status" >raw.csv
for cc in gcc clang; do
  "${compiler[$cc]}" --version | head -n 1
  for n in 0 ${ns}; do measure count "${cc}" "${n}" mixed "tu_${n}.cpp"; done
  for d in ${devices}; do measure devices "${cc}" "${scale_n}" "${d}" "dev_${d}.cpp"; done
done

python3 - <<'EOF'
import csv, statistics
from collections import defaultdict
wall, cpu, rss = defaultdict(list), defaultdict(list), defaultdict(list)
failed = set()
for row in csv.DictReader(open("raw.csv")):
    key = (row["experiment"], row["compiler"], int(row["n"]), row["devices"])
    if row["status"] != "ok":
        failed.add(key)
        continue
    wall[key].append(float(row["wall_s"]))
    cpu[key].append(float(row["cpu_s"]))
    rss[key].append(int(row["max_rss_kb"]))
W = {k: statistics.median(v) for k, v in wall.items()}
C = {k: statistics.median(v) for k, v in cpu.items()}
R = {k: max(v) / 1024 for k, v in rss.items()}
ccs = ["gcc", "clang"]
ns = sorted({k[2] for k in W if k[0] == "count"})
ds = sorted({int(k[3]) for k in W if k[0] == "devices"})
sn = next((k[2] for k in W if k[0] == "devices"), 0)
cnt = lambda c, n: ("count", c, n, "mixed")
dev = lambda c, d: ("devices", c, sn, str(d))
ns = sorted(set(ns) | {k[2] for k in failed if k[0] == "count"})
ds = sorted(set(ds) | {int(k[3]) for k in failed if k[0] == "devices"})
sn = sn or next((k[2] for k in failed if k[0] == "devices"), 0)
FAIL = "fails"
def fmt(table, key, f="{:.2f}", scale=1.0, minus=None, div=1):
    if key in failed or (minus is not None and minus in failed) or key not in table:
        return FAIL
    base = table[minus] if minus is not None else 0.0
    return f.format(scale * (table[key] - base) / div)
with open("results.csv", "w") as f:
    f.write("experiment,compiler,n,devices,wall_s,cpu_s,max_rss_mb\n")
    for k in sorted(W):
        f.write(f"{k[0]},{k[1]},{k[2]},{k[3]},{W[k]:.2f},{C[k]:.2f},{R[k]:.0f}\n")
    for k in sorted(failed):
        f.write(f"{k[0]},{k[1]},{k[2]},{k[3]},fail,fail,fail\n")
L = ["Seconds to compile (median; wall / CPU = user + sys):", "",
     "| N | g++ wall | g++ CPU | clang wall | clang CPU | g++ MB | clang MB |",
     "|---:|---:|---:|---:|---:|---:|---:|"]
for n in ns:
    cells = []
    for c in ccs:
        cells += [fmt(W, cnt(c, n)), fmt(C, cnt(c, n))]
    cells += [fmt(R, cnt(c, n), "{:.0f}") for c in ccs]
    L.append(f"| {'baseline' if n == 0 else n} | " + " | ".join(cells) + " |")
L += ["", "Per sharding, ms: (t(N) - t(baseline)) / N, and between consecutive N (CPU time):", "",
      "| N or step | g++ wall | g++ CPU | clang wall | clang CPU |", "|---|---:|---:|---:|---:|"]
for n in ns[1:]:
    cells = []
    for c in ccs:
        cells += [fmt(T, cnt(c, n), "{:.0f}", 1000, cnt(c, 0), n) for T in (W, C)]
    L.append(f"| {n} | " + " | ".join(cells) + " |")
for a, b in zip(ns[1:], ns[2:]):
    cells = []
    for c in ccs:
        cells += ["", fmt(C, cnt(c, b), "{:.0f}", 1000, cnt(c, a), b - a)]
    L.append(f"| {a} -> {b} | " + " | ".join(cells) + " |")
if ds:
    L += ["", f"Cost per sharding by mesh size: {sn} shardings of D devices, spec \"None, y\";",
          "ms per sharding over the baseline (CPU), and max RSS:", "",
          "| D | g++ ms | clang ms | g++ MB | clang MB |", "|---:|---:|---:|---:|---:|"]
    for d in ds:
        cells = [fmt(C, dev(c, d), "{:.0f}", 1000, cnt(c, 0), sn) for c in ccs]
        cells += [fmt(R, dev(c, d), "{:.0f}") for c in ccs]
        L.append(f"| {d} | " + " | ".join(cells) + " |")
if failed:
    L += ["", "`fails`: the TU does not compile; its first error is in fail_<compiler>_<tu>.txt."]
open("results.md", "w").write(open("header.md").read() + "\n".join(L) + "\n")
print("\n".join(L))
EOF

nmax="$(echo "${ns}" | tr ' ' '\n' | sort -n | tail -n 1)"
echo "== clang++-14 -ftime-trace, N=${nmax}"
# -ftime-trace writes <output>.json next to the object file, so compile with -c.
rm -f "tu_${nmax}.json"
"${clangxx}" -std=c++20 "${inc[@]}" -c "tu_${nmax}.cpp" -o "tu_${nmax}.o" -ftime-trace -ftime-trace-granularity=0 ||
  failures=$((failures + 1))
echo "== g++ -ftime-report, N=${nmax}"
"${gxx}" -std=c++20 -O2 -fsyntax-only "${inc[@]}" "tu_${nmax}.cpp" -ftime-report 2>gcc-time-report.txt ||
  failures=$((failures + 1))

[ -f "tu_${nmax}.json" ] && NMAX="${nmax}" python3 - <<'EOF'
# Clang 14 has no constant-evaluation events: constexpr work shows up as the
# self time of the instantiation (or top-level declaration) that triggers it.
# Self time = an event's duration minus its direct children's (main thread).
import json, os, re
from collections import defaultdict
n = os.environ["NMAX"]
events = [e for e in json.load(open(f"tu_{n}.json"))["traceEvents"] if e.get("ph") == "X"]
main_tid = min(e["tid"] for e in events)
out = [f"# Clang 14 -ftime-trace, N={n}", "", "## Totals (outermost events of each kind)", "",
       "| event | count | total ms |", "|---|---:|---:|"]
for e in sorted((e for e in events if e["name"].startswith("Total ")), key=lambda e: -e["dur"])[:9]:
    out.append(f"| {e['name'][6:]} | {e['args'].get('count', '')} | {e['dur'] / 1000:.0f} |")


def template_of(detail):
    """xshard::hlo_sharding<xshard::mesh<...>> -> xshard::hlo_sharding"""
    return re.split(r"[<(]", detail, maxsplit=1)[0] or "(none)"


main = sorted((e for e in events if e["tid"] == main_tid and not e["name"].startswith("Total ")),
              key=lambda e: (e["ts"], -e["dur"]))
selfs, stack = [], []
for e in main:
    while stack and stack[-1][0]["ts"] + stack[-1][0]["dur"] <= e["ts"]:
        stack.pop()
    rec = [e, e["dur"]]
    if stack:
        stack[-1][1] -= e["dur"]
    stack.append(rec)
    selfs.append(rec)
incl, own = defaultdict(lambda: [0, 0.0]), defaultdict(float)
for e, self_us in selfs:
    key = (e["name"], template_of(e.get("args", {}).get("detail", "")))
    own[key] += self_us / 1000
    incl[key][0] += 1
    incl[key][1] += e["dur"] / 1000
out += ["", "## Where the time goes: self time by event and template (children subtracted)", "",
        "| event | template | count | self ms | inclusive ms |", "|---|---|---:|---:|---:|"]
for key, ms in sorted(own.items(), key=lambda kv: -kv[1])[:16]:
    c, inc = incl[key]
    out.append(f"| {key[0]} | `{key[1]}` | {c} | {ms:.0f} | {inc:.0f} |")

timer = re.compile(r"\s*\|?(.+?)\s*:\s*([\d.]+)\s*\(\s*(\d+)%\)\s*[\d.]+\s*\(\s*\d+%\)\s*([\d.]+)\s*\(\s*\d+%\)\s*(\S+)")
rows = []
for line in open("gcc-time-report.txt"):
    m = timer.match(line)
    if m:
        rows.append((float(m.group(2)), m.group(1), m.group(3), m.group(4), m.group(5)))
out += ["", f"## g++ -O2 -fsyntax-only -ftime-report, N={n}: top timers by usr time", "",
        "| timer | usr s | usr % | wall s | GGC |", "|---|---:|---:|---:|---:|"]
for usr, name, pct, wall, mem in sorted(rows, reverse=True)[:10]:
    out.append(f"| {name} | {usr:.2f} | {pct} | {wall} | {mem} |")
open("trace.md", "w").write("\n".join(out) + "\n")
print("\n".join(out))
EOF
echo "== written: ${out}/{raw.csv,results.csv,results.md,trace.md,gcc-time-report.txt}"
if [ "${failures}" -gt 0 ]; then
  echo "run.sh: ${failures} TU(s) did not compile; see fail_*.txt in ${out}" >&2
  exit 1
fi
