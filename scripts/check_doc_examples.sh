#!/usr/bin/env bash
# Header examples are compiled code: a header whose top comment says
# "Example, compiled in tests/compile/doc_<name>.cpp:" must have every code
# line of the example that follows (the "//   "-indented lines up to the
# next prose line) in that file, character for character apart from
# whitespace (clang-format may re-flow the compiled copy). Every
# tests/compile/doc_*.cpp must be named by some header. Exits non-zero
# naming the header, its line and the file on the first mismatch of each.
# CTest: docs.examples_compiled.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec python3 - <<'PY'
import glob
import re
import sys

marker = re.compile(r"^// Example, compiled in (tests/compile/doc_\w+\.cpp):\s*$")
failures, named = [], set()
for header in sorted(glob.glob("include/xshard/**/*.hpp", recursive=True)):
    lines = open(header, encoding="utf-8").read().split("\n")
    for at, line in enumerate(lines):
        m = marker.match(line)
        if not m:
            continue
        doc = m.group(1)
        named.add(doc)
        try:
            squashed = re.sub(r"\s+", "", open(doc, encoding="utf-8").read())
        except OSError:
            failures.append(f"{header}:{at + 1}: names {doc}, which does not exist")
            continue
        code_lines = 0
        for n in range(at + 1, len(lines)):
            text = lines[n]
            if not text.startswith("//") or re.match(r"^// \S", text):
                break  # the example ends at code or at the next prose line
            code = text[2:].strip()
            if code in ("", "..."):
                continue
            code_lines += 1
            if re.sub(r"\s+", "", code) not in squashed:
                failures.append(f"{header}:{n + 1}: example line not in {doc}: {code}")
        if code_lines == 0:
            failures.append(f"{header}:{at + 1}: the marker is not followed by an example")
for doc in sorted(glob.glob("tests/compile/doc_*.cpp")):
    if doc not in named:
        failures.append(f"{doc}: no header names it (\"// Example, compiled in {doc}:\")")
for f in failures:
    print(f, file=sys.stderr)
if failures:
    sys.exit(1)
print(f"header examples: {len(named)} compiled files checked")
PY
