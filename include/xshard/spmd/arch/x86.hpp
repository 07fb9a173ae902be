// xshard/spmd/arch/x86.hpp - the thread mesh's float sums (all-reduce,
// reduce-scatter) with AVX-512 and AVX2 intrinsics under target attributes,
// so a binary built without -march sums on the CPU's widest vectors instead
// of the SSE2 that GCC vectorises the portable loop to (spmd/thread_mesh.hpp
// picks one by active_isa()). Each element is one correctly rounded add, as
// in the portable loop: the same bits.
#pragma once

#include "../../core/isa.hpp"

#if XSHARD_X86_KERNELS

#include <cstddef>

#include "../../core/x86_simd.hpp"

namespace xshard::detail::x86 {

// clang-format off
#define XSHARD_SUM_BODY(TARGET, LANES, LOAD, STORE, ADD)                                                  \
  /* out[i] = a[i] + b[i]; out may be a or b. */                                                         \
  TARGET inline void sum_floats(float* out, const float* a, const float* b, std::size_t n) {             \
    std::size_t i = 0;                                                                                   \
    for (; i + 4 * LANES <= n; i += 4 * LANES) {                                                         \
      const auto s0 = ADD(LOAD(a + i), LOAD(b + i));                                                     \
      const auto s1 = ADD(LOAD(a + i + LANES), LOAD(b + i + LANES));                                     \
      const auto s2 = ADD(LOAD(a + i + 2 * LANES), LOAD(b + i + 2 * LANES));                             \
      const auto s3 = ADD(LOAD(a + i + 3 * LANES), LOAD(b + i + 3 * LANES));                             \
      STORE(out + i, s0);                                                                                \
      STORE(out + i + LANES, s1);                                                                        \
      STORE(out + i + 2 * LANES, s2);                                                                    \
      STORE(out + i + 3 * LANES, s3);                                                                    \
    }                                                                                                    \
    for (; i + LANES <= n; i += LANES) STORE(out + i, ADD(LOAD(a + i), LOAD(b + i)));                    \
    for (; i < n; ++i) out[i] = a[i] + b[i];                                                             \
  }
// clang-format on

namespace avx512 {
XSHARD_SUM_BODY(__attribute__((target("avx512f"))), 16, simd::mm512_loadu_ps, simd::mm512_storeu_ps, simd::mm512_add_ps)
}  // namespace avx512
namespace avx2 {
XSHARD_SUM_BODY(__attribute__((target("avx2"))), 8, simd::mm256_loadu_ps, simd::mm256_storeu_ps, simd::mm256_add_ps)
}  // namespace avx2

#undef XSHARD_SUM_BODY

}  // namespace xshard::detail::x86

#endif  // XSHARD_X86_KERNELS
