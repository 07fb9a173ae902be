#!/usr/bin/env python3
"""Summarises clang -ftime-trace JSON files as markdown.

    summarize_trace.py tu_0.json tu_20.json [--top 10] [-o trace.md]

1. Totals: the "Total <event>" entries of every file, side by side (ms), so a
   baseline trace can be subtracted by eye.
2. For the last file:
   - Frontend: self time (an event's duration minus its direct children's) by
     event and template, so a constexpr evaluation or a parse shows up under
     the declaration that triggers it (clang 14 has no constant-evaluation
     events).
   - Backend: OptFunction time (the LLVM optimizer, per function) by function
     family (demangled name with template and call arguments elided: all the
     instantiations of one template together) and by single function
     (template arguments past the first level elided), and by area of
     xshard's einsum (AREAS: first matching regex on the demangled name).
     Clang 14's trace does not attribute machine code generation
     (CodeGenPasses) to functions.
"""

import argparse
import json
import re
import shutil
import subprocess
from collections import defaultdict

TOTALS = [
    "ExecuteCompiler",
    "Frontend",
    "Source",
    "ParseClass",
    "ParseTemplate",
    "InstantiateClass",
    "InstantiateFunction",
    "PerformPendingInstantiations",
    "CodeGen Function",
    "Backend",
    "Optimizer",
    "OptFunction",
    "CodeGenPasses",
]

# Areas of the einsum engine, for the backend: (name, regex on the demangled
# function name); the first match wins.
AREAS = [
    ("GEMM kernels (per T x 3 archs: gemm_driver, packing, micro-kernels, dispatch)",
     r"gemm_driver|pack_[ab]|micro_|gemm_by_arch|xsimd::detail::dispatcher|run_gemm|xsimd_micro"),
    ("reduction kernel (run_reduce, per T)", r"run_reduce"),
    ("per equation: einsum<Eq, E...>, einsum_run<T, lambda, E...>",
     r"^(void )?xshard::detail::einsum_run<|xshard::einsum<|xshard::detail::make_result"),
    ("engine per T: contract_pair, execute_einsum, reduce_single, operands",
     r"contract_pair|execute_einsum|reduce_single|bind_operands|as_operand|fill_offsets|sort_by_stride"
     r"|strides_by_label|check_output|output_shape"),
    ("run-time parse, bind, plan, error text",
     r"describe|text_builder|append_|bind_einsum|plan_einsum|parse_einsum|einsum_label_extents|einsum_text"
     r"|xshard::error|diagnostic"),
    ("thread pool", r"thread_pool|thread_count|std::thread|parallel_for"),
    ("std:: (vector, sort, string, ...)", r"^(\S+ )?(std::|__gnu_cxx)"),
    ("xtensor", r"xt::"),
]


def area_of(name):
    return next((a for a, rx in AREAS if re.search(rx, name)), "other")


def load(path):
    return [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]


def totals(events):
    return {e["name"][6:]: e["dur"] / 1000 for e in events if e["name"].startswith("Total ")}


def elide(text, keep_depth=0):
    """Drops what is nested deeper than keep_depth in <...> and (...)."""
    out, depth = [], 0
    for ch in text:
        if ch in "<(":
            if depth <= keep_depth:
                out.append(ch)
            depth += 1
        elif ch in ">)":
            depth -= 1
            if depth <= keep_depth:
                out.append(ch)
        elif depth <= keep_depth:
            out.append(ch)
    return "".join(out)


def demangle(names):
    if not names or not shutil.which("c++filt"):
        return dict(zip(names, names))
    res = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
    return dict(zip(names, res.stdout.splitlines()))


def self_times(events):
    """(event, template) -> [count, self ms, inclusive ms] on the main thread,
    frontend events only (those that start before the Backend event)."""
    main_tid = min(e["tid"] for e in events)
    backend = min((e["ts"] for e in events if e["name"] == "Backend"), default=float("inf"))
    main = sorted(
        (e for e in events if e["tid"] == main_tid and not e["name"].startswith("Total ") and e["ts"] < backend),
        key=lambda e: (e["ts"], -e["dur"]),
    )
    recs, stack = [], []
    for e in main:
        while stack and stack[-1][0]["ts"] + stack[-1][0]["dur"] <= e["ts"]:
            stack.pop()
        rec = [e, e["dur"]]
        if stack:
            stack[-1][1] -= e["dur"]
        stack.append(rec)
        recs.append(rec)
    agg = defaultdict(lambda: [0, 0.0, 0.0])
    for e, own in recs:
        if e["name"] == "ExecuteCompiler":
            continue  # its self time would include the backend
        if e["name"] in ("Frontend", "Source"):
            key = (e["name"], "")  # parsing: the files are not the point here
        else:
            detail = e.get("args", {}).get("detail", "")
            key = (e["name"], re.split(r"[<(]", detail, maxsplit=1)[0] or "(none)")
        a = agg[key]
        a[0] += 1
        a[1] += own / 1000
        a[2] += e["dur"] / 1000
    return agg


def short(text, n=110):
    text = text.replace("|", "\\|")
    return text if len(text) <= n else text[: n - 1] + "…"


def summarize(paths, labels, top):
    loaded = [load(p) for p in paths]
    out = ["## Totals (ms; `Total <event>` of the trace: outermost events of each kind)", ""]
    out.append("| event | " + " | ".join(labels) + " |")
    out.append("|---|" + "---:|" * len(labels))
    tots = [totals(ev) for ev in loaded]
    for name in TOTALS:
        if any(name in t for t in tots):
            out.append(f"| {name} | " + " | ".join(f"{t.get(name, 0):.0f}" for t in tots) + " |")

    events = loaded[-1]
    out += ["", f"## Frontend of {labels[-1]}: self time by event and template (top {top})", "",
            "| event | template | count | self ms | inclusive ms |", "|---|---|---:|---:|---:|"]
    for (name, tmpl), (count, own, incl) in sorted(self_times(events).items(), key=lambda kv: -kv[1][1])[:top]:
        out.append(f"| {name} | `{short(tmpl) or '-'}` | {count} | {own:.0f} | {incl:.0f} |")

    opt = [e for e in events if e["name"] == "OptFunction"]
    names = demangle(sorted({e["args"]["detail"] for e in opt}))
    fam, fun, area = defaultdict(lambda: [0, 0.0]), defaultdict(float), defaultdict(float)
    for e in opt:
        d = names[e["args"]["detail"]]
        f = fam[elide(d)]
        f[0] += 1
        f[1] += e["dur"] / 1000
        fun[elide(d, 1)] += e["dur"] / 1000
        area[area_of(d)] += e["dur"] / 1000
    total_opt = sum(f[1] for f in fam.values())
    out += ["", f"## Backend of {labels[-1]}: LLVM optimizer time (OptFunction, {total_opt:.0f} ms) by area", "",
            "| area | ms | share |", "|---|---:|---:|"]
    for name, ms in sorted(area.items(), key=lambda kv: -kv[1]):
        out.append(f"| {name} | {ms:.0f} | {100 * ms / total_opt:.0f}% |")
    out += ["", f"## Backend of {labels[-1]}: LLVM optimizer time (OptFunction, {total_opt:.0f} ms) "
            f"by function family (top {top})", "",
            "| family (template and call arguments elided) | OptFunction events | ms | share |",
            "|---|---:|---:|---:|"]
    for name, (count, ms) in sorted(fam.items(), key=lambda kv: -kv[1][1])[:top]:
        out.append(f"| `{short(name)}` | {count} | {ms:.0f} | {100 * ms / total_opt:.0f}% |")
    out += ["", f"By function (first-level template arguments kept; top {top}):", "",
            "| function | ms |", "|---|---:|"]
    for name, ms in sorted(fun.items(), key=lambda kv: -kv[1])[:top]:
        out.append(f"| `{short(name, 160)}` | {ms:.0f} |")
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="+", help="clang -ftime-trace JSON files; details for the last")
    p.add_argument("--labels", help="comma-separated column names (default: the file names)")
    p.add_argument("--top", type=int, default=10)
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    args = p.parse_args()
    labels = args.labels.split(",") if args.labels else args.traces
    if len(labels) != len(args.traces):
        p.error("--labels needs one name per trace")
    text = summarize(args.traces, labels, args.top)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
