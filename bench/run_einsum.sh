#!/usr/bin/env bash
# Runs the einsum benchmarks and their peers, then writes the table and chart.
#
#   bench/run_einsum.sh                    # from anywhere
#   REPS=7 THREADS="1 2" OUT=/tmp/r bench/run_einsum.sh
#   FILTER='f32/' bench/run_einsum.sh      # --benchmark_filter for bench/einsum
#   SKIP_PEERS=1 / SKIP_BUILD=1            # reuse peers.json / the built binary
#   EXTRA_ARGS='--benchmark_min_time=0.1'  # more flags for bench/einsum
#   ISA=avx2 bench/run_einsum.sh           # AVX2 on an AVX-512 CPU, into bench/results/avx2
#
# 1. Configures and builds the `release` preset's bench/einsum target (GCC,
#    -O3; bench/einsum adds -march=native unless XSHARD_BENCH_EINSUM_NATIVE=OFF,
#    see bench/CMakeLists.txt). Peers need the Debian packages installed by
#    XSHARD_BENCH_DEPS=1 scripts/install-deps.sh.
# 2. Runs bench/einsum once per thread count t in $THREADS (default "1 2") with
#    XSHARD_NUM_THREADS = OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = t,
#    OPENBLAS_CORETYPE=Cooperlake, or Haswell on a CPU without AVX-512 (OpenBLAS reads it when it loads; without it
#    the comparison is meaningless, see ../shared/PERF-NOTES.md) and
#    --benchmark_repetitions=$REPS (default 5), --benchmark_enable_random_interleaving=true
#    (repetitions shuffled across benchmarks, so drift hits every side alike)
#    and --benchmark_report_aggregates_only=true,
#    writing $OUT/einsum_t<t>.json (and the console output to .txt).
# 3. Runs bench/peers.py (numpy, torch; Debian's /usr/bin/python3) -> $OUT/peers.json.
# 4. Runs bench/plot_einsum.py -> $OUT/einsum.md and $OUT/einsum.png.
# $OUT defaults to bench/results. $OUT/build_info.txt records the commit, the
# state of the einsum headers and the compile command used.
# ISA=avx2 caps every side at AVX2 for a same-machine comparison: xshard's
# kernels (XSHARD_ISA=avx2), OpenBLAS's (OPENBLAS_CORETYPE=Haswell, which
# numpy and torch load too) and torch's own (ATEN_CPU_CAPABILITY=avx2); $OUT
# then defaults to bench/results/avx2. (Eigen is compiled, not dispatched: it
# keeps bench/einsum's -march.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

REPS="${REPS:-5}"
THREADS="${THREADS:-1 2}"
FILTER="${FILTER:-}"
ISA="${ISA:-}"
case "$ISA" in
  "") OUT="${OUT:-bench/results}" ;;
  avx2)
    OUT="${OUT:-bench/results/avx2}"
    export XSHARD_ISA=avx2 OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2
    ;;
  *)
    echo "run_einsum.sh: ISA must be empty (the CPU's best) or avx2, not '$ISA'" >&2
    exit 2
    ;;
esac
# OpenBLAS's AVX-512 kernels (Cooperlake) where the CPU has AVX-512, its
# AVX2 ones (Haswell) otherwise: Cooperlake on an AVX2-only CPU would stop
# on its first AVX-512 instruction.
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  export OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-Cooperlake}"
else
  export OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-Haswell}"
fi

# numpy and torch are Debian packages: prefer Debian's interpreter over any
# python3 earlier on PATH (pyenv and the like do not see them).
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  for p in /usr/bin/python3 python3; do
    if "$p" -c 'import numpy' >/dev/null 2>&1; then
      PYTHON="$p"
      break
    fi
  done
fi

mkdir -p "$OUT"
bin=build/release/bench/einsum

if [ "${SKIP_BUILD:-0}" != "1" ]; then
  echo "== build: release preset, target einsum"
  cmake --preset release >/dev/null
  cmake --build --preset release --target einsum
fi

{
  echo "date: $(date -Iseconds)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "uncommitted changes under include/xshard/einsum: $(git status --porcelain -- include/xshard/einsum 2>/dev/null | wc -l) file(s)"
  for f in include/xshard/einsum/*.hpp include/xshard/core/thread_pool.hpp; do
    [ -f "$f" ] && echo "  $(sha256sum "$f" | cut -c1-12)  $f"
  done
  echo "binary built: $(date -Iseconds -r "$bin")"
  echo "compiler: $(g++ --version | head -n1)"
  echo "compile command (bench/einsum.cpp):"
  "${PYTHON}" - <<'EOF' 2>/dev/null || echo "  (build/release/compile_commands.json not readable)"
import json
for e in json.load(open("build/release/compile_commands.json")):
    if e["file"].endswith("bench/einsum.cpp"):
        print("  " + e.get("command", " ".join(e.get("arguments", []))))
EOF
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cpu(s)"
  echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE}"
  echo "XSHARD_ISA=${XSHARD_ISA:-} ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-}"
} >"$OUT/build_info.txt"
cat "$OUT/build_info.txt"

for t in $THREADS; do
  echo "== bench/einsum, ${t} thread(s)"
  # Repetitions in random order across all benchmarks: a drift of the
  # machine's speed during the run then falls on every implementation alike
  # rather than on whichever ran in the slow spell.
  args=(--benchmark_repetitions="$REPS" --benchmark_enable_random_interleaving=true
    --benchmark_report_aggregates_only=true
    --benchmark_out="$OUT/einsum_t${t}.json" --benchmark_out_format=json --benchmark_color=false)
  if [ -n "$FILTER" ]; then args+=(--benchmark_filter="$FILTER"); fi
  # shellcheck disable=SC2206  # EXTRA_ARGS is a list of flags
  args+=(${EXTRA_ARGS:-})
  XSHARD_NUM_THREADS="$t" OPENBLAS_NUM_THREADS="$t" OMP_NUM_THREADS="$t" "$bin" "${args[@]}" 2>&1 |
    tee "$OUT/einsum_t${t}.txt"
done

if [ "${SKIP_PEERS:-0}" != "1" ]; then
  echo "== bench/peers.py (${PYTHON})"
  # shellcheck disable=SC2086  # THREADS is a list
  "$PYTHON" bench/peers.py --threads $THREADS --reps "$((REPS < 5 ? 5 : REPS))" --out "$OUT/peers.json"  # it takes >= 5
fi

echo "== bench/plot_einsum.py"
"$PYTHON" bench/plot_einsum.py --results "$OUT"
cat "$OUT/einsum.md"
