#!/usr/bin/env python3
"""Writes a translation unit that computes N distinct typed shardings.

    gen_sharding_tu.py N [-o FILE] [--seed S]
    gen_sharding_tu.py 0 -o baseline.cpp      # only #include <xshard/xshard.hpp>
    gen_sharding_tu.py 10 --devices 256       # 10 meshes of 256 devices each

Each sharding i gets its own mesh type (axis names carry the suffix i, so no
two meshes are the same type and nothing is shared between them), 2..64
devices (uniform) in 1..4 axes; every fourth mesh lists its device ids
explicitly, shuffled. The spec mixes axis names, axis indices, tuples and None.
Every pair is checked with

    static_assert(xshard::hlo_sharding<M_i, S_i>() == "<XLA V1 text>");

where the expected text comes from `reference_hlo_v1` below: an independent
re-implementation, in a few lines of Python, of the rules in DESIGN.md
("Semantics to match"), so a passing TU also cross-checks the engine.
The output is deterministic for a given N and seed.
"""

import argparse
import random
import sys
from math import prod

AXIS_NAMES = ["data", "model", "fsdp", "tensor", "x", "y", "z", "expert"]


# ---------------------------------------------------------------------------
# Reference: torch_xla's OpSharding -> XLA normal form -> V1 text.


def transpose(values, shape, perm):
    """Row-major transpose: new dim j is old dim perm[j]."""
    strides = [prod(shape[d + 1 :]) for d in range(len(shape))]
    new_shape = [shape[p] for p in perm]
    out = []
    for flat in range(len(values)):
        rest, src = flat, 0
        for j in reversed(range(len(perm))):
            src += (rest % new_shape[j]) * strides[perm[j]]
            rest //= new_shape[j]
        out.append(values[src])
    return out, new_shape


def reference_hlo_v1(sizes, ids, spec):
    """sizes: mesh axis sizes; ids: device ids row-major; spec: list of
    entries, each a list of mesh-axis indices ([] is None)."""
    used = [a for entry in spec for a in entry]
    perm = used + [a for a in range(len(sizes)) if a not in used]
    values, shape = transpose(ids, sizes, perm)
    tile_shape, d = [], 0
    for entry in spec:
        if entry:
            tile_shape.append(prod(shape[d : d + len(entry)]))
            d += len(entry)
    tile_shape += shape[d:]
    nones = sum(1 for e in spec if not e)
    if len(tile_shape) > len(spec):
        kind = "partial"
    elif len(ids) == 1 or nones == len(spec):
        return "{replicated}"  # MAXIMAL and REPLICATED print alike
    elif nones:
        kind = "partial"
    else:
        kind = "tiled"
    if kind == "tiled":
        dims, devices, replicate = tile_shape, values, False
    else:
        tiled = len(spec) - nones
        groups = prod(tile_shape[:tiled])
        group_size = len(values) // groups
        it = iter(tile_shape[:tiled])
        dims = [1 if not e else next(it) for e in spec] + [group_size]
        devices = list(values)  # group assignment is iota: groups in order
        if len(dims) <= 1 or group_size == len(devices):
            return "{replicated}"
        replicate = group_size != 1
        if replicate:
            for g in range(0, len(devices), group_size):
                devices[g : g + group_size] = sorted(devices[g : g + group_size])
        else:
            dims = dims[:-1]
    text = "{devices=[" + ",".join(map(str, dims)) + "]" + ",".join(map(str, devices))
    return text + (" last_tile_dim_replicate}" if replicate else "}")


# ---------------------------------------------------------------------------
# Random but deterministic meshes and specs.


def mesh_shapes():
    """Every ordered factorisation of 2..64 into 1..4 axes of size >= 2,
    plus a few with a size-1 axis."""
    shapes = []

    def grow(prefix, product):
        if prefix and 2 <= product <= 64:
            shapes.append(list(prefix))
        if len(prefix) == 4:
            return
        for f in range(2, 65):
            if product * f > 64:
                break
            grow(prefix + [f], product * f)

    grow([], 1)
    shapes += [[1, 8], [4, 1, 2], [2, 1, 16]]
    return shapes


def make_case(i, rng, shapes):
    # Device count uniform in 2..64, then one of its factorisations.
    n = rng.randint(2, 64)
    sizes = rng.choice([s for s in shapes if prod(s) == n])
    names = [f"{name}{i}" for name in rng.sample(AXIS_NAMES, len(sizes))]
    ids = list(range(n))
    explicit = i % 4 == 3
    if explicit:
        rng.shuffle(ids)
    # Spec: the axes in a random order, dealt into entries of 0..3 axes.
    axes = list(range(len(sizes)))
    rng.shuffle(axes)
    if rng.random() < 0.05:
        axes = []  # all None: {replicated}
    else:
        axes = axes[: rng.randint(max(1, len(axes) - 1), len(axes))]  # sometimes leave one out
    spec = []
    while axes:
        take = rng.choice([1, 1, 1, 2, 2, 3])
        spec.append(axes[:take])
        axes = axes[take:]
    for _ in range(rng.choice([0, 0, 1, 2]) if spec else rng.choice([1, 2])):
        spec.insert(rng.randint(0, len(spec)), [])
    spec = spec[:16]

    def axis_text(a):
        return str(a) if rng.random() < 0.15 else names[a]

    entries = []
    for e in spec:
        if not e:
            entries.append("None")
        elif len(e) == 1:
            entries.append(axis_text(e[0]))
        else:
            entries.append("(" + ", ".join(axis_text(a) for a in e) + ")")
    mesh_text = ", ".join(f"{nm}={s}" for nm, s in zip(names, sizes))
    mesh_args = f'"{mesh_text}"' + ("".join(f", {d}" for d in ids) if explicit else "")
    return {
        "mesh": mesh_args,
        "spec": ", ".join(entries),
        "hlo": reference_hlo_v1(sizes, ids, spec),
        "devices": n,
    }


def scaling_case(i, devices):
    """A 2-D mesh of `devices` devices (as square as powers of two allow)
    with the PARTIAL spec "None, y": for the cost per device."""
    a = 1
    while a * a * 4 <= devices and devices % (a * 2) == 0:
        a *= 2
    sizes = [a, devices // a]
    return {
        "mesh": f'"x{i}={sizes[0]}, y{i}={sizes[1]}"',
        "spec": f"None, y{i}",
        "hlo": reference_hlo_v1(sizes, list(range(devices)), [[], [1]]),
        "devices": devices,
    }


def generate(n, seed, devices=None):
    rng = random.Random(seed)
    shapes = mesh_shapes()
    lines = [
        f"// Generated by bench/compile_time/gen_sharding_tu.py {n} --seed {seed}"
        + (f" --devices {devices}" if devices else "")
        + "; do not edit.",
        f"// {n} distinct typed (mesh, spec) shardings, each checked against its XLA V1 text.",
        "#include <xshard/xshard.hpp>",
        "",
    ]
    if n:
        lines.append("namespace gen {")
    for i in range(n):
        c = scaling_case(i, devices) if devices else make_case(i, rng, shapes)
        lines += [
            f"// {c['devices']} devices",
            f"using M{i} = xshard::mesh<{c['mesh']}>;",
            f'using S{i} = xshard::spec<"{c["spec"]}">;',
            f'static_assert(xshard::hlo_sharding<M{i}, S{i}>() == "{c["hlo"]}");',
        ]
    if n:
        lines.append("}  // namespace gen")
    lines.append("")
    return "\n".join(lines)


def self_test():
    # The worked examples of DESIGN.md and the headers.
    assert reference_hlo_v1([4, 2], list(range(8)), [[0], []]) == (
        "{devices=[4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"
    )
    assert reference_hlo_v1([4, 2], list(range(8)), [[1, 0]]) == "{devices=[8]0,2,4,6,1,3,5,7}"
    assert reference_hlo_v1([4, 2], list(range(8)), [[]]) == "{replicated}"
    assert reference_hlo_v1([4, 2, 2], list(range(16)), [[], [1]]) == (
        "{devices=[1,2,8]0,1,4,5,8,9,12,13,2,3,6,7,10,11,14,15 last_tile_dim_replicate}"
    )
    assert reference_hlo_v1([4, 2], [7, 6, 5, 4, 3, 2, 1, 0], [[0], [1]]) == "{devices=[4,2]7,6,5,4,3,2,1,0}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("n", type=int, help="number of shardings (0: baseline TU)")
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.add_argument("--seed", type=int, default=20240601)
    p.add_argument("--devices", type=int, help="instead: N meshes of this many devices, spec 'None, y'")
    args = p.parse_args()
    self_test()
    text = generate(args.n, args.seed, args.devices)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
