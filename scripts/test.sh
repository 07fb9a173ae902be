#!/usr/bin/env bash
# Installs dependencies, then builds and runs every test with GCC (preset
# `default`) and Clang 14 (preset `clang`), then checks formatting.
# Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./scripts/install-deps.sh

for preset in default clang; do
  echo "== ${preset}: configure, build, test"
  cmake --preset "${preset}"
  cmake --build --preset "${preset}"
  ctest --preset "${preset}"
done

echo "== clang-format check"
dirs=()
for d in include tests examples bench; do
  if [ -d "$d" ]; then dirs+=("$d"); fi
done
files=()
if [ "${#dirs[@]}" -gt 0 ]; then
  while IFS= read -r -d '' f; do files+=("$f"); done \
    < <(find "${dirs[@]}" -type f \( -name '*.hpp' -o -name '*.cpp' \) -print0 | sort -z)
fi
if [ "${#files[@]}" -gt 0 ]; then
  if ! out=$(clang-format --dry-run --Werror "${files[@]}" 2>&1); then
    printf '%s\n' "$out" | head -n 60
    echo "clang-format: these files need formatting (fix with: clang-format -i FILE...):" >&2
    printf '%s\n' "$out" | grep -oE '^[^: ]+\.(hpp|cpp):' | tr -d : | sort -u >&2
    exit 1
  fi
fi
echo "clang-format: ${#files[@]} files clean"
echo "test.sh: all checks passed"
