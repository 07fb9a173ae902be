"""bench/step_peer.py - what the training-step scripts share
(train_peer.py and mesh_overhead.py: the MLP; train_transformer_peer.py: the
decoder).

The machine's description, the BLAS PyTorch mapped and the kernel OpenBLAS
picked, glibc's heap settings matching xshard::retain_freed_memory(), and
the OpenBLAS kernels to time PyTorch with for an --isa choice: OpenBLAS
0.3.21 mis-detects some CPUs (this Zen 4 VM reports Haswell, i.e. AVX2
kernels), so PyTorch is timed both with its own choice and with the kernel
the CPU's ISA calls for, and the best row is the bar.
"""
import argparse
import os

# glibc's environment form of xshard::retain_freed_memory() (the examples
# call it): PyTorch is timed with it too, so neither side keeps an allocator
# advantage the other lacks.
RETAIN_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(2**62)}


def train_mlp_parser(doc):
    """An argument parser for a script that times train_mlp: --train-mlp
    (the release preset's binary by default) and --steps (300)."""
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--train-mlp", default=os.path.join(here, "..", "build", "release", "examples", "train_mlp",
                                                        "train_mlp"))
    ap.add_argument("--steps", type=int, default=300)
    return ap


def cpu_text():
    """(model name, the AVX flags that matter) from /proc/cpuinfo."""
    model, flags = "unknown CPU", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "unknown CPU":
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    isa = [f for f in ("avx512f", "avx512bw", "avx512vl", "avx2", "fma") if f in flags]
    return model, " ".join(isa) or "no AVX"


def openblas_core():
    """The kernel OpenBLAS picked in this process."""
    import ctypes
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except OSError:
        return "no OpenBLAS"


def blas_in_use():
    """The BLAS libraries this process mapped (PyTorch's generic BLAS is
    whatever libblas.so.3 resolves to: OpenBLAS, or Debian's slow reference
    BLAS when OpenBLAS is not installed)."""
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "blas" in line.split()[-1]}
    return ", ".join(sorted(os.path.realpath(l) for l in libs)) or "none mapped"


def isa_settings(choice, cpu_isa):
    """For --isa best|avx2: (XSHARD_ISA or None, OPENBLAS_CORETYPE values to
    time PyTorch with, None meaning OpenBLAS's own detection). avx2 caps both
    sides at AVX2 (xshard's kernels by XSHARD_ISA, OpenBLAS's Haswell
    kernels): the comparison for an AVX2-only machine."""
    if choice == "avx2":
        return "avx2", ["Haswell"]
    return None, [None, "Cooperlake" if "avx512f" in cpu_isa else "Haswell"]
