#!/usr/bin/env bash
# Builds xshard for aarch64 with Debian's cross compiler and runs the einsum,
# sharding and scan tests under qemu-user (scripts/test.sh step "aarch64").
#
#   scripts/aarch64.sh [BUILD_DIR]     (default build/aarch64)
#
# Installs g++-aarch64-linux-gnu and qemu-user from Debian when missing.
# Everything is compiled straight with aarch64-linux-gnu-g++ (no CMake
# toolchain): GoogleTest from Debian's sources (/usr/src/googletest, package
# googletest), a TU that includes <xshard/xshard.hpp> (the whole library
# builds: no x86 intrinsics outside #if defined(__x86_64__)), and the tests
# below, which run with the portable xsimd kernels (NEON) and must give the
# results they give on x86.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-build/aarch64}

need=()
command -v aarch64-linux-gnu-g++ > /dev/null || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 > /dev/null || need+=(qemu-user)
[ -d /usr/src/googletest/googletest ] || need+=(googletest)
if [ "${#need[@]}" -gt 0 ]; then
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get update
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y --no-install-recommends "${need[@]}"
fi

tests=(einsum_test einsum_grad_test sharding_test scan_test scan_layers_test fiber_test)
mkdir -p "$out/include"
# The header-only dependencies, without the rest of the host's /usr/include
# (the cross compiler has its own C and C++ headers).
for d in xtensor xsimd xtl boost; do ln -sfn "/usr/include/$d" "$out/include/$d"; done
cxx=(aarch64-linux-gnu-g++ -std=c++20 -O1 -Wall -Wextra -Wpedantic -Werror -Wno-restrict -Iinclude
  -isystem "$out/include" -isystem /usr/src/googletest/googletest/include -pthread)

gtest=/usr/src/googletest/googletest
if [ ! -f "$out/libgtest.a" ]; then
  echo "== aarch64: GoogleTest from $gtest"
  aarch64-linux-gnu-g++ -std=c++20 -O1 -isystem "$gtest/include" -I"$gtest" -pthread -c "$gtest/src/gtest-all.cc" \
    -o "$out/gtest-all.o"
  aarch64-linux-gnu-g++ -std=c++20 -O1 -isystem "$gtest/include" -I"$gtest" -pthread -c "$gtest/src/gtest_main.cc" \
    -o "$out/gtest_main.o"
  aarch64-linux-gnu-ar rcs "$out/libgtest.a" "$out/gtest-all.o" "$out/gtest_main.o"
fi

echo "== aarch64: the whole library (<xshard/xshard.hpp>)"
printf '#include <xshard/xshard.hpp>\nint main() { return 0; }\n' > "$out/all_headers.cpp"
"${cxx[@]}" -c "$out/all_headers.cpp" -o "$out/all_headers.o"

echo "== aarch64: ${tests[*]} (built two at a time)"
pids=()
for t in "${tests[@]}"; do
  "${cxx[@]}" "tests/runtime/$t.cpp" "$out/libgtest.a" -o "$out/$t" &
  pids+=($!)
  if [ "${#pids[@]}" -ge 2 ]; then
    wait "${pids[0]}"
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p"; done

echo "== aarch64: running under qemu-aarch64"
# EinsumTable.SizeOneAgainstZero runs its cases as threadsafe death tests,
# which re-exec the test binary: qemu-user cannot exec an aarch64 binary
# without binfmt_misc, so that one test is left to the x86 suite.
for t in "${tests[@]}"; do
  QEMU_LD_PREFIX=/usr/aarch64-linux-gnu qemu-aarch64 "$out/$t" --gtest_brief=1 \
    --gtest_filter=-EinsumTable.SizeOneAgainstZero
done
echo "aarch64.sh: ${#tests[@]} test programs passed under qemu-aarch64"
