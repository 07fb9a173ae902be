// xshard/ops/arch/x86.hpp - the composites' fused kernels on floats with
// AVX-512 and AVX2 + FMA intrinsics under target attributes, so a binary
// built without -march runs them on the CPU's widest vectors (ops/gelu.hpp,
// ops/softmax.hpp, ops/rms_norm.hpp and ops/layer_norm.hpp pick one by
// active_isa()): erf, tanh, gelu, gelu_backward and
// gelu_backward_from_output (erf form), gelu and gelu_backward (tanh form),
// softmax and softmax_backward of contiguous rows and along a strided dim,
// rms_norm, layer_norm and their backwards of contiguous rows, and the
// graph's bias adds and bias gradients' row sums (graph/ops.hpp: a row op a
// vector).
// xsimd 8.1 defines its wide batches only when the TU itself is compiled
// for them, hence intrinsics here.
//
// The math is the portable kernel's (ops/gelu.hpp): erf as the rational
// function of ops/erf_float.hpp, and xsimd 8.1's float exp (k = round(a /
// ln 2), a Cephes polynomial on the remainder, 2^k by the exponent bits) for
// the backward's Gaussian density, and xsimd 8.1's float tanh (a Cephes
// polynomial below 0.625, else from that exp) for gelu's tanh form.
// Softmax is the portable kernel's three passes (max; exp and sum; scale)
// with the same exp. One body per instruction set, stamped out by
// XSHARD_X86_KERNEL_BODIES over a struct of primitives.
#pragma once

#include <cstddef>

#include "../../core/isa.hpp"

namespace xshard::detail {

/// The instruction set for a row kernel over rows of n floats: the CPU's
/// widest, but AVX2 for rows shorter than three AVX-512 vectors (a row ends
/// in a horizontal sum over the lanes, which costs more than the wider
/// vectors save there: measured with rms_norm at n = 32).
inline simd_isa row_isa(std::size_t n) {
  const simd_isa isa = active_isa();
  return isa == simd_isa::avx512 && n < 48 ? simd_isa::avx2 : isa;
}

/// The instruction set for a kernel over `in` adjacent columns (softmax
/// along a dim that is not the last): the CPU's widest, but AVX2 for fewer
/// than 16 columns (one 8-float vector instead of a padded 16-float one).
inline simd_isa column_isa(std::size_t in) {
  const simd_isa isa = active_isa();
  return isa == simd_isa::avx512 && in < 16 ? simd_isa::avx2 : isa;
}

/// Softmax along a strided dim goes over its columns in blocks of this many
/// (the kernels below keep a block's running max and sum in L1, 1 KiB each
/// for floats; ops/softmax.hpp splits the work over the pool by the same
/// blocks, so a thread's range never cuts inside one).
inline constexpr std::size_t softmax_column_block = 256;

}  // namespace xshard::detail

#if XSHARD_X86_KERNELS

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>

#include "../../core/x86_simd.hpp"
#include "../erf_float.hpp"

// GCC 12 reports the undefined pass-through operands of AVX-512 operations
// (core/x86_simd.hpp) as maybe uninitialized once inlined (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace xshard::detail::x86 {

#define XSHARD_X86_AVX512 __attribute__((target("avx512f,avx512dq,avx2,fma")))
#define XSHARD_X86_AVX2 __attribute__((target("avx2,fma")))
#define XSHARD_X86_INLINE __attribute__((always_inline)) inline

struct avx512_f32 {
  using V = simd::m512;
  static constexpr std::size_t lanes = 16;
  XSHARD_X86_AVX512 XSHARD_X86_INLINE static V set1(float v) { return simd::mm512_set1_ps(v); }
  XSHARD_X86_AVX512 XSHARD_X86_INLINE static V load(const float* p) { return simd::mm512_loadu_ps(p); }
  XSHARD_X86_AVX512 XSHARD_X86_INLINE static void store(float* p, V v) { simd::mm512_storeu_ps(p, v); }
  XSHARD_X86_AVX512 XSHARD_X86_INLINE static V add(V a, V b) { return simd::mm512_add_ps(a, b); }
  XSHARD_X86_AVX512 XSHARD_X86_INLINE static V sub(V a, V b) { return simd::mm512_sub_ps(a, b); }
  XSHARD_X86_AVX512 XSHARD_X86_INLINE static V mul(V a, V b) { return simd::mm512_mul_ps(a, b); }
  XSHARD_X86_AVX512 XSHARD_X86_INLINE static V div(V a, V b) { return simd::mm512_div_ps(a, b); }
  XSHARD_X86_AVX512 XSHARD_X86_INLINE static V fma(V a, V b, V c) { return simd::mm512_fmadd_ps(a, b, c); }
  XSHARD_X86_AVX512 XSHARD_X86_INLINE static V fnma(V a, V b, V c) { return simd::mm512_fnmadd_ps(a, b, c); }
  XSHARD_X86_AVX512 XSHARD_X86_INLINE static V abs(V a) { return simd::mm512_abs_ps(a); }
  XSHARD_X86_AVX512 XSHARD_X86_INLINE static V max(V a, V b) { return simd::mm512_max_ps(a, b); }
  XSHARD_X86_AVX512 XSHARD_X86_INLINE static V min(V a, V b) { return simd::mm512_min_ps(a, b); }
  /// To the nearest integer (ties to even, the default rounding mode).
  XSHARD_X86_AVX512 XSHARD_X86_INLINE static V round(V a) {
    return simd::mm512_cvtepi32_ps(simd::mm512_cvtps_epi32(a));
  }
  /// x 2^k for integral k (the exponent bits of k + 127).
  XSHARD_X86_AVX512 XSHARD_X86_INLINE static V ldexp(V x, V k) {
    const simd::m512i e =
        simd::mm512_slli_epi32<23>(simd::mm512_add_epi32(simd::mm512_cvtps_epi32(k), simd::mm512_set1_epi32(127)));
    return simd::mm512_mul_ps(x, simd::mm512_castsi512_ps(e));
  }
  /// a < b ? t : f, a <= b ? t : f, a == b ? t : f (ordered: false on NaN).
  XSHARD_X86_AVX512 XSHARD_X86_INLINE static V if_lt(V a, V b, V t, V f) {
    return simd::mm512_mask_blend_ps(simd::mm512_cmp_ps_mask<simd::cmp_lt_oq>(a, b), f, t);
  }
  XSHARD_X86_AVX512 XSHARD_X86_INLINE static V if_le(V a, V b, V t, V f) {
    return simd::mm512_mask_blend_ps(simd::mm512_cmp_ps_mask<simd::cmp_le_oq>(a, b), f, t);
  }
  XSHARD_X86_AVX512 XSHARD_X86_INLINE static V if_eq(V a, V b, V t, V f) {
    return simd::mm512_mask_blend_ps(simd::mm512_cmp_ps_mask<simd::cmp_eq_oq>(a, b), f, t);
  }
};

struct avx2_f32 {
  using V = simd::m256;
  static constexpr std::size_t lanes = 8;
  XSHARD_X86_AVX2 XSHARD_X86_INLINE static V set1(float v) { return simd::mm256_set1_ps(v); }
  XSHARD_X86_AVX2 XSHARD_X86_INLINE static V load(const float* p) { return simd::mm256_loadu_ps(p); }
  XSHARD_X86_AVX2 XSHARD_X86_INLINE static void store(float* p, V v) { simd::mm256_storeu_ps(p, v); }
  XSHARD_X86_AVX2 XSHARD_X86_INLINE static V add(V a, V b) { return simd::mm256_add_ps(a, b); }
  XSHARD_X86_AVX2 XSHARD_X86_INLINE static V sub(V a, V b) { return simd::mm256_sub_ps(a, b); }
  XSHARD_X86_AVX2 XSHARD_X86_INLINE static V mul(V a, V b) { return simd::mm256_mul_ps(a, b); }
  XSHARD_X86_AVX2 XSHARD_X86_INLINE static V div(V a, V b) { return simd::mm256_div_ps(a, b); }
  XSHARD_X86_AVX2 XSHARD_X86_INLINE static V fma(V a, V b, V c) { return simd::mm256_fmadd_ps(a, b, c); }
  XSHARD_X86_AVX2 XSHARD_X86_INLINE static V fnma(V a, V b, V c) { return simd::mm256_fnmadd_ps(a, b, c); }
  XSHARD_X86_AVX2 XSHARD_X86_INLINE static V abs(V a) { return simd::mm256_andnot_ps(simd::mm256_set1_ps(-0.0f), a); }
  XSHARD_X86_AVX2 XSHARD_X86_INLINE static V max(V a, V b) { return simd::mm256_max_ps(a, b); }
  XSHARD_X86_AVX2 XSHARD_X86_INLINE static V min(V a, V b) { return simd::mm256_min_ps(a, b); }
  XSHARD_X86_AVX2 XSHARD_X86_INLINE static V round(V a) { return simd::mm256_cvtepi32_ps(simd::mm256_cvtps_epi32(a)); }
  XSHARD_X86_AVX2 XSHARD_X86_INLINE static V ldexp(V x, V k) {
    const simd::m256i e =
        simd::mm256_slli_epi32<23>(simd::mm256_add_epi32(simd::mm256_cvtps_epi32(k), simd::mm256_set1_epi32(127)));
    return simd::mm256_mul_ps(x, simd::mm256_castsi256_ps(e));
  }
  XSHARD_X86_AVX2 XSHARD_X86_INLINE static V if_lt(V a, V b, V t, V f) {
    return simd::mm256_blendv_ps(f, t, simd::mm256_cmp_ps<simd::cmp_lt_oq>(a, b));
  }
  XSHARD_X86_AVX2 XSHARD_X86_INLINE static V if_le(V a, V b, V t, V f) {
    return simd::mm256_blendv_ps(f, t, simd::mm256_cmp_ps<simd::cmp_le_oq>(a, b));
  }
  XSHARD_X86_AVX2 XSHARD_X86_INLINE static V if_eq(V a, V b, V t, V f) {
    return simd::mm256_blendv_ps(f, t, simd::mm256_cmp_ps<simd::cmp_eq_oq>(a, b));
  }
};

// The shared body: erf(u) and exp(-u^2), then gelu and its backward over n
// floats (full vectors, then the tail through a padded buffer).
#define XSHARD_X86_KERNEL_BODIES(TARGET, OPS)                                                                         \
  TARGET XSHARD_X86_INLINE OPS::V exp_of(OPS::V a) {                                                                  \
    using O = OPS;                                                                                                    \
    const O::V k = O::round(O::mul(O::set1(1.442695040888963407359924681001892137426645954152986f), a));              \
    O::V x = O::fnma(k, O::set1(0.693359375f), a); /* log 2, high part */                                             \
    x = O::fnma(k, O::set1(-2.12194440e-4f), x);   /* low part */                                                     \
    O::V y = O::set1(1.3997796e-03f);                                                                                 \
    y = O::fma(y, x, O::set1(8.3955629e-03f));                                                                        \
    y = O::fma(y, x, O::set1(4.1665401e-02f));                                                                        \
    y = O::fma(y, x, O::set1(1.6666277e-01f));                                                                        \
    y = O::fma(y, x, O::set1(5.0000000e-01f));                                                                        \
    y = O::add(O::fma(y, O::mul(x, x), x), O::set1(1.0f));                                                            \
    return O::if_le(a, O::set1(-88.3762626647949f), O::set1(0.0f), O::ldexp(y, k));                                   \
  }                                                                                                                   \
  /* erf(u): the rational function of ops/erf_float.hpp, in its order. */                                             \
  TARGET XSHARD_X86_INLINE OPS::V erf_of(OPS::V u) {                                                                  \
    using O = OPS;                                                                                                    \
    using E = erf_float;                                                                                              \
    const O::V x = O::min(O::set1(E::clamp), O::max(O::set1(-E::clamp), u));                                          \
    const O::V s = O::mul(x, x);                                                                                      \
    O::V p = O::fma(O::set1(E::p6), s, O::set1(E::p5));                                                               \
    p = O::fma(p, s, O::set1(E::p4));                                                                                 \
    p = O::fma(p, s, O::set1(E::p3));                                                                                 \
    p = O::fma(p, s, O::set1(E::p2));                                                                                 \
    p = O::fma(p, s, O::set1(E::p1));                                                                                 \
    p = O::fma(p, s, O::set1(E::p0));                                                                                 \
    O::V q = O::fma(O::set1(E::q4), s, O::set1(E::q3));                                                               \
    q = O::fma(q, s, O::set1(E::q2));                                                                                 \
    q = O::fma(q, s, O::set1(E::q1));                                                                                 \
    q = O::fma(q, s, O::set1(1.0f));                                                                                  \
    return O::max(O::set1(-1.0f), O::min(O::set1(1.0f), O::div(O::mul(x, p), q)));                                    \
  }                                                                                                                   \
  TARGET XSHARD_X86_INLINE OPS::V gelu_of(OPS::V v) {                                                                 \
    using O = OPS;                                                                                                    \
    const O::V erf = erf_of(O::mul(v, O::set1(0.70710678118654752440f)));                                             \
    return O::mul(O::mul(O::set1(0.5f), v), O::add(O::set1(1.0f), erf));                                              \
  }                                                                                                                   \
  TARGET XSHARD_X86_INLINE OPS::V gelu_backward_of(OPS::V g, OPS::V v) {                                              \
    using O = OPS;                                                                                                    \
    const O::V cdf =                                                                                                  \
        O::mul(O::set1(0.5f), O::add(O::set1(1.0f), erf_of(O::mul(v, O::set1(0.70710678118654752440f)))));            \
    const O::V pdf = O::mul(exp_of(O::mul(O::set1(-0.5f), O::mul(v, v))), O::set1(0.39894228040143267794f));          \
    return O::mul(g, O::fma(v, pdf, cdf));                                                                            \
  }                                                                                                                   \
  /* The backward from the forward's output y = gelu(v): cdf = y / v (1/2 where |v| < 1e-30, whose y would */         \
  /* lose bits below the normal range), so only exp(-v^2 / 2) remains to compute. */                                  \
  TARGET XSHARD_X86_INLINE OPS::V gelu_backward_from_output_of(OPS::V g, OPS::V v, OPS::V y) {                        \
    using O = OPS;                                                                                                    \
    const O::V cdf = O::if_lt(O::abs(v), O::set1(1e-30f), O::set1(0.5f), O::div(y, v));                               \
    const O::V pdf = O::mul(exp_of(O::mul(O::set1(-0.5f), O::mul(v, v))), O::set1(0.39894228040143267794f));          \
    return O::mul(g, O::fma(v, pdf, cdf));                                                                            \
  }                                                                                                                   \
  /* tanh(u): xsimd 8.1's float tanh (Cephes), so the portable kernel computes the same: |u| + |u|^3 P(u^2) */        \
  /* below |u| = 0.625, else 1 - 2 / (1 + exp(2|u|)) (exp's argument capped at 88, where tanh is 1 in float */        \
  /* long before), then u's sign by a compare (a zero's sign is dropped: gelu adds t to 1 or squares it).   */        \
  TARGET XSHARD_X86_INLINE OPS::V tanh_of(OPS::V u) {                                                                 \
    using O = OPS;                                                                                                    \
    const O::V x = O::abs(u), s = O::mul(x, x), one = O::set1(1.0f);                                                  \
    O::V p = O::fma(s, O::set1(-5.70498872745e-3f), O::set1(2.06390887954e-2f));                                      \
    p = O::fma(s, p, O::set1(-5.37397155531e-2f));                                                                    \
    p = O::fma(s, p, O::set1(1.33314422036e-1f));                                                                     \
    p = O::fma(s, p, O::set1(-3.33332819422e-1f));                                                                    \
    const O::V small = O::fma(O::mul(p, s), x, x);                                                                    \
    const O::V e = exp_of(O::min(O::set1(88.0f), O::add(x, x))); /* min(88, NaN) is NaN */                            \
    const O::V large = O::fma(O::set1(-2.0f), O::div(one, O::add(one, e)), one);                                      \
    const O::V t = O::if_lt(x, O::set1(0.625f), small, large);                                                        \
    return O::if_lt(u, O::set1(0.0f), O::sub(O::set1(0.0f), t), t);                                                   \
  }                                                                                                                   \
  /* gelu's tanh form and its backward, in the portable kernel's order and constants (ops/gelu.hpp). */               \
  TARGET XSHARD_X86_INLINE OPS::V gelu_tanh_t(OPS::V v) {                                                             \
    using O = OPS;                                                                                                    \
    const O::V cube = O::mul(O::mul(v, v), v);                                                                        \
    return tanh_of(O::mul(O::set1(0.79788456080286535588f), O::add(v, O::mul(O::set1(0.044715f), cube))));            \
  }                                                                                                                   \
  TARGET XSHARD_X86_INLINE OPS::V gelu_tanh_of(OPS::V v) {                                                            \
    using O = OPS;                                                                                                    \
    return O::mul(O::mul(O::set1(0.5f), v), O::add(O::set1(1.0f), gelu_tanh_t(v)));                                   \
  }                                                                                                                   \
  TARGET XSHARD_X86_INLINE OPS::V gelu_tanh_backward_of(OPS::V g, OPS::V v) {                                         \
    using O = OPS;                                                                                                    \
    const O::V t = gelu_tanh_t(v), one = O::set1(1.0f), half = O::set1(0.5f);                                         \
    const O::V left = O::mul(half, O::add(one, t));                                                                   \
    const O::V slope =                                                                                                \
        O::mul(O::set1(0.79788456080286535588f), O::add(one, O::mul(O::set1(0.134145f), O::mul(v, v))));              \
    const O::V right = O::mul(O::sub(one, O::mul(t, t)), slope);                                                      \
    return O::mul(g, O::add(left, O::mul(O::mul(half, v), right)));                                                   \
  }                                                                                                                   \
  /* The first r (< lanes) floats of p, the other lanes `pad`. */                                                     \
  TARGET XSHARD_X86_INLINE OPS::V load_padded(const float* p, std::size_t r, float pad) {                             \
    std::array<float, OPS::lanes> buf;                                                                                \
    buf.fill(pad);                                                                                                    \
    std::copy(p, p + r, buf.begin());                                                                                 \
    return OPS::load(buf.data());                                                                                     \
  }                                                                                                                   \
  TARGET XSHARD_X86_INLINE void store_first(float* p, std::size_t r, OPS::V v) {                                      \
    std::array<float, OPS::lanes> buf;                                                                                \
    OPS::store(buf.data(), v);                                                                                        \
    std::copy(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(r), p);                                          \
  }                                                                                                                   \
  TARGET inline void erf(const float* u, float* y, std::size_t n) {                                                   \
    using O = OPS;                                                                                                    \
    std::size_t i = 0;                                                                                                \
    for (; i + O::lanes <= n; i += O::lanes) O::store(y + i, erf_of(O::load(u + i)));                                 \
    if (i < n) store_first(y + i, n - i, erf_of(load_padded(u + i, n - i, 0.0f)));                                    \
  }                                                                                                                   \
  TARGET inline void gelu(const float* x, float* y, std::size_t n) {                                                  \
    using O = OPS;                                                                                                    \
    std::size_t i = 0;                                                                                                \
    for (; i + O::lanes <= n; i += O::lanes) O::store(y + i, gelu_of(O::load(x + i)));                                \
    if (i < n) store_first(y + i, n - i, gelu_of(load_padded(x + i, n - i, 0.0f)));                                   \
  }                                                                                                                   \
  TARGET inline void gelu_backward(const float* g, const float* x, float* dx, std::size_t n) {                        \
    using O = OPS;                                                                                                    \
    std::size_t i = 0;                                                                                                \
    for (; i + O::lanes <= n; i += O::lanes) O::store(dx + i, gelu_backward_of(O::load(g + i), O::load(x + i)));      \
    if (i < n) {                                                                                                      \
      const std::size_t r = n - i;                                                                                    \
      store_first(dx + i, r, gelu_backward_of(load_padded(g + i, r, 0.0f), load_padded(x + i, r, 0.0f)));             \
    }                                                                                                                 \
  }                                                                                                                   \
  TARGET inline void gelu_backward_from_output(const float* g, const float* x, const float* y, float* dx,             \
                                               std::size_t n) {                                                       \
    using O = OPS;                                                                                                    \
    std::size_t i = 0;                                                                                                \
    for (; i + O::lanes <= n; i += O::lanes)                                                                          \
      O::store(dx + i, gelu_backward_from_output_of(O::load(g + i), O::load(x + i), O::load(y + i)));                 \
    if (i < n) {                                                                                                      \
      const std::size_t r = n - i;                                                                                    \
      store_first(dx + i, r,                                                                                          \
                  gelu_backward_from_output_of(load_padded(g + i, r, 0.0f), load_padded(x + i, r, 0.0f),              \
                                               load_padded(y + i, r, 0.0f)));                                         \
    }                                                                                                                 \
  }                                                                                                                   \
  TARGET inline void tanh(const float* u, float* y, std::size_t n) {                                                  \
    using O = OPS;                                                                                                    \
    std::size_t i = 0;                                                                                                \
    for (; i + O::lanes <= n; i += O::lanes) O::store(y + i, tanh_of(O::load(u + i)));                                \
    if (i < n) store_first(y + i, n - i, tanh_of(load_padded(u + i, n - i, 0.0f)));                                   \
  }                                                                                                                   \
  TARGET inline void gelu_tanh(const float* x, float* y, std::size_t n) {                                             \
    using O = OPS;                                                                                                    \
    std::size_t i = 0;                                                                                                \
    for (; i + O::lanes <= n; i += O::lanes) O::store(y + i, gelu_tanh_of(O::load(x + i)));                           \
    if (i < n) store_first(y + i, n - i, gelu_tanh_of(load_padded(x + i, n - i, 0.0f)));                              \
  }                                                                                                                   \
  TARGET inline void gelu_tanh_backward(const float* g, const float* x, float* dx, std::size_t n) {                   \
    using O = OPS;                                                                                                    \
    std::size_t i = 0;                                                                                                \
    for (; i + O::lanes <= n; i += O::lanes) O::store(dx + i, gelu_tanh_backward_of(O::load(g + i), O::load(x + i))); \
    if (i < n) {                                                                                                      \
      const std::size_t r = n - i;                                                                                    \
      store_first(dx + i, r, gelu_tanh_backward_of(load_padded(g + i, r, 0.0f), load_padded(x + i, r, 0.0f)));        \
    }                                                                                                                 \
  }                                                                                                                   \
  /* Lane reductions in lane order: the largest (NaN wins), the sum. */                                               \
  TARGET XSHARD_X86_INLINE float lanes_max(OPS::V v) {                                                                \
    std::array<float, OPS::lanes> buf;                                                                                \
    OPS::store(buf.data(), v);                                                                                        \
    float m = buf[0];                                                                                                 \
    for (std::size_t k = 1; k < buf.size(); ++k) m = (buf[k] > m || buf[k] != buf[k]) ? buf[k] : m;                   \
    return m;                                                                                                         \
  }                                                                                                                   \
  TARGET XSHARD_X86_INLINE float lanes_sum(OPS::V v) {                                                                \
    std::array<float, OPS::lanes> buf;                                                                                \
    OPS::store(buf.data(), v);                                                                                        \
    float s = 0.0f;                                                                                                   \
    for (float b : buf) s += b;                                                                                       \
    return s;                                                                                                         \
  }                                                                                                                   \
  /* Softmax of one contiguous row of k floats (the tail padded with -inf: exp(-inf - m) = 0). */                     \
  TARGET inline void softmax_row(const float* x, float* y, std::size_t k) {                                           \
    using O = OPS;                                                                                                    \
    const float ninf = -std::numeric_limits<float>::infinity();                                                       \
    const std::size_t full = k - k % O::lanes, r = k - full;                                                          \
    O::V vmax = O::set1(ninf);                                                                                        \
    for (std::size_t j = 0; j < full; j += O::lanes) vmax = O::max(vmax, O::load(x + j));                             \
    if (r) vmax = O::max(vmax, load_padded(x + full, r, ninf));                                                       \
    const O::V m = O::set1(lanes_max(vmax));                                                                          \
    O::V vsum = O::set1(0.0f);                                                                                        \
    for (std::size_t j = 0; j < full; j += O::lanes) {                                                                \
      const O::V e = exp_of(O::sub(O::load(x + j), m));                                                               \
      O::store(y + j, e);                                                                                             \
      vsum = O::add(vsum, e);                                                                                         \
    }                                                                                                                 \
    if (r) {                                                                                                          \
      const O::V e = exp_of(O::sub(load_padded(x + full, r, ninf), m));                                               \
      store_first(y + full, r, e);                                                                                    \
      vsum = O::add(vsum, e);                                                                                         \
    }                                                                                                                 \
    const O::V s = O::set1(lanes_sum(vsum));                                                                          \
    for (std::size_t j = 0; j < full; j += O::lanes) O::store(y + j, O::div(O::load(y + j), s));                      \
    if (r) store_first(y + full, r, O::div(load_padded(y + full, r, 1.0f), s));                                       \
  }                                                                                                                   \
  /* dx = y (g - sum(g y)) over one contiguous row of k floats. */                                                    \
  TARGET inline void softmax_backward_row(const float* g, const float* y, float* dx, std::size_t k) {                 \
    using O = OPS;                                                                                                    \
    const std::size_t full = k - k % O::lanes, r = k - full;                                                          \
    O::V vdot = O::set1(0.0f);                                                                                        \
    for (std::size_t j = 0; j < full; j += O::lanes) vdot = O::fma(O::load(g + j), O::load(y + j), vdot);             \
    if (r) vdot = O::fma(load_padded(g + full, r, 0.0f), load_padded(y + full, r, 0.0f), vdot);                       \
    const O::V dot = O::set1(lanes_sum(vdot));                                                                        \
    for (std::size_t j = 0; j < full; j += O::lanes)                                                                  \
      O::store(dx + j, O::mul(O::load(y + j), O::sub(O::load(g + j), dot)));                                          \
    if (r)                                                                                                            \
      store_first(dx + full, r, O::mul(load_padded(y + full, r, 0.0f), O::sub(load_padded(g + full, r, 0.0f), dot))); \
  }                                                                                                                   \
  /* r <= lanes floats at p: a whole vector, or the first r and `pad` (stored: the first r). */                       \
  TARGET XSHARD_X86_INLINE OPS::V load_some(const float* p, std::size_t r, float pad) {                               \
    return r == OPS::lanes ? OPS::load(p) : load_padded(p, r, pad);                                                   \
  }                                                                                                                   \
  TARGET XSHARD_X86_INLINE void store_some(float* p, std::size_t r, OPS::V v) {                                       \
    if (r == OPS::lanes)                                                                                              \
      OPS::store(p, v);                                                                                               \
    else                                                                                                              \
      store_first(p, r, v);                                                                                           \
  }                                                                                                                   \
  /* Softmax along a strided dim: k elements `stride` apart, for each of `in` adjacent columns, in the    */          \
  /* portable kernel's three passes per column. The columns go in blocks of 256 (each row's 1 KiB read   */           \
  /* contiguously, the block's running max and sum in L1), a vector at a time (the last padded).         */           \
  TARGET inline void softmax_columns(const float* x, float* y, std::size_t k, std::size_t stride, std::size_t in) {   \
    using O = OPS;                                                                                                    \
    constexpr std::size_t block = softmax_column_block;                                                               \
    const float ninf = -std::numeric_limits<float>::infinity();                                                       \
    alignas(64) float mb[block], sb[block];                                                                           \
    for (std::size_t c0 = 0; c0 < in; c0 += block) {                                                                  \
      const std::size_t w = std::min(block, in - c0);                                                                 \
      for (std::size_t c = 0; c < w; c += O::lanes) {                                                                 \
        O::store(mb + c, O::set1(ninf));                                                                              \
        O::store(sb + c, O::set1(0.0f));                                                                              \
      }                                                                                                               \
      for (std::size_t j = 0; j < k; ++j) {                                                                           \
        const float* xr = x + j * stride + c0;                                                                        \
        for (std::size_t c = 0; c < w; c += O::lanes)                                                                 \
          O::store(mb + c, O::max(O::load(mb + c), load_some(xr + c, std::min(O::lanes, w - c), ninf)));              \
      }                                                                                                               \
      for (std::size_t j = 0; j < k; ++j) {                                                                           \
        const float* xr = x + j * stride + c0;                                                                        \
        float* yr = y + j * stride + c0;                                                                              \
        for (std::size_t c = 0; c < w; c += O::lanes) {                                                               \
          const std::size_t r = std::min(O::lanes, w - c);                                                            \
          const O::V e = exp_of(O::sub(load_some(xr + c, r, ninf), O::load(mb + c)));                                 \
          store_some(yr + c, r, e);                                                                                   \
          O::store(sb + c, O::add(O::load(sb + c), e));                                                               \
        }                                                                                                             \
      }                                                                                                               \
      for (std::size_t j = 0; j < k; ++j) {                                                                           \
        float* yr = y + j * stride + c0;                                                                              \
        for (std::size_t c = 0; c < w; c += O::lanes) {                                                               \
          const std::size_t r = std::min(O::lanes, w - c);                                                            \
          store_some(yr + c, r, O::div(load_some(yr + c, r, 1.0f), O::load(sb + c)));                                 \
        }                                                                                                             \
      }                                                                                                               \
    }                                                                                                                 \
  }                                                                                                                   \
  /* dx = y (g - sum(g y)) along a strided dim, in softmax_columns' blocks. */                                        \
  TARGET inline void softmax_backward_columns(const float* g, const float* y, float* dx, std::size_t k,               \
                                              std::size_t stride, std::size_t in) {                                   \
    using O = OPS;                                                                                                    \
    constexpr std::size_t block = softmax_column_block;                                                               \
    alignas(64) float db[block];                                                                                      \
    for (std::size_t c0 = 0; c0 < in; c0 += block) {                                                                  \
      const std::size_t w = std::min(block, in - c0);                                                                 \
      for (std::size_t c = 0; c < w; c += O::lanes) O::store(db + c, O::set1(0.0f));                                  \
      for (std::size_t j = 0; j < k; ++j) {                                                                           \
        const std::size_t row = j * stride + c0;                                                                      \
        for (std::size_t c = 0; c < w; c += O::lanes) {                                                               \
          const std::size_t r = std::min(O::lanes, w - c);                                                            \
          const O::V gv = load_some(g + row + c, r, 0.0f);                                                            \
          O::store(db + c, O::fma(gv, load_some(y + row + c, r, 0.0f), O::load(db + c)));                             \
        }                                                                                                             \
      }                                                                                                               \
      for (std::size_t j = 0; j < k; ++j) {                                                                           \
        const std::size_t row = j * stride + c0;                                                                      \
        for (std::size_t c = 0; c < w; c += O::lanes) {                                                               \
          const std::size_t r = std::min(O::lanes, w - c);                                                            \
          const O::V d =                                                                                              \
              O::mul(load_some(y + row + c, r, 0.0f), O::sub(load_some(g + row + c, r, 0.0f), O::load(db + c)));      \
          store_some(dx + row + c, r, d);                                                                             \
        }                                                                                                             \
      }                                                                                                               \
    }                                                                                                                 \
  }                                                                                                                   \
  /* rms_norm of one contiguous row of n floats: y = x rstd; returns rstd = 1 / sqrt(mean(x^2) + eps). */             \
  TARGET inline float rms_norm_row(const float* x, float* y, std::size_t n, float eps) {                              \
    using O = OPS;                                                                                                    \
    const std::size_t full = n - n % O::lanes, r = n - full;                                                          \
    O::V sq = O::set1(0.0f);                                                                                          \
    for (std::size_t j = 0; j < full; j += O::lanes) {                                                                \
      const O::V v = O::load(x + j);                                                                                  \
      sq = O::fma(v, v, sq);                                                                                          \
    }                                                                                                                 \
    if (r) {                                                                                                          \
      const O::V v = load_padded(x + full, r, 0.0f); /* padding adds 0 */                                             \
      sq = O::fma(v, v, sq);                                                                                          \
    }                                                                                                                 \
    const float rstd = 1.0f / std::sqrt(lanes_sum(sq) * (1.0f / static_cast<float>(n)) + eps);                        \
    const O::V s = O::set1(rstd);                                                                                     \
    for (std::size_t j = 0; j < full; j += O::lanes) O::store(y + j, O::mul(O::load(x + j), s));                      \
    if (r) store_first(y + full, r, O::mul(load_padded(x + full, r, 0.0f), s));                                       \
    return rstd;                                                                                                      \
  }                                                                                                                   \
  /* rms_norm's input gradient over one row: dx = rstd (g - y mean(g y)), y = x rstd. */                              \
  TARGET inline void rms_norm_backward_row(const float* g, const float* x, float rstd, float* dx, std::size_t n) {    \
    using O = OPS;                                                                                                    \
    const std::size_t full = n - n % O::lanes, r = n - full;                                                          \
    const O::V s = O::set1(rstd);                                                                                     \
    O::V sb = O::set1(0.0f);                                                                                          \
    for (std::size_t j = 0; j < full; j += O::lanes) sb = O::fma(O::load(g + j), O::mul(O::load(x + j), s), sb);      \
    if (r) sb = O::fma(load_padded(g + full, r, 0.0f), O::mul(load_padded(x + full, r, 0.0f), s), sb);                \
    const O::V b = O::set1(lanes_sum(sb) / static_cast<float>(n));                                                    \
    for (std::size_t j = 0; j < full; j += O::lanes)                                                                  \
      O::store(dx + j, O::mul(s, O::sub(O::load(g + j), O::mul(O::mul(O::load(x + j), s), b))));                      \
    if (r)                                                                                                            \
      store_first(                                                                                                    \
          dx + full, r,                                                                                               \
          O::mul(s, O::sub(load_padded(g + full, r, 0.0f), O::mul(O::mul(load_padded(x + full, r, 0.0f), s), b))));   \
  }                                                                                                                   \
  /* out[j] = x[j] op b[j], j < n, op 0: +, 1: -, 2: *, 3: / (bias adds, bias gradients' sums; out may be x) */       \
  TARGET inline void binary_row(int op, const float* x, const float* b, float* out, std::size_t n) {                  \
    using O = OPS;                                                                                                    \
    const std::size_t full = n - n % O::lanes, r = n - full;                                                          \
    switch (op) {                                                                                                     \
      case 0:                                                                                                         \
        for (std::size_t j = 0; j < full; j += O::lanes) O::store(out + j, O::add(O::load(x + j), O::load(b + j)));   \
        if (r) store_first(out + full, r, O::add(load_padded(x + full, r, 0.0f), load_padded(b + full, r, 0.0f)));    \
        break;                                                                                                        \
      case 1:                                                                                                         \
        for (std::size_t j = 0; j < full; j += O::lanes) O::store(out + j, O::sub(O::load(x + j), O::load(b + j)));   \
        if (r) store_first(out + full, r, O::sub(load_padded(x + full, r, 0.0f), load_padded(b + full, r, 0.0f)));    \
        break;                                                                                                        \
      case 2:                                                                                                         \
        for (std::size_t j = 0; j < full; j += O::lanes) O::store(out + j, O::mul(O::load(x + j), O::load(b + j)));   \
        if (r) store_first(out + full, r, O::mul(load_padded(x + full, r, 0.0f), load_padded(b + full, r, 0.0f)));    \
        break;                                                                                                        \
      default:                                                                                                        \
        for (std::size_t j = 0; j < full; j += O::lanes) O::store(out + j, O::div(O::load(x + j), O::load(b + j)));   \
        if (r) store_first(out + full, r, O::div(load_padded(x + full, r, 0.0f), load_padded(b + full, r, 1.0f)));    \
        break;                                                                                                        \
    }                                                                                                                 \
  }                                                                                                                   \
  /* layer_norm of one contiguous row of n floats in three passes (sum; squared deviations; write):          */       \
  /* y = (x - mean) rstd (* w) (+ b), w and b optional (null); *mean_out, *rstd_out = 1 / sqrt(var + eps). */         \
  TARGET inline void layer_norm_row(const float* x, float* y, std::size_t n, const float* w, const float* b,          \
                                    float eps, float* mean_out, float* rstd_out) {                                    \
    using O = OPS;                                                                                                    \
    const std::size_t full = n - n % O::lanes, r = n - full;                                                          \
    O::V acc = O::set1(0.0f);                                                                                         \
    for (std::size_t j = 0; j < full; j += O::lanes) acc = O::add(acc, O::load(x + j));                               \
    if (r) acc = O::add(acc, load_padded(x + full, r, 0.0f));                                                         \
    const float mean = lanes_sum(acc) / static_cast<float>(n);                                                        \
    const O::V m = O::set1(mean);                                                                                     \
    O::V sq = O::set1(0.0f);                                                                                          \
    for (std::size_t j = 0; j < full; j += O::lanes) {                                                                \
      const O::V d = O::sub(O::load(x + j), m);                                                                       \
      sq = O::fma(d, d, sq);                                                                                          \
    }                                                                                                                 \
    if (r) {                                                                                                          \
      const O::V d = O::sub(load_padded(x + full, r, mean), m); /* padding adds 0 */                                  \
      sq = O::fma(d, d, sq);                                                                                          \
    }                                                                                                                 \
    const float rstd = 1.0f / std::sqrt(lanes_sum(sq) * (1.0f / static_cast<float>(n)) + eps);                        \
    *mean_out = mean;                                                                                                 \
    *rstd_out = rstd;                                                                                                 \
    const O::V s = O::set1(rstd);                                                                                     \
    for (std::size_t j = 0; j < full; j += O::lanes) {                                                                \
      O::V v = O::mul(O::sub(O::load(x + j), m), s);                                                                  \
      if (w) v = O::mul(v, O::load(w + j));                                                                           \
      if (b) v = O::add(v, O::load(b + j));                                                                           \
      O::store(y + j, v);                                                                                             \
    }                                                                                                                 \
    if (r) {                                                                                                          \
      O::V v = O::mul(O::sub(load_padded(x + full, r, 0.0f), m), s);                                                  \
      if (w) v = O::mul(v, load_padded(w + full, r, 0.0f));                                                           \
      if (b) v = O::add(v, load_padded(b + full, r, 0.0f));                                                           \
      store_first(y + full, r, v);                                                                                    \
    }                                                                                                                 \
  }                                                                                                                   \
  /* layer_norm's gradients over one row, g' = g (* w): dx = rstd (g' - mean(g') - xhat mean(g' xhat)),  */           \
  /* and the row's terms added to the parameter gradients: dw += g xhat, db += g.                         */          \
  TARGET inline void layer_norm_backward_row(const float* g, const float* x, float mean, float rstd, const float* w,  \
                                             float* dx, float* dw, float* db, std::size_t n) {                        \
    using O = OPS;                                                                                                    \
    const std::size_t full = n - n % O::lanes, r = n - full;                                                          \
    const O::V m = O::set1(mean), s = O::set1(rstd);                                                                  \
    O::V sa = O::set1(0.0f), sb = O::set1(0.0f);                                                                      \
    for (std::size_t j = 0; j < full; j += O::lanes) {                                                                \
      const O::V gv = O::load(g + j), xhat = O::mul(O::sub(O::load(x + j), m), s);                                    \
      const O::V gw = w ? O::mul(gv, O::load(w + j)) : gv;                                                            \
      sa = O::add(sa, gw);                                                                                            \
      sb = O::fma(gw, xhat, sb);                                                                                      \
      O::store(dw + j, O::fma(gv, xhat, O::load(dw + j)));                                                            \
      O::store(db + j, O::add(O::load(db + j), gv));                                                                  \
    }                                                                                                                 \
    if (r) { /* padding: g = 0 adds nothing */                                                                        \
      const O::V gv = load_padded(g + full, r, 0.0f), xhat = O::mul(O::sub(load_padded(x + full, r, 0.0f), m), s);    \
      const O::V gw = w ? O::mul(gv, load_padded(w + full, r, 0.0f)) : gv;                                            \
      sa = O::add(sa, gw);                                                                                            \
      sb = O::fma(gw, xhat, sb);                                                                                      \
      store_first(dw + full, r, O::fma(gv, xhat, load_padded(dw + full, r, 0.0f)));                                   \
      store_first(db + full, r, O::add(load_padded(db + full, r, 0.0f), gv));                                         \
    }                                                                                                                 \
    const O::V a = O::set1(lanes_sum(sa) / static_cast<float>(n));                                                    \
    const O::V bm = O::set1(lanes_sum(sb) / static_cast<float>(n));                                                   \
    for (std::size_t j = 0; j < full; j += O::lanes) {                                                                \
      const O::V gv = O::load(g + j), xhat = O::mul(O::sub(O::load(x + j), m), s);                                    \
      const O::V gw = w ? O::mul(gv, O::load(w + j)) : gv;                                                            \
      O::store(dx + j, O::mul(s, O::fnma(xhat, bm, O::sub(gw, a))));                                                  \
    }                                                                                                                 \
    if (r) {                                                                                                          \
      const O::V gv = load_padded(g + full, r, 0.0f), xhat = O::mul(O::sub(load_padded(x + full, r, 0.0f), m), s);    \
      const O::V gw = w ? O::mul(gv, load_padded(w + full, r, 0.0f)) : gv;                                            \
      store_first(dx + full, r, O::mul(s, O::fnma(xhat, bm, O::sub(gw, a))));                                         \
    }                                                                                                                 \
  }

namespace avx512 {
XSHARD_X86_KERNEL_BODIES(XSHARD_X86_AVX512, avx512_f32)
}  // namespace avx512
namespace avx2 {
XSHARD_X86_KERNEL_BODIES(XSHARD_X86_AVX2, avx2_f32)
}  // namespace avx2

// The row kernels on `isa` (avx512, else avx2): the one dispatch of their
// callers (ops/rms_norm.hpp, ops/layer_norm.hpp, graph/ops.hpp's bias rows).
inline void binary_row(simd_isa isa, int op, const float* x, const float* b, float* out, std::size_t n) {
  if (isa == simd_isa::avx512)
    avx512::binary_row(op, x, b, out, n);
  else
    avx2::binary_row(op, x, b, out, n);
}
inline float rms_norm_row(simd_isa isa, const float* x, float* y, std::size_t n, float eps) {
  return isa == simd_isa::avx512 ? avx512::rms_norm_row(x, y, n, eps) : avx2::rms_norm_row(x, y, n, eps);
}
inline void rms_norm_backward_row(simd_isa isa, const float* g, const float* x, float rstd, float* dx, std::size_t n) {
  if (isa == simd_isa::avx512)
    avx512::rms_norm_backward_row(g, x, rstd, dx, n);
  else
    avx2::rms_norm_backward_row(g, x, rstd, dx, n);
}
inline void layer_norm_row(simd_isa isa, const float* x, float* y, std::size_t n, const float* w, const float* b,
                           float eps, float* mean_out, float* rstd_out) {
  if (isa == simd_isa::avx512)
    avx512::layer_norm_row(x, y, n, w, b, eps, mean_out, rstd_out);
  else
    avx2::layer_norm_row(x, y, n, w, b, eps, mean_out, rstd_out);
}
inline void layer_norm_backward_row(simd_isa isa, const float* g, const float* x, float mean, float rstd,
                                    const float* w, float* dx, float* dw, float* db, std::size_t n) {
  if (isa == simd_isa::avx512)
    avx512::layer_norm_backward_row(g, x, mean, rstd, w, dx, dw, db, n);
  else
    avx2::layer_norm_backward_row(g, x, mean, rstd, w, dx, dw, db, n);
}

#undef XSHARD_X86_KERNEL_BODIES
#undef XSHARD_X86_INLINE
#undef XSHARD_X86_AVX2
#undef XSHARD_X86_AVX512

}  // namespace xshard::detail::x86

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // XSHARD_X86_KERNELS
