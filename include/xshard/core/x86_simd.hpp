// xshard/core/x86_simd.hpp - the x86-64 vector operations of the kernels
// that run under target attributes (einsum/arch/x86_gemm.hpp,
// ops/arch/x86.hpp, optim/arch/x86.hpp), without <immintrin.h> on GCC.
//
// GCC's <immintrin.h> costs about 0.35 s in every translation unit that
// includes it (thousands of intrinsics, each parsed under its own target
// pragma), more than all of xshard's standard headers together. The kernels
// use some sixty intrinsics, so on GCC this header defines those as GCC
// itself does in its headers: the same vector types and the same builtins
// or vector operations, so the code generated is the same instruction for
// instruction. Clang parses <immintrin.h> quickly; there the operations
// forward to the intrinsics.
//
// Names are Intel's without the leading underscore (mm256_add_ps is
// _mm256_add_ps); an operation whose operand must be a constant takes it as
// a template argument (mm256_cmp_ps<cmp_lt_oq>(a, b)). Each has the target
// of its instruction set ("avx", "avx2", "fma", "avx512f"), so it inlines
// into a kernel whose target includes that set.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#if defined(__clang__)
#include <immintrin.h>
#endif

namespace xshard::detail::simd {

/// Comparison predicates (ordered, non-signalling) and _MM_SHUFFLE.
inline constexpr int cmp_eq_oq = 0x00;
inline constexpr int cmp_lt_oq = 0x11;
inline constexpr int cmp_le_oq = 0x12;
constexpr int mm_shuffle(int z, int y, int x, int w) { return (z << 6) | (y << 4) | (x << 2) | w; }

#define XSHARD_SIMD_AVX __attribute__((target("avx"), always_inline, artificial)) inline
#define XSHARD_SIMD_AVX2 __attribute__((target("avx2"), always_inline, artificial)) inline
#define XSHARD_SIMD_FMA __attribute__((target("fma"), always_inline, artificial)) inline
#define XSHARD_SIMD_AVX512 __attribute__((target("avx512f"), always_inline, artificial)) inline

#if defined(__clang__)

using m256 = __m256;
using m256d = __m256d;
using m256i = __m256i;
using m512 = __m512;
using m512d = __m512d;
using m512i = __m512i;
using mmask16 = __mmask16;

// AVX
XSHARD_SIMD_AVX m256 mm256_setzero_ps() { return _mm256_setzero_ps(); }
XSHARD_SIMD_AVX m256d mm256_setzero_pd() { return _mm256_setzero_pd(); }
XSHARD_SIMD_AVX m256 mm256_loadu_ps(const float* p) { return _mm256_loadu_ps(p); }
XSHARD_SIMD_AVX m256d mm256_loadu_pd(const double* p) { return _mm256_loadu_pd(p); }
XSHARD_SIMD_AVX void mm256_storeu_ps(float* p, m256 a) { _mm256_storeu_ps(p, a); }
XSHARD_SIMD_AVX void mm256_storeu_pd(double* p, m256d a) { _mm256_storeu_pd(p, a); }
XSHARD_SIMD_AVX m256 mm256_set1_ps(float a) { return _mm256_set1_ps(a); }
XSHARD_SIMD_AVX m256i mm256_set1_epi32(int a) { return _mm256_set1_epi32(a); }
XSHARD_SIMD_AVX m256 mm256_broadcast_ss(const float* p) { return _mm256_broadcast_ss(p); }
XSHARD_SIMD_AVX m256d mm256_broadcast_sd(const double* p) { return _mm256_broadcast_sd(p); }
XSHARD_SIMD_AVX m256 mm256_add_ps(m256 a, m256 b) { return _mm256_add_ps(a, b); }
XSHARD_SIMD_AVX m256d mm256_add_pd(m256d a, m256d b) { return _mm256_add_pd(a, b); }
XSHARD_SIMD_AVX m256 mm256_sub_ps(m256 a, m256 b) { return _mm256_sub_ps(a, b); }
XSHARD_SIMD_AVX m256 mm256_mul_ps(m256 a, m256 b) { return _mm256_mul_ps(a, b); }
XSHARD_SIMD_AVX m256 mm256_div_ps(m256 a, m256 b) { return _mm256_div_ps(a, b); }
XSHARD_SIMD_AVX m256 mm256_max_ps(m256 a, m256 b) { return _mm256_max_ps(a, b); }
XSHARD_SIMD_AVX m256 mm256_min_ps(m256 a, m256 b) { return _mm256_min_ps(a, b); }
XSHARD_SIMD_AVX m256 mm256_sqrt_ps(m256 a) { return _mm256_sqrt_ps(a); }
XSHARD_SIMD_AVX m256 mm256_andnot_ps(m256 a, m256 b) { return _mm256_andnot_ps(a, b); }
XSHARD_SIMD_AVX m256 mm256_blendv_ps(m256 a, m256 b, m256 mask) { return _mm256_blendv_ps(a, b, mask); }
template <int P>
XSHARD_SIMD_AVX m256 mm256_cmp_ps(m256 a, m256 b) {
  return _mm256_cmp_ps(a, b, P);
}
XSHARD_SIMD_AVX m256 mm256_unpacklo_ps(m256 a, m256 b) { return _mm256_unpacklo_ps(a, b); }
XSHARD_SIMD_AVX m256 mm256_unpackhi_ps(m256 a, m256 b) { return _mm256_unpackhi_ps(a, b); }
template <int M>
XSHARD_SIMD_AVX m256 mm256_shuffle_ps(m256 a, m256 b) {
  return _mm256_shuffle_ps(a, b, M);
}
template <int C>
XSHARD_SIMD_AVX m256 mm256_permute2f128_ps(m256 a, m256 b) {
  return _mm256_permute2f128_ps(a, b, C);
}
XSHARD_SIMD_AVX m256i mm256_cvtps_epi32(m256 a) { return _mm256_cvtps_epi32(a); }
XSHARD_SIMD_AVX m256 mm256_cvtepi32_ps(m256i a) { return _mm256_cvtepi32_ps(a); }
XSHARD_SIMD_AVX m256 mm256_castsi256_ps(m256i a) { return _mm256_castsi256_ps(a); }
// AVX2
XSHARD_SIMD_AVX2 m256i mm256_add_epi32(m256i a, m256i b) { return _mm256_add_epi32(a, b); }
template <int C>
XSHARD_SIMD_AVX2 m256i mm256_slli_epi32(m256i a) {
  return _mm256_slli_epi32(a, C);
}
// FMA
XSHARD_SIMD_FMA m256 mm256_fmadd_ps(m256 a, m256 b, m256 c) { return _mm256_fmadd_ps(a, b, c); }
XSHARD_SIMD_FMA m256d mm256_fmadd_pd(m256d a, m256d b, m256d c) { return _mm256_fmadd_pd(a, b, c); }
XSHARD_SIMD_FMA m256 mm256_fnmadd_ps(m256 a, m256 b, m256 c) { return _mm256_fnmadd_ps(a, b, c); }
// AVX-512F
XSHARD_SIMD_AVX512 m512 mm512_setzero_ps() { return _mm512_setzero_ps(); }
XSHARD_SIMD_AVX512 m512d mm512_setzero_pd() { return _mm512_setzero_pd(); }
XSHARD_SIMD_AVX512 m512 mm512_loadu_ps(const float* p) { return _mm512_loadu_ps(p); }
XSHARD_SIMD_AVX512 m512d mm512_loadu_pd(const double* p) { return _mm512_loadu_pd(p); }
XSHARD_SIMD_AVX512 void mm512_storeu_ps(float* p, m512 a) { _mm512_storeu_ps(p, a); }
XSHARD_SIMD_AVX512 void mm512_storeu_pd(double* p, m512d a) { _mm512_storeu_pd(p, a); }
XSHARD_SIMD_AVX512 m512 mm512_set1_ps(float a) { return _mm512_set1_ps(a); }
XSHARD_SIMD_AVX512 m512d mm512_set1_pd(double a) { return _mm512_set1_pd(a); }
XSHARD_SIMD_AVX512 m512i mm512_set1_epi32(int a) { return _mm512_set1_epi32(a); }
XSHARD_SIMD_AVX512 m512 mm512_add_ps(m512 a, m512 b) { return _mm512_add_ps(a, b); }
XSHARD_SIMD_AVX512 m512d mm512_add_pd(m512d a, m512d b) { return _mm512_add_pd(a, b); }
XSHARD_SIMD_AVX512 m512 mm512_sub_ps(m512 a, m512 b) { return _mm512_sub_ps(a, b); }
XSHARD_SIMD_AVX512 m512 mm512_mul_ps(m512 a, m512 b) { return _mm512_mul_ps(a, b); }
XSHARD_SIMD_AVX512 m512 mm512_div_ps(m512 a, m512 b) { return _mm512_div_ps(a, b); }
XSHARD_SIMD_AVX512 m512 mm512_fmadd_ps(m512 a, m512 b, m512 c) { return _mm512_fmadd_ps(a, b, c); }
XSHARD_SIMD_AVX512 m512d mm512_fmadd_pd(m512d a, m512d b, m512d c) { return _mm512_fmadd_pd(a, b, c); }
XSHARD_SIMD_AVX512 m512 mm512_fnmadd_ps(m512 a, m512 b, m512 c) { return _mm512_fnmadd_ps(a, b, c); }
XSHARD_SIMD_AVX512 m512 mm512_abs_ps(m512 a) { return _mm512_abs_ps(a); }
XSHARD_SIMD_AVX512 m512 mm512_max_ps(m512 a, m512 b) { return _mm512_max_ps(a, b); }
XSHARD_SIMD_AVX512 m512 mm512_min_ps(m512 a, m512 b) { return _mm512_min_ps(a, b); }
XSHARD_SIMD_AVX512 m512 mm512_sqrt_ps(m512 a) { return _mm512_sqrt_ps(a); }
XSHARD_SIMD_AVX512 m512i mm512_cvtps_epi32(m512 a) { return _mm512_cvtps_epi32(a); }
XSHARD_SIMD_AVX512 m512 mm512_cvtepi32_ps(m512i a) { return _mm512_cvtepi32_ps(a); }
XSHARD_SIMD_AVX512 m512i mm512_add_epi32(m512i a, m512i b) { return _mm512_add_epi32(a, b); }
template <unsigned C>
XSHARD_SIMD_AVX512 m512i mm512_slli_epi32(m512i a) {
  return _mm512_slli_epi32(a, C);
}
XSHARD_SIMD_AVX512 m512 mm512_castsi512_ps(m512i a) { return _mm512_castsi512_ps(a); }
template <int P>
XSHARD_SIMD_AVX512 mmask16 mm512_cmp_ps_mask(m512 a, m512 b) {
  return _mm512_cmp_ps_mask(a, b, P);
}
XSHARD_SIMD_AVX512 m512 mm512_mask_blend_ps(mmask16 k, m512 a, m512 b) { return _mm512_mask_blend_ps(k, a, b); }

#else  // GCC: its own definitions, from the same builtins and vector types

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Winit-self"

typedef float m256 __attribute__((vector_size(32), may_alias));
typedef double m256d __attribute__((vector_size(32), may_alias));
typedef long long m256i __attribute__((vector_size(32), may_alias));
typedef float m512 __attribute__((vector_size(64), may_alias));
typedef double m512d __attribute__((vector_size(64), may_alias));
typedef long long m512i __attribute__((vector_size(64), may_alias));
typedef unsigned short mmask16;
typedef unsigned char mmask8;

namespace gcc {
typedef float v8sf __attribute__((vector_size(32)));
typedef double v4df __attribute__((vector_size(32)));
typedef int v8si __attribute__((vector_size(32)));
typedef unsigned v8su __attribute__((vector_size(32)));
typedef float v16sf __attribute__((vector_size(64)));
typedef double v8df __attribute__((vector_size(64)));
typedef int v16si __attribute__((vector_size(64)));
typedef unsigned v16su __attribute__((vector_size(64)));
typedef float m256_u __attribute__((vector_size(32), may_alias, aligned(1)));
typedef double m256d_u __attribute__((vector_size(32), may_alias, aligned(1)));
typedef float m512_u __attribute__((vector_size(64), may_alias, aligned(1)));
typedef double m512d_u __attribute__((vector_size(64), may_alias, aligned(1)));
inline constexpr int round_cur_direction = 0x04;  // _MM_FROUND_CUR_DIRECTION

// The pass-through operand of a fully masked AVX-512 operation, which GCC
// leaves undefined (a self-initialised variable, as in its header; the
// warnings about it are off to the end of this file).
XSHARD_SIMD_AVX512 m512 undefined_ps() {
  m512 y = y;
  return y;
}
XSHARD_SIMD_AVX512 m512i undefined_epi32() {
  m512i y = y;
  return y;
}
}  // namespace gcc

// AVX
XSHARD_SIMD_AVX m256 mm256_setzero_ps() { return __extension__(m256){0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}; }
XSHARD_SIMD_AVX m256d mm256_setzero_pd() { return __extension__(m256d){0.0, 0.0, 0.0, 0.0}; }
XSHARD_SIMD_AVX m256 mm256_loadu_ps(const float* p) { return *(const gcc::m256_u*)p; }
XSHARD_SIMD_AVX m256d mm256_loadu_pd(const double* p) { return *(const gcc::m256d_u*)p; }
XSHARD_SIMD_AVX void mm256_storeu_ps(float* p, m256 a) { *(gcc::m256_u*)p = a; }
XSHARD_SIMD_AVX void mm256_storeu_pd(double* p, m256d a) { *(gcc::m256d_u*)p = a; }
XSHARD_SIMD_AVX m256 mm256_set1_ps(float a) { return __extension__(m256){a, a, a, a, a, a, a, a}; }
XSHARD_SIMD_AVX m256i mm256_set1_epi32(int a) { return __extension__(m256i)(gcc::v8si){a, a, a, a, a, a, a, a}; }
XSHARD_SIMD_AVX m256 mm256_broadcast_ss(const float* p) { return (m256)__builtin_ia32_vbroadcastss256(p); }
XSHARD_SIMD_AVX m256d mm256_broadcast_sd(const double* p) { return (m256d)__builtin_ia32_vbroadcastsd256(p); }
XSHARD_SIMD_AVX m256 mm256_add_ps(m256 a, m256 b) { return (m256)((gcc::v8sf)a + (gcc::v8sf)b); }
XSHARD_SIMD_AVX m256d mm256_add_pd(m256d a, m256d b) { return (m256d)((gcc::v4df)a + (gcc::v4df)b); }
XSHARD_SIMD_AVX m256 mm256_sub_ps(m256 a, m256 b) { return (m256)((gcc::v8sf)a - (gcc::v8sf)b); }
XSHARD_SIMD_AVX m256 mm256_mul_ps(m256 a, m256 b) { return (m256)((gcc::v8sf)a * (gcc::v8sf)b); }
XSHARD_SIMD_AVX m256 mm256_div_ps(m256 a, m256 b) { return (m256)((gcc::v8sf)a / (gcc::v8sf)b); }
XSHARD_SIMD_AVX m256 mm256_max_ps(m256 a, m256 b) { return (m256)__builtin_ia32_maxps256((gcc::v8sf)a, (gcc::v8sf)b); }
XSHARD_SIMD_AVX m256 mm256_min_ps(m256 a, m256 b) { return (m256)__builtin_ia32_minps256((gcc::v8sf)a, (gcc::v8sf)b); }
XSHARD_SIMD_AVX m256 mm256_sqrt_ps(m256 a) { return (m256)__builtin_ia32_sqrtps256((gcc::v8sf)a); }
XSHARD_SIMD_AVX m256 mm256_andnot_ps(m256 a, m256 b) {
  return (m256)__builtin_ia32_andnps256((gcc::v8sf)a, (gcc::v8sf)b);
}
XSHARD_SIMD_AVX m256 mm256_blendv_ps(m256 a, m256 b, m256 mask) {
  return (m256)__builtin_ia32_blendvps256((gcc::v8sf)a, (gcc::v8sf)b, (gcc::v8sf)mask);
}
template <int P>
XSHARD_SIMD_AVX m256 mm256_cmp_ps(m256 a, m256 b) {
  return (m256)__builtin_ia32_cmpps256((gcc::v8sf)a, (gcc::v8sf)b, P);
}
XSHARD_SIMD_AVX m256 mm256_unpacklo_ps(m256 a, m256 b) {
  return (m256)__builtin_ia32_unpcklps256((gcc::v8sf)a, (gcc::v8sf)b);
}
XSHARD_SIMD_AVX m256 mm256_unpackhi_ps(m256 a, m256 b) {
  return (m256)__builtin_ia32_unpckhps256((gcc::v8sf)a, (gcc::v8sf)b);
}
template <int M>
XSHARD_SIMD_AVX m256 mm256_shuffle_ps(m256 a, m256 b) {
  return (m256)__builtin_ia32_shufps256((gcc::v8sf)a, (gcc::v8sf)b, M);
}
template <int C>
XSHARD_SIMD_AVX m256 mm256_permute2f128_ps(m256 a, m256 b) {
  return (m256)__builtin_ia32_vperm2f128_ps256((gcc::v8sf)a, (gcc::v8sf)b, C);
}
XSHARD_SIMD_AVX m256i mm256_cvtps_epi32(m256 a) { return (m256i)__builtin_ia32_cvtps2dq256((gcc::v8sf)a); }
XSHARD_SIMD_AVX m256 mm256_cvtepi32_ps(m256i a) { return (m256)__builtin_ia32_cvtdq2ps256((gcc::v8si)a); }
XSHARD_SIMD_AVX m256 mm256_castsi256_ps(m256i a) { return (m256)a; }
// AVX2
XSHARD_SIMD_AVX2 m256i mm256_add_epi32(m256i a, m256i b) { return (m256i)((gcc::v8su)a + (gcc::v8su)b); }
template <int C>
XSHARD_SIMD_AVX2 m256i mm256_slli_epi32(m256i a) {
  return (m256i)__builtin_ia32_pslldi256((gcc::v8si)a, C);
}
// FMA
XSHARD_SIMD_FMA m256 mm256_fmadd_ps(m256 a, m256 b, m256 c) {
  return (m256)__builtin_ia32_vfmaddps256((gcc::v8sf)a, (gcc::v8sf)b, (gcc::v8sf)c);
}
XSHARD_SIMD_FMA m256d mm256_fmadd_pd(m256d a, m256d b, m256d c) {
  return (m256d)__builtin_ia32_vfmaddpd256((gcc::v4df)a, (gcc::v4df)b, (gcc::v4df)c);
}
XSHARD_SIMD_FMA m256 mm256_fnmadd_ps(m256 a, m256 b, m256 c) {
  return (m256)__builtin_ia32_vfnmaddps256((gcc::v8sf)a, (gcc::v8sf)b, (gcc::v8sf)c);
}
// AVX-512F
XSHARD_SIMD_AVX512 m512 mm512_setzero_ps() {
  return __extension__(m512){0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
}
XSHARD_SIMD_AVX512 m512d mm512_setzero_pd() { return __extension__(m512d){0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}; }
XSHARD_SIMD_AVX512 m512 mm512_loadu_ps(const float* p) { return *(const gcc::m512_u*)p; }
XSHARD_SIMD_AVX512 m512d mm512_loadu_pd(const double* p) { return *(const gcc::m512d_u*)p; }
XSHARD_SIMD_AVX512 void mm512_storeu_ps(float* p, m512 a) { *(gcc::m512_u*)p = a; }
XSHARD_SIMD_AVX512 void mm512_storeu_pd(double* p, m512d a) { *(gcc::m512d_u*)p = a; }
XSHARD_SIMD_AVX512 m512 mm512_set1_ps(float a) {
  return __extension__(m512)(gcc::v16sf){a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a};
}
XSHARD_SIMD_AVX512 m512d mm512_set1_pd(double a) { return __extension__(m512d)(gcc::v8df){a, a, a, a, a, a, a, a}; }
XSHARD_SIMD_AVX512 m512i mm512_set1_epi32(int a) {
  return __extension__(m512i)(gcc::v16si){a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a};
}
XSHARD_SIMD_AVX512 m512 mm512_add_ps(m512 a, m512 b) { return (m512)((gcc::v16sf)a + (gcc::v16sf)b); }
XSHARD_SIMD_AVX512 m512d mm512_add_pd(m512d a, m512d b) { return (m512d)((gcc::v8df)a + (gcc::v8df)b); }
XSHARD_SIMD_AVX512 m512 mm512_sub_ps(m512 a, m512 b) { return (m512)((gcc::v16sf)a - (gcc::v16sf)b); }
XSHARD_SIMD_AVX512 m512 mm512_mul_ps(m512 a, m512 b) { return (m512)((gcc::v16sf)a * (gcc::v16sf)b); }
XSHARD_SIMD_AVX512 m512 mm512_div_ps(m512 a, m512 b) { return (m512)((gcc::v16sf)a / (gcc::v16sf)b); }
XSHARD_SIMD_AVX512 m512 mm512_fmadd_ps(m512 a, m512 b, m512 c) {
  return (m512)__builtin_ia32_vfmaddps512_mask((gcc::v16sf)a, (gcc::v16sf)b, (gcc::v16sf)c, (mmask16)-1,
                                               gcc::round_cur_direction);
}
XSHARD_SIMD_AVX512 m512d mm512_fmadd_pd(m512d a, m512d b, m512d c) {
  return (m512d)__builtin_ia32_vfmaddpd512_mask((gcc::v8df)a, (gcc::v8df)b, (gcc::v8df)c, (mmask8)-1,
                                                gcc::round_cur_direction);
}
XSHARD_SIMD_AVX512 m512 mm512_fnmadd_ps(m512 a, m512 b, m512 c) {
  return (m512)__builtin_ia32_vfnmaddps512_mask((gcc::v16sf)a, (gcc::v16sf)b, (gcc::v16sf)c, (mmask16)-1,
                                                gcc::round_cur_direction);
}
XSHARD_SIMD_AVX512 m512 mm512_abs_ps(m512 a) {
  return (m512)(m512i)((gcc::v16su)(m512i)a & (gcc::v16su)mm512_set1_epi32(0x7fffffff));
}
XSHARD_SIMD_AVX512 m512 mm512_max_ps(m512 a, m512 b) {
  return (m512)__builtin_ia32_maxps512_mask((gcc::v16sf)a, (gcc::v16sf)b, (gcc::v16sf)gcc::undefined_ps(), (mmask16)-1,
                                            gcc::round_cur_direction);
}
XSHARD_SIMD_AVX512 m512 mm512_min_ps(m512 a, m512 b) {
  return (m512)__builtin_ia32_minps512_mask((gcc::v16sf)a, (gcc::v16sf)b, (gcc::v16sf)gcc::undefined_ps(), (mmask16)-1,
                                            gcc::round_cur_direction);
}
XSHARD_SIMD_AVX512 m512 mm512_sqrt_ps(m512 a) {
  return (m512)__builtin_ia32_sqrtps512_mask((gcc::v16sf)a, (gcc::v16sf)gcc::undefined_ps(), (mmask16)-1,
                                             gcc::round_cur_direction);
}
XSHARD_SIMD_AVX512 m512i mm512_cvtps_epi32(m512 a) {
  return (m512i)__builtin_ia32_cvtps2dq512_mask((gcc::v16sf)a, (gcc::v16si)gcc::undefined_epi32(), (mmask16)-1,
                                                gcc::round_cur_direction);
}
XSHARD_SIMD_AVX512 m512 mm512_cvtepi32_ps(m512i a) {
  return (m512)__builtin_ia32_cvtdq2ps512_mask((gcc::v16si)a, (gcc::v16sf)gcc::undefined_ps(), (mmask16)-1,
                                               gcc::round_cur_direction);
}
XSHARD_SIMD_AVX512 m512i mm512_add_epi32(m512i a, m512i b) { return (m512i)((gcc::v16su)a + (gcc::v16su)b); }
template <unsigned C>
XSHARD_SIMD_AVX512 m512i mm512_slli_epi32(m512i a) {
  return (m512i)__builtin_ia32_pslldi512_mask((gcc::v16si)a, C, (gcc::v16si)gcc::undefined_epi32(), (mmask16)-1);
}
XSHARD_SIMD_AVX512 m512 mm512_castsi512_ps(m512i a) { return (m512)a; }
template <int P>
XSHARD_SIMD_AVX512 mmask16 mm512_cmp_ps_mask(m512 a, m512 b) {
  return (mmask16)__builtin_ia32_cmpps512_mask((gcc::v16sf)a, (gcc::v16sf)b, P, (mmask16)-1, gcc::round_cur_direction);
}
XSHARD_SIMD_AVX512 m512 mm512_mask_blend_ps(mmask16 k, m512 a, m512 b) {
  return (m512)__builtin_ia32_blendmps_512_mask((gcc::v16sf)a, (gcc::v16sf)b, (mmask16)k);
}

#pragma GCC diagnostic pop

#endif

#undef XSHARD_SIMD_AVX
#undef XSHARD_SIMD_AVX2
#undef XSHARD_SIMD_FMA
#undef XSHARD_SIMD_AVX512

}  // namespace xshard::detail::simd

#endif
