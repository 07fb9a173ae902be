#!/usr/bin/env bash
# What including each public header costs (issue: compile time is a feature).
#
#   bench/compile_time/run_headers.sh              # writes build/compile_time_headers/
#   RUNS=5 CXX=clang++-14 bench/compile_time/run_headers.sh
#
# For every header under include/xshard/ (and for a TU that includes only the
# dependencies: xtensor.hpp, xarray.hpp, xsimd.hpp, boost/hana.hpp) compiles
#
#   #include <HEADER>
#   int main() {}
#
# with `$CXX -std=c++20 -O2 -c` (code generation included: a header that emits
# code costs it in every TU) $RUNS times (default 3), and reports the medians
# of CPU time (user + sys: steadier than wall clock on a shared machine) and
# wall time, the peak memory, the ratio to the dependencies-only TU of the
# same run, and the bytes of xshard code the empty TU emits (`nm` symbols in
# namespace xshard, sized). The TUs compile against a copy of include/ taken
# at start. Output: $OUT/results.md (a markdown table) and $OUT/raw.csv.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
out="${OUT:-${root}/build/compile_time_headers}"
runs="${RUNS:-3}"
cxx="${CXX:-g++}"
mpi_flags=()
if command -v mpicxx >/dev/null 2>&1; then
  read -r -a mpi_flags <<<"$(mpicxx --showme:compile 2>/dev/null || true)"
fi
hdf5_flags=()  # checkpoint/checkpoint.hpp needs <hdf5.h> (libhdf5-dev)
if pkg-config --exists hdf5-serial 2>/dev/null; then
  read -r -a hdf5_flags <<<"$(pkg-config --cflags hdf5-serial)"
fi

rm -rf "${out}"
mkdir -p "${out}/src" "${out}/obj"
cp -r "${root}/include" "${out}/include"

tus=(deps)
printf '#include <xtensor/xtensor.hpp>\n#include <xtensor/xarray.hpp>\n#include <xsimd/xsimd.hpp>\n#include <boost/hana.hpp>\nint main() {}\n' \
  >"${out}/src/deps.cpp"
while IFS= read -r h; do
  id="$(echo "${h}" | tr '/.' '__')"
  echo "${id},${h}" >>"${out}/headers.csv"
  tus+=("${id}")
  printf '#include <%s>\nint main() {}\n' "${h}" >"${out}/src/${id}.cpp"
done < <(cd "${out}/include" && find xshard -name '*.hpp' | sort)

echo "tu,run,cpu_s,wall_s,max_rss_kb,xshard_code_bytes" >"${out}/raw.csv"
for tu in "${tus[@]}"; do
  flags=()
  if [ "${tu}" = "xshard_spmd_mpi_mesh_hpp" ]; then
    if [ "${#mpi_flags[@]}" -eq 0 ]; then continue; fi
    flags=("${mpi_flags[@]}")
  fi
  if [ "${tu}" = "xshard_checkpoint_checkpoint_hpp" ]; then
    if [ "${#hdf5_flags[@]}" -eq 0 ]; then continue; fi
    flags=("${hdf5_flags[@]}")
  fi
  for r in $(seq "${runs}"); do
    /usr/bin/time -f '%U %S %e %M' -o "${out}/time.txt" \
      "${cxx}" -std=c++20 -O2 -I"${out}/include" "${flags[@]}" -c "${out}/src/${tu}.cpp" -o "${out}/obj/${tu}.o"
    read -r user sys wall rss <"${out}/time.txt"
    code=$(nm -C -S --defined-only "${out}/obj/${tu}.o" | perl -ne '$s += hex($1) if /^\S+ (\S+) \S+ .*xshard::/; END { print $s + 0 }')
    echo "${tu},${r},$(echo "${user} + ${sys}" | bc),${wall},${rss},${code}" >>"${out}/raw.csv"
  done
done

python3 - "${out}" "${cxx}" <<'PY'
import csv, statistics, sys, collections, platform, subprocess
out, cxx = sys.argv[1], sys.argv[2]
header = dict(l.strip().split(",", 1) for l in open(f"{out}/headers.csv"))
rows = collections.defaultdict(list)
for r in csv.DictReader(open(f"{out}/raw.csv")):
    rows[r["tu"]].append(r)
def med(tu, key): return statistics.median(float(r[key]) for r in rows[tu])
base = med("deps", "cpu_s")
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
isa = sorted({f for l in open("/proc/cpuinfo") if l.startswith("flags") for f in l.split() if f.startswith("avx")})
ver = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
lines = [f"Compiler: {ver}; `-std=c++20 -O2 -c` of `#include <HEADER>` + `int main() {{}}`; "
         f"medians of {len(rows['deps'])} runs; CPU: {cpu} ({', '.join(isa[:3])}{', ...' if len(isa) > 3 else ''}).", "",
         "| TU includes | CPU s | wall s | x deps | peak MB | xshard code bytes |", "|---|---:|---:|---:|---:|---:|"]
for tu in sorted(rows, key=lambda t: (t != "deps", t)):
    name = "dependencies only (xtensor, xarray, xsimd, hana)" if tu == "deps" else "`" + header[tu] + "`"
    lines.append(f"| {name} | {med(tu,'cpu_s'):.2f} | {med(tu,'wall_s'):.2f} | {med(tu,'cpu_s')/base:.2f} | "
                 f"{med(tu,'max_rss_kb')/1024:.0f} | {int(med(tu,'xshard_code_bytes'))} |")
open(f"{out}/results.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
