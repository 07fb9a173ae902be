// xshard/optim/arch/x86.hpp - AdamW's fused update on floats with AVX-512
// and AVX2 intrinsics under target attributes, so a binary built without
// -march updates on the CPU's widest vectors (optim/optimizer.hpp picks one
// by active_isa()).
//
// The arithmetic is the portable loop's, operation for operation and
// without fused multiply-adds (m = b1 m + c1 g; v = b2 v + c2 g g; p = p
// decay - step m / (sqrt(v) / root_bc2 + eps)): each operation is correctly
// rounded in both, so the vector and portable updates agree to the bit.
// The tail goes through the vector body too (padded), so how a tensor is
// cut into chunks (ZeRO-1's shards) never changes a value.
#pragma once

#include "../../core/isa.hpp"

#if XSHARD_X86_KERNELS

#include <cstddef>

#include "../../core/x86_simd.hpp"

namespace xshard::detail::x86 {

/// AdamW's per-step constants (optimizer.hpp computes them once per tensor).
struct adamw_constants {
  float scale, b1, c1, b2, c2, step, root_bc2, decay, eps;
};

// clang-format off
#define XSHARD_ADAMW_BODY(TARGET, V, LANES, SET1, LOAD, STORE, ADD, SUB, MUL, DIV, SQRT)                   \
  /* One vector of elements (a lambda would not inherit the target). */                                    \
  TARGET __attribute__((always_inline)) inline void adamw_lanes(float* p, const float* g, float* m,        \
                                                                float* v, const adamw_constants& k) {      \
    const V gi = MUL(LOAD(g), SET1(k.scale));                                                              \
    const V mi = ADD(MUL(SET1(k.b1), LOAD(m)), MUL(SET1(k.c1), gi));                                       \
    const V vi = ADD(MUL(SET1(k.b2), LOAD(v)), MUL(MUL(SET1(k.c2), gi), gi));                              \
    STORE(m, mi);                                                                                          \
    STORE(v, vi);                                                                                          \
    const V denom = ADD(DIV(SQRT(vi), SET1(k.root_bc2)), SET1(k.eps));                                     \
    STORE(p, SUB(MUL(LOAD(p), SET1(k.decay)), DIV(MUL(SET1(k.step), mi), denom)));                         \
  }                                                                                                        \
  TARGET inline void adamw_update(float* p, const float* g, float* m, float* v, std::size_t n,              \
                                  const adamw_constants& k) {                                             \
    const std::size_t full = n - n % LANES;                                                                \
    for (std::size_t i = 0; i < full; i += LANES) adamw_lanes(p + i, g + i, m + i, v + i, k);              \
    if (const std::size_t r = n - full) {                                                                  \
      alignas(64) float bp[LANES] = {}, bg[LANES] = {}, bm[LANES] = {}, bv[LANES] = {};                    \
      for (std::size_t j = 0; j < r; ++j) {                                                                \
        bp[j] = p[full + j];                                                                               \
        bg[j] = g[full + j];                                                                               \
        bm[j] = m[full + j];                                                                               \
        bv[j] = v[full + j];                                                                               \
      }                                                                                                    \
      adamw_lanes(bp, bg, bm, bv, k);                                                                      \
      for (std::size_t j = 0; j < r; ++j) {                                                                \
        p[full + j] = bp[j];                                                                               \
        m[full + j] = bm[j];                                                                               \
        v[full + j] = bv[j];                                                                               \
      }                                                                                                    \
    }                                                                                                      \
  }
// clang-format on

namespace avx512 {
XSHARD_ADAMW_BODY(__attribute__((target("avx512f"))), simd::m512, 16, simd::mm512_set1_ps, simd::mm512_loadu_ps,
                  simd::mm512_storeu_ps, simd::mm512_add_ps, simd::mm512_sub_ps, simd::mm512_mul_ps, simd::mm512_div_ps,
                  simd::mm512_sqrt_ps)
}  // namespace avx512
namespace avx2 {
XSHARD_ADAMW_BODY(__attribute__((target("avx2"))), simd::m256, 8, simd::mm256_set1_ps, simd::mm256_loadu_ps,
                  simd::mm256_storeu_ps, simd::mm256_add_ps, simd::mm256_sub_ps, simd::mm256_mul_ps, simd::mm256_div_ps,
                  simd::mm256_sqrt_ps)
}  // namespace avx2

#undef XSHARD_ADAMW_BODY

}  // namespace xshard::detail::x86

#endif  // XSHARD_X86_KERNELS
