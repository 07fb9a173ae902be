// xshard/ops/erf_float.hpp - erf on floats as one rational function, the
// rule of gelu's kernels (ops/arch/x86.hpp on AVX-512 and AVX2, ops/gelu.hpp
// on xsimd batches elsewhere), which evaluate it in the same order so every
// kernel rounds alike:
//
//   x = min(4, max(-4, u)),  s = x x,
//   P = p0 + s (p1 + ... s (p5 + s p6)),  Q = 1 + s (q1 + ... s (q3 + s q4))
//   (Horner, each step one fused multiply-add),
//   erf(u) ~ max(-1, min(1, (x P) / Q))
//
// P (degree 6) and Q (degree 4, Q(0) = 1) are a minimax fit of erf on
// [0, 4] (differential correction in double, scripts/fit_erf_float.py),
// rounded to float and then
// moved by a few ulp each to the smallest error of the float evaluation
// (Horner with fused multiply-adds). Over every float in [0, 4.5] the
// absolute error against erf in double is at most 3.9e-7 (about 6 ulp of
// 1), largest near u = 3.92; erf(4) rounds to 1 in float, so
// the clamp loses nothing. It costs 11 multiply-adds and a division per
// vector, with no exponential and no second branch: gelu on 32768 floats,
// AVX2, Zen 3, takes 0.49 ns per float against 1.52 with the two-range
// polynomials and exp(-u^2) it replaced (xsimd 8.1's float erf). The price
// is accuracy: gelu's largest error over every 7th float in [4.7e-10, 4.5],
// |gelu - exact| / |x|, went from 1.3e-7 to 2.4e-7 (x > 0) and from 7.0e-8
// to 1.7e-7 (x < 0), about 2 ulp of x.
//
// The clamp keeps NaN (the constant is the first operand of max and min,
// which return the second when either is NaN), and the cap keeps
// 1 + erf(-inf) exactly 0, so gelu(-inf) is NaN as the formula gives.
#pragma once

namespace xshard::detail {

struct erf_float {
  static constexpr float clamp = 4.0f;
  // P(s) = p0 + p1 s + ... + p6 s^6 and Q(s) = 1 + q1 s + ... + q4 s^4.
  static constexpr float p0 = 1.128378749e+00f, p1 = 2.144219130e-01f, p2 = 5.250498280e-02f, p3 = 4.311458673e-03f,
                         p4 = 1.557742362e-04f, p5 = -1.987675205e-06f, p6 = 1.915177172e-08f;
  static constexpr float q1 = 5.233548880e-01f, q2 = 1.210028231e-01f, q3 = 1.559400652e-02f, q4 = 1.101695583e-03f;
};

}  // namespace xshard::detail
