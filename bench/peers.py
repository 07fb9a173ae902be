#!/usr/bin/env python3
"""Times numpy.einsum(optimize=True) and torch.einsum on bench/einsum.cpp's six cases.

    /usr/bin/python3 bench/peers.py --out bench/results/peers.json [--threads 1 2] [--reps 5]

Use Debian's interpreter (/usr/bin/python3): numpy and torch are the Debian
packages python3-numpy and python3-torch, which link Debian's OpenBLAS.

Every thread count runs in its own subprocess, because OpenBLAS reads
OPENBLAS_NUM_THREADS and OPENBLAS_CORETYPE when it is loaded. The subprocess
gets OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = MKL_NUM_THREADS = the thread
count and OPENBLAS_CORETYPE (unless already set: Cooperlake on an AVX-512 CPU, Haswell otherwise; see
../shared/PERF-NOTES.md), and calls torch.set_num_threads(threads).

fp32 operands, uniform in [-1, 1), made once per case. Per library and case:
two warm-up calls, then `--reps` repetitions (default 5, at least 5); each
repetition times a loop of calls lasting at least `--min-time` seconds
(default 0.3) and records the time per call. The JSON has every repetition
and the median; GFLOP/s = 2*M*N*K*batch / median. numpy's third case is
`bsm,bsn->mn` (numpy.einsum rejects ellipsis dims missing from the output);
the results of numpy and torch are compared with each other once per case.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# (id, equation, numpy equation, shape A, shape B, flops)
CASES = [
    ("fwd", "...n,mn->...m", "...n,mn->...m", (8, 512, 1024), (1024, 1024), 2.0 * 4096 * 1024 * 1024),
    ("bwd_x", "...m,mn->...n", "...m,mn->...n", (8, 512, 1024), (1024, 1024), 2.0 * 4096 * 1024 * 1024),
    ("bwd_w", "...m,...n->mn", "bsm,bsn->mn", (8, 512, 1024), (8, 512, 1024), 2.0 * 1024 * 1024 * 4096),
    ("attn_qk", "bhqd,bhkd->bhqk", "bhqd,bhkd->bhqk", (8, 16, 256, 64), (8, 16, 256, 64), 2.0 * 128 * 256 * 256 * 64),
    ("attn_pv", "bhqk,bhkd->bhqd", "bhqk,bhkd->bhqd", (8, 16, 256, 256), (8, 16, 256, 64), 2.0 * 128 * 256 * 64 * 256),
    ("ikj_jkl", "ikj,jkl->il", "ikj,jkl->il", (512, 64, 64), (64, 64, 512), 2.0 * 512 * 512 * 64 * 64),
]


def time_reps(fn, reps, min_time):
    fn()
    fn()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-6)
    calls = max(1, int(min_time / one + 0.999))
    per_call = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - t0) / calls)
    return per_call, calls


def openblas_info():
    """Core and thread count of the OpenBLAS numpy loaded (None if not found)."""
    import ctypes

    for name in ("libopenblas.so.0", "libblas.so.3", "libopenblas.so"):
        try:
            lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        except OSError:
            continue
        if hasattr(lib, "openblas_get_corename"):
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_config.restype = ctypes.c_char_p
            return {
                "library": name,
                "corename": lib.openblas_get_corename().decode(),
                "config": lib.openblas_get_config().decode(),
                "threads": lib.openblas_get_num_threads(),
            }
    return None


def worker(threads, reps, min_time, libs):
    import numpy as np

    result = {"threads": threads, "env": {k: os.environ.get(k) for k in (
        "OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "ATEN_CPU_CAPABILITY")}}
    result["numpy_version"] = np.__version__
    torch = None
    if "torch" in libs:
        try:
            import torch as torch_module

            torch = torch_module
            torch.set_num_threads(threads)
            result["torch_version"] = torch.__version__
            result["torch_threads"] = torch.get_num_threads()
            result["torch_parallel_info"] = torch.__config__.parallel_info()
        except ImportError as e:
            result["torch_error"] = str(e)
    result["openblas"] = openblas_info()  # after torch: both load the same libopenblas
    rng = np.random.default_rng(0)
    cases = {}
    for cid, eq, np_eq, sa, sb, flops in CASES:
        a = rng.uniform(-1, 1, sa).astype(np.float32)
        b = rng.uniform(-1, 1, sb).astype(np.float32)
        entry = {"equation": eq, "shapes": [list(sa), list(sb)], "flops": flops}
        ref = None
        if "numpy" in libs:
            per_call, calls = time_reps(lambda: np.einsum(np_eq, a, b, optimize=True), reps, min_time)
            med = statistics.median(per_call)
            entry["numpy"] = {"equation": np_eq, "seconds": per_call, "calls_per_rep": calls,
                              "median_s": med, "gflops": flops / med * 1e-9}
            ref = np.einsum(np_eq, a, b, optimize=True)
        if torch is not None:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            with torch.inference_mode():
                per_call, calls = time_reps(lambda: torch.einsum(eq, ta, tb), reps, min_time)
                out = torch.einsum(eq, ta, tb).numpy()
            med = statistics.median(per_call)
            entry["torch"] = {"equation": eq, "seconds": per_call, "calls_per_rep": calls, "median_s": med,
                              "gflops": flops / med * 1e-9}
            if ref is not None:
                scale = float(np.abs(ref).max()) or 1.0
                entry["numpy_vs_torch_rel_diff"] = float(np.abs(out - ref).max()) / scale
        cases[cid] = entry
        print(f"  [{threads} thread(s)] {cid:8s}" + "".join(
            f"  {lib} {entry[lib]['gflops']:7.1f} GFLOP/s" for lib in ("numpy", "torch") if lib in entry),
            file=sys.stderr, flush=True)
    result["cases"] = cases
    return result


def default_coretype():
    """OpenBLAS's AVX-512 kernels where the CPU has AVX-512, its AVX2 ones otherwise."""
    try:
        with open("/proc/cpuinfo") as f:
            return "Cooperlake" if " avx512f" in f.read() else "Haswell"
    except OSError:
        return "Haswell"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/results/peers.json")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.3, help="seconds per repetition (at least)")
    ap.add_argument("--libs", nargs="+", default=["numpy", "torch"], choices=["numpy", "torch"])
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.reps < 5:
        ap.error("--reps must be at least 5")

    if args.worker is not None:
        json.dump(worker(args.worker, args.reps, args.min_time, args.libs), sys.stdout)
        return

    runs = []
    for t in args.threads:
        env = dict(os.environ)
        env.setdefault("OPENBLAS_CORETYPE", default_coretype())
        for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[k] = str(t)
        print(f"peers.py: {t} thread(s), OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE']}", file=sys.stderr, flush=True)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", str(t), "--reps", str(args.reps),
               "--min-time", str(args.min_time), "--libs", *args.libs]
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, check=True)
        runs.append(json.loads(proc.stdout))
    meta = {"python": sys.version.split()[0], "executable": sys.executable, "reps": args.reps,
            "min_time_s": args.min_time, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "runs": runs}, f, indent=1)
    print(f"peers.py: wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
