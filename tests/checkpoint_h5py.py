#!/usr/bin/env python3
"""CTest checkpoint.h5py: h5py opens the checkpoint that
CheckpointInterop.WriteForH5py (tests/runtime/checkpoint_test.cpp) saved on a
2x2 mesh, and its arrays equal the gathered tensors written beside it as text
(checkpoint_interop.txt: name dtype shape values...). Exit 77 (skipped) when
h5py cannot be imported."""
import sys

try:
    import h5py
    import numpy as np
except ImportError:
    print("h5py not importable: skipped")
    sys.exit(77)

folder = sys.argv[1] if len(sys.argv) > 1 else "."
failures = []
with h5py.File(f"{folder}/checkpoint_interop.h5", "r") as f:
    assert f.attrs["xshard_step"] == 17, f.attrs["xshard_step"]
    assert f.attrs["xshard_mesh"] == b"data=2, model=2"
    assert f.attrs["xshard_devices"] == b"3,1,2,0"
    assert f.attrs["xshard_version"].startswith(b"0.")
    for line in open(f"{folder}/checkpoint_interop.txt"):
        name, dtype, shape, *values = line.split()
        shape = tuple(int(x) for x in shape.split(","))
        want = np.array([float(v) if "float" in dtype else int(v) for v in values], dtype=dtype).reshape(shape)
        ds = f[name]
        if ds.dtype != np.dtype(dtype) or ds.shape != shape:
            failures.append(f"{name}: {ds.dtype} {ds.shape}, want {dtype} {shape}")
        elif not np.array_equal(ds[()], want):
            failures.append(f"{name}: values differ")
        if ds.attrs["xshard_dtype"].decode() != dtype or not ds.attrs["xshard_hlo_sharding"].startswith(b"{"):
            failures.append(f"{name}: attributes {dict(ds.attrs)}")
        print(f"{name}: {ds.dtype} {ds.shape} spec ({ds.attrs['xshard_spec'].decode()}) "
              f"{ds.attrs['xshard_hlo_sharding'].decode()}: equal")
for f in failures:
    print("FAIL", f)
sys.exit(1 if failures else 0)
