#!/usr/bin/env python3
"""bench/mesh_overhead.py - the 2x2 thread mesh against one device on all cores.

train_mlp's default run trains its model on the 2x2 mesh (4 devices as
fibers on the machine's threads, data x model sharded) and then the same
steps on one device whose einsums use every thread, and prints both times.
On this kind of VM one such pair says little: the machine's speed drifts by
a quarter within minutes, and the two runs are seconds apart. This script
runs train_mlp --rounds times and reports each round's mesh / one-device
ratio (two runs of the same process, back to back) and their median, the
figure the issue judges (goal <= 1.10), with the medians of each side.

    cmake --preset release && cmake --build build/release --target train_mlp
    python3 bench/mesh_overhead.py [--train-mlp PATH] [--rounds 7] [--steps 300] [--isa avx2]

--isa avx2 caps xshard's kernels at AVX2 (XSHARD_ISA), for the AVX2 figure
on an AVX-512 machine.
"""
import os
import re
import statistics
import subprocess
import sys

from step_peer import cpu_text, train_mlp_parser


def one_round(exe, steps, isa):
    env = dict(os.environ)
    if isa == "avx2":
        env["XSHARD_ISA"] = "avx2"
    out = subprocess.run([exe, "--steps", str(steps), "--no-progress"], env=env, check=True, capture_output=True,
                         text=True).stdout
    mesh = re.search(r"steps on the mesh in ([0-9.eE+-]+) s", out)
    one = re.search(r"the same training on one device \((\d+) einsum threads?\): ([0-9.eE+-]+) s", out)
    if not mesh or not one:
        sys.exit("mesh_overhead.py: no times in train_mlp's output:\n" + out)
    return float(mesh.group(1)), float(one.group(2)), int(one.group(1))


def main():
    ap = train_mlp_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--isa", choices=["best", "avx2"], default="best")
    args = ap.parse_args()
    model, isa = cpu_text()
    print(f"CPU: {model}, {os.cpu_count()} logical CPUs; ISA: {isa}; --isa {args.isa}")
    print(f"train_mlp, {args.steps} steps on the 2x2 mesh, then on one device; {args.rounds} rounds\n")
    rows = [one_round(args.train_mlp, args.steps, args.isa) for _ in range(args.rounds)]
    threads = rows[0][2]
    print(f"| round | mesh (s) | one device, {threads} threads (s) | mesh / one device |")
    print("|---:|---:|---:|---:|")
    for i, (m, o, _) in enumerate(rows, 1):
        print(f"| {i} | {m:.3f} | {o:.3f} | {m / o:.3f} |")
    ratios = [m / o for m, o, _ in rows]
    print(f"\nmedians: mesh {statistics.median(r[0] for r in rows):.3f} s, one device "
          f"{statistics.median(r[1] for r in rows):.3f} s")
    print(f"mesh / one device: median of the rounds' ratios {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f}; goal <= 1.10)")


if __name__ == "__main__":
    main()
