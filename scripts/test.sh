#!/usr/bin/env bash
# The README's test command; CI runs it (.ci/run). Installs dependencies,
# then runs these steps in order and exits non-zero on the first failure:
#
#   format      clang-format check of include/ tests/ examples/ bench/.
#   asan-ubsan  Clang 14, Debug, AddressSanitizer + UndefinedBehaviorSanitizer:
#               builds everything and runs every test (runtime, compile-only,
#               compile-fail, contract, package, the MPI backend under
#               mpiexec, the example). This is the Clang build of the suite.
#               The one-TU-per-header self-sufficiency tests (CTest headers)
#               are left to tsan (XSHARD_BUILD_HEADER_TESTS=OFF): whether a
#               header stands alone does not depend on the compiler.
#               train_transformer, which no test runs, is compile-checked
#               (-fsyntax-only, CTest syntax.*) instead of built; both
#               sanitizer presets keep line tables only (-gline-tables-only /
#               -g1: file and line in every report, less to compile) and
#               build the train_mlp example at -O1 (XSHARD_EXAMPLE_OPTIMIZE:
#               the example tests run it six times).
#   tsan        GCC 12, Debug, ThreadSanitizer: builds and runs every test
#               (but the compile-checked ones below) except the MPI ones
#               (the tsan test preset excludes label mpi: Open MPI is not
#               built with TSan, and under it
#               MPI_Init alone reports races and a lock-order inversion among
#               Open MPI's own threads; each rank is a single-threaded
#               process of ours, and asan-ubsan runs them) and label isa
#               (the GEMM, composite and optimizer tests again under
#               XSHARD_ISA=avx2 and generic: the ISA changes the kernels, not
#               the thread pool's synchronisation, which TSan checks through
#               the same tests at the CPU's own ISA; asan-ubsan runs all
#               three ISAs. Under TSan they took 174 s of CPU on the Xeon of
#               PERF-NOTES). This is the GCC
#               build of the suite. The MPI tests' executables are
#               compile-checked (CTest syntax.*), not built, and so are the
#               runtime tests that start no threads of their own (kernels at
#               the pool's default size, sharding tables, scans; listed in
#               tests/CMakeLists.txt's xshard_thread_free_tests, which the
#               preset's XSHARD_SYNTAX_CHECK_THREAD_FREE_TESTS turns on;
#               configuring fails if one of them names a thread mesh, a
#               fiber, the pool's size or a std::thread): the pool, fibers,
#               meshes, thread counts and the graph, decoder, optimizer and
#               checkpoint tests that run them on threads are where TSan
#               finds races, and asan-ubsan runs every test. GCC still
#               compiles each of them (-fsyntax-only, with the runtime
#               tests' PCH).
#   fuzz        Clang 14 libFuzzer + ASan + UBSan: each fuzz target for 5
#               seconds from its corpus (tests/fuzz, ctest -L fuzz).
#   aarch64     Debian's aarch64 cross compiler: the whole library and the
#               einsum, sharding and scan tests, run under qemu-user with the
#               portable (NEON) kernels (scripts/aarch64.sh).
#
# The asan-ubsan, tsan and fuzz presets link with lld (Debian package lld): the
# largest ASan test executable (decoder_test) links in 0.3 s, 1.5 s with GNU ld.
#
# Usage: scripts/test.sh [STEP...]   (default: every step, in the order above)
# Each step's wall time is printed at the end (also after a failure).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

all_steps=(format asan-ubsan tsan fuzz aarch64)
steps=("$@")
if [ "${#steps[@]}" -eq 0 ]; then steps=("${all_steps[@]}"); fi
for s in "${steps[@]}"; do
  case " ${all_steps[*]} " in
    *" $s "*) ;;
    *)
      echo "test.sh: unknown step '$s' (steps: ${all_steps[*]})" >&2
      exit 2
      ;;
  esac
done

times=()
report_times() {
  if [ "${#times[@]}" -gt 0 ]; then
    echo "== wall times"
    printf '  %s\n' "${times[@]}"
  fi
}
trap report_times EXIT
timed() {  # timed NAME COMMAND...: runs COMMAND, records its wall time
  local name=$1 start=$SECONDS
  shift
  "$@"
  times+=("$(printf '%-22s %4d s' "$name" $((SECONDS - start)))")
}

# Configure, build and test one preset (the build preset's default targets).
preset_suite() {
  local preset=$1
  echo "== ${preset}: configure, build, test"
  timed "${preset} configure" cmake --preset "${preset}"
  timed "${preset} build" cmake --build --preset "${preset}"
  timed "${preset} test" ctest --preset "${preset}"
}

format_check() {
  echo "== clang-format check"
  local dirs=() files=() out
  for d in include tests examples bench; do
    if [ -d "$d" ]; then dirs+=("$d"); fi
  done
  if [ "${#dirs[@]}" -gt 0 ]; then
    while IFS= read -r -d '' f; do files+=("$f"); done \
      < <(find "${dirs[@]}" -type f \( -name '*.hpp' -o -name '*.cpp' \) -print0 | sort -z)
  fi
  if [ "${#files[@]}" -gt 0 ]; then
    if ! out=$(clang-format --dry-run --Werror "${files[@]}" 2>&1); then
      printf '%s\n' "$out" | head -n 60
      echo "clang-format: these files need formatting (fix with: clang-format -i FILE...):" >&2
      printf '%s\n' "$out" | grep -oE '^[^: ]+\.(hpp|cpp):' | tr -d : | sort -u >&2
      return 1
    fi
  fi
  echo "clang-format: ${#files[@]} files clean"
}

fuzz_step() {
  echo "== fuzz: configure, build, a short run of every fuzz target"
  timed "fuzz configure" cmake --preset fuzz
  timed "fuzz build" cmake --build --preset fuzz
  timed "fuzz run" ctest --preset fuzz -L fuzz
}

timed "install-deps" ./scripts/install-deps.sh

for s in "${steps[@]}"; do
  case "$s" in
    format) timed "format" format_check ;;
    asan-ubsan) preset_suite asan-ubsan ;;
    tsan) preset_suite tsan ;;
    fuzz) fuzz_step ;;
    aarch64) timed "aarch64" ./scripts/aarch64.sh ;;
  esac
done
echo "test.sh: all checks passed (${steps[*]})"
