// xshard/einsum/arch/x86_sums.hpp - the sums of einsum's reduction path
// (run_reduce and the typed path's contiguous sums) and of the thread mesh's
// all-reduce and reduce-scatter, on floats and doubles with AVX-512 and AVX2
// intrinsics under target attributes, so a binary built without -march sums
// on the CPU's widest vectors instead of SSE2 (einsum/sums.hpp picks one by
// active_isa()).
//
// add_elements: out[i] = a[i] + b[i], one correctly rounded add per element:
// the portable loop's bits at every width.
// sum_run: the sum of a contiguous run in a fixed order that depends on the
// width L (the lanes of one vector): two accumulators of L lanes over the
// blocks of 2 L elements, their sum's lanes added in lane order, then the
// rest in order; a run shorter than 2 L is summed in order.
#pragma once

#include "../../core/isa.hpp"

#if XSHARD_X86_KERNELS

#include <cstddef>

#include "../../core/x86_simd.hpp"

namespace xshard::detail::x86 {

// clang-format off
#define XSHARD_SUMS_BODY(TARGET, T, LANES, V, LOAD, STORE, ADD, ZERO)                                     \
  TARGET inline void add_elements(T* out, const T* a, const T* b, std::size_t n) {                       \
    std::size_t i = 0;                                                                                   \
    for (; i + 4 * LANES <= n; i += 4 * LANES) {                                                         \
      const V s0 = ADD(LOAD(a + i), LOAD(b + i));                                                        \
      const V s1 = ADD(LOAD(a + i + LANES), LOAD(b + i + LANES));                                        \
      const V s2 = ADD(LOAD(a + i + 2 * LANES), LOAD(b + i + 2 * LANES));                                \
      const V s3 = ADD(LOAD(a + i + 3 * LANES), LOAD(b + i + 3 * LANES));                                \
      STORE(out + i, s0);                                                                                \
      STORE(out + i + LANES, s1);                                                                        \
      STORE(out + i + 2 * LANES, s2);                                                                    \
      STORE(out + i + 3 * LANES, s3);                                                                    \
    }                                                                                                    \
    for (; i + LANES <= n; i += LANES) STORE(out + i, ADD(LOAD(a + i), LOAD(b + i)));                    \
    for (; i < n; ++i) out[i] = a[i] + b[i];                                                             \
  }                                                                                                      \
  TARGET inline T sum_run(const T* a, std::size_t n) {                                                   \
    const std::size_t blocked = n / (2 * LANES) * (2 * LANES);                                           \
    T s = T(0);                                                                                          \
    if (blocked != 0) {                                                                                  \
      V acc0 = ZERO(), acc1 = ZERO();                                                                    \
      for (std::size_t k = 0; k < blocked; k += 2 * LANES) {                                             \
        acc0 = ADD(acc0, LOAD(a + k));                                                                   \
        acc1 = ADD(acc1, LOAD(a + k + LANES));                                                           \
      }                                                                                                  \
      T lanes[LANES];                                                                                    \
      STORE(lanes, ADD(acc0, acc1));                                                                     \
      for (T x : lanes) s += x;                                                                          \
    }                                                                                                    \
    for (std::size_t k = blocked; k < n; ++k) s += a[k];                                                 \
    return s;                                                                                            \
  }
// clang-format on

namespace avx512 {
XSHARD_SUMS_BODY(__attribute__((target("avx512f"))), float, 16, simd::m512, simd::mm512_loadu_ps, simd::mm512_storeu_ps,
                 simd::mm512_add_ps, simd::mm512_setzero_ps)
XSHARD_SUMS_BODY(__attribute__((target("avx512f"))), double, 8, simd::m512d, simd::mm512_loadu_pd,
                 simd::mm512_storeu_pd, simd::mm512_add_pd, simd::mm512_setzero_pd)
}  // namespace avx512
namespace avx2 {
XSHARD_SUMS_BODY(__attribute__((target("avx2"))), float, 8, simd::m256, simd::mm256_loadu_ps, simd::mm256_storeu_ps,
                 simd::mm256_add_ps, simd::mm256_setzero_ps)
XSHARD_SUMS_BODY(__attribute__((target("avx2"))), double, 4, simd::m256d, simd::mm256_loadu_pd, simd::mm256_storeu_pd,
                 simd::mm256_add_pd, simd::mm256_setzero_pd)
}  // namespace avx2

#undef XSHARD_SUMS_BODY

}  // namespace xshard::detail::x86

#endif  // XSHARD_X86_KERNELS
