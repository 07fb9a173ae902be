// xshard/einsum/fixed.hpp - einsum on operands whose shapes are all static:
// the plan is a constant, the loops have constant bounds, nothing is
// allocated.
//
// Example (compiled in tests/compile/doc_einsum.cpp):
//   xt::xtensor_fixed<float, xt::xshape<8, 8>> a, b, c;
//   xshard::einsum_into<"ij,jk->ik">(c, a, b);   // this path: no allocation
//
// The typed API (einsum.hpp) takes it when there are one or two operands, all
// row-major tensors with static extents (xt::xtensor_fixed; einsum_into's
// output too), and the contraction is small (fewer than fixed_max_madds
// multiply-adds: above that the general kernel's cache blocking and threads
// pay for its allocations). The plan holds, per loop, its extent and its
// stride in A, B and C, in the general path's groups (see einsum.hpp):
//
//   outer  output dims but the fastest, in C's order (batch, M, N labels)
//   inner  the output's fastest dim (C stride 1); B holds it where possible
//   sum    K: labels not in the output, slowest first by A's strides
//
// Labels of extent 1 are dropped (size-1 broadcasting is stride 0), a
// diagonal sums its strides, and neighbours that step alike in A, B and C
// are merged ("ijk,jkl->il" on 8x8x8 becomes one 8x64 by 64x8 product).
// When C's rows are sums of A scalars times contiguous rows of B (the GEMM
// form, e.g. "ij,jk->ik", "bij,bjk->bik", "ijk,jkl->il"):
//
//   for each outer index, for each block of MR rows, for each chunk of
//   vectors along `inner`:
//     acc[MR][chunk] = 0;  for each k: acc[r][:] = fma(A[r, k], B[k, :], acc[r][:]);
//     C[r][:] = acc[r][:]                      (each element written once)
//
// with the accumulators in vector registers. Other layouts run the same
// loops on scalars.
//
// Numerics are the general path's: each element of a contraction is the
// chain of multiply-adds over k in the general path's order, fused exactly
// when the general kernel fuses them (CPUs with AVX2 and FMA), so typed and
// run-time results agree bit for bit for K up to the general kernel's KC
// block (256 floats, 192 doubles). A single operand's contiguous sum is the
// general path's own function (sums.hpp); other sums run in order.
#pragma once

#include <array>
#include <cmath>  // std::fma
#include <cstddef>
#include <cstdint>
#include <functional>  // std::less: a total order on pointers into unrelated tensors
#include <span>
#include <type_traits>
#include <utility>
#include <xsimd/xsimd.hpp>  // batches of the SSE, AVX2 and AVX-512 widths
#include <xtensor/xlayout.hpp>

#include "../core/static_vector.hpp"
#include "../core/tensor_traits.hpp"
#include "parse.hpp"
#include "sums.hpp"

// How the multiply-adds are done:
//   XSHARD_FIXED_SIMD   compiled with AVX2 and FMA: xsimd batches (AVX-512,
//                       AVX2, SSE widths) and fused multiply-adds
//   XSHARD_FIXED_CLONE  x86 GCC/Clang without FMA: scalar loops, run in a
//                       copy compiled for "avx2,fma" when active_isa() has
//                       both (as the general kernel does), else unfused
//   neither             scalar loops with std::fma
#if defined(__AVX2__) && defined(__FMA__)
#define XSHARD_FIXED_SIMD 1
#include <immintrin.h>  // _mm*_fmadd_*: xsimd 8.1's fma is x * y + z except on fma3<avx2>
#elif (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__)) && !defined(__FMA__)
#define XSHARD_FIXED_CLONE 1
#endif

#if defined(__GNUC__) || defined(__clang__)
#define XSHARD_FIXED_INLINE __attribute__((always_inline)) inline
#else
#define XSHARD_FIXED_INLINE inline
#endif

namespace xshard::detail {

// ---------------------------------------------------------------------------
// Which tensors qualify.

/// A tensor type with static extents and a static row-major layout whose data
/// can be read in place (xt::xtensor_fixed).
template <class E, class D = std::remove_cvref_t<E>>
constexpr bool is_static_row_major() {
  if constexpr (!static_extents<D>::known) {
    return false;
  } else if constexpr (requires {
                         D::static_layout;
                         typename D::value_type;
                         std::declval<const D&>().data();
                         std::declval<const D&>().data_offset();
                       }) {
    return D::static_layout == xt::layout_type::row_major;
  } else {
    return false;
  }
}
template <class E>
inline constexpr bool static_row_major_v = is_static_row_major<E>();

/// Elements of a tensor type with static extents.
template <class E>
constexpr std::int64_t static_size() {
  std::int64_t n = 1;
  for (std::int64_t x : static_extents<E>::value) n *= x;
  return n;
}

/// Above this many multiply-adds (where the general kernel starts a second
/// thread) the general path is used.
inline constexpr std::int64_t fixed_max_madds = std::int64_t{1} << 20;

// ---------------------------------------------------------------------------
// The plan.

/// One loop: its extent and the stride (elements) it steps in A, B and C.
struct fixed_dim {
  std::int64_t n = 1;
  std::ptrdiff_t a = 0, b = 0, c = 0;
};
using fixed_dims = static_vector<fixed_dim, max_einsum_labels>;

struct fixed_plan {
  std::size_t operands = 0;
  bool swapped = false;       ///< A and B exchanged so that B holds the output's fastest label
  fixed_dims outer{};         ///< output dims but the fastest, slowest first
  fixed_dim inner{};          ///< the output's fastest dim (n == 1 for a scalar output)
  fixed_dims sum{};           ///< summed dims, slowest first
  std::int64_t out_size = 0;  ///< elements of C
  std::int64_t madds = 0;     ///< multiply-adds (elements of C times the summed extents)
};

constexpr std::int64_t dims_count(std::span<const fixed_dim> dims) {
  std::int64_t n = 1;
  for (const fixed_dim& d : dims) n *= d.n;
  return n;
}

/// Drops extent-1 dims and merges neighbours that step alike in A, B and C:
/// (8, 8) with A strides (8, 1) and B strides (64, 8) is one dim of 64.
constexpr fixed_dims merge_dims(const fixed_dims& in) {
  fixed_dims out;
  for (const fixed_dim& d : in) {
    if (d.n == 1) continue;
    if (!out.empty()) {
      fixed_dim& p = out.back();
      if (p.a == d.a * d.n && p.b == d.b * d.n && p.c == d.c * d.n) {
        p = {p.n * d.n, d.a, d.b, d.c};
        continue;
      }
    }
    out.push_back(d);
  }
  return out;
}

/// The plan for a bound equation on row-major operands of static `shapes`.
/// @pre 1 or 2 operands; `ext` is einsum_label_extents(b, shapes) without error.
///   "ij,jk->ik" on 4x3, 3x5: outer {4: a 3, b 0, c 5}, inner {5: a 0, b 1, c 1},
///   sum {3: a 1, b 5, c 0}.
constexpr fixed_plan make_fixed_plan(const einsum_binding& b, const einsum_extents& ext,
                                     std::span<const std::span<const std::int64_t>> shapes) {
  fixed_plan p;
  p.operands = shapes.size();
  // Per tensor (A, B, C) and label: summed stride (a diagonal sums its dims'
  // strides; an extent 1 against a larger extent is 0) and presence.
  std::ptrdiff_t s[3][max_einsum_labels]{};
  bool has[3][max_einsum_labels]{};
  for (std::size_t i = 0; i < shapes.size() && i < 2; ++i) {
    const auto& ids = b.operand_labels[i];
    std::ptrdiff_t stride = 1;
    for (std::size_t d = ids.size(); d-- > 0;) {
      const int id = ids[d];
      has[i][id] = true;
      if (shapes[i][d] != 1 || ext.of[id] == 1) s[i][id] += stride;
      stride *= shapes[i][d];
    }
  }
  std::ptrdiff_t stride = 1;
  for (std::size_t d = b.output_labels.size(); d-- > 0;) {
    const int id = b.output_labels[d];
    has[2][id] = true;
    s[2][id] = stride;
    stride *= ext.of[id];
  }
  p.out_size = stride;
  // As in the general path: the output's fastest label goes to B if only A has it.
  int fastest = -1;
  for (int id : b.output_labels)
    if (ext.of[id] != 1) fastest = id;
  if (p.operands == 2 && fastest >= 0 && has[0][fastest] && !has[1][fastest]) {
    p.swapped = true;
    for (std::size_t id = 0; id < max_einsum_labels; ++id) {
      std::swap(s[0][id], s[1][id]);
      std::swap(has[0][id], has[1][id]);
    }
  }
  auto dim = [&](std::size_t id) { return fixed_dim{ext.of[id], s[0][id], s[1][id], s[2][id]}; };
  fixed_dims out;
  for (int id : b.output_labels) out.push_back(dim(static_cast<std::size_t>(id)));
  out = merge_dims(out);
  if (!out.empty()) {
    p.inner = out.back();
    out.pop_back();
  }
  p.outer = out;
  // K in the general path's order: by label id, then stably by decreasing |A stride|.
  fixed_dims sum;
  for (std::size_t id = 0; id < max_einsum_labels; ++id)
    if ((has[0][id] || has[1][id]) && !has[2][id]) sum.push_back(dim(id));
  auto abs_a = [](const fixed_dim& d) { return d.a < 0 ? -d.a : d.a; };
  for (std::size_t i = 1; i < sum.size(); ++i)  // insertion sort: stable
    for (std::size_t j = i; j > 0 && abs_a(sum[j - 1]) < abs_a(sum[j]); --j) std::swap(sum[j - 1], sum[j]);
  p.sum = merge_dims(sum);
  p.madds = p.out_size * dims_count(p.sum);
  return p;
}

// ---------------------------------------------------------------------------
// Execution.

template <std::size_t N>
constexpr std::array<fixed_dim, N> first_dims(const fixed_dims& v) {
  std::array<fixed_dim, N> r{};
  for (std::size_t i = 0; i < N; ++i) r[i] = v[i];
  return r;
}

/// What the loops need, as constants.
template <const fixed_plan& P>
struct fixed_layout {
  static constexpr bool two = P.operands == 2;
  static constexpr fixed_dim inner = P.inner;
  // Rows: the output dim before `inner`, several at a time when B does not
  // move along it (then each B vector is loaded once for all of them).
  static constexpr bool blocked = two && !P.outer.empty() && P.outer.back().b == 0;
  static constexpr fixed_dim rows = blocked ? P.outer.back() : fixed_dim{};
  static constexpr std::size_t n_outer = P.outer.size() - (blocked ? 1 : 0);
  static constexpr std::array<fixed_dim, n_outer> outer = first_dims<n_outer>(P.outer);
  static constexpr std::array<fixed_dim, P.sum.size()> sum = first_dims<P.sum.size()>(P.sum);
  static constexpr std::int64_t outer_count = dims_count(outer), sum_count = dims_count(sum);
  /// A row of C is a sum of A scalars times contiguous rows of B.
  static constexpr bool gemm = two && inner.a == 0 && inner.b == 1 && inner.c == 1 && inner.n > 1;
};

/// Offsets in A, B and C of flat index x over `Dims` (slowest first; all n > 0).
template <const auto& Dims>
XSHARD_FIXED_INLINE std::array<std::ptrdiff_t, 3> dims_offsets(std::int64_t x) {
  constexpr std::size_t N = Dims.size();
  std::array<std::ptrdiff_t, 3> off{};
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          constexpr fixed_dim d = Dims[N - 1 - I];  // fastest first
          const std::int64_t i = I + 1 == N ? x : x % d.n;
          if constexpr (I + 1 < N) x /= d.n;
          off[0] += i * d.a;
          off[1] += i * d.b;
          off[2] += i * d.c;
        }(),
        ...);
  }
  (std::make_index_sequence<N>{});
  return off;
}

/// Any layout, scalars: C[r < M, j < W] = the contraction, element (0, 0) at a, b, c.
template <class T, const fixed_plan& P, bool Fused, std::int64_t M, std::int64_t W>
XSHARD_FIXED_INLINE void fixed_scalar_tile(const T* a, const T* b, T* c) {
  using L = fixed_layout<P>;
  constexpr fixed_dim R = L::rows, J = L::inner;
  T acc[M][W] = {};
  if constexpr (L::sum_count > 0) {
    for (std::int64_t k = 0; k < L::sum_count; ++k) {
      const std::array<std::ptrdiff_t, 3> off = dims_offsets<L::sum>(k);
      for (std::int64_t r = 0; r < M; ++r)
        for (std::int64_t j = 0; j < W; ++j) {
          const T x = a[off[0] + r * R.a + j * J.a];
          if constexpr (!L::two) {
            acc[r][j] += x;
          } else {
            const T y = b[off[1] + r * R.b + j * J.b];
            if constexpr (Fused)
              acc[r][j] = std::fma(x, y, acc[r][j]);
            else
              acc[r][j] = x * y + acc[r][j];
          }
        }
    }
  }
  for (std::int64_t r = 0; r < M; ++r)
    for (std::int64_t j = 0; j < W; ++j) c[r * R.c + j * J.c] = acc[r][j];
}

/// One operand, one contiguous summed dim of at least 4 elements: summed by
/// the run-time path's own function (sums.hpp's sum_run, on the widest
/// vectors active_isa() allows), so both give the same bits. Every width's
/// order sums a shorter run in order, as the scalar loops do.
template <const fixed_plan& P>
constexpr bool fixed_run_sum() {
  using L = fixed_layout<P>;
  return !L::two && L::sum.size() == 1 && L::sum[0].a == 1 && L::sum[0].n >= 4;
}
template <class T, const fixed_plan& P>
XSHARD_FIXED_INLINE void fixed_run_sums(const T* a, T* c) {
  using L = fixed_layout<P>;
  for (std::int64_t j = 0; j < L::inner.n; ++j)
    c[j * L::inner.c] = sum_run(a + j * L::inner.a, static_cast<std::size_t>(L::sum[0].n));
}

#if XSHARD_FIXED_SIMD
/// x * y + z rounded once, on a batch of 16, 32 or 64 bytes.
template <class V>
XSHARD_FIXED_INLINE V fixed_fma(const V& x, const V& y, const V& z) {
  constexpr bool f = std::is_same_v<typename V::value_type, float>;
  if constexpr (sizeof(typename V::register_type) == 16) {
    if constexpr (f)
      return _mm_fmadd_ps(x, y, z);
    else
      return _mm_fmadd_pd(x, y, z);
  } else if constexpr (sizeof(typename V::register_type) == 32) {
    if constexpr (f)
      return _mm256_fmadd_ps(x, y, z);
    else
      return _mm256_fmadd_pd(x, y, z);
  } else {
    if constexpr (f)
      return _mm512_fmadd_ps(x, y, z);
    else
      return _mm512_fmadd_pd(x, y, z);
  }
}

/// GEMM form on batches V: for each k, C[r, :] += A[r, k] * B[k, :] with the
/// rows' NV batches each in registers (accumulator I is row I / NV, batch
/// I % NV). Folds, not loops: GCC turns loops over an accumulator array into
/// memset / memcpy through the stack.
template <class T, const fixed_plan& P, class V, std::size_t NV, std::size_t... I>
XSHARD_FIXED_INLINE void fixed_simd_tile(const T* a, const T* b, T* c, std::index_sequence<I...>) {
  using L = fixed_layout<P>;
  constexpr fixed_dim R = L::rows;
  constexpr std::size_t lanes = V::size;
  V acc[sizeof...(I)] = {(static_cast<void>(I), V(T(0)))...};
  if constexpr (L::sum_count > 0) {
    for (std::int64_t k = 0; k < L::sum_count; ++k) {
      const std::array<std::ptrdiff_t, 3> off = dims_offsets<L::sum>(k);
      const T* ak = a + off[0];
      const T* bk = b + off[1];
      ((acc[I] =
            fixed_fma(V(ak[static_cast<std::int64_t>(I / NV) * R.a]), V::load_unaligned(bk + I % NV * lanes), acc[I])),
       ...);
    }
  }
  (acc[I].store_unaligned(c + static_cast<std::int64_t>(I / NV) * R.c + static_cast<std::int64_t>(I % NV * lanes)),
   ...);
}

// Batches of 16, 32 and (with AVX-512) 64 bytes.
template <class T>
using fixed_batch16 = xsimd::batch<T, xsimd::sse4_2>;
template <class T>
using fixed_batch32 = xsimd::batch<T, xsimd::fma3<xsimd::avx2>>;
#if defined(__AVX512F__) && XSIMD_WITH_AVX512F
template <class T>
using fixed_batch64 = xsimd::batch<T, xsimd::avx512f>;
inline constexpr std::int64_t fixed_vector_registers = 32;
#else
template <class T>
using fixed_batch64 = fixed_batch32<T>;
inline constexpr std::int64_t fixed_vector_registers = 16;
#endif
#endif

/// Rows [0, M) x columns [0, W) of C, in batches V (scalars when V is T).
template <class T, const fixed_plan& P, class V, bool Fused, std::int64_t M, std::int64_t W>
XSHARD_FIXED_INLINE void fixed_tile(const T* a, const T* b, T* c) {
#if XSHARD_FIXED_SIMD
  if constexpr (!std::is_same_v<V, T>) {
    constexpr std::size_t nv = static_cast<std::size_t>(W) / V::size;
    fixed_simd_tile<T, P, V, nv>(a, b, c, std::make_index_sequence<static_cast<std::size_t>(M) * nv>{});
    return;
  }
#endif
  fixed_scalar_tile<T, P, Fused, M, W>(a, b, c);
}

/// Columns [j0, j0 + W) of `inner` for every row, MR rows at a time.
template <class T, const fixed_plan& P, class V, bool Fused, std::int64_t W, std::int64_t MR>
XSHARD_FIXED_INLINE void fixed_columns(const T* a, const T* b, T* c, std::int64_t j0) {
  using L = fixed_layout<P>;
  constexpr fixed_dim R = L::rows, J = L::inner;
  constexpr std::int64_t mr = R.n < MR ? R.n : MR, full = R.n / mr * mr;
  a += j0 * J.a;
  b += j0 * J.b;
  c += j0 * J.c;
  for (std::int64_t r = 0; r < full; r += mr) fixed_tile<T, P, V, Fused, mr, W>(a + r * R.a, b + r * R.b, c + r * R.c);
  if constexpr (full < R.n) fixed_tile<T, P, V, Fused, R.n - full, W>(a + full * R.a, b + full * R.b, c + full * R.c);
}

/// All of `inner` at one outer index, in column chunks as wide as their
/// vectors allow.
template <class T, const fixed_plan& P, bool Fused>
XSHARD_FIXED_INLINE void fixed_block(const T* a, const T* b, T* c) {
  using L = fixed_layout<P>;
  constexpr std::int64_t n = L::inner.n;
#if XSHARD_FIXED_SIMD
  if constexpr (L::gemm) {
    // Chunks of up to two of the widest batches, with as many rows as fill
    // half the vector registers with accumulators; then one batch of each
    // narrower width that fits; then scalars.
    using V64 = fixed_batch64<T>;
    using V32 = fixed_batch32<T>;
    using V16 = fixed_batch16<T>;
    constexpr std::int64_t l64 = V64::size, l32 = V32::size, l16 = V16::size;
    constexpr std::int64_t budget = fixed_vector_registers / 2;
    constexpr std::int64_t e64 = n / l64 * l64, chunk = e64 < 2 * l64 ? e64 : 2 * l64;
    if constexpr (chunk > 0) {
      constexpr std::int64_t full = e64 / chunk * chunk;
      for (std::int64_t j = 0; j < full; j += chunk)
        fixed_columns<T, P, V64, Fused, chunk, budget / (chunk / l64)>(a, b, c, j);
      if constexpr (full < e64) fixed_columns<T, P, V64, Fused, e64 - full, budget>(a, b, c, full);
    }
    constexpr std::int64_t e32 = l32 < l64 && n - e64 >= l32 ? e64 + l32 : e64;
    constexpr std::int64_t e16 = n - e32 >= l16 ? e32 + l16 : e32;
    if constexpr (e32 > e64) fixed_columns<T, P, V32, Fused, l32, budget>(a, b, c, e64);
    if constexpr (e16 > e32) fixed_columns<T, P, V16, Fused, l16, budget>(a, b, c, e32);
    if constexpr (e16 < n) fixed_columns<T, P, T, Fused, n - e16, 4>(a, b, c, e16);
    return;
  }
#endif
  // Any other layout: scalar tiles of up to 4 rows of 16.
  constexpr std::int64_t w = n < 16 ? n : 16, full = n / w * w;
  for (std::int64_t j = 0; j < full; j += w) fixed_columns<T, P, T, Fused, w, 4>(a, b, c, j);
  if constexpr (full < n) fixed_columns<T, P, T, Fused, n - full, 4>(a, b, c, full);
}

/// The whole contraction: C = einsum(A[, B]) for plan P.
template <class T, const fixed_plan& P, bool Fused>
XSHARD_FIXED_INLINE void fixed_body(const T* a, const T* b, T* c) {
  using L = fixed_layout<P>;
  if constexpr (P.out_size > 0) {
    for (std::int64_t o = 0; o < L::outer_count; ++o) {
      const std::array<std::ptrdiff_t, 3> off = dims_offsets<L::outer>(o);
      if constexpr (fixed_run_sum<P>())
        fixed_run_sums<T, P>(a + off[0], c + off[2]);
      else
        fixed_block<T, P, Fused>(a + off[0], b + off[1], c + off[2]);
    }
  }
}

#if XSHARD_FIXED_CLONE
/// The scalar loops compiled for AVX2 and FMA (std::fma is one instruction).
template <class T, const fixed_plan& P>
__attribute__((target("avx2,fma"))) void fixed_body_fma(const T* a, const T* b, T* c) {
  fixed_body<T, P, true>(a, b, c);
}
#endif

/// Runs plan P: C = einsum(A[, B]), all three row-major as planned; `b` is
/// ignored for one operand. Allocates nothing.
template <class T, const fixed_plan& P>
XSHARD_FIXED_INLINE void run_fixed(const T* a, const T* b, T* c) {
  if constexpr (P.swapped) std::swap(a, b);
#if XSHARD_FIXED_CLONE
  if constexpr (P.operands == 2) {
    // Fused exactly when the general kernel is (its AVX2 and AVX-512 paths,
    // which XSHARD_ISA=generic turns off as it does here).
    if (active_isa() != simd_isa::generic)
      fixed_body_fma<T, P>(a, b, c);
    else
      fixed_body<T, P, false>(a, b, c);
    return;
  }
#endif
  fixed_body<T, P, true>(a, b, c);
}

/// True if C's storage meets an operand's, each a contiguous block of
/// `size` elements (an empty block meets nothing).
template <class T>
bool fixed_overlaps(const T* c, std::int64_t c_size, const T* op, std::int64_t op_size) {
  if (c_size == 0 || op_size == 0) return false;
  const std::less<const T*> less;
  return less(op, c + c_size) && less(c, op + op_size);
}

}  // namespace xshard::detail
