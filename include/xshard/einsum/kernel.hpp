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
// ir (MR) -> jr (NR) -> micro-kernel (an MR x NR register tile over KC), with
// A's micro-panel held in L1 while B's block streams from L2/L3. A is read
// in place, without packing, when its rows are contiguous along K (the
// attention shapes, where packing would cost a third of the time); the
// next panel's rows are prefetched meanwhile. B is read in place when its
// rows are contiguous along N and C has few rows (a training step's 32-64
// row GEMMs, where each packed panel would be read only a few times).
// The micro-kernel is one body (arch/micro_body.hpp) stamped out per
// instruction set and, on x86-64, chosen at run time with xsimd::dispatch:
//   avx512bw       target("avx512...") intrinsics, 12 x 32 floats / 12 x 16 doubles
//   fma3<avx2>     target("avx2,fma") intrinsics,   6 x 16 floats /  6 x 8 doubles
//   anything else  xsimd::batch of the arch the TU is compiled for, 6 x 2 batches
// The x86 kernels live in arch/x86_gemm.hpp (xsimd 8.1 only defines
// batch<T, avx512f> when the TU is compiled with -mavx512f, so they use
// intrinsics under target attributes; the binary needs no -march flag to use
// AVX-512 where the CPU has it). Other architectures (aarch64: NEON) run the
// xsimd kernel.
// Threads: (batch, M, N) is cut into one rectangle per thread (the grid that
// balances best, see gemm_thread_grid); each thread packs into its own
// buffers, reused across calls. Every C element is summed over k in the same
// KC blocks and order whatever the grid, so results do not depend on the
// thread count.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>
#include <xsimd/xsimd.hpp>

#include "../core/isa.hpp"
#include "../core/thread_pool.hpp"
#include "arch/x86_gemm.hpp"
#include "sums.hpp"

namespace xshard::detail {

using offsets = std::vector<std::ptrdiff_t>;

/// What uniform_stride finds in an offset table.
struct stride_info {
  std::ptrdiff_t stride = 0;
  bool uniform = false;
};

/// Stride s if table[i] == i * s for all i, else 0 and uniform == false.
inline stride_info uniform_stride(const offsets& t) {
  if (t.empty()) return {0, true};
  if (t[0] != 0) return {};
  const std::ptrdiff_t s = t.size() > 1 ? t[1] : 1;
  for (std::size_t i = 2; i < t.size(); ++i)
    if (t[i] != static_cast<std::ptrdiff_t>(i) * s) return {};
  return {s, true};
}

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
  /// C = A B + bias[j] (C's column j's value; the epilogue's bias add,
  /// after the last K block's sum): N values and zeros up to a whole NR
  /// panel past them. Not with accumulate. Row i's value bias[i] while
  /// `transposed`.
  const T* bias = nullptr;
  /// Whether the problem runs as C^T = B^T A^T (transpose()): the tables
  /// and strides of A and B, M and N swapped, the bias along C's rows.
  bool transposed = false;
  /// uniform_stride of a_m, a_k, b_n, b_k, c_m and c_n (describe() sets
  /// them once the tables are filled).
  stride_info m_a, k_a, n_b, k_b, m_c, n_c;
  void describe() {
    m_a = uniform_stride(a_m);
    k_a = uniform_stride(a_k);
    n_b = uniform_stride(b_n);
    k_b = uniform_stride(b_k);
    m_c = uniform_stride(c_m);
    n_c = uniform_stride(c_n);
  }
  /// C = A B as C^T = B^T A^T: B's columns become the rows, A's rows the
  /// columns (swaps of the tables, no copies). Its own inverse.
  void transpose() {
    std::swap(a, b);
    std::swap(a_batch, b_batch);
    std::swap(a_m, b_n);
    std::swap(c_m, c_n);
    std::swap(a_k, b_k);
    std::swap(m_a, n_b);
    std::swap(k_a, k_b);
    std::swap(m_c, n_c);
    transposed = !transposed;
  }
};

// ---------------------------------------------------------------------------
// Micro-kernels: one body (arch/micro_body.hpp) stamped out per instruction
// set with that set's vector operations. On x86-64, arch/x86_gemm.hpp adds
// AVX-512 and AVX2 + FMA kernels; everywhere, the portable kernel below runs
// xsimd batches of the arch the TU is compiled for (NEON on aarch64).

/// The most rows of C for which a share reads B's rows in place
/// (reads_b_in_place) with the AVX-512 and portable kernels (AVX-512:
/// train_mlp's 64 x 128 x 512 products 40-42 -> 37-38 us against B packed),
/// and what runs_transposed calls few rows.
inline constexpr std::size_t direct_b_max_rows = 96;

/// Portable operations on xsimd batches of the arch the TU is compiled for.
struct xsimd_ops {
  template <class T>
  using vec = xsimd::batch<T>;
  template <class T>
  static constexpr int lanes = static_cast<int>(xsimd::batch<T>::size);
  static constexpr int rows = 6;
  static constexpr int prefetch_k = 0;
  template <class T>
  static vec<T> zero(const T*) {
    return vec<T>(T(0));
  }
  template <class T>
  static vec<T> load(const T* p) {
    return vec<T>::load_unaligned(p);
  }
  template <class T>
  static vec<T> bcast(const T* p) {
    return vec<T>(*p);
  }
  template <class T>
  static vec<T> fma(vec<T> a, vec<T> b, vec<T> c) {
    return xsimd::fma(a, b, c);
  }
  template <class T>
  static vec<T> add(vec<T> a, vec<T> b) {
    return a + b;
  }
  template <class T>
  static void store(T* p, vec<T> v) {
    v.store_unaligned(p);
  }
};

#include "arch/micro_body.hpp"
XSHARD_DEFINE_MICRO_KERNEL(micro_xsimd, , xsimd_ops)
#undef XSHARD_DEFINE_MICRO_KERNEL

/// The micro-kernel stamped for Ops (the one adapter the driver calls).
template <class Ops, class T, int MR>
void micro_run(std::size_t kc, const T* a, std::ptrdiff_t rs, std::ptrdiff_t cs, const T* b, std::ptrdiff_t bs,
               T* const* c, bool add, const T* bias) {
#if XSHARD_GEMM_X86
  if constexpr (std::is_same_v<Ops, avx512_ops>)
    micro_avx512<T, MR>(kc, a, rs, cs, b, bs, c, add, bias);
  else if constexpr (std::is_same_v<Ops, avx2_ops>)
    micro_avx2<T, MR>(kc, a, rs, cs, b, bs, c, add, bias);
  else
#endif
    micro_xsimd<T, MR>(kc, a, rs, cs, b, bs, c, add, bias);
}

// ---------------------------------------------------------------------------
// The blocked driver, for one micro-kernel shape.

/// Cache blocking, in elements. The loop nest keeps A's micro-panel
/// (MR x KC) in L1 and B's block (KC x NC) in L2 (1-2 MiB per core on the
/// AVX-512 machines this is tuned for); A's block (MC x KC) is packed per MC
/// rows. Override with -DXSHARD_GEMM_KC=... (and _MC, _NC) to tune.
template <class T>
struct blocking {
#ifdef XSHARD_GEMM_KC
  static constexpr std::size_t kc = XSHARD_GEMM_KC;
#else
  static constexpr std::size_t kc = 384;
#endif
#ifdef XSHARD_GEMM_MC
  static constexpr std::size_t mc = XSHARD_GEMM_MC;
#else
  static constexpr std::size_t mc = 144;
#endif
#ifdef XSHARD_GEMM_NC
  static constexpr std::size_t nc = XSHARD_GEMM_NC;
#else
  static constexpr std::size_t nc = 1024;
#endif
  /// A's block when the macro-kernel holds B's micro-panel in L1
  /// (holds_b_micro_panel: AVX2's panels of KC x 16 floats; AVX-512's only
  /// for a K block of 129-192). Measured on the Zen 1 of the issue's
  /// figures (AVX2, 32 KiB L1, 512 KiB L2), one thread, three paired
  /// rounds: the 1024 x 1024 x 4096 `...m,...n->mn` 1.2-1.6% faster, the
  /// 4096-row `...n,mn->...m` and `...m,mn->...n` 0.4-0.9% (72 and 96
  /// rows fell between). The likely reason, not measured: each B
  /// micro-panel meets the block's C lines of one column strip, and C's
  /// rows are often a multiple of 4 KiB apart (N = 1024 floats), so 144
  /// rows put 9 lines in each of 16 of the L2's 8-way sets, 48 rows 3.
#ifdef XSHARD_GEMM_MC_HELD_B
  static constexpr std::size_t mc_held_b = XSHARD_GEMM_MC_HELD_B;
#else
  static constexpr std::size_t mc_held_b = 48;
#endif
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

/// The row tiles of a macro-tile of mc rows: tile t is rows [start, start +
/// rows), MR rows each but the last. With Four (a kernel that also runs 4
/// rows: MR = 6, where 4 rows fill the FMA pipes as 6 do and 1-3 rows are
/// bound by the FMA latency, costing what 4 do), a last tile of 1 or 2 rows
/// joins the full tile before it and the two run as 4 + 3 or 4 + 4 rows:
/// 32 rows as 6, 6, 6, 6, 4, 4 instead of 6, 6, 6, 6, 6, 2 (about 32 against
/// 34 cycles per k on AVX2). The count is ceil(mc / MR) either way, and
/// tile t's packed panel is the t-th of MR rows.
template <int MR, bool Four>
struct row_tiles {
  std::size_t mc, count;
  bool joined;
  explicit row_tiles(std::size_t m)
      : mc(m), count((m + MR - 1) / MR), joined(Four && m > MR && (m % MR == 1 || m % MR == 2)) {}
  std::pair<std::size_t, std::size_t> operator[](std::size_t t) const {
    if (joined && t + 2 >= count) {
      const std::size_t first = (count - 2) * MR;
      return t + 2 == count ? std::pair<std::size_t, std::size_t>{first, 4} : std::pair{first + 4, mc - first - 4};
    }
    return {t * MR, std::min<std::size_t>(MR, mc - t * MR)};
  }
};

/// How many rows (steps of K) ahead pack_a's row-by-row copy (A contiguous
/// along M) prefetches the source: each row's elements of a
/// block lie on their own page when the rows are 4 KiB or more apart (the
/// `...m,...n->mn` weight gradient's 1024-float rows), and the hardware
/// prefetchers do not cross pages. Eight rows ahead halved pack_a's share of
/// the 1024 x 1024 x 4096 product (3.8% to 1.9% of its samples) on the AVX2
/// Zen 3 of bench/results, and it ran 3.5% faster. (pack_b's copy of B
/// contiguous along N, whose block rows were whole pages there, gained
/// nothing from it.)
inline constexpr std::size_t pack_prefetch_rows = 8;

/// Prefetches (non-temporal hint) every line of the `count` elements at
/// `src` + `rows` * `stride` (micro_body's prefetch_ahead: the row may lie
/// past the operand).
template <class T>
inline void prefetch_row_ahead(const T* src, std::ptrdiff_t stride, std::size_t rows, std::size_t count) {
  constexpr std::size_t line = 64 / sizeof(T);
  const std::ptrdiff_t row = stride * static_cast<std::ptrdiff_t>(rows);
  for (std::size_t e = 0; e < count + line - 1; e += line) prefetch_ahead<0>(src, row + static_cast<std::ptrdiff_t>(e));
}

/// Packs rows [i0, i0 + mc) x k [p0, p0 + kc) of A into MR-row panels, one
/// per row tile (row_tiles; panel t holds a[p * MR + i] for the tile's
/// rows, zero rows past them). Reads straight from the operand: MR
/// contiguous elements per k when M has unit stride; with X86Transpose (the
/// x86 kernels), float rows contiguous along K through register transposes
/// (pack_rows_avx2); a strided or table-driven row otherwise.
template <class T, int MR, bool Four = false, bool X86Transpose = false>
void pack_a(const gemm_problem<T>& g, std::ptrdiff_t base, std::size_t i0, std::size_t mc, std::size_t p0,
            std::size_t kc, T* out, const stride_info& m_stride, const stride_info& k_stride) {
  const row_tiles<MR, Four> tiles(mc);
  if (m_stride.uniform && m_stride.stride == 1) {
    // M contiguous: k by k, each k's mc elements read in order into every
    // panel (MR of them for a full tile; a short last tile's rows, then
    // zeros). Tile by tile, each k's read was MR elements one row stride
    // past the last, which the prefetchers followed poorly.
    const std::size_t full = tiles.joined ? tiles.count - 2 : tiles.mc / MR;  // the tiles of MR rows
    for (std::size_t p = 0; p < kc; ++p) {
      const T* src = g.a + base + g.a_m[i0] + g.a_k[p0 + p];
      if (k_stride.uniform && p + pack_prefetch_rows < kc)
        prefetch_row_ahead(src, k_stride.stride, pack_prefetch_rows, mc);
      T* dst = out + p * MR;
      for (std::size_t t = 0; t < full; ++t)
        std::memcpy(dst + t * MR * kc, src + t * MR, MR * sizeof(T));  // vector moves: dst and src may not alias
      for (std::size_t t = full; t < tiles.count; ++t) {
        const auto [r, rows] = tiles[t];
        std::memcpy(dst + t * MR * kc, src + r, rows * sizeof(T));
        std::fill(dst + t * MR * kc + rows, dst + t * MR * kc + MR, T(0));
      }
    }
    return;
  }
  for (std::size_t t = 0; t < tiles.count; ++t) {
    const auto [r, rows] = tiles[t];
    T* panel = out + t * MR * kc;
#if XSHARD_GEMM_X86
    if constexpr (X86Transpose && std::is_same_v<T, float>) {
      if (k_stride.uniform && k_stride.stride == 1) {
        const T* starts[MR] = {};
        for (std::size_t ii = 0; ii < rows; ++ii) starts[ii] = g.a + base + g.a_m[i0 + r + ii] + p0;
        pack_rows_avx2<MR>(starts, static_cast<int>(rows), kc, panel);
        continue;
      }
    }
#endif
    for (std::size_t ii = 0; ii < static_cast<std::size_t>(MR); ++ii) {
      T* dst = panel + ii;
      if (ii >= rows) {
        for (std::size_t p = 0; p < kc; ++p) dst[p * MR] = T(0);
        continue;
      }
      const T* src = g.a + base + g.a_m[i0 + r + ii];
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

/// Packs k [p0, p0 + kc) x columns [j0, j0 + nc) of B into NR-column panels
/// (panel c holds b[p * NR + j]; zero columns past nc). Row by row when N
/// has unit stride, column by column (contiguous reads along K) otherwise;
/// with X86Transpose (the x86 kernels), float columns contiguous along K
/// go eight by eight through register transposes (pack_columns_avx2).
template <class T, int NR, bool X86Transpose = false>
void pack_b(const gemm_problem<T>& g, std::ptrdiff_t base, std::size_t p0, std::size_t kc, std::size_t j0,
            std::size_t nc, T* out, const stride_info& n_stride, const stride_info& k_stride) {
  if (n_stride.uniform && n_stride.stride == 1) {
    // N contiguous: k by k, each k's nc elements read in order into every
    // panel (NR of them; a narrower last panel's, then zeros), as pack_a
    // does for A with unit M stride.
    const std::size_t full = nc / NR;
    for (std::size_t p = 0; p < kc; ++p) {
      const T* src = g.b + base + g.b_k[p0 + p] + j0;
      T* dst = out + p * NR;
      for (std::size_t c = 0; c < full; ++c) std::memcpy(dst + c * NR * kc, src + c * NR, NR * sizeof(T));
      if (const std::size_t width = nc - full * NR) {
        T* last = dst + full * NR * kc;
        std::memcpy(last, src + full * NR, width * sizeof(T));
        std::fill(last + width, last + NR, T(0));
      }
    }
    return;
  }
  for (std::size_t c = 0; c < nc; c += NR) {
    T* panel = out + c * kc;
    const std::size_t width = std::min<std::size_t>(NR, nc - c);
#if XSHARD_GEMM_X86
    if constexpr (X86Transpose && std::is_same_v<T, float>) {
      if (width == static_cast<std::size_t>(NR) && k_stride.uniform && k_stride.stride == 1) {
        const T* cols[NR];
        for (int jj = 0; jj < NR; ++jj) cols[jj] = g.b + base + g.b_n[j0 + c + static_cast<std::size_t>(jj)] + p0;
        pack_columns_avx2<NR>(cols, kc, panel);
        continue;
      }
    }
#endif
    for (std::size_t jj = 0; jj < static_cast<std::size_t>(NR); ++jj) {
      T* dst = panel + jj;
      if (jj >= width) {
        for (std::size_t p = 0; p < kc; ++p) dst[p * NR] = T(0);
        continue;
      }
      const T* src = g.b + base + g.b_n[j0 + c + jj];
      if (k_stride.uniform) {
        const std::ptrdiff_t s = k_stride.stride;
        src += static_cast<std::ptrdiff_t>(p0) * s;
        for (std::size_t p = 0; p < kc; ++p) dst[p * NR] = src[static_cast<std::ptrdiff_t>(p) * s];
      } else {
        for (std::size_t p = 0; p < kc; ++p) dst[p * NR] = src[g.b_k[p0 + p]];
      }
    }
  }
}

/// Whether A's rows are read in place (no packing): each row contiguous
/// along K, and the rows not all in the same L1 sets (a row stride that is a
/// multiple of 4 KiB would make MR rows compete for 8 ways).
template <class T>
bool reads_a_in_place(const stride_info& m_a, const stride_info& k_a) {
  const std::size_t row = static_cast<std::size_t>(m_a.stride < 0 ? -m_a.stride : m_a.stride) * sizeof(T);
  return k_a.uniform && k_a.stride == 1 && m_a.uniform && m_a.stride != 0 && row % 4096 != 0;
}

/// The layout half of reads_b_in_place.
template <class T>
bool b_layout_in_place(const stride_info& n_b, const stride_info& k_b) {
  const std::size_t row = static_cast<std::size_t>(k_b.stride < 0 ? -k_b.stride : k_b.stride) * sizeof(T);
  return n_b.uniform && n_b.stride == 1 && k_b.uniform && k_b.stride != 0 && row % 4096 != 0;
}
/// The rows half of reads_b_in_place (also gemm_thread_grid's).
constexpr bool few_rows_for_b_in_place(std::size_t rows, std::size_t max_rows = direct_b_max_rows) {
  return rows <= max_rows;
}
/// Whether B's rows are read in place (B not packed) for a share of `rows`
/// rows of C: each row of B contiguous along N, rows a fixed stride apart
/// that is not a multiple of 4 KiB (the same L1 sets), and few enough rows
/// of A (at most `max_rows`, the kernel's `b_in_place_rows`: 96,
/// direct_b_max_rows, for the AVX-512 and portable kernels, 24 for AVX2's)
/// that a packed panel would be read too few times to pay for the copy (a
/// training step's GEMMs of few rows re-pack every weight at every call
/// otherwise). Full-width panels only; the last, narrower one is packed.
template <class T>
bool reads_b_in_place(const stride_info& n_b, const stride_info& k_b, std::size_t rows,
                      std::size_t max_rows = direct_b_max_rows) {
  return b_layout_in_place<T>(n_b, k_b) && few_rows_for_b_in_place(rows, max_rows);
}

/// What packing one element costs the cost models below, in multiply-adds
/// (gemm_thread_grid, runs_transposed).
inline constexpr std::size_t gemm_pack_cost = 16;

/// x / y rounded up, and x rounded up to a multiple of y (sizes; the
/// int64 extents of sharding/ have their own detail::ceil_div).
constexpr std::size_t div_up(std::size_t x, std::size_t y) { return (x + y - 1) / y; }
constexpr std::size_t round_up(std::size_t x, std::size_t y) { return div_up(x, y) * y; }

/// The K blocks every product sums over: as few as KC allows, all of one
/// size (a whole number of 64-byte lines of elements, at most KC) but the
/// last. A function of K alone: every split of a product (of batches, M, N
/// or K itself: gemm_run_split_k) sums each element of C over the same
/// blocks in the same order, so results do not depend on the thread count.
/// (K = 512 runs as 256 + 256 rather than 384 + 128: two equal halves for
/// two threads to sum.)
struct k_blocks {
  std::size_t count, size;
};
template <class T>
constexpr k_blocks gemm_k_blocks(std::size_t K) {
  constexpr std::size_t kc = blocking<T>::kc, line = 64 / sizeof(T);
  if (K == 0) return {0, kc};
  const std::size_t size = std::min(kc, round_up(div_up(K, div_up(K, kc)), line));
  return {div_up(K, size), size};
}

/// A rectangle of the (batch, M, N) index space and a range of K blocks
/// (gemm_k_blocks): one thread's share.
struct gemm_range {
  std::size_t b0, b1, m0, m1, n0, n1;
  std::size_t kb0 = 0, kb1 = static_cast<std::size_t>(-1);
};

/// What an element read in place (not packed) costs the thread grid's
/// cost model, in multiply-adds: the share's footprint in A and B, read
/// from beyond L1 once per NC block. A split that leaves each thread the
/// smaller footprint wins among splits of equal multiply-adds and packing,
/// and then each thread reads only its own rows of a weight (the hidden
/// dim's half), as it later updates them.
inline constexpr std::size_t gemm_read_cost = 4;
/// Split-K's extra cost per element of C and partial: the caller adds each
/// partial into C after the split (load both, add, store).
inline constexpr std::size_t gemm_partial_cost = 2;
/// Split-K's C at most this many elements (64 KiB of floats): a training
/// step's products of 64 rows x 128 columns over K = 512.
inline constexpr std::size_t gemm_split_k_max = 16384;

/// Splits (batches, M, N) over `threads` as a grid tb x tm x tn x 1 with
/// tb * tm * tn == threads, or K's blocks over threads as 1 x 1 x 1 x tk
/// (split-K: one block per thread, tk == kb.count <= threads, for one
/// product (batches == 1) whose C has at most gemm_split_k_max elements),
/// choosing the split whose largest share costs least: its multiply-adds
/// (M and N rounded up to whole micro-tiles) plus the elements it packs,
/// weighted as `gemm_pack_cost` multiply-adds each (B once per K block
/// unless read in place; A once per NC block unless A is read in place),
/// plus the elements it reads in place, `gemm_read_cost` each, and for
/// split-K the partials the caller adds into C (`gemm_partial_cost` per
/// element of each). `b_in_place`: B's layout lets a share of few enough
/// rows read it in place (b_layout_in_place), so a split of M that brings
/// the shares down to that many rows (few_rows_for_b_in_place) packs no B;
/// counted only for a share of one K block (kb.count == 1, or split-K).
/// Ties keep the first split found, which splits batches before M before N
/// before K. Returns {tb, tm, tn, tk}.
/// (A weight gradient of a training step, M 128 x N 512 x K 64 with A
/// packed: two shares of 66 rows that read B in place ran in 113 us at two
/// threads on an AVX2 Zen 1, two of 256 columns that each pack half of B
/// in 150-155 us. The same product over K = 1024 ran about 10% slower on
/// shares that read B in place, 1024 strided rows of 2 KiB, than on shares
/// that packed it.)
inline std::array<std::size_t, 4> gemm_thread_grid(std::size_t batches, std::size_t M, std::size_t N, std::size_t K,
                                                   std::size_t threads, std::size_t mr, std::size_t nr, std::size_t nc,
                                                   bool packs_a, bool b_in_place = false, k_blocks kb = {1, 0},
                                                   std::size_t b_rows = direct_b_max_rows) {
  constexpr double pack_cost = gemm_pack_cost, read_cost = gemm_read_cost;
  // One share: rows x cols of C over k, B read in place if allowed.
  auto share_cost = [&](std::size_t rows, std::size_t cols, std::size_t k, bool b_allowed) {
    const double mb = static_cast<double>(rows), nb = static_cast<double>(cols), kd = static_cast<double>(k);
    const double a_reads = kd * mb * static_cast<double>(div_up(cols, nc));
    const bool packs_b = !(b_allowed && few_rows_for_b_in_place(rows, b_rows));
    const double packed = (packs_b ? kd * nb : 0.0) + (packs_a ? a_reads : 0.0);
    const double read = (packs_b ? 0.0 : kd * nb) + (packs_a ? 0.0 : a_reads);
    return mb * nb * kd + pack_cost * packed + read_cost * read;
  };
  std::array<std::size_t, 4> best{1, 1, 1, 1};
  double best_cost = -1;
  for (std::size_t tb = threads; tb >= 1; --tb) {
    if (threads % tb) continue;
    for (std::size_t tn = 1; tn <= threads / tb; ++tn) {
      if ((threads / tb) % tn) continue;
      const std::size_t tm = threads / tb / tn;
      const double cost =
          static_cast<double>(div_up(batches, tb)) *
          share_cost(round_up(div_up(M, tm), mr), round_up(div_up(N, tn), nr), K, b_in_place && kb.count <= 1);
      if (best_cost < 0 || cost < best_cost) best_cost = cost, best = {tb, tm, tn, 1};
    }
  }
  if (batches == 1 && kb.count >= 2 && kb.count <= threads && M * N <= gemm_split_k_max) {
    const double cost = share_cost(round_up(M, mr), round_up(N, nr), kb.size, b_in_place) +
                        static_cast<double>(gemm_partial_cost * M * N * (kb.count - 1));
    if (cost < best_cost) best = {1, 1, 1, kb.count};
  }
  return best;
}

/// Where a share writes: C as the problem describes it, or a split-K
/// partial (gemm_run_split_k): its own C tables, no bias, not accumulated.
template <class T>
struct gemm_target {
  T* c;
  const std::ptrdiff_t* c_batch;
  const std::ptrdiff_t* c_m;
  const std::ptrdiff_t* c_n;
  bool rows_contiguous, columns_contiguous, accumulate;
  const T* bias;  ///< added as the last K block (of all K) stores C
  /// C of g as the problem describes it; `with_bias`: g's bias too.
  static gemm_target of(const gemm_problem<T>& g, bool with_bias) {
    return {g.c,
            g.c_batch.data(),
            g.c_m.data(),
            g.c_n.data(),
            g.n_c.uniform && g.n_c.stride == 1,
            g.m_c.uniform && g.m_c.stride == 1,
            g.accumulate,
            with_bias ? g.bias : nullptr};
  }
};

/// What every block of one thread's share reads: the operands' strides, the
/// packing buffers, whether A and B are read in place, and where it writes.
template <class T>
struct gemm_share_state {
  stride_info m_a, k_a, n_b, k_b;
  bool direct_a, direct_b;
  T* ap;
  T* bp;
  gemm_target<T> out;
};

/// The macro-kernel's loop order. A B block (KC x NC, packed) larger than
/// half of a 1 MiB L2 (the AMD EPYC Zen 4/5 machines this is tuned on) does
/// not stay in L2 while A's micro-panels go by: when A is packed and one B
/// micro-panel (KC x NR) fits in half of a 48 KiB L1, each B micro-panel is
/// held in L1 while A's packed micro-panels (the MC x KC block, in L2) go
/// past it (jr outer, ir inner, as BLIS does). Otherwise A's micro-panel is
/// held in L1 and B's are swept (ir outer). Measured on a 4096 x 1024 x 1024
/// GEMM with the AVX2 kernel (a 384 x 16 B panel, 24 KiB): 2-3% faster with
/// B held; with the AVX-512 kernel's 384 x 32 panel (48 KiB, the whole L1)
/// holding B was 2-7% slower.
template <class T, int NR>
constexpr bool holds_b_micro_panel(std::size_t kc, std::size_t nc) {
  return kc * nc * sizeof(T) > (std::size_t{512} << 10) && kc * NR * sizeof(T) <= (std::size_t{24} << 10);
}

/// The macro-kernel: rows [i0, i0 + mc) x columns [j0, j0 + nc) of C for
/// the K block [p0, p0 + kc), B packed in st.bp unless read in place (then
/// only its last, narrower panel is there) and A in st.ap unless read in
/// place: the MR x NR micro-tiles, edge tiles through a local tile; with A
/// in place, a last tile of rows not a multiple of 3 runs over an
/// overlapping window of A instead of packing. Loop order: hold_b (the
/// caller's holds_b_micro_panel, which also sizes A's block).
template <class T, class Kernel>
void gemm_macro_tile(const gemm_problem<T>& g, const gemm_share_state<T>& st, std::size_t bi, std::size_t i0,
                     std::size_t mc, std::size_t j0, std::size_t nc, std::size_t p0, std::size_t kc, bool add,
                     bool hold_b) {
  constexpr int MR = Kernel::mr, NR = Kernel::nr;
  const gemm_target<T>& out = st.out;
  T* const cb = out.c + out.c_batch[bi];
  // The epilogue's bias: added as the last K block stores C, by column (in
  // the kernel, from bias) or, transposed, by row (from row_bias[i], C's
  // row i's).
  const bool last_k = out.bias && p0 + kc == g.a_k.size();
  const T* const bias = last_k && !g.transposed ? out.bias + j0 : nullptr;
  const T* const row_bias = last_k && g.transposed ? out.bias : nullptr;
  alignas(64) T ctile[MR * NR];
  T* rows[MR];
  // One micro-kernel call: `used` rows (Kernel::rows_for) of A times the B
  // panel; the tile's row i is C's row c0 + i, of which rows [lo, hi) are
  // written (straight into C when that is all of them, C's rows are
  // contiguous and the panel is full; else through ctile).
  auto tile = [&](int used, const T* a, std::ptrdiff_t rs, std::ptrdiff_t cs, std::size_t c0, int lo, int hi,
                  std::size_t jr, std::size_t nw, const T* b, std::ptrdiff_t bs) {
    // Straight into C: every row of the tile, or also rows [0, lo) of an
    // overlapping window when they are this macro-tile's own rows, already
    // written in this K block (c0 >= i0) and not accumulated into (!add):
    // the kernel writes them again with the same values (each row's sum is
    // its own, in the same k order, whatever the kernel's row count).
    if (out.rows_contiguous && !row_bias && hi == used && nw == NR && (lo == 0 || (!add && c0 >= i0))) {
      for (int i = 0; i < used; ++i) rows[i] = cb + out.c_m[c0 + static_cast<std::size_t>(i)] + (j0 + jr);
      Kernel::run(used, kc, a, rs, cs, b, bs, rows, add, bias ? bias + jr : nullptr);
      return;
    }
    for (int i = 0; i < used; ++i) rows[i] = ctile + i * NR;
    Kernel::run(used, kc, a, rs, cs, b, bs, rows, false, nullptr);
    // The biases are added after C's own value, as in the kernel.
    const T* const bj = bias ? bias + jr : nullptr;
    auto store = [&](T& dst, T v, int i, std::size_t j) {
      v = add ? dst + v : v;
      if (bj) v += bj[j];
      if (row_bias) v += row_bias[c0 + static_cast<std::size_t>(i)];
      dst = v;
    };
    if (!out.rows_contiguous && out.columns_contiguous) {  // (transposed) a column of the tile at a time
#if XSHARD_GEMM_X86
      if constexpr (Kernel::x86_packing && std::is_same_v<T, float>)
        if (lo == 0 && hi == used && nw == NR && !bj &&
            store_tile_columns_avx2<NR>(used, ctile, cb + out.c_m[c0], out.c_n + (j0 + jr), add,
                                        row_bias ? row_bias + c0 : nullptr))
          return;
#endif
      for (std::size_t j = 0; j < nw; ++j) {
        T* const col = cb + out.c_n[j0 + jr + j] + out.c_m[c0];
        for (int i = lo; i < hi; ++i) store(col[i], ctile[i * NR + static_cast<int>(j)], i, j);
      }
      return;
    }
    for (int i = lo; i < hi; ++i) {
      T* const crow = cb + out.c_m[c0 + static_cast<std::size_t>(i)];
      const T* const src = ctile + i * NR;
      if (out.rows_contiguous && nw == NR && !row_bias) {  // a full row of the tile, contiguous: a loop of NR
        T* const dst = crow + (j0 + jr);
        if (add)
          for (int j = 0; j < NR; ++j) dst[j] += src[j];
        else
          for (int j = 0; j < NR; ++j) dst[j] = src[j];
        if (bj)
          for (int j = 0; j < NR; ++j) dst[j] += bj[j];
        continue;
      }
      for (std::size_t j = 0; j < nw; ++j) store(crow[out.c_n[j0 + jr + j]], src[j], i, j);
    }
  };
  auto a_row = [&](std::size_t i) { return g.a + g.a_batch[bi] + g.a_m[i] + static_cast<std::ptrdiff_t>(p0); };
  // B's micro-panel of columns [jr, jr + nw) and its row stride: packed, or
  // in place (full panels of a B read in place).
  auto b_panel = [&](std::size_t jr, std::size_t nw) -> std::pair<const T*, std::ptrdiff_t> {
    if (st.direct_b && nw == NR)
      return {g.b + g.b_batch[bi] + g.b_k[p0] + static_cast<std::ptrdiff_t>(j0 + jr), st.k_b.stride};
    return {st.bp + jr * kc, NR};
  };
  const row_tiles<MR, Kernel::four> tiles(mc);
  if (hold_b) {
    // B's block does not stay in L2: each B micro-panel stays in L1 while
    // A's packed micro-panels (its block, in L2) go past it.
    for (std::size_t jr = 0; jr < nc; jr += NR) {
      const std::size_t nw = std::min<std::size_t>(NR, nc - jr);
      const auto [b, bs] = b_panel(jr, nw);
      for (std::size_t t = 0; t < tiles.count; ++t) {
        const auto [ir, mw] = tiles[t];
        tile(Kernel::rows_for(static_cast<int>(mw)), st.ap + t * MR * kc, 1, MR, i0 + ir, 0, static_cast<int>(mw), jr,
             nw, b, bs);
      }
    }
    return;
  }
  for (std::size_t t = 0; t < tiles.count; ++t) {
    const auto [ir, mw] = tiles[t];
    const std::size_t c0 = i0 + ir;
    const int rows_used = Kernel::rows_for(static_cast<int>(mw));  // the kernel's rows
    // A read in place: a tile of mw rows that no kernel runs exactly runs
    // the kernel of rows_used rows over a window of A that ends at its last row
    // and overlaps rows already done (still rows of A; only the tile's own
    // rows are written). Packed (zero-padded) when A has fewer rows than
    // that before the tile's end.
    const int shift = rows_used - static_cast<int>(mw);  // rows of the window before the tile
    const bool in_place = st.direct_a && c0 + mw >= static_cast<std::size_t>(rows_used);
    const T* a_panel = st.ap + t * MR * kc;
    if (in_place) {
      a_panel = a_row(c0 + mw - static_cast<std::size_t>(rows_used));
      if (ir + 2 * MR <= mc) {  // the next panel's rows, while this one computes
        const T* next = a_panel + MR * st.m_a.stride;
        for (int i = 0; i < MR; ++i)
          for (std::size_t p = 0; p < kc; p += 64 / sizeof(T)) __builtin_prefetch(next + i * st.m_a.stride + p, 0, 2);
      }
    } else if (st.direct_a) {
      pack_a<T, MR, Kernel::four, Kernel::x86_packing>(g, g.a_batch[bi], c0, mw, p0, kc, st.ap, st.m_a, st.k_a);
      a_panel = st.ap;
    }
    for (std::size_t jr = 0; jr < nc; jr += NR) {
      const std::size_t nw = std::min<std::size_t>(NR, nc - jr);
      const auto [b, bs] = b_panel(jr, nw);
      // B read in place arrives cold at the block's first row tile (a
      // layer's weights, last touched a layer ago): its next panel's rows
      // are prefetched into L2 while this one computes, as the kernel's
      // strided reads alone left it waiting on each line. (train_mlp's
      // mesh, one worker: the devices' 32 x 128 x 256 products 5-7% faster;
      // the rows after the first find B in L2.)
      if (t == 0 && st.direct_b && jr + 2 * NR <= nc) {
        const T* const next = b_panel(jr + NR, NR).first;
        for (std::size_t p = 0; p < kc; ++p) __builtin_prefetch(next + static_cast<std::ptrdiff_t>(p) * bs, 0, 2);
      }
      if (!in_place) {
        tile(rows_used, a_panel, 1, MR, c0, 0, static_cast<int>(mw), jr, nw, b, bs);
        continue;
      }
      tile(rows_used, a_panel, st.m_a.stride, 1, c0 + mw - static_cast<std::size_t>(rows_used), shift, rows_used, jr,
           nw, b, bs);
    }
  }
}

/// C = A B (or C += A B) over one thread's share of (batch, M, N) and of
/// K's blocks (gemm_k_blocks), written to `out`. Goto's loop nest: jc (NC)
/// -> pc (K blocks; pack B) -> ic (MC; pack A) -> the macro-kernel (ir (MR)
/// -> jr (NR) -> micro-kernel). Each C element is summed over k in the same
/// K blocks in the same order whatever the share, so results do not depend
/// on the thread count.
template <class T, class Kernel>
void gemm_share(const gemm_problem<T>& g, const gemm_range& r, const gemm_target<T>& out) {
  constexpr int MR = Kernel::mr, NR = Kernel::nr;
  using B = blocking<T>;
  constexpr std::size_t MC = (B::mc + MR - 1) / MR * MR, NC = (B::nc + NR - 1) / NR * NR, KC = B::kc;
  constexpr std::size_t MC_held_b = std::min(MC, (B::mc_held_b + MR - 1) / MR * MR);
  const std::size_t K = g.a_k.size();
  const k_blocks kb = gemm_k_blocks<T>(K);
  const std::size_t kb1 = std::min(r.kb1, kb.count);
  thread_local aligned_buffer<T> abuf, bbuf;
  gemm_share_state<T> st{g.m_a, g.k_a, g.n_b, g.k_b, false, false, abuf.get(MC * KC), bbuf.get(NC * KC), out};
  st.direct_a = reads_a_in_place<T>(st.m_a, st.k_a);
  st.direct_b = reads_b_in_place<T>(st.n_b, st.k_b, r.m1 - r.m0, Kernel::b_in_place_rows);
  for (std::size_t bi = r.b0; bi < r.b1; ++bi) {
    if (K == 0) {  // an empty sum: C = 0 or the bias (unchanged when accumulating)
      T* const cb = out.c + out.c_batch[bi];
      if (!out.accumulate)
        for (std::size_t i = r.m0; i < r.m1; ++i)
          for (std::size_t j = r.n0; j < r.n1; ++j)
            cb[out.c_m[i] + out.c_n[j]] = out.bias ? out.bias[g.transposed ? i : j] : T(0);
      continue;
    }
    for (std::size_t j0 = r.n0; j0 < r.n1; j0 += NC) {
      const std::size_t nc = std::min(NC, r.n1 - j0);
      for (std::size_t blk = r.kb0; blk < kb1; ++blk) {
        const std::size_t p0 = blk * kb.size, kc = std::min(kb.size, K - p0);
        const std::size_t packed_from = st.direct_b ? nc / NR * NR : 0;  // in place: the last panel only
        if (packed_from < nc)
          pack_b<T, NR, Kernel::x86_packing>(g, g.b_batch[bi], p0, kc, j0 + packed_from, nc - packed_from,
                                             st.bp + packed_from * kc, st.n_b, st.k_b);
        // The macro-kernel's loop order, and A's block: fewer rows when it
        // holds B's micro-panels (blocking::mc_held_b).
        const bool hold_b = !st.direct_a && holds_b_micro_panel<T, NR>(kc, nc);
        const std::size_t block = hold_b ? MC_held_b : MC;
        for (std::size_t i0 = r.m0; i0 < r.m1; i0 += block) {
          const std::size_t mc = std::min(block, r.m1 - i0);
          if (!st.direct_a)
            pack_a<T, MR, Kernel::four, Kernel::x86_packing>(g, g.a_batch[bi], i0, mc, p0, kc, st.ap, st.m_a, st.k_a);
          gemm_macro_tile<T, Kernel>(g, st, bi, i0, mc, j0, nc, p0, kc, out.accumulate || blk > r.kb0, hold_b);
        }
      }
    }
  }
}

/// A split-K's partial sums and their C tables (rows i * N, columns j), on
/// the calling thread: grown to the largest product seen, then reused.
template <class T>
struct split_k_scratch {
  aligned_buffer<T> values;
  offsets rows, columns;
  std::ptrdiff_t batch = 0;
};

/// C = A B with K's blocks summed in parallel (gemm_thread_grid's split-K):
/// task 0 sums block 0 into C, task t block t into a partial of its own;
/// then the caller adds the partials into C in block order, and the bias
/// after them, the additions one thread makes ((C + block 1) + block 2 ...)
/// + bias: the same bits as one thread.
template <class T, class Kernel>
void gemm_run_split_k(const gemm_problem<T>& g, k_blocks kb) {
  const std::size_t M = g.a_m.size(), N = g.b_n.size(), size = M * N;
  thread_local split_k_scratch<T> mine;
  split_k_scratch<T>& s = mine;  // the caller's: a thread_local named in the tasks would be each worker's own
  T* const partials = s.values.get((kb.count - 1) * size);
  s.rows.resize(M);
  s.columns.resize(N);
  for (std::size_t i = 0; i < M; ++i) s.rows[i] = static_cast<std::ptrdiff_t>(i * N);
  for (std::size_t j = 0; j < N; ++j) s.columns[j] = static_cast<std::ptrdiff_t>(j);
  const gemm_target<T> c = gemm_target<T>::of(g, false);  // the bias is added after the partials
  default_thread_pool().parallel_for(kb.count, [&](std::size_t t) {
    const gemm_range r{0, 1, 0, M, 0, N, t, t + 1};
    if (t == 0) return gemm_share<T, Kernel>(g, r, c);
    gemm_share<T, Kernel>(g, r,
                          gemm_target<T>{partials + (t - 1) * size, &s.batch, s.rows.data(), s.columns.data(), true,
                                         N == 1, false, nullptr});
  });
  // Row by row, a pass per partial and one for the bias, on the CPU's
  // widest vectors (add_elements, dispatched at run time: the caller adds
  // alone while the workers wait, and a build without -march would get SSE2
  // from the compiler; the same bits either way).
  T* const cb = g.c + g.c_batch[0];
  for (std::size_t i = 0; i < M; ++i) {
    T* const crow = cb + g.c_m[i];
    if (c.rows_contiguous) {
      for (std::size_t t = 1; t < kb.count; ++t) add_elements(crow, crow, partials + (t - 1) * size + i * N, N);
      if (g.bias && g.transposed) {
        const T b = g.bias[i];
        for (std::size_t j = 0; j < N; ++j) crow[j] += b;
      } else if (g.bias) {
        add_elements(crow, crow, g.bias, N);
      }
      continue;
    }
    for (std::size_t j = 0; j < N; ++j) {
      T v = crow[g.c_n[j]];
      for (std::size_t t = 1; t < kb.count; ++t) v += partials[(t - 1) * size + i * N + j];
      if (g.bias) v += g.bias[g.transposed ? i : j];
      crow[g.c_n[j]] = v;
    }
  }
}

/// C = A B as g describes it, split over the thread pool (gemm_thread_grid)
/// when it is large enough to pay for waking a worker.
template <class T, class Kernel>
void gemm_run(const gemm_problem<T>& g) {
  const std::size_t M = g.a_m.size(), N = g.b_n.size(), K = g.a_k.size(), batches = g.a_batch.size();
  if (M == 0 || N == 0 || batches == 0) return;
  const std::size_t flops = 2 * M * N * std::max<std::size_t>(K, 1) * batches;
  std::size_t threads = usable_threads();
  // Below ~2^20 flops the wake-up of a worker costs more than it saves.
  threads = std::min(threads, std::max<std::size_t>(1, flops >> 20));
  const gemm_target<T> out = gemm_target<T>::of(g, true);
  if (threads <= 1) {
    gemm_share<T, Kernel>(g, {0, batches, 0, M, 0, N}, out);
    return;
  }
  const k_blocks kb = gemm_k_blocks<T>(K);
  const auto grid = gemm_thread_grid(batches, M, N, K, threads, Kernel::mr, Kernel::nr, blocking<T>::nc,
                                     !reads_a_in_place<T>(g.m_a, g.k_a), b_layout_in_place<T>(g.n_b, g.k_b), kb,
                                     Kernel::b_in_place_rows);
  if (grid[3] > 1) return gemm_run_split_k<T, Kernel>(g, kb);
  thread_pool& pool = default_thread_pool();
  if (grid[0] == threads || grid[1] == threads || grid[2] == threads) {
    // One dim (batches, M or N) split over every thread: by the threads'
    // measured speeds (thread_pool::parallel_for_balanced), on whole
    // products or tiles.
    const std::size_t dim = grid[0] == threads ? 0 : grid[1] == threads ? 1 : 2;
    const std::size_t extent = dim == 0 ? batches : dim == 1 ? M : N;
    const std::size_t unit = dim == 0 ? 1 : dim == 1 ? Kernel::mr : Kernel::nr;
    const balanced_shares s = pool.shares(threads);
    pool.parallel_for_balanced(s, [&](std::size_t t) {
      const auto [a0, a1] = s.range(extent, t, unit);
      if (a0 >= a1) return;
      gemm_range span{0, batches, 0, M, 0, N};
      (dim == 0 ? span.b0 : dim == 1 ? span.m0 : span.n0) = a0;
      (dim == 0 ? span.b1 : dim == 1 ? span.m1 : span.n1) = a1;
      gemm_share<T, Kernel>(g, span, out);
    });
    return;
  }
  pool.parallel_for(threads, [&](std::size_t t) {
    const std::size_t tb = t / (grid[1] * grid[2]), tm = (t / grid[2]) % grid[1], tn = t % grid[2];
    const auto [b0, b1] = split_range(batches, grid[0], tb, 1);
    const auto [m0, m1] = split_range(M, grid[1], tm, Kernel::mr);
    const auto [n0, n1] = split_range(N, grid[2], tn, Kernel::nr);
    if (b0 < b1 && m0 < m1 && n0 < n1) gemm_share<T, Kernel>(g, {b0, b1, m0, m1, n0, n1}, out);
  });
}

/// Whether C = A B runs faster as C^T = B^T A^T (gemm_problem::transpose):
/// for few rows of C (<= direct_b_max_rows) times a B that would be packed
/// (its rows not contiguous along N) but whose columns are contiguous along
/// K, so that B^T's rows are read in place as A. Then only A^T (K x M, the
/// few rows) is packed instead of B (K x N), and C^T's tiles are stored a
/// column of C at a time (C's rows contiguous). The cost: MR x NR tiles'
/// multiply-adds, plus `gemm_pack_cost` per element packed and `store_cost` per
/// element of C stored through the tile buffer. This is the forward x W^T
/// of a linear layer on a training step's 32-64 rows (W [N, K] row-major),
/// whose W^T would be packed again at every call for a few rows of x.
/// `b_rows`: the kernel's b_in_place_rows (reads_b_in_place).
template <class T>
bool runs_transposed(const gemm_problem<T>& g, std::size_t mr, std::size_t nr, std::size_t b_rows = direct_b_max_rows) {
  constexpr std::size_t pack_cost = gemm_pack_cost, store_cost = 8;
  const std::size_t M = g.a_m.size(), N = g.b_n.size(), K = g.a_k.size();
  if (K == 0 || M > direct_b_max_rows || !g.n_c.uniform || g.n_c.stride != 1) return false;
  if (reads_b_in_place<T>(g.n_b, g.k_b, M, b_rows) || !reads_a_in_place<T>(g.n_b, g.k_b)) return false;
  const std::size_t packs_a = reads_a_in_place<T>(g.m_a, g.k_a) ? 0 : K * M;
  const std::size_t as_is = round_up(M, mr) * round_up(N, nr) * K + pack_cost * (K * N + packs_a);
  const std::size_t transposed = round_up(N, mr) * round_up(M, nr) * K + pack_cost * K * M + store_cost * M * N;
  return transposed < as_is;
}

/// Runs g as it is or transposed (runs_transposed): transposed in place
/// for the run (the tables swap, nothing is copied) and back after it.
template <class T, class Kernel>
void gemm_driver(gemm_problem<T>& g) {
  if (!runs_transposed(g, Kernel::mr, Kernel::nr, Kernel::b_in_place_rows)) return gemm_run<T, Kernel>(g);
  struct transposed_for_the_run {
    gemm_problem<T>& g;
    explicit transposed_for_the_run(gemm_problem<T>& p) : g(p) { g.transpose(); }
    ~transposed_for_the_run() { g.transpose(); }
  } scope(g);
  gemm_run<T, Kernel>(g);
}

template <class T>
struct gemm_by_arch {
  gemm_problem<T>* g;
  /// The ISA's kernel at MR = Ops::rows, and at fewer rows (multiples of 3)
  /// for the last rows of M.
  template <class Ops>
  struct kernel {
    static constexpr int mr = Ops::rows, nr = 2 * Ops::template lanes<T>;
    /// The most rows of C a share may have for B's rows to be read in place
    /// (reads_b_in_place): the ISA's own limit where it sets one (AVX2's),
    /// else direct_b_max_rows.
    static constexpr std::size_t b_in_place_rows = [] {
      if constexpr (requires { Ops::b_in_place_rows; })
        return std::size_t{Ops::b_in_place_rows};
      else
        return direct_b_max_rows;
    }();
    /// Whether B's columns are packed with the x86 (AVX2) transposes.
    static constexpr bool x86_packing = !std::is_same_v<Ops, xsimd_ops>;
    /// Whether a 4-row kernel runs 4-row tiles (row_tiles): at MR = 6 (2 x 4
    /// accumulators keep the two FMA pipes busy through their latency).
    static constexpr bool four = mr == 6;
    /// Whether 8- and 4-row kernels run the tiles of 7-8 and 4 rows: at
    /// MR = 12 (AVX-512: 16 and 8 accumulators, still enough for the pipes),
    /// instead of 9 and 6 rows with padding: the last tiles of M = 32 (12,
    /// 12, 8) and M = 64 (12 x 5, 4), a training step's shapes.
    static constexpr bool eight = mr == 12;
    /// The kernel's rows for a tile of mw rows: 4 itself where `four` or
    /// `eight`, 7-8 as 8 where `eight`, else mw rounded up to a multiple of 3.
    static constexpr int rows_for(int mw) {
      if ((four || eight) && mw == 4) return 4;
      if (eight && (mw == 7 || mw == 8)) return 8;
      return (mw + 2) / 3 * 3;
    }
    static void run(int rows, std::size_t kc, const T* a, std::ptrdiff_t rs, std::ptrdiff_t cs, const T* b,
                    std::ptrdiff_t bs, T* const* c, bool add, const T* bias) {
      if constexpr (mr > 9)
        if (rows > 9) return micro_run<Ops, T, mr>(kc, a, rs, cs, b, bs, c, add, bias);
      if constexpr (eight)
        if (rows == 8) return micro_run<Ops, T, 8>(kc, a, rs, cs, b, bs, c, add, bias);
      if constexpr (mr > 6)
        if (rows > 6) return micro_run<Ops, T, 9>(kc, a, rs, cs, b, bs, c, add, bias);
      if constexpr (four || eight)
        if (rows == 4) return micro_run<Ops, T, 4>(kc, a, rs, cs, b, bs, c, add, bias);
      if constexpr (mr > 3)
        if (rows > 3) return micro_run<Ops, T, 6>(kc, a, rs, cs, b, bs, c, add, bias);
      micro_run<Ops, T, 3>(kc, a, rs, cs, b, bs, c, add, bias);
    }
  };
#if XSHARD_GEMM_X86
  void operator()(xsimd::avx512bw) const { gemm_driver<T, kernel<avx512_ops>>(*g); }
  void operator()(xsimd::fma3<xsimd::avx2>) const { gemm_driver<T, kernel<avx2_ops>>(*g); }
#endif
  template <class Arch>
  void operator()(Arch) const {
    gemm_driver<T, kernel<xsimd_ops>>(*g);
  }
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

/// The reduction path: the CPU's widest vectors (sums.hpp) over a
/// contiguous summed run or a contiguous kept run, table lookups otherwise;
/// split over the thread pool by blocks of kept elements, each summed in a
/// fixed order.
template <class T>
void run_reduce(const reduce_problem<T>& r) {
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
      for (std::size_t k = 0; k < K; ++k) add_elements(c, c, r.a + r.a_k[k] + r.a_m[m0], m1 - m0);
      return;
    }
    for (std::size_t m = m0; m < m1; ++m) {
      const T* a = r.a + r.a_m[m];
      if (k_contiguous) {
        finish(m, sum_run(a, K));
      } else {
        T sum = T(0);
        for (std::size_t k = 0; k < K; ++k) sum += a[r.a_k[k]];
        finish(m, sum);
      }
    }
  };
  const std::size_t work = M * std::max<std::size_t>(K, 1);
  const std::size_t threads = usable_threads();
  if (work < (std::size_t{1} << 16) || threads == 1 || M < 2) {
    rows(0, M);
    return;
  }
  const std::size_t chunks = std::min(M, 4 * threads);
  default_thread_pool().parallel_for(chunks, [&](std::size_t t) { rows(M * t / chunks, M * (t + 1) / chunks); });
}

/// Runs a GEMM problem with the best micro-kernel for this CPU.
template <class T>
void run_gemm(gemm_problem<T>& g) {
#if XSHARD_GEMM_X86
  // XSHARD_ISA caps the kernel (core/isa.hpp): avx2 or generic below the
  // CPU's widest, for same-machine comparisons.
  switch (active_isa()) {
    case simd_isa::generic:
      return gemm_by_arch<T>{&g}(xsimd::sse2{});
    case simd_isa::avx2:
      return gemm_by_arch<T>{&g}(xsimd::fma3<xsimd::avx2>{});
    case simd_isa::avx512:
      break;
  }
  xsimd::dispatch<xsimd::arch_list<xsimd::avx512bw, xsimd::fma3<xsimd::avx2>, xsimd::sse2>>(gemm_by_arch<T>{&g})();
#else
  gemm_by_arch<T>{&g}(xsimd::default_arch{});  // the portable kernel on the TU's arch (NEON on aarch64)
#endif
}

}  // namespace xshard::detail
