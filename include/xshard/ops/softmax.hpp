// xshard/ops/softmax.hpp - the composites xshard.softmax and
// xshard.softmax_backward (version 1, attribute dim, default -1 = last):
//
//   y  = exp(x - max_dim x) / sum_dim exp(x - max_dim x)
//   dx = y * (g - sum_dim(g * y))
//
// Subtracting the max keeps large inputs finite (softmax of {1000, 1000} is
// {0.5, 0.5}). A row holding NaN or +inf gives NaN, as torch does.
// The decomposition is xt::amax, xt::exp, xt::sum and a division, each
// evaluated; the kernel does a row in three passes (max; exp and sum;
// scale) with vectors along the row when `dim` is the last non-trivial dim,
// and along the trailing dims (one vector of columns at a time) otherwise:
// for floats on x86-64 the AVX-512 or AVX2 kernels of ops/arch/x86.hpp
// (active_isa()), else xsimd on the compiled architecture.
#pragma once

#include <array>
#include <cstddef>
#include <limits>
#include <optional>
#include <type_traits>
#include <xtensor/xmath.hpp>     // xt::exp
#include <xtensor/xreducer.hpp>  // xt::sum, xt::amax, xt::keep_dims

#include "../core/isa.hpp"
#include "arch/x86.hpp"
#include "composite_policy.hpp"
#include "composite_support.hpp"

namespace xshard {

namespace detail {

// ---- decomposition ----------------------------------------------------------
// On (outer, extent, inner) views of the contiguous buffers, along axis 1.

template <class T>
void softmax_decomposition(const T* x_data, T* y_data, axis_split s) {
  const std::array<std::size_t, 3> shape{s.outer, s.extent, s.inner};
  const std::array<std::size_t, 1> ax{1};
  const auto x = adapt_buffer(x_data, shape);
  auto y = adapt_buffer(y_data, shape);
  const xt::xtensor<T, 3> m = xt::amax(x, ax, keep_dims_now());
  const xt::xtensor<T, 3> e = xt::exp(x - m);
  const xt::xtensor<T, 3> sum = xt::sum(e, ax, keep_dims_now());
  y = e / sum;
}

template <class T>
void softmax_backward_decomposition(const T* g_data, const T* y_data, T* dx_data, axis_split s) {
  const std::array<std::size_t, 3> shape{s.outer, s.extent, s.inner};
  const std::array<std::size_t, 1> ax{1};
  const auto g = adapt_buffer(g_data, shape);
  const auto y = adapt_buffer(y_data, shape);
  auto dx = adapt_buffer(dx_data, shape);
  const xt::xtensor<T, 3> dot = xt::sum(g * y, ax, keep_dims_now());
  dx = y * (g - dot);
}

// ---- fused kernel -----------------------------------------------------------

/// Softmax of one contiguous row of length k.
template <class T>
void softmax_row(const T* x, T* y, std::size_t k) {
  using B = batch_t<T>;
  constexpr std::size_t L = B::size;
  constexpr T ninf = -std::numeric_limits<T>::infinity();
  const std::size_t full = k - k % L;
  B vmax(ninf);
  for (std::size_t j = 0; j < full; j += L) vmax = xsimd::max(vmax, B::load_unaligned(x + j));
  if (full < k) vmax = xsimd::max(vmax, load_partial(x + full, k - full, ninf));
  const B m(reduce_max(vmax));
  B vsum(T(0));
  for (std::size_t j = 0; j < full; j += L) {
    const B e = xsimd::exp(B::load_unaligned(x + j) - m);
    e.store_unaligned(y + j);
    vsum += e;
  }
  if (full < k) {
    // Padding is -inf: exp(-inf - m) = 0 for finite m (else the row is NaN anyway).
    const B e = xsimd::exp(load_partial(x + full, k - full, ninf) - m);
    store_partial(y + full, k - full, e);
    vsum += e;
  }
  const B s(xsimd::hadd(vsum));
  for (std::size_t j = 0; j < full; j += L) (B::load_unaligned(y + j) / s).store_unaligned(y + j);
  if (full < k) store_partial(y + full, k - full, load_partial(y + full, k - full, T(1)) / s);
}

/// Softmax along a strided dim: `r` (<= lanes) adjacent columns starting at
/// x, the dim's elements `stride` apart.
template <class T>
void softmax_columns(const T* x, T* y, std::size_t k, std::size_t stride, std::size_t r) {
  using B = batch_t<T>;
  constexpr T ninf = -std::numeric_limits<T>::infinity();
  const bool full = r == B::size;
  auto ld = [&](const T* p, T pad) { return full ? B::load_unaligned(p) : load_partial(p, r, pad); };
  auto st = [&](T* p, const B& v) { full ? v.store_unaligned(p) : store_partial(p, r, v); };
  B m(ninf);
  for (std::size_t j = 0; j < k; ++j) m = xsimd::max(m, ld(x + j * stride, ninf));
  B s(T(0));
  for (std::size_t j = 0; j < k; ++j) {
    const B e = xsimd::exp(ld(x + j * stride, ninf) - m);
    st(y + j * stride, e);
    s += e;
  }
  for (std::size_t j = 0; j < k; ++j) st(y + j * stride, ld(y + j * stride, T(1)) / s);
}

/// The work of a softmax (or its backward) along a strided dim: for each
/// of the sp.outer slabs, its sp.inner columns in blocks of
/// softmax_column_block (ops/arch/x86.hpp: the x86 kernels' L1 block), all
/// of them split over the pool as one range, so that a softmax over dim 0 of
/// a matrix (one slab) uses every thread too. f(offset of the block's first
/// element, its width in columns). Each column is computed alone and in one
/// order: the same bits for any split.
template <class F>
void for_column_blocks(axis_split sp, F&& f) {
  constexpr std::size_t column_block = softmax_column_block;
  const std::size_t k = sp.extent, in = sp.inner;
  const std::size_t blocks = (in + column_block - 1) / column_block;
  parallel_ranges(sp.outer * blocks, rows_per_grain(k * std::min(in, column_block)),
                  [&](std::size_t i0, std::size_t i1) {
                    for (std::size_t i = i0; i < i1; ++i) {
                      const std::size_t o = i / blocks, c0 = (i % blocks) * column_block;
                      f(o * k * in + c0, std::min(column_block, in - c0));
                    }
                  });
}

template <class T>
void softmax_kernel(const T* x, T* y, axis_split sp) {
  constexpr std::size_t L = lanes_v<T>;
  const std::size_t k = sp.extent, in = sp.inner;
  if (in > 1) {
    [[maybe_unused]] const simd_isa cisa = column_isa(in);
    for_column_blocks(sp, [&](std::size_t off, std::size_t w) {
#if XSHARD_X86_KERNELS
      if constexpr (std::is_same_v<T, float>) {
        if (cisa == simd_isa::avx512) return x86::avx512::softmax_columns(x + off, y + off, k, in, w);
        if (cisa == simd_isa::avx2) return x86::avx2::softmax_columns(x + off, y + off, k, in, w);
      }
#endif
      for (std::size_t i = 0; i < w; i += L) softmax_columns(x + off + i, y + off + i, k, in, std::min(L, w - i));
    });
    return;
  }
  [[maybe_unused]] const simd_isa isa = active_isa();
  parallel_ranges(sp.outer, rows_per_grain(k), [&](std::size_t o0, std::size_t o1) {
    for (std::size_t o = o0; o < o1; ++o) {
      const T* xo = x + o * k;
      T* yo = y + o * k;
#if XSHARD_X86_KERNELS
      if constexpr (std::is_same_v<T, float>) {
        if (isa == simd_isa::avx512) {
          x86::avx512::softmax_row(xo, yo, k);
          continue;
        }
        if (isa == simd_isa::avx2) {
          x86::avx2::softmax_row(xo, yo, k);
          continue;
        }
      }
#endif
      softmax_row(xo, yo, k);
    }
  });
}

template <class T>
void softmax_backward_row(const T* g, const T* y, T* dx, std::size_t k) {
  using B = batch_t<T>;
  constexpr std::size_t L = B::size;
  const std::size_t full = k - k % L;
  B vdot(T(0));
  for (std::size_t j = 0; j < full; j += L) vdot += B::load_unaligned(g + j) * B::load_unaligned(y + j);
  if (full < k) vdot += load_partial(g + full, k - full, T(0)) * load_partial(y + full, k - full, T(0));
  const B dot(xsimd::hadd(vdot));
  for (std::size_t j = 0; j < full; j += L) {
    const B yv = B::load_unaligned(y + j);
    (yv * (B::load_unaligned(g + j) - dot)).store_unaligned(dx + j);
  }
  if (full < k) {
    const B yv = load_partial(y + full, k - full, T(0));
    store_partial(dx + full, k - full, yv * (load_partial(g + full, k - full, T(0)) - dot));
  }
}

template <class T>
void softmax_backward_columns(const T* g, const T* y, T* dx, std::size_t k, std::size_t stride, std::size_t r) {
  using B = batch_t<T>;
  const bool full = r == B::size;
  auto ld = [&](const T* p) { return full ? B::load_unaligned(p) : load_partial(p, r, T(0)); };
  B dot(T(0));
  for (std::size_t j = 0; j < k; ++j) dot += ld(g + j * stride) * ld(y + j * stride);
  for (std::size_t j = 0; j < k; ++j) {
    const B v = ld(y + j * stride) * (ld(g + j * stride) - dot);
    full ? v.store_unaligned(dx + j * stride) : store_partial(dx + j * stride, r, v);
  }
}

template <class T>
void softmax_backward_kernel(const T* g, const T* y, T* dx, axis_split sp) {
  constexpr std::size_t L = lanes_v<T>;
  const std::size_t k = sp.extent, in = sp.inner;
  if (in > 1) {
    [[maybe_unused]] const simd_isa cisa = column_isa(in);
    for_column_blocks(sp, [&](std::size_t off, std::size_t w) {
#if XSHARD_X86_KERNELS
      if constexpr (std::is_same_v<T, float>) {
        if (cisa == simd_isa::avx512)
          return x86::avx512::softmax_backward_columns(g + off, y + off, dx + off, k, in, w);
        if (cisa == simd_isa::avx2) return x86::avx2::softmax_backward_columns(g + off, y + off, dx + off, k, in, w);
      }
#endif
      for (std::size_t i = 0; i < w; i += L)
        softmax_backward_columns(g + off + i, y + off + i, dx + off + i, k, in, std::min(L, w - i));
    });
    return;
  }
  [[maybe_unused]] const simd_isa isa = active_isa();
  parallel_ranges(sp.outer, rows_per_grain(k), [&](std::size_t o0, std::size_t o1) {
    for (std::size_t o = o0; o < o1; ++o) {
      const std::size_t off = o * k;
#if XSHARD_X86_KERNELS
      if constexpr (std::is_same_v<T, float>) {
        if (isa == simd_isa::avx512) {
          x86::avx512::softmax_backward_row(g + off, y + off, dx + off, k);
          continue;
        }
        if (isa == simd_isa::avx2) {
          x86::avx2::softmax_backward_row(g + off, y + off, dx + off, k);
          continue;
        }
      }
#endif
      softmax_backward_row(g + off, y + off, dx + off, k);
    }
  });
}

}  // namespace detail

/// xshard.softmax along `dim` (negative counts from the end) with an
/// explicit mode. x: rank >= 1, float or double.
template <class E>
detail::composite_result_t<E> softmax(const E& x, std::ptrdiff_t dim, composite_mode mode) {
  const auto scope = detail::composite_trace(composite_id::softmax, mode);
  using T = detail::composite_value_t<E>;
  static_assert(detail::composite_real_v<T>, "xshard::softmax(x) requires x's value_type to be float or double");
  static_assert(tensor_rank_v<E> != 0, "xshard::softmax(x) requires x to have rank >= 1");
  using R = detail::composite_result_t<E>;
  std::optional<R> keep;
  const R& xc = detail::contiguous<R>(x, keep);
  const std::size_t axis = detail::normalize_dim(dim, xc.dimension(), "softmax");
  if (xc.size() == 0) return R::from_shape(xc.shape());
  R y = detail::composite_out<R>(xc.shape());
  if (mode == composite_mode::decompose)
    detail::softmax_decomposition<T>(xc.data(), y.data(), detail::split_at(xc.shape(), axis));
  else
    detail::softmax_kernel<T>(xc.data(), y.data(), detail::split_at(xc.shape(), axis));
  return y;
}

/// xshard.softmax, mode chosen by composite_policy ("softmax").
template <class E>
detail::composite_result_t<E> softmax(const E& x, std::ptrdiff_t dim = -1) {
  return softmax(x, dim, composite_policy::get(composite_id::softmax));
}

/// xshard.softmax_backward with an explicit mode: the gradient w.r.t. the
/// input of softmax, from the output gradient and the output y = softmax(x).
template <class G, class Y>
detail::composite_result_t<Y> softmax_backward(const G& grad_y, const Y& y, std::ptrdiff_t dim, composite_mode mode) {
  const auto scope = detail::composite_trace(composite_id::softmax_backward, mode);
  using T = detail::composite_value_t<Y>;
  static_assert(detail::composite_real_v<T>,
                "xshard::softmax_backward(grad_y, y) requires y's value_type to be float or double");
  static_assert(std::is_same_v<detail::composite_value_t<G>, T>,
                "xshard::softmax_backward(grad_y, y) requires grad_y and y to have the same value_type");
  static_assert(tensor_rank_v<Y> != 0, "xshard::softmax_backward(grad_y, y) requires y to have rank >= 1");
  using R = detail::composite_result_t<Y>;
  std::optional<R> keep_y, keep_g;
  const R& yc = detail::contiguous<R>(y, keep_y);
  detail::require_same_shape(grad_y, yc, "softmax_backward", "grad_y", "y");
  const R& gc = detail::contiguous<R>(grad_y, keep_g);
  const std::size_t axis = detail::normalize_dim(dim, yc.dimension(), "softmax_backward");
  if (yc.size() == 0) return R::from_shape(yc.shape());
  R dx = detail::composite_out<R>(yc.shape());
  if (mode == composite_mode::decompose)
    detail::softmax_backward_decomposition<T>(gc.data(), yc.data(), dx.data(), detail::split_at(yc.shape(), axis));
  else
    detail::softmax_backward_kernel<T>(gc.data(), yc.data(), dx.data(), detail::split_at(yc.shape(), axis));
  return dx;
}

/// xshard.softmax_backward, mode chosen by composite_policy ("softmax_backward").
template <class G, class Y>
detail::composite_result_t<Y> softmax_backward(const G& grad_y, const Y& y, std::ptrdiff_t dim = -1) {
  return softmax_backward(grad_y, y, dim, composite_policy::get(composite_id::softmax_backward));
}

}  // namespace xshard
