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
