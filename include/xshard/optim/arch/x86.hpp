// xshard/optim/arch/x86.hpp - AdamW's and SGD's updates on floats with
// AVX-512 and AVX2 intrinsics under target attributes, so a binary built without
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

// GCC contracts a multiply and an add into an FMA where the target has one
// (C++ defaults to -ffp-contract=fast), also across these intrinsics once
// inlined: the kernels would then round differently from the portable loop
// (seen: 18 FMAs in the AVX-512 SGD kernel of a -O3 build). Every kernel
// function here turns contraction off. (Clang contracts only within one
// expression by default, and each intrinsic is its own.)
#if defined(__GNUC__) && !defined(__clang__)
#define XSHARD_OPTIM_EXACT __attribute__((optimize("fp-contract=off")))
#else
#define XSHARD_OPTIM_EXACT
#endif

namespace xshard::detail::x86 {

/// AdamW's per-step constants (optimizer.hpp computes them once per tensor).
struct adamw_constants {
  float scale, b1, c1, b2, c2, step, root_bc2, decay, eps;
};

// clang-format off
#define XSHARD_ADAMW_BODY(TARGET, V, LANES, SET1, LOAD, STORE, ADD, SUB, MUL, DIV, SQRT)                   \
  /* One vector of elements (a lambda would not inherit the target). */                                    \
  TARGET XSHARD_OPTIM_EXACT __attribute__((always_inline)) inline void adamw_lanes(float* p, const float* g, float* m,        \
                                                                float* v, const adamw_constants& k) {      \
    const V gi = MUL(LOAD(g), SET1(k.scale));                                                              \
    const V mi = ADD(MUL(SET1(k.b1), LOAD(m)), MUL(SET1(k.c1), gi));                                       \
    const V vi = ADD(MUL(SET1(k.b2), LOAD(v)), MUL(MUL(SET1(k.c2), gi), gi));                              \
    STORE(m, mi);                                                                                          \
    STORE(v, vi);                                                                                          \
    const V denom = ADD(DIV(SQRT(vi), SET1(k.root_bc2)), SET1(k.eps));                                     \
    STORE(p, SUB(MUL(LOAD(p), SET1(k.decay)), DIV(MUL(SET1(k.step), mi), denom)));                         \
  }                                                                                                        \
  TARGET XSHARD_OPTIM_EXACT inline void adamw_update(float* p, const float* g, float* m, float* v, std::size_t n,              \
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

/// SGD's per-call constants and which of its three updates runs.
struct sgd_constants {
  float scale, lr, mu, wd;
  bool momentum, decay, nesterov;
};

// SGD's update, the portable loop's arithmetic operation for operation (no
// fused multiply-adds): p -= lr (g s) without weight decay, p -= lr (g s +
// wd p) with it; with momentum b = mu b + (g s + wd p) and p -= lr b (or lr
// ((g s + wd p) + mu b), Nesterov). The tail is padded through the vector
// body like AdamW's.
// clang-format off
#define XSHARD_SGD_BODY(TARGET, V, LANES, SET1, LOAD, STORE, ADD, SUB, MUL)                                   \
  TARGET XSHARD_OPTIM_EXACT __attribute__((always_inline)) inline void sgd_lanes(float* p, const float* g, float* b,            \
                                                              const sgd_constants& k) {                      \
    const V pi = LOAD(p);                                                                                    \
    V gi = MUL(LOAD(g), SET1(k.scale));                                                                      \
    if (k.decay || k.momentum) gi = ADD(gi, MUL(SET1(k.wd), pi));                                            \
    if (!k.momentum) {                                                                                       \
      STORE(p, SUB(pi, MUL(SET1(k.lr), gi)));                                                                \
      return;                                                                                                \
    }                                                                                                        \
    const V bi = ADD(MUL(SET1(k.mu), LOAD(b)), gi);                                                          \
    STORE(b, bi);                                                                                            \
    STORE(p, SUB(pi, MUL(SET1(k.lr), k.nesterov ? ADD(gi, MUL(SET1(k.mu), bi)) : bi)));                      \
  }                                                                                                          \
  TARGET XSHARD_OPTIM_EXACT inline void sgd_update(float* p, const float* g, float* b, std::size_t n, const sgd_constants& k) {  \
    const std::size_t full = n - n % LANES;                                                                  \
    alignas(64) float unused[LANES] = {};                                                                    \
    for (std::size_t i = 0; i < full; i += LANES) sgd_lanes(p + i, g + i, b ? b + i : unused, k);            \
    if (const std::size_t r = n - full) {                                                                    \
      alignas(64) float bp[LANES] = {}, bg[LANES] = {}, bb[LANES] = {};                                      \
      for (std::size_t j = 0; j < r; ++j) {                                                                  \
        bp[j] = p[full + j];                                                                                 \
        bg[j] = g[full + j];                                                                                 \
        if (b) bb[j] = b[full + j];                                                                          \
      }                                                                                                      \
      sgd_lanes(bp, bg, bb, k);                                                                              \
      for (std::size_t j = 0; j < r; ++j) {                                                                  \
        p[full + j] = bp[j];                                                                                 \
        if (b) b[full + j] = bb[j];                                                                          \
      }                                                                                                      \
    }                                                                                                        \
  }
// clang-format on

namespace avx512 {
XSHARD_SGD_BODY(__attribute__((target("avx512f"))), simd::m512, 16, simd::mm512_set1_ps, simd::mm512_loadu_ps,
                simd::mm512_storeu_ps, simd::mm512_add_ps, simd::mm512_sub_ps, simd::mm512_mul_ps)
}  // namespace avx512
namespace avx2 {
XSHARD_SGD_BODY(__attribute__((target("avx2"))), simd::m256, 8, simd::mm256_set1_ps, simd::mm256_loadu_ps,
                simd::mm256_storeu_ps, simd::mm256_add_ps, simd::mm256_sub_ps, simd::mm256_mul_ps)
}  // namespace avx2

#undef XSHARD_SGD_BODY
#undef XSHARD_OPTIM_EXACT

}  // namespace xshard::detail::x86

#endif  // XSHARD_X86_KERNELS
