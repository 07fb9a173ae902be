#!/usr/bin/env bash
# Fails when an error code has no compile-fail test (CTest
# errors.compile_fail_coverage): every row of include/xshard/core/errors.def
# names a diagnostic template, and that name followed by '<' must appear on
# the `// expect:` line of some tests/compile_fail/*.cpp. Also fails on a
# template name used by two rows.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

list=include/xshard/core/errors.def
# XSHARD_ERROR(code, template, ...) -> "code template"
rows=$(sed -nE 's/^XSHARD_ERROR\(([a-z_0-9]+), *([a-z_0-9]+),.*/\1 \2/p' "$list")
if [ -z "$rows" ]; then
  echo "check_error_tests: no XSHARD_ERROR rows read from $list" >&2
  exit 1
fi
expects=$(grep -h '//[[:space:]]*expect:' tests/compile_fail/*.cpp)

bad=0
count=0
dups=$(awk '{print $2}' <<<"$rows" | sort | uniq -d)
if [ -n "$dups" ]; then
  echo "check_error_tests: $list: template names used by more than one row: $dups" >&2
  bad=1
fi
while read -r code name; do
  count=$((count + 1))
  if ! grep -qE "(^|[^a-z_0-9])${name}<" <<<"$expects"; then
    echo "check_error_tests: errc::$code ($name): no tests/compile_fail/*.cpp has \`// expect: ...$name<...\`" >&2
    bad=1
  fi
done <<<"$rows"
if [ "$bad" -ne 0 ]; then exit 1; fi
echo "check_error_tests: all $count error codes of $list have a compile-fail test"
