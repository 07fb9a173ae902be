#!/usr/bin/python3
"""The coefficients of include/xshard/ops/erf_float.hpp, reproduced.

erf(x) ~ x P(x^2) / Q(x^2) on [0, 4], P of degree 6 and Q of degree 4 with
Q(0) = 1: a minimax fit in double by differential correction (a linear
program per step, scipy's HiGHS), then each coefficient rounded to float and
moved by up to 8 ulp, one at a time, while that lowers the largest error of
the float evaluation (Horner with fused multiply-adds, as the kernels do) on
a dense grid. Prints the coefficients and that error. Needs numpy and scipy
(python3-numpy, python3-scipy). Takes a few minutes.
"""
import numpy as np
from scipy.optimize import linprog
from scipy.special import erf

X = 4.0
NP, NQ = 7, 5  # coefficients of P and of Q (Q's first is 1)


def minimax_double(points=3000):
    x = (np.cos(np.linspace(np.pi, 0, points)) + 1) / 2 * X  # Chebyshev points
    f = erf(x)
    u = (x / X) ** 2  # the fit in u = x^2 / X^2 for conditioning
    pm = np.stack([x * u**i for i in range(NP)], 1)
    qm = np.stack([u**j for j in range(NQ)], 1)
    q = np.zeros(NQ)
    q[0] = 1
    p = np.zeros(NP)
    delta = 1.0
    for _ in range(30):
        qprev = qm @ q
        # min d subject to |P - f Q| - delta Q <= d Qprev, q0 = 1
        a1 = np.hstack([pm, -f[:, None] * qm - delta * qm, -qprev[:, None]])
        a2 = np.hstack([-pm, f[:, None] * qm - delta * qm, -qprev[:, None]])
        c = np.zeros(NP + NQ + 1)
        c[-1] = 1
        aeq = np.zeros((1, NP + NQ + 1))
        aeq[0, NP] = 1
        res = linprog(c, A_ub=np.vstack([a1, a2]), b_ub=np.zeros(2 * points), A_eq=aeq, b_eq=[1],
                      bounds=[(None, None)] * (NP + NQ + 1), method="highs")
        pn, qn = res.x[:NP], res.x[NP:NP + NQ]
        err = np.abs((pm @ pn) / (qm @ qn) - f).max()
        if err >= delta:
            break
        p, q, delta = pn, qn, err
    scale = 1.0 / X**2  # back to coefficients of s = x^2
    return ([p[i] * scale**i for i in range(NP)], [q[j] * scale**j for j in range(NQ)], delta)


def evaluate(p, q, x):
    f32 = np.float32
    xc = np.minimum(x, f32(X))
    s = (xc * xc).astype(f32)

    def horner(c):
        acc = np.full_like(s, c[-1])
        for k in c[-2::-1]:  # a float fma: the double product of two floats is exact
            acc = (acc.astype(np.float64) * s + np.float64(k)).astype(f32)
        return acc

    return np.minimum(f32(1), ((xc * horner(p)).astype(f32) / horner(q)).astype(f32))


def main():
    p, q, delta = minimax_double()
    print(f"minimax error in double: {delta:.3g}")
    p = np.array(p, dtype=np.float32)
    q = np.array(q, dtype=np.float32)
    x = np.unique(np.concatenate([np.linspace(0, X + 0.2, 300001), np.linspace(3.5, X, 50001)]).astype(np.float32))
    ref = erf(x.astype(np.float64))

    def worst():
        return np.abs(evaluate(p, q, x).astype(np.float64) - ref).max()

    best = worst()
    print(f"rounded to float: {best:.3g}")
    improved = True
    while improved:
        improved = False
        for arr in (p, q[1:]):  # Q(0) stays 1
            for i in range(len(arr)):
                for steps in (1, -1, 2, -2, 4, -4, 8, -8):
                    old = arr[i]
                    toward = np.float32(np.inf if steps > 0 else -np.inf)
                    for _ in range(abs(steps)):
                        arr[i] = np.nextafter(arr[i], toward)
                    e = worst()
                    if e < best:
                        best, improved = e, True
                    else:
                        arr[i] = old
    print(f"after the ulp search: {best:.3g}")
    for i, c in enumerate(p):
        print(f"p{i} = {c:.9e}f")
    for j, c in enumerate(q):
        print(f"q{j} = {c:.9e}f")


if __name__ == "__main__":
    main()
