// xshard/einsum/arch/x86_gemm.hpp - the GEMM micro-kernels for x86-64:
// AVX-512 (12 x 32 floats / 12 x 16 doubles) and AVX2 + FMA (6 x 16 floats /
// 6 x 8 doubles), intrinsics under target attributes, so a binary built
// without -march uses them where the CPU has them (xsimd 8.1 only defines
// batch<T, avx512f> when the TU itself is compiled with -mavx512f). Included
// by einsum/kernel.hpp on x86-64 only (XSHARD_GEMM_X86); every other
// architecture runs the portable xsimd kernel. The target macros are
// #undef'd at the end.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define XSHARD_GEMM_X86 1

#include <immintrin.h>

#include <cstddef>

#define XSHARD_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,avx2")))
#define XSHARD_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define XSHARD_ALWAYS_INLINE __attribute__((always_inline)) inline

namespace xshard::detail {

/// AVX-512 operations on float (__m512, 16 lanes) and double (__m512d, 8).
struct avx512_ops {
  template <class T>
  static constexpr int lanes = 64 / static_cast<int>(sizeof(T));
  static constexpr int rows = 12;  // 12 x 2 accumulators + 2 B vectors + 1 broadcast of 32 zmm
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static __m512 zero(const float*) { return _mm512_setzero_ps(); }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static __m512d zero(const double*) { return _mm512_setzero_pd(); }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static __m512d load(const double* p) { return _mm512_loadu_pd(p); }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static __m512 bcast(const float* p) { return _mm512_set1_ps(*p); }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static __m512d bcast(const double* p) { return _mm512_set1_pd(*p); }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static __m512 fma(__m512 a, __m512 b, __m512 c) {
    return _mm512_fmadd_ps(a, b, c);
  }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static __m512d fma(__m512d a, __m512d b, __m512d c) {
    return _mm512_fmadd_pd(a, b, c);
  }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static __m512d add(__m512d a, __m512d b) { return _mm512_add_pd(a, b); }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static void store(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static void store(double* p, __m512d v) { _mm512_storeu_pd(p, v); }
};

/// AVX2 + FMA operations on float (__m256, 8 lanes) and double (__m256d, 4).
struct avx2_ops {
  template <class T>
  static constexpr int lanes = 32 / static_cast<int>(sizeof(T));
  static constexpr int rows = 6;  // 6 x 2 accumulators + 2 B vectors + 1 broadcast of 16 ymm
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static __m256 zero(const float*) { return _mm256_setzero_ps(); }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static __m256d zero(const double*) { return _mm256_setzero_pd(); }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static __m256d load(const double* p) { return _mm256_loadu_pd(p); }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static __m256 bcast(const float* p) { return _mm256_broadcast_ss(p); }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static __m256d bcast(const double* p) { return _mm256_broadcast_sd(p); }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static __m256 fma(__m256 a, __m256 b, __m256 c) {
    return _mm256_fmadd_ps(a, b, c);
  }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static __m256d fma(__m256d a, __m256d b, __m256d c) {
    return _mm256_fmadd_pd(a, b, c);
  }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static __m256 add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static __m256d add(__m256d a, __m256d b) { return _mm256_add_pd(a, b); }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static void store(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static void store(double* p, __m256d v) { _mm256_storeu_pd(p, v); }
};

/// Packs NR float columns of B, each contiguous along k (column j starts at
/// cols[j]), for k in [0, kc) into a panel holding b[p * NR + j]: eight
/// columns by eight k at a time, transposed in registers (unpack, shuffle,
/// 128-bit permute), instead of NR strided scalar stores per k. The k tail
/// (kc % 8) is copied element by element. Used by both x86 kernels (every
/// AVX-512 CPU has AVX2).
template <int NR>
XSHARD_TARGET_AVX2 void pack_columns_avx2(const float* const* cols, std::size_t kc, float* panel) {
  static_assert(NR % 8 == 0, "pack_columns_avx2: NR must be a multiple of 8");
  const std::size_t k8 = kc - kc % 8;
  for (int j0 = 0; j0 < NR; j0 += 8) {
    const float* const* c = cols + j0;
    for (std::size_t p = 0; p < k8; p += 8) {
      const __m256 r0 = _mm256_loadu_ps(c[0] + p), r1 = _mm256_loadu_ps(c[1] + p);
      const __m256 r2 = _mm256_loadu_ps(c[2] + p), r3 = _mm256_loadu_ps(c[3] + p);
      const __m256 r4 = _mm256_loadu_ps(c[4] + p), r5 = _mm256_loadu_ps(c[5] + p);
      const __m256 r6 = _mm256_loadu_ps(c[6] + p), r7 = _mm256_loadu_ps(c[7] + p);
      // Pairs of columns interleaved, then quads, then the 128-bit halves:
      // row k of the result holds element k of every column.
      const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
      const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
      const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
      const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
      const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
      const __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
      const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
      const __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
      const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
      const __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
      const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
      const __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
      float* const d = panel + p * NR + static_cast<std::size_t>(j0);
      _mm256_storeu_ps(d + 0 * NR, _mm256_permute2f128_ps(s0, s4, 0x20));
      _mm256_storeu_ps(d + 1 * NR, _mm256_permute2f128_ps(s1, s5, 0x20));
      _mm256_storeu_ps(d + 2 * NR, _mm256_permute2f128_ps(s2, s6, 0x20));
      _mm256_storeu_ps(d + 3 * NR, _mm256_permute2f128_ps(s3, s7, 0x20));
      _mm256_storeu_ps(d + 4 * NR, _mm256_permute2f128_ps(s0, s4, 0x31));
      _mm256_storeu_ps(d + 5 * NR, _mm256_permute2f128_ps(s1, s5, 0x31));
      _mm256_storeu_ps(d + 6 * NR, _mm256_permute2f128_ps(s2, s6, 0x31));
      _mm256_storeu_ps(d + 7 * NR, _mm256_permute2f128_ps(s3, s7, 0x31));
    }
    for (std::size_t p = k8; p < kc; ++p)
      for (int j = 0; j < 8; ++j) panel[p * NR + static_cast<std::size_t>(j0 + j)] = c[j][p];
  }
}

#include "micro_body.hpp"
XSHARD_DEFINE_MICRO_KERNEL(micro_avx512, XSHARD_TARGET_AVX512, avx512_ops)
XSHARD_DEFINE_MICRO_KERNEL(micro_avx2, XSHARD_TARGET_AVX2, avx2_ops)
#undef XSHARD_DEFINE_MICRO_KERNEL

}  // namespace xshard::detail

#undef XSHARD_TARGET_AVX512
#undef XSHARD_TARGET_AVX2
#undef XSHARD_ALWAYS_INLINE

#else
#define XSHARD_GEMM_X86 0
#endif
