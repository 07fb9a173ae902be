// xshard/einsum/kernel.hpp - batched GEMM straight from strided operands.
//
//   C[b, m, n] (+)= sum_k A[b, m, k] * B[b, k, n]
//
// where b, m, n and k are each a *group* of tensor dims. Every group is
// described by an offset table (TBLIS's scatter vectors): offset of element
// i of the group in each operand. Any strided layout - transposed, sliced,
// diagonal (strides summed), broadcast (stride 0) - is packed straight from
// the operand; nothing is transposed or flattened first.
//
// Loops are Goto/BLIS's: jc (NC) -> pc (KC, pack B) -> ic (MC, pack A) ->
// jr (NR) -> ir (MR) -> micro-kernel (an MR x NR register tile over KC).
// The micro-kernel is chosen at run time with xsimd::dispatch:
//   avx512bw       intrinsics in a target("avx512...") function, 12 x 32 floats
//   fma3<avx2>     intrinsics in a target("avx2,fma") function,   6 x 16 floats
//   anything else  xsimd::batch of the arch the TU is compiled for
// (xsimd 8.1 only defines batch<T, avx512f> when the TU is compiled with
// -mavx512f, so the wide kernels use intrinsics under target attributes; the
// binary needs no -march flag to use AVX-512 where the CPU has it.)
// Work is split over the thread pool by (batch, M block, N block) tiles; each
// C element is always summed over k in the same order, so results do not
// depend on the thread count.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <vector>
#include <xsimd/xsimd.hpp>

#include "../core/thread_pool.hpp"

namespace xshard::detail {

using offsets = std::vector<std::ptrdiff_t>;

/// One batched strided GEMM problem (see the header comment).
template <class T>
struct gemm_problem {
  const T* a = nullptr;
  const T* b = nullptr;
  T* c = nullptr;
  offsets a_batch, b_batch, c_batch;  ///< one entry per batch index
  offsets a_m, c_m;                   ///< M
  offsets b_n, c_n;                   ///< N
  offsets a_k, b_k;                   ///< K
  bool accumulate = false;            ///< C += (else C =)
};

/// Stride s if table[i] == i * s for all i, else 0 and uniform == false.
struct stride_info {
  std::ptrdiff_t stride = 0;
  bool uniform = false;
};
inline stride_info uniform_stride(const offsets& t) {
  if (t.empty()) return {0, true};
  if (t[0] != 0) return {};
  const std::ptrdiff_t s = t.size() > 1 ? t[1] : 1;
  for (std::size_t i = 2; i < t.size(); ++i)
    if (t[i] != static_cast<std::ptrdiff_t>(i) * s) return {};
  return {s, true};
}

// ---------------------------------------------------------------------------
// Micro-kernels: c[MR x NR] (row-major, ldc = NR) = sum over kc of
// a[p * MR + i] * b[p * NR + j].

#if defined(__GNUC__) || defined(__clang__)
#define XSHARD_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,avx2")))
#define XSHARD_TARGET_AVX2 __attribute__((target("avx2,fma")))
#endif

XSHARD_TARGET_AVX512 inline void micro_avx512(std::size_t kc, const float* a, const float* b, float* c) {
  __m512 acc[12][2];
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (std::size_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += 12;
    b += 32;
  }
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) {
    _mm512_storeu_ps(c + 32 * i, acc[i][0]);
    _mm512_storeu_ps(c + 32 * i + 16, acc[i][1]);
  }
}
XSHARD_TARGET_AVX512 inline void micro_avx512(std::size_t kc, const double* a, const double* b, double* c) {
  __m512d acc[12][2];
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_pd();
  for (std::size_t p = 0; p < kc; ++p) {
    const __m512d b0 = _mm512_loadu_pd(b), b1 = _mm512_loadu_pd(b + 8);
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) {
      const __m512d ai = _mm512_set1_pd(a[i]);
      acc[i][0] = _mm512_fmadd_pd(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_pd(ai, b1, acc[i][1]);
    }
    a += 12;
    b += 16;
  }
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) {
    _mm512_storeu_pd(c + 16 * i, acc[i][0]);
    _mm512_storeu_pd(c + 16 * i + 8, acc[i][1]);
  }
}
XSHARD_TARGET_AVX2 inline void micro_avx2(std::size_t kc, const float* a, const float* b, float* c) {
  __m256 acc[6][2];
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (std::size_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += 6;
    b += 16;
  }
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) {
    _mm256_storeu_ps(c + 16 * i, acc[i][0]);
    _mm256_storeu_ps(c + 16 * i + 8, acc[i][1]);
  }
}
XSHARD_TARGET_AVX2 inline void micro_avx2(std::size_t kc, const double* a, const double* b, double* c) {
  __m256d acc[6][2];
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_pd();
  for (std::size_t p = 0; p < kc; ++p) {
    const __m256d b0 = _mm256_loadu_pd(b), b1 = _mm256_loadu_pd(b + 4);
#pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) {
      const __m256d ai = _mm256_broadcast_sd(a + i);
      acc[i][0] = _mm256_fmadd_pd(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_pd(ai, b1, acc[i][1]);
    }
    a += 6;
    b += 8;
  }
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) {
    _mm256_storeu_pd(c + 8 * i, acc[i][0]);
    _mm256_storeu_pd(c + 8 * i + 4, acc[i][1]);
  }
}

/// Portable kernel on xsimd batches of the compiled arch: 4 x (2 batches).
template <class T>
struct xsimd_micro {
  using batch = xsimd::batch<T>;
  static constexpr int mr = 4;
  static constexpr int nr = 2 * static_cast<int>(batch::size);
  static void run(std::size_t kc, const T* a, const T* b, T* c) {
    batch acc[mr][2];
    for (int i = 0; i < mr; ++i) acc[i][0] = acc[i][1] = batch(T(0));
    for (std::size_t p = 0; p < kc; ++p) {
      const batch b0 = batch::load_unaligned(b), b1 = batch::load_unaligned(b + batch::size);
      for (int i = 0; i < mr; ++i) {
        const batch ai(a[i]);
        acc[i][0] = xsimd::fma(ai, b0, acc[i][0]);
        acc[i][1] = xsimd::fma(ai, b1, acc[i][1]);
      }
      a += mr;
      b += nr;
    }
    for (int i = 0; i < mr; ++i) {
      acc[i][0].store_unaligned(c + nr * i);
      acc[i][1].store_unaligned(c + nr * i + batch::size);
    }
  }
};

// ---------------------------------------------------------------------------
// The blocked driver, for one micro-kernel shape.

/// Cache blocking (floats): KC x NR panels of B stay in L1, MC x KC of A in
/// L2 (2 MiB per core here), KC x NC of B in L3.
template <class T>
struct blocking {
  static constexpr std::size_t kc = sizeof(T) == 4 ? 384 : 256;
  static constexpr std::size_t mc = sizeof(T) == 4 ? 480 : 240;
  static constexpr std::size_t nc = 3072;
};

template <class T>
struct aligned_buffer {
  struct deleter {
    void operator()(T* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::unique_ptr<T[], deleter> data;
  std::size_t size = 0;
  T* get(std::size_t n) {
    if (n > size) {
      data.reset(static_cast<T*>(::operator new[](n * sizeof(T), std::align_val_t{64})));
      size = n;
    }
    return data.get();
  }
};

/// Packs rows [i0, i0 + mc) x k [p0, p0 + kc) of A into MR-row panels
/// (zero rows past M). Reads through the k offsets, or by a constant stride
/// when k is uniformly strided (the common case).
template <class T, int MR>
void pack_a(const gemm_problem<T>& g, std::ptrdiff_t base, std::size_t i0, std::size_t mc, std::size_t p0,
            std::size_t kc, T* out, const stride_info& k_stride) {
  const std::size_t m_total = g.a_m.size();
  for (std::size_t r = 0; r < mc; r += MR) {
    T* panel = out + r * kc;
    for (int ii = 0; ii < MR; ++ii) {
      const std::size_t row = i0 + r + static_cast<std::size_t>(ii);
      T* dst = panel + ii;
      if (row >= m_total || r + static_cast<std::size_t>(ii) >= mc) {
        for (std::size_t p = 0; p < kc; ++p) dst[p * MR] = T(0);
        continue;
      }
      const T* src = g.a + base + g.a_m[row];
      if (k_stride.uniform) {
        const std::ptrdiff_t s = k_stride.stride;
        src += static_cast<std::ptrdiff_t>(p0) * s;
        for (std::size_t p = 0; p < kc; ++p) dst[p * MR] = src[static_cast<std::ptrdiff_t>(p) * s];
      } else {
        for (std::size_t p = 0; p < kc; ++p) dst[p * MR] = src[g.a_k[p0 + p]];
      }
    }
  }
}

/// Packs k [p0, p0 + kc) x columns [j0, j0 + nc) of B into NR-column panels.
template <class T, int NR>
void pack_b(const gemm_problem<T>& g, std::ptrdiff_t base, std::size_t p0, std::size_t kc, std::size_t j0,
            std::size_t nc, T* out, const stride_info& n_stride) {
  const std::size_t n_total = g.b_n.size();
  for (std::size_t c = 0; c < nc; c += NR) {
    T* panel = out + c * kc;
    const std::size_t width = std::min<std::size_t>(NR, std::min(nc - c, n_total - (j0 + c)));
    for (std::size_t p = 0; p < kc; ++p) {
      const T* src = g.b + base + g.b_k[p0 + p];
      T* dst = panel + p * NR;
      if (n_stride.uniform && n_stride.stride == 1) {
        std::memcpy(dst, src + (j0 + c), width * sizeof(T));
      } else {
        for (std::size_t jj = 0; jj < width; ++jj) dst[jj] = src[g.b_n[j0 + c + jj]];
      }
      for (std::size_t jj = width; jj < static_cast<std::size_t>(NR); ++jj) dst[jj] = T(0);
    }
  }
}

template <class T, class Micro, int MR, int NR>
void gemm_driver(const gemm_problem<T>& g) {
  using B = blocking<T>;
  const std::size_t M = g.a_m.size(), N = g.b_n.size(), K = g.a_k.size(), batches = g.a_batch.size();
  if (M == 0 || N == 0 || batches == 0) return;
  const std::size_t mc_max = (B::mc / MR) * MR;
  const std::size_t nc_max = (B::nc / NR) * NR;
  const stride_info n_b = uniform_stride(g.b_n), n_c = uniform_stride(g.c_n), k_a = uniform_stride(g.a_k);
  // Tiles: (batch, M block, N block); each computes its C block completely.
  const std::size_t m_blocks = (M + mc_max - 1) / mc_max, n_blocks = (N + nc_max - 1) / nc_max;
  // With few tiles, split M finer so every thread has work.
  std::size_t mc_step = mc_max;
  const std::size_t threads = default_thread_pool().size();
  if (batches * m_blocks * n_blocks < 2 * threads && M > MR) {
    const std::size_t want = std::max<std::size_t>(1, (2 * threads + batches * n_blocks - 1) / (batches * n_blocks));
    mc_step = std::max<std::size_t>(MR, ((M + want - 1) / want + MR - 1) / MR * MR);
    mc_step = std::min(mc_step, mc_max);
  }
  const std::size_t m_tiles = (M + mc_step - 1) / mc_step;
  const std::size_t tiles = batches * m_tiles * n_blocks;
  const std::size_t flops = 2 * M * N * std::max<std::size_t>(K, 1) * batches;
  auto tile = [&](std::size_t t) {
    thread_local aligned_buffer<T> abuf, bbuf;
    const std::size_t bi = t / (m_tiles * n_blocks);
    const std::size_t mi = (t / n_blocks) % m_tiles;
    const std::size_t ni = t % n_blocks;
    const std::size_t i0 = mi * mc_step, mc = std::min(mc_step, M - i0);
    const std::size_t j0 = ni * nc_max, nc = std::min(nc_max, N - j0);
    const std::size_t mc_pad = (mc + MR - 1) / MR * MR, nc_pad = (nc + NR - 1) / NR * NR;
    T ctile[MR * NR];
    if (K == 0) {  // empty sum: C = 0 (or unchanged when accumulating)
      if (g.accumulate) return;
      for (std::size_t i = 0; i < mc; ++i)
        for (std::size_t j = 0; j < nc; ++j) g.c[g.c_batch[bi] + g.c_m[i0 + i] + g.c_n[j0 + j]] = T(0);
      return;
    }
    for (std::size_t p0 = 0; p0 < K; p0 += B::kc) {
      const std::size_t kc = std::min(B::kc, K - p0);
      T* bp = bbuf.get(kc * nc_pad);
      pack_b<T, NR>(g, g.b_batch[bi], p0, kc, j0, nc, bp, n_b);
      T* ap = abuf.get(kc * mc_pad);
      pack_a<T, MR>(g, g.a_batch[bi], i0, mc, p0, kc, ap, k_a);
      const bool add = g.accumulate || p0 > 0;
      for (std::size_t jr = 0; jr < nc; jr += NR) {
        const std::size_t nw = std::min<std::size_t>(NR, nc - jr);
        for (std::size_t ir = 0; ir < mc; ir += MR) {
          const std::size_t mw = std::min<std::size_t>(MR, mc - ir);
          Micro::run(kc, ap + ir * kc, bp + jr * kc, ctile);
          for (std::size_t i = 0; i < mw; ++i) {
            T* crow = g.c + g.c_batch[bi] + g.c_m[i0 + ir + i];
            const T* src = ctile + i * NR;
            if (n_c.uniform && n_c.stride == 1) {
              T* dst = crow + (j0 + jr);
              if (add)
                for (std::size_t j = 0; j < nw; ++j) dst[j] += src[j];
              else
                std::memcpy(dst, src, nw * sizeof(T));
            } else {
              for (std::size_t j = 0; j < nw; ++j) {
                T& dst = crow[g.c_n[j0 + jr + j]];
                dst = add ? dst + src[j] : src[j];
              }
            }
          }
        }
      }
    }
  };
  if (flops < (std::size_t{1} << 18) || tiles == 1) {
    for (std::size_t t = 0; t < tiles; ++t) tile(t);
  } else {
    default_thread_pool().parallel_for(tiles, tile);
  }
}

template <class T>
struct gemm_by_arch {
  const gemm_problem<T>* g;
  void operator()(xsimd::avx512bw) const {
    gemm_driver<T, avx512_micro_t, 12, 128 / static_cast<int>(sizeof(T))>(*g);  // two zmm per row
  }
  void operator()(xsimd::fma3<xsimd::avx2>) const {
    gemm_driver<T, avx2_micro_t, 6, 64 / static_cast<int>(sizeof(T))>(*g);  // two ymm per row
  }
  template <class Arch>
  void operator()(Arch) const {
    gemm_driver<T, xsimd_micro<T>, xsimd_micro<T>::mr, xsimd_micro<T>::nr>(*g);
  }
  struct avx512_micro_t {
    static void run(std::size_t kc, const T* a, const T* b, T* c) { micro_avx512(kc, a, b, c); }
  };
  struct avx2_micro_t {
    static void run(std::size_t kc, const T* a, const T* b, T* c) { micro_avx2(kc, a, b, c); }
  };
};

/// One single-operand einsum: C[m] (+)= sum_k A[m, k] (a reduction, a
/// diagonal via summed strides, or a permutation when K is empty).
template <class T>
struct reduce_problem {
  const T* a = nullptr;
  T* c = nullptr;
  offsets a_m, c_m;  ///< kept labels
  offsets a_k;       ///< summed labels
  bool accumulate = false;
};

/// The reduction path: SIMD (xsimd, compiled arch) over a contiguous summed
/// run or a contiguous kept run, table lookups otherwise; split over the
/// thread pool by blocks of kept elements, each summed in a fixed order.
template <class T>
void run_reduce(const reduce_problem<T>& r) {
  using batch = xsimd::batch<T>;
  constexpr std::size_t lanes = batch::size;
  const std::size_t M = r.a_m.size(), K = r.a_k.size();
  if (M == 0) return;
  const stride_info ks = uniform_stride(r.a_k), ms = uniform_stride(r.a_m), cs = uniform_stride(r.c_m);
  const bool k_contiguous = ks.uniform && (ks.stride == 1 || K <= 1);
  const bool m_contiguous = ms.uniform && ms.stride == 1 && cs.uniform && cs.stride == 1 && M > 1;
  auto finish = [&](std::size_t m, T v) {
    T& dst = r.c[r.c_m[m]];
    dst = r.accumulate ? dst + v : v;
  };
  auto rows = [&](std::size_t m0, std::size_t m1) {
    if (m_contiguous && !k_contiguous) {
      // Vertical: C[m0:m1] += A[k][m0:m1] for each k.
      T* c = r.c + r.c_m[m0];
      if (!r.accumulate) std::fill(c, c + (m1 - m0), T(0));
      for (std::size_t k = 0; k < K; ++k) {
        const T* a = r.a + r.a_k[k] + r.a_m[m0];
        std::size_t i = 0;
        for (; i + lanes <= m1 - m0; i += lanes)
          (batch::load_unaligned(c + i) + batch::load_unaligned(a + i)).store_unaligned(c + i);
        for (; i < m1 - m0; ++i) c[i] += a[i];
      }
      return;
    }
    for (std::size_t m = m0; m < m1; ++m) {
      const T* a = r.a + r.a_m[m];
      if (k_contiguous) {
        batch acc0(T(0)), acc1(T(0));
        std::size_t k = 0;
        for (; k + 2 * lanes <= K; k += 2 * lanes) {
          acc0 += batch::load_unaligned(a + k);
          acc1 += batch::load_unaligned(a + k + lanes);
        }
        T sum = xsimd::hadd(acc0 + acc1);
        for (; k < K; ++k) sum += a[k];
        finish(m, sum);
      } else {
        T sum = T(0);
        for (std::size_t k = 0; k < K; ++k) sum += a[r.a_k[k]];
        finish(m, sum);
      }
    }
  };
  const std::size_t work = M * std::max<std::size_t>(K, 1);
  const std::size_t threads = default_thread_pool().size();
  if (work < (std::size_t{1} << 16) || threads == 1 || M < 2) {
    rows(0, M);
    return;
  }
  const std::size_t chunks = std::min(M, 4 * threads);
  default_thread_pool().parallel_for(chunks, [&](std::size_t t) { rows(M * t / chunks, M * (t + 1) / chunks); });
}

/// Runs a GEMM problem with the best micro-kernel for this CPU.
template <class T>
void run_gemm(const gemm_problem<T>& g) {
  xsimd::dispatch<xsimd::arch_list<xsimd::avx512bw, xsimd::fma3<xsimd::avx2>, xsimd::sse2>>(gemm_by_arch<T>{&g})();
}

}  // namespace xshard::detail
