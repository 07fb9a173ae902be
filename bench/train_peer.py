#!/usr/bin/env python3
"""bench/train_peer.py - a whole training step, xshard beside PyTorch eager.

The train_mlp model (8 residual MLP blocks x + W2 gelu(W1 x + b1) + b2,
width 128, hidden 512, batch 64, exact gelu, mean squared error, SGD lr 0.1)
trained for --steps steps on one device: xshard's `train_mlp --devices 1`
(XSHARD_NUM_THREADS=1 and 2) and the same model, shapes, initialisation
scheme, data scheme and optimizer in PyTorch eager (torch.set_num_threads 1
and 2), in one run, each timed --repeats times (the median is reported).

    cmake --preset release && cmake --build build/release --target train_mlp
    python3 bench/train_peer.py [--train-mlp build/release/examples/train_mlp/train_mlp] [--steps 300]

Prints the CPU, the ISA flags, each median, and the ratios the issue judges:
xshard 1 thread / PyTorch's best (goal <= 0.8) and xshard 1 thread / 2
threads (goal >= 1.7). train_mlp keeps freed memory in glibc's heap
(xshard::retain_freed_memory); PyTorch is timed without and with the same
glibc settings (as environment variables), and its best row is the bar.
Needs python3-torch (Debian).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

LAYERS, WIDTH, HIDDEN, BATCH, SAMPLES, LR = 8, 128, 512, 64, 1024, 0.1


def cpu_text():
    model, flags = "unknown CPU", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "unknown CPU":
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    isa = [f for f in ("avx512f", "avx512bw", "avx512vl", "avx2", "fma") if f in flags]
    return model, " ".join(isa) or "no AVX"


def xshard_seconds(exe, steps, threads):
    env = dict(os.environ, XSHARD_NUM_THREADS=str(threads))
    out = subprocess.run([exe, "--devices", "1", "--steps", str(steps), "--no-progress"],
                         env=env, check=True, capture_output=True, text=True).stdout
    m = re.search(r"steps on one device in ([0-9.eE+-]+) s", out)
    if not m:
        sys.exit("train_peer.py: no time in train_mlp's output:\n" + out)
    return float(m.group(1))


def blas_in_use():
    """The BLAS library this process mapped (PyTorch's generic BLAS is
    whatever libblas.so.3 resolves to: OpenBLAS, or Debian's slow reference
    BLAS when OpenBLAS is not installed)."""
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "blas" in line.split()[-1]}
    return ", ".join(sorted(os.path.realpath(l) for l in libs)) or "none mapped"


def torch_worker(steps, threads):
    """Runs in a child whose OPENBLAS_NUM_THREADS and OMP_NUM_THREADS are
    `threads` (OpenBLAS reads them when it loads)."""
    seconds, loss = torch_seconds(steps, threads)
    print(f"seconds={seconds} loss={loss} blas={blas_in_use()}")


# glibc's environment form of xshard::retain_freed_memory() (train_mlp calls
# it): PyTorch is also timed with it, so neither side keeps an allocator
# advantage the other lacks.
RETAIN_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(2**62)}


def torch_run(steps, threads, retain=False):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    if retain:
        env.update(RETAIN_ENV)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-worker", str(threads), "--steps",
                          str(steps)], env=env, check=True, capture_output=True, text=True).stdout
    m = re.search(r"seconds=(\S+) loss=(\S+) blas=(.*)", out)
    return float(m.group(1)), m.group(3).strip()


def torch_seconds(steps, threads):
    import torch

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(7)
    x_all = torch.randn(SAMPLES, WIDTH, generator=g)
    a = torch.randn(WIDTH, WIDTH, generator=g) / WIDTH**0.5
    y_all = torch.sin(x_all @ a) / 2
    params = []
    for _ in range(LAYERS):
        params.append([
            (torch.randn(HIDDEN, WIDTH, generator=g) / WIDTH**0.5).requires_grad_(),
            torch.zeros(HIDDEN).requires_grad_(),
            (torch.randn(WIDTH, HIDDEN, generator=g) * 0.1 / HIDDEN**0.5).requires_grad_(),
            torch.zeros(WIDTH).requires_grad_(),
        ])
    flat = [p for layer in params for p in layer]
    opt = torch.optim.SGD(flat, lr=LR)
    gelu = torch.nn.functional.gelu
    start = time.perf_counter()
    for step in range(steps):
        first = (step * BATCH) % SAMPLES
        h = x_all[first:first + BATCH]
        for w1, b1, w2, b2 in params:
            h = h + torch.nn.functional.linear(gelu(torch.nn.functional.linear(h, w1, b1)), w2, b2)
        loss = ((h - y_all[first:first + BATCH])**2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - start, float(loss)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train-mlp", default=os.path.join(here, "..", "build", "release", "examples", "train_mlp",
                                                        "train_mlp"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--torch-worker", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        torch_worker(args.steps, args.torch_worker)
        return
    import torch

    model, isa = cpu_text()
    print(f"CPU: {model}, {os.cpu_count()} logical CPUs; ISA: {isa}; PyTorch {torch.__version__}")
    print(f"train_mlp model, {args.steps} steps, median of {args.repeats}\n")
    rows, blas = {}, ""
    for threads in (1, 2):
        # Interleaved, so load changes hit both sides alike.
        xs, ts, rs = [], [], []
        for _ in range(args.repeats):
            xs.append(xshard_seconds(args.train_mlp, args.steps, threads))
            seconds, blas = torch_run(args.steps, threads)
            ts.append(seconds)
            rs.append(torch_run(args.steps, threads, retain=True)[0])
        rows[threads] = (statistics.median(xs), statistics.median(ts), statistics.median(rs))
    print(f"PyTorch's BLAS: {blas}")
    if "openblas" not in blas:
        print("warning: PyTorch is not on OpenBLAS (XSHARD_BENCH_DEPS=1 scripts/install-deps.sh installs it)")
    print("| | 1 thread (s) | 2 threads (s) |")
    print("|---|---:|---:|")
    print(f"| xshard (`train_mlp --devices 1`) | {rows[1][0]:.3f} | {rows[2][0]:.3f} |")
    print(f"| PyTorch {torch.__version__} eager | {rows[1][1]:.3f} | {rows[2][1]:.3f} |")
    print(f"| PyTorch, glibc heap retained as train_mlp's | {rows[1][2]:.3f} | {rows[2][2]:.3f} |")
    best_torch = min(rows[1][1], rows[2][1], rows[1][2], rows[2][2])
    print(f"\nxshard 1 thread / PyTorch's best: {rows[1][0] / best_torch:.2f} (goal <= 0.8)")
    print(f"xshard best / PyTorch's best: {min(rows[1][0], rows[2][0]) / best_torch:.2f}")
    print(f"xshard 1 thread / 2 threads: {rows[1][0] / rows[2][0]:.2f} (goal >= 1.7)")


if __name__ == "__main__":
    main()
