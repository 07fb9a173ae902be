// xshard/ops/composite_support.hpp - what the composite ops share: the
// result type of an op, contiguous operands, the trace scope of a call, and
// the xsimd loops of the fused kernels.
//
// Every composite call with its mode decided (the explicit-mode entries;
// the policy entries forward to them) opens one trace scope, named by the
// composite's full registry name, with the mode it runs and the registry
// version:
//
//   xshard.gelu  args {"mode": "kernel", "version": 1}
//
// Kernels use xsimd::batch<T>, the batch of the arch the translation unit is
// compiled for (SSE2 without -m flags; xsimd 8.1 defines AVX-512 batches only
// under -mavx512f). A tail shorter than a batch runs the same batch code on a
// padded copy, so an element's result does not depend on where it sits.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <xsimd/xsimd.hpp>
#include <xtensor/xadapt.hpp>  // xt::adapt: the decompositions' views of contiguous buffers
#include <xtensor/xarray.hpp>
#include <xtensor/xreducer.hpp>  // xt::keep_dims
#include <xtensor/xtensor.hpp>

#include "../core/error.hpp"
#include "../core/tensor_traits.hpp"
#include "../core/text.hpp"
#include "../core/thread_pool.hpp"  // parallel_ranges: the kernels split rows or elements over the pool
#include "../core/workspace.hpp"    // composite_out: results from the current workspace
#include "../trace/trace.hpp"       // composite_trace: one trace_me scope per composite call
#include "composite_policy.hpp"

namespace xshard::detail {

/// Reduce and keep the reduced dim (extent 1), evaluated now.
inline auto keep_dims_now() { return xt::keep_dims | xt::evaluation_strategy::immediate; }

/// The trace scope of one call of composite `id` running in `mode` (see the
/// header comment); hold it for the call:
///   const auto scope = detail::composite_trace(composite_id::gelu, mode);
/// With tracing off this costs trace_me's one branch (the two arg views are
/// built from constants on the stack, nothing is read or allocated).
template <class = void>  // instantiated only where a composite runs
[[nodiscard]] trace_me composite_trace(composite_id id, composite_mode mode) noexcept {
  const composite_descriptor& d = descriptor(id);
  return trace_me(d.name, {{"mode", to_string(mode)}, {"version", d.version}});
}

template <class E>
using composite_value_t = typename std::remove_cvref_t<E>::value_type;

template <class T>
inline constexpr bool composite_real_v = std::is_same_v<T, float> || std::is_same_v<T, double>;

template <class T, std::int64_t N>
struct composite_result {
  using type = xt::xtensor<T, static_cast<std::size_t>(N)>;
};
template <class T>
struct composite_result<T, -1> {
  using type = xt::xarray<T>;
};
/// xt::xtensor<T, N> for an operand of static rank N, else xt::xarray<T>.
template <class E, class T = composite_value_t<E>>
using composite_result_t = typename composite_result<T, tensor_rank_v<E>>::type;

/// A fresh result of type R (a composite_result_t) and the given shape:
/// from the current workspace (core/workspace.hpp) when R is a tensor of
/// static rank and a scope is open, else allocated. Contents unspecified.
template <class R, class S>
R composite_out(const S& shape) {
  if constexpr (is_pooled_tensor<R>::value)
    return fresh_tensor<typename R::value_type, std::tuple_size_v<typename R::shape_type>>(shape);
  else
    return R::from_shape(shape);
}

/// A contiguous row-major buffer as an xtensor expression of the given
/// shape (no copy, no ownership). The decompositions run on such views of a
/// canonical rank (elementwise: 1; softmax: (outer, extent, inner); layer
/// norm: (rows, n)), so each is instantiated once per value type, not once
/// per operand type and rank.
template <class T, std::size_t N>
auto adapt_buffer(T* p, const std::array<std::size_t, N>& shape) {
  std::size_t n = 1;
  for (const std::size_t e : shape) n *= e;
  return xt::adapt(p, n, xt::no_ownership(), shape);
}

/// `e` itself if it is already a row-major container of type R, else `e`
/// evaluated into `keep`.
template <class R, class E>
const R& contiguous(const E& e, std::optional<R>& keep) {
  if constexpr (std::is_same_v<std::remove_cvref_t<E>, R>) {
    return e;
  } else {
    keep.emplace(e);
    return *keep;
  }
}

template <class A, class B>
void require_same_shape(const A& a, const B& b, const char* op, const char* a_name, const char* b_name) {
  if (a.dimension() != b.dimension() || !std::equal(a.shape().begin(), a.shape().end(), b.shape().begin()))
    throw error(std::string("xshard: ") + op + ": " + a_name + " has shape " + shape_text(a.shape()) + " but " +
                b_name + " has shape " + shape_text(b.shape()));
}

/// A shape as require_same_shape's operand (nothing allocated to hold it).
template <class S>
struct shape_ref {
  const S& s;
  std::size_t dimension() const { return s.size(); }
  const S& shape() const { return s; }
};

template <class T>
using batch_t = xsimd::batch<T>;
template <class T>
inline constexpr std::size_t lanes_v = batch_t<T>::size;

/// Rows of `row` elements each that make up parallel_grain elements.
inline constexpr std::size_t rows_per_grain(std::size_t row) {
  return row ? std::max<std::size_t>(1, parallel_grain / row) : 1;
}

/// out[i] = f(in[i]...) for i < n, batch by batch; the tail runs f on a
/// padded batch (padding value `pad`).
template <class T, class F, class... In>
void simd_map(std::size_t n, T* out, F f, const In*... in) {
  using B = batch_t<T>;
  constexpr std::size_t L = B::size;
  std::size_t i = 0;
  for (; i + L <= n; i += L) f(B::load_unaligned(in + i)...).store_unaligned(out + i);
  if (i < n) {
    const std::size_t r = n - i;
    auto padded = [&](const T* p) {
      alignas(64) std::array<T, L> buf{};
      std::copy(p + i, p + n, buf.begin());
      return B::load_aligned(buf.data());
    };
    alignas(64) std::array<T, L> res{};
    f(padded(in)...).store_aligned(res.data());
    std::copy(res.begin(), res.begin() + static_cast<std::ptrdiff_t>(r), out + i);
  }
}

/// The first `n` lanes of p (n < lanes), the others `pad`.
template <class T>
batch_t<T> load_partial(const T* p, std::size_t n, T pad) {
  alignas(64) std::array<T, lanes_v<T>> buf;
  buf.fill(pad);
  std::copy(p, p + n, buf.begin());
  return batch_t<T>::load_aligned(buf.data());
}
/// Stores the first `n` lanes of v (n < lanes).
template <class T>
void store_partial(T* p, std::size_t n, const batch_t<T>& v) {
  alignas(64) std::array<T, lanes_v<T>> buf;
  v.store_aligned(buf.data());
  std::copy(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n), p);
}

template <class T>
T reduce_max(const batch_t<T>& v) {
  alignas(64) std::array<T, lanes_v<T>> buf;
  v.store_aligned(buf.data());
  T m = buf[0];
  for (std::size_t k = 1; k < buf.size(); ++k) m = (buf[k] > m || buf[k] != buf[k]) ? buf[k] : m;
  return m;
}

/// (outer, extent, inner) of a row-major shape cut at `axis`.
struct axis_split {
  std::size_t outer = 1, extent = 1, inner = 1;
};
template <class Shape>
axis_split split_at(const Shape& shape, std::size_t axis) {
  axis_split s;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (d < axis)
      s.outer *= shape[d];
    else if (d == axis)
      s.extent = shape[d];
    else
      s.inner *= shape[d];
  }
  return s;
}

/// The shape of a row statistic of a norm over the last dim: `shape` with
/// the last extent 1 ((2, 3, 8) -> (2, 3, 1)). @pre shape.size() >= 1
template <class S>
S stats_shape(const S& shape) {
  S s = shape;
  s[s.size() - 1] = 1;
  return s;
}

/// A dim attribute in [-rank, rank) as an axis in [0, rank).
inline std::size_t normalize_dim(std::ptrdiff_t dim, std::size_t rank, const char* op) {
  const auto r = static_cast<std::ptrdiff_t>(rank);
  if (rank == 0 || dim < -r || dim >= r)
    throw error(std::string("xshard: ") + op + ": dim " + std::to_string(dim) +
                " is out of range for a tensor of rank " + std::to_string(rank));
  return static_cast<std::size_t>(dim < 0 ? dim + r : dim);
}

}  // namespace xshard::detail
