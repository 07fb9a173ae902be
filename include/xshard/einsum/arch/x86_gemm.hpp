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

#include <cstddef>

#include "../../core/x86_simd.hpp"

#define XSHARD_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,avx2")))
#define XSHARD_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define XSHARD_ALWAYS_INLINE __attribute__((always_inline)) inline

namespace xshard::detail {

/// AVX-512 operations on float (simd::m512, 16 lanes) and double (simd::m512d, 8).
struct avx512_ops {
  template <class T>
  static constexpr int lanes = 64 / static_cast<int>(sizeof(T));
  static constexpr int rows = 12;       // 12 x 2 accumulators + 2 B vectors + 1 broadcast of 32 zmm
  static constexpr int prefetch_k = 8;  // B's row and A's micro-panel prefetched ahead in the k loop (micro_body)
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static simd::m512 zero(const float*) { return simd::mm512_setzero_ps(); }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static simd::m512d zero(const double*) { return simd::mm512_setzero_pd(); }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static simd::m512 load(const float* p) { return simd::mm512_loadu_ps(p); }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static simd::m512d load(const double* p) { return simd::mm512_loadu_pd(p); }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static simd::m512 bcast(const float* p) { return simd::mm512_set1_ps(*p); }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static simd::m512d bcast(const double* p) {
    return simd::mm512_set1_pd(*p);
  }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static simd::m512 fma(simd::m512 a, simd::m512 b, simd::m512 c) {
    return simd::mm512_fmadd_ps(a, b, c);
  }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static simd::m512d fma(simd::m512d a, simd::m512d b, simd::m512d c) {
    return simd::mm512_fmadd_pd(a, b, c);
  }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static simd::m512 add(simd::m512 a, simd::m512 b) {
    return simd::mm512_add_ps(a, b);
  }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static simd::m512d add(simd::m512d a, simd::m512d b) {
    return simd::mm512_add_pd(a, b);
  }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static void store(float* p, simd::m512 v) { simd::mm512_storeu_ps(p, v); }
  XSHARD_TARGET_AVX512 XSHARD_ALWAYS_INLINE static void store(double* p, simd::m512d v) { simd::mm512_storeu_pd(p, v); }
};

/// AVX2 + FMA operations on float (simd::m256, 8 lanes) and double (simd::m256d, 4).
struct avx2_ops {
  template <class T>
  static constexpr int lanes = 32 / static_cast<int>(sizeof(T));
  static constexpr int rows = 6;  // 6 x 2 accumulators + 2 B vectors + 1 broadcast of 16 ymm
  static constexpr int prefetch_k = 0;
  /// B's rows read in place (reads_b_in_place) for shares of at most 24 rows
  /// of C, not the other kernels' 96. On the AVX2 Zen 3 of bench/results
  /// (one thread, best of 15 x 50 calls, the two ways alternating), a B of
  /// 128-float rows read in place against packed: 4-8 rows 3-35% faster,
  /// 16 rows 3-7%, 24 even; over K = 256 (one K block) 32-96 rows within 2%
  /// either way; over K = 512 (two blocks) 32-96 rows 8-12% slower, as
  /// train_mlp's 64 x 128 x 512 products: 79-80 against 89 GFLOP/s packed
  /// (OpenBLAS 85). In a training step, timed call by call alternating:
  /// those products 131.7 -> 119.4 us at one thread and 69.9 -> 62.5 us at
  /// two, the mesh's 32 x 128 x 256 ones 30.9 -> 30.2 us. (The likely
  /// reason, not measured: a 16-column micro-panel of such a B, a line per
  /// row 512 bytes apart, maps to 8 of L1's 64 sets and does not stay in L1
  /// from one row tile to the next; packed, it is contiguous.)
  static constexpr std::size_t b_in_place_rows = 24;
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static simd::m256 zero(const float*) { return simd::mm256_setzero_ps(); }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static simd::m256d zero(const double*) { return simd::mm256_setzero_pd(); }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static simd::m256 load(const float* p) { return simd::mm256_loadu_ps(p); }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static simd::m256d load(const double* p) { return simd::mm256_loadu_pd(p); }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static simd::m256 bcast(const float* p) {
    return simd::mm256_broadcast_ss(p);
  }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static simd::m256d bcast(const double* p) {
    return simd::mm256_broadcast_sd(p);
  }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static simd::m256 fma(simd::m256 a, simd::m256 b, simd::m256 c) {
    return simd::mm256_fmadd_ps(a, b, c);
  }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static simd::m256d fma(simd::m256d a, simd::m256d b, simd::m256d c) {
    return simd::mm256_fmadd_pd(a, b, c);
  }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static simd::m256 add(simd::m256 a, simd::m256 b) {
    return simd::mm256_add_ps(a, b);
  }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static simd::m256d add(simd::m256d a, simd::m256d b) {
    return simd::mm256_add_pd(a, b);
  }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static void store(float* p, simd::m256 v) { simd::mm256_storeu_ps(p, v); }
  XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE static void store(double* p, simd::m256d v) { simd::mm256_storeu_pd(p, v); }
};

/// Transposes eight rows of eight floats in registers (unpack, shuffle,
/// 128-bit permute): afterwards r[q] holds element q of every input row.
XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE void transpose8_avx2(simd::m256 (&r)[8]) {
  // Pairs of rows interleaved, then quads, then the 128-bit halves.
  const simd::m256 t0 = simd::mm256_unpacklo_ps(r[0], r[1]), t1 = simd::mm256_unpackhi_ps(r[0], r[1]);
  const simd::m256 t2 = simd::mm256_unpacklo_ps(r[2], r[3]), t3 = simd::mm256_unpackhi_ps(r[2], r[3]);
  const simd::m256 t4 = simd::mm256_unpacklo_ps(r[4], r[5]), t5 = simd::mm256_unpackhi_ps(r[4], r[5]);
  const simd::m256 t6 = simd::mm256_unpacklo_ps(r[6], r[7]), t7 = simd::mm256_unpackhi_ps(r[6], r[7]);
  const simd::m256 s0 = simd::mm256_shuffle_ps<simd::mm_shuffle(1, 0, 1, 0)>(t0, t2);
  const simd::m256 s1 = simd::mm256_shuffle_ps<simd::mm_shuffle(3, 2, 3, 2)>(t0, t2);
  const simd::m256 s2 = simd::mm256_shuffle_ps<simd::mm_shuffle(1, 0, 1, 0)>(t1, t3);
  const simd::m256 s3 = simd::mm256_shuffle_ps<simd::mm_shuffle(3, 2, 3, 2)>(t1, t3);
  const simd::m256 s4 = simd::mm256_shuffle_ps<simd::mm_shuffle(1, 0, 1, 0)>(t4, t6);
  const simd::m256 s5 = simd::mm256_shuffle_ps<simd::mm_shuffle(3, 2, 3, 2)>(t4, t6);
  const simd::m256 s6 = simd::mm256_shuffle_ps<simd::mm_shuffle(1, 0, 1, 0)>(t5, t7);
  const simd::m256 s7 = simd::mm256_shuffle_ps<simd::mm_shuffle(3, 2, 3, 2)>(t5, t7);
  r[0] = simd::mm256_permute2f128_ps<0x20>(s0, s4);
  r[1] = simd::mm256_permute2f128_ps<0x20>(s1, s5);
  r[2] = simd::mm256_permute2f128_ps<0x20>(s2, s6);
  r[3] = simd::mm256_permute2f128_ps<0x20>(s3, s7);
  r[4] = simd::mm256_permute2f128_ps<0x31>(s0, s4);
  r[5] = simd::mm256_permute2f128_ps<0x31>(s1, s5);
  r[6] = simd::mm256_permute2f128_ps<0x31>(s2, s6);
  r[7] = simd::mm256_permute2f128_ps<0x31>(s3, s7);
}

/// Stores the first W (4, 6 or 8) floats of v at p (unaligned): one 256-bit
/// store, or a 128-bit one and for 6 a 64-bit one.
template <int W>
XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE void store_first_avx2(float* p, simd::m256 v) {
  static_assert(W == 4 || W == 6 || W == 8, "store_first_avx2: 4, 6 or 8 floats");
  if constexpr (W == 8) {
    simd::mm256_storeu_ps(p, v);
  } else {
    typedef float f4_u __attribute__((vector_size(16), may_alias, aligned(1)));
    typedef float f2_u __attribute__((vector_size(8), may_alias, aligned(1)));
    *reinterpret_cast<f4_u*>(p) = __builtin_shufflevector(v, v, 0, 1, 2, 3);
    if constexpr (W == 6) *reinterpret_cast<f2_u*>(p + 4) = __builtin_shufflevector(v, v, 4, 5);
  }
}

/// Loads the first W (4, 6 or 8) floats at p (unaligned), the rest zero: the
/// loads store_first_avx2 mirrors, reading nothing past p + W.
template <int W>
XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE simd::m256 load_first_avx2(const float* p) {
  static_assert(W == 4 || W == 6 || W == 8, "load_first_avx2: 4, 6 or 8 floats");
  if constexpr (W == 8) {
    return simd::mm256_loadu_ps(p);
  } else {
    typedef float f4_u __attribute__((vector_size(16), may_alias, aligned(1)));
    typedef float f2_u __attribute__((vector_size(8), may_alias, aligned(1)));
    typedef float f2 __attribute__((vector_size(8)));
    const f4_u lo = *reinterpret_cast<const f4_u*>(p);
    f2 two = {0.0f, 0.0f};
    if constexpr (W == 6) two = *reinterpret_cast<const f2_u*>(p + 4);
    const f2 zero = {0.0f, 0.0f};
    const auto hi = __builtin_shufflevector(two, zero, 0, 1, 2, 3);
    return (simd::m256)__builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7);
  }
}

/// C's column of W (4, 6 or 8) floats at d from a tile's column v:
/// (d + v) + bias with add, else v + bias (bias null: none).
template <int W>
XSHARD_TARGET_AVX2 XSHARD_ALWAYS_INLINE void store_column_avx2(float* d, simd::m256 v, bool add, const float* bias) {
  if (add) v = simd::mm256_add_ps(load_first_avx2<W>(d), v);
  if (bias) v = simd::mm256_add_ps(v, load_first_avx2<W>(bias));
  store_first_avx2<W>(d, v);
}

/// Stores a tile of R (4, 6, 8 or 12) rows of NR floats (row-major at tile)
/// into C column by column, where C's column j holds the tile's R values of
/// column j contiguously at c + col[j] (a GEMM run transposed, its C^T
/// tiles): eight columns at a time transposed in registers
/// (transpose8_avx2), each then one load (with add) and one store, where an
/// element at a time took NR x R scalar stores. C = (C + tile) + row_bias[i]
/// with add, else tile + row_bias[i] (row_bias null: none): the order of
/// the scalar store.
template <int R, int NR>
XSHARD_TARGET_AVX2 void store_tile_columns_avx2(const float* tile, float* c, const std::ptrdiff_t* col, bool add,
                                                const float* row_bias) {
  static_assert(NR % 8 == 0 && (R == 4 || R == 6 || R == 8 || R == 12), "store_tile_columns_avx2: R x NR");
  constexpr int groups = (R + 7) / 8;
  for (int j0 = 0; j0 < NR; j0 += 8) {
    simd::m256 r[groups][8];
    for (int g = 0; g < groups; ++g) {
      for (int q = 0; q < 8; ++q)
        r[g][q] = 8 * g + q < R ? simd::mm256_loadu_ps(tile + (8 * g + q) * NR + j0) : simd::mm256_setzero_ps();
      transpose8_avx2(r[g]);
    }
    for (int q = 0; q < 8; ++q) {
      float* const d = c + col[j0 + q];
      store_column_avx2<(R < 8 ? R : 8)>(d, r[0][q], add, row_bias);
      if constexpr (R > 8) store_column_avx2<R - 8>(d + 8, r[1][q], add, row_bias ? row_bias + 8 : nullptr);
    }
  }
}

/// store_tile_columns_avx2 for a tile of `rows` rows; false (nothing
/// stored) for a row count it has no variant for.
template <int NR>
inline bool store_tile_columns_avx2(int rows, const float* tile, float* c, const std::ptrdiff_t* col, bool add,
                                    const float* row_bias) {
  switch (rows) {
    case 4:
      return store_tile_columns_avx2<4, NR>(tile, c, col, add, row_bias), true;
    case 6:
      return store_tile_columns_avx2<6, NR>(tile, c, col, add, row_bias), true;
    case 8:
      return store_tile_columns_avx2<8, NR>(tile, c, col, add, row_bias), true;
    case 12:
      return store_tile_columns_avx2<12, NR>(tile, c, col, add, row_bias), true;
    default:
      return false;
  }
}

/// Packs NR float columns of B, each contiguous along k (column j starts at
/// cols[j]), for k in [0, kc) into a panel holding b[p * NR + j]: eight
/// columns by eight k at a time, transposed in registers (transpose8_avx2),
/// instead of NR strided scalar stores per k. Each block of eight k is done
/// for all NR columns before the next, so the panel's rows are written
/// whole, line by line (column blocks outermost wrote each line NR / 8
/// times, a part at a time: a 128 x 512 weight took 6.1 us that way and
/// takes 4.8 us this way, measured). The k tail (kc % 8) is copied element
/// by element. Used by both x86 kernels (every AVX-512 CPU has AVX2).
template <int NR>
XSHARD_TARGET_AVX2 void pack_columns_avx2(const float* const* cols, std::size_t kc, float* panel) {
  static_assert(NR % 8 == 0, "pack_columns_avx2: NR must be a multiple of 8");
  const std::size_t k8 = kc - kc % 8;
  for (std::size_t p = 0; p < k8; p += 8) {
    for (int j0 = 0; j0 < NR; j0 += 8) {
      simd::m256 r[8];
      for (int q = 0; q < 8; ++q) r[q] = simd::mm256_loadu_ps(cols[j0 + q] + p);
      transpose8_avx2(r);
      float* const d = panel + p * NR + static_cast<std::size_t>(j0);
      for (int q = 0; q < 8; ++q) simd::mm256_storeu_ps(d + q * NR, r[q]);
    }
  }
  for (std::size_t p = k8; p < kc; ++p)
    for (int j = 0; j < NR; ++j) panel[p * NR + static_cast<std::size_t>(j)] = cols[j][p];
}

/// Packs A's micro-panel of MR (4, 6, 8 or 12) float rows, each contiguous
/// along k (row i starts at rows[i], i < used; rows [used, MR) are zero),
/// for k in [0, kc) into panel[p * MR + i]: eight rows by eight k at a time
/// through transpose8_avx2, where a row by row copy would make MR strided
/// scalar stores per k (5% of a 4096 x 1024 x 1024 GEMM whose A rows are
/// 4 KiB apart, measured). The k tail (kc % 8) is copied element by element.
template <int MR>
XSHARD_TARGET_AVX2 void pack_rows_avx2(const float* const* rows, int used, std::size_t kc, float* panel) {
  static_assert(MR == 4 || MR == 6 || MR == 8 || MR == 12, "pack_rows_avx2: 4, 6, 8 or 12 rows");
  const std::size_t k8 = kc - kc % 8;
  for (std::size_t p = 0; p < k8; p += 8) {
    simd::m256 r[(MR + 7) / 8][8];
    for (int g = 0; g < (MR + 7) / 8; ++g) {
      for (int q = 0; q < 8; ++q)
        r[g][q] = 8 * g + q < used ? simd::mm256_loadu_ps(rows[8 * g + q] + p) : simd::mm256_setzero_ps();
      transpose8_avx2(r[g]);
    }
    float* const d = panel + p * MR;
    for (int q = 0; q < 8; ++q) {
      store_first_avx2<(MR < 8 ? MR : 8)>(d + q * MR, r[0][q]);
      if constexpr (MR > 8) store_first_avx2<MR - 8>(d + q * MR + 8, r[1][q]);
    }
  }
  for (std::size_t p = k8; p < kc; ++p)
    for (int i = 0; i < MR; ++i) panel[p * MR + static_cast<std::size_t>(i)] = i < used ? rows[i][p] : 0.0f;
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
