#!/usr/bin/env bash
# Fails when a header's example is not the code that is compiled (CTest
# docs.examples). A header under include/xshard/ shows a compiled example as
#
#   // Example (compiled in tests/compile/doc_<folder>.cpp):
#   //   <code line>
#   //   <code line>
#   //
#   //   <code line>
#
# The block runs from the line after the marker over lines that are `//`
# alone or `//` and at least three spaces; it ends at the first other line
# (prose, `// text`, or code). Every non-empty line of the block, with
# whitespace runs collapsed to one space, must be a line of the named file,
# normalised alike, and the lines must occur there in the header's order
# (the file may hold more between them: the context an example takes for
# granted, the functions that hold its statements). Also fails on a marker
# naming a missing file, an empty block, and a tests/compile/doc_*.cpp that
# no header names.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

python3 - <<'EOF'
import pathlib, re, sys

marker = re.compile(r"^// Example \(compiled in (tests/compile/doc_[A-Za-z0-9_]+\.cpp)\):\s*$")
block_line = re.compile(r"^//(?:   .*)?$")


def norm(s):
    return " ".join(s.split())


bad = 0
examples = 0
lines_checked = 0
named = set()
files = {}
for header in sorted(pathlib.Path("include/xshard").rglob("*.hpp")):
    text = header.read_text().splitlines()
    i = 0
    while i < len(text):
        m = marker.match(text[i])
        if not m:
            i += 1
            continue
        doc = m.group(1)
        named.add(doc)
        examples += 1
        start = i + 1
        block = []
        j = start
        while j < len(text) and block_line.match(text[j]):
            code = norm(text[j][2:])
            if code:
                block.append((j + 1, code))
            j += 1
        if not block:
            print(f"check_doc_examples: {header}:{i + 1}: the example block after the marker is empty", file=sys.stderr)
            bad = 1
        elif not pathlib.Path(doc).is_file():
            print(f"check_doc_examples: {header}:{i + 1}: names {doc}, which does not exist", file=sys.stderr)
            bad = 1
        else:
            if doc not in files:
                files[doc] = [norm(s) for s in pathlib.Path(doc).read_text().splitlines()]
            lines = files[doc]
            pos = 0
            for lineno, code in block:
                lines_checked += 1
                try:
                    pos = lines.index(code, pos) + 1
                except ValueError:
                    where = "not in" if code not in lines else "not in order in"
                    print(f"check_doc_examples: {header}:{lineno}: example line {where} {doc}:\n    {code}",
                          file=sys.stderr)
                    bad = 1
        i = j

for doc in sorted(str(p) for p in pathlib.Path("tests/compile").glob("doc_*.cpp")):
    if doc not in named:
        print(f"check_doc_examples: {doc}: no header under include/xshard names it in an `// Example (compiled in ...)` line",
              file=sys.stderr)
        bad = 1

if examples == 0:
    print("check_doc_examples: no `// Example (compiled in ...)` marker found under include/xshard", file=sys.stderr)
    bad = 1
if bad:
    sys.exit(1)
print(f"check_doc_examples: {examples} header examples ({lines_checked} lines) match "
      f"{len(named)} files tests/compile/doc_*.cpp")
EOF
