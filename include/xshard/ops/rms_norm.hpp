// xshard/ops/rms_norm.hpp - the composites xshard.rms_norm (version 1,
// attribute eps) and xshard.rms_norm_backward (version 1), normalised over
// the last dim (torch's rms_norm with normalized_shape = [x.shape[-1]] and
// no weight):
//
//   rstd = 1 / sqrt(mean_last(x^2) + eps),  y = x * rstd
//
// eps defaults to 1e-6, the value of T5 and LLaMA. There is no weight: a
// weight (LLaMA's RMSNorm gamma) is a separate multiply, y * weight, whose
// gradients the caller forms from y.
//
// Backward, with n the last extent and y = x * rstd:
//   dx = rstd * (g - y * mean_last(g * y))
//
// rms_norm returns y with the saved rstd (x's shape with the last extent 1)
// that rms_norm_backward takes. mean_last(x^2) sums non-negative terms, so
// unlike layer_norm's variance it loses nothing in one pass.
// The decomposition is xt::mean, xt::sqrt and broadcasting arithmetic, each
// evaluated; the kernel does a row in two passes (sum of squares; write), the
// backward in two per row (sum of g * y; write), along the row on the CPU's
// widest vectors for floats on x86-64 (ops/arch/x86.hpp, by active_isa()),
// with xsimd otherwise.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <xtensor/xmath.hpp>     // xt::sqrt
#include <xtensor/xreducer.hpp>  // xt::mean

#include "../core/isa.hpp"
#include "arch/x86.hpp"
#include "composite_policy.hpp"
#include "composite_support.hpp"

namespace xshard {

/// rms_norm's output and what its backward needs.
template <class R>
struct rms_norm_result {
  R output;
  R rstd;  ///< 1 / sqrt(mean(x^2) + eps): x's shape with the last extent 1
};

namespace detail {

// ---- decomposition ----------------------------------------------------------
// On (rows, n) views of the contiguous buffers (rstd (rows, 1)), with the
// kernels' signatures.

template <class T>
void rms_norm_decomposition(const T* x_data, T* y_data, T* rstd_data, std::size_t rows, std::size_t n, T eps) {
  const std::array<std::size_t, 2> shape{rows, n}, stats{rows, 1};
  const std::array<std::size_t, 1> ax{1};
  const auto x = adapt_buffer(x_data, shape);
  auto y = adapt_buffer(y_data, shape);
  auto rstd = adapt_buffer(rstd_data, stats);
  const xt::xtensor<T, 2> mean_square = xt::mean(x * x, ax, keep_dims_now());
  rstd = T(1) / xt::sqrt(mean_square + eps);
  y = x * rstd;
}

template <class T>
void rms_norm_backward_decomposition(const T* g_data, const T* x_data, const T* rstd_data, T* dx_data, std::size_t rows,
                                     std::size_t n) {
  const std::array<std::size_t, 2> shape{rows, n}, stats{rows, 1};
  const std::array<std::size_t, 1> ax{1};
  const auto g = adapt_buffer(g_data, shape);
  const auto x = adapt_buffer(x_data, shape);
  const auto rstd = adapt_buffer(rstd_data, stats);
  auto dx = adapt_buffer(dx_data, shape);
  using R = xt::xtensor<T, 2>;
  const R y = x * rstd;
  const R b = xt::mean(g * y, ax, keep_dims_now());
  dx = rstd * (g - y * b);
}

// ---- fused kernel -----------------------------------------------------------

template <class T>
void rms_norm_kernel(const T* x, T* y, T* rstd_out, std::size_t rows, std::size_t n, T eps) {
  using B = batch_t<T>;
  constexpr std::size_t L = B::size;
  const std::size_t full = n - n % L;
  const std::size_t r = n - full;
  const T inv_n = T(1) / static_cast<T>(n);
  [[maybe_unused]] const simd_isa isa = row_isa(n);
  parallel_ranges(rows, rows_per_grain(n), [&](std::size_t r0, std::size_t r1) {
#if XSHARD_X86_KERNELS
    if constexpr (std::is_same_v<T, float>) {  // the CPU's widest vectors (ops/arch/x86.hpp)
      if (isa != simd_isa::generic) {
        for (std::size_t row = r0; row < r1; ++row)
          rstd_out[row] = x86::rms_norm_row(isa, x + row * n, y + row * n, n, eps);
        return;
      }
    }
#endif
    for (std::size_t row = r0; row < r1; ++row) {
      const T* xr = x + row * n;
      T* yr = y + row * n;
      B sq(T(0));
      for (std::size_t j = 0; j < full; j += L) {
        const B v = B::load_unaligned(xr + j);
        sq = xsimd::fma(v, v, sq);
      }
      if (r) {
        const B v = load_partial(xr + full, r, T(0));  // padding contributes 0
        sq = xsimd::fma(v, v, sq);
      }
      const T rstd = T(1) / std::sqrt(xsimd::hadd(sq) * inv_n + eps);
      rstd_out[row] = rstd;
      const B s(rstd);
      for (std::size_t j = 0; j < full; j += L) (B::load_unaligned(xr + j) * s).store_unaligned(yr + j);
      if (r) store_partial(yr + full, r, load_partial(xr + full, r, T(0)) * s);
    }
  });
}

template <class T>
void rms_norm_backward_kernel(const T* g, const T* x, const T* rstd, T* dx, std::size_t rows, std::size_t n) {
  using B = batch_t<T>;
  constexpr std::size_t L = B::size;
  const std::size_t full = n - n % L;
  const std::size_t r = n - full;
  [[maybe_unused]] const simd_isa isa = row_isa(n);
  parallel_ranges(rows, rows_per_grain(n), [&](std::size_t r0, std::size_t r1) {
#if XSHARD_X86_KERNELS
    if constexpr (std::is_same_v<T, float>) {  // the CPU's widest vectors (ops/arch/x86.hpp)
      if (isa != simd_isa::generic) {
        for (std::size_t row = r0; row < r1; ++row)
          x86::rms_norm_backward_row(isa, g + row * n, x + row * n, rstd[row], dx + row * n, n);
        return;
      }
    }
#endif
    for (std::size_t row = r0; row < r1; ++row) {
      const T* gr = g + row * n;
      const T* xr = x + row * n;
      T* dxr = dx + row * n;
      const B s(rstd[row]);
      // Pass 1: the row mean of g * y.
      B sb(T(0));
      for (std::size_t j = 0; j < full; j += L)
        sb = xsimd::fma(B::load_unaligned(gr + j), B::load_unaligned(xr + j) * s, sb);
      if (r) sb = xsimd::fma(load_partial(gr + full, r, T(0)), load_partial(xr + full, r, T(0)) * s, sb);
      const B b(xsimd::hadd(sb) / static_cast<T>(n));
      // Pass 2: the input gradient.
      auto input_grad = [&](const B& gv, const B& xv) { return s * (gv - (xv * s) * b); };
      for (std::size_t j = 0; j < full; j += L)
        input_grad(B::load_unaligned(gr + j), B::load_unaligned(xr + j)).store_unaligned(dxr + j);
      if (r)
        store_partial(dxr + full, r, input_grad(load_partial(gr + full, r, T(0)), load_partial(xr + full, r, T(0))));
    }
  });
}

template <class E>
rms_norm_result<composite_result_t<E>> rms_norm_impl(const E& x, double eps, composite_mode mode) {
  const auto scope = composite_trace(composite_id::rms_norm, mode);
  using T = composite_value_t<E>;
  static_assert(composite_real_v<T>, "xshard::rms_norm(x) requires x's value_type to be float or double");
  static_assert(tensor_rank_v<E> != 0, "xshard::rms_norm(x) requires x to have rank >= 1");
  using R = composite_result_t<E>;
  std::optional<R> keep;
  const R& xc = contiguous<R>(x, keep);
  if (xc.dimension() == 0) throw error("xshard: rms_norm: x has rank 0; it normalises over the last dim");
  const std::size_t n = xc.shape()[xc.dimension() - 1];
  const auto sshape = stats_shape(xc.shape());
  if (xc.size() == 0) {
    R nan = R::from_shape(sshape);  // rows of extent 0 have no mean square
    nan.fill(std::numeric_limits<T>::quiet_NaN());
    return {R::from_shape(xc.shape()), nan};
  }
  rms_norm_result<R> out{composite_out<R>(xc.shape()), composite_out<R>(sshape)};
  const auto run = mode == composite_mode::decompose ? &rms_norm_decomposition<T> : &rms_norm_kernel<T>;
  run(xc.data(), out.output.data(), out.rstd.data(), xc.size() / n, n, static_cast<T>(eps));
  return out;
}

template <class G, class E, class S>
composite_result_t<E> rms_norm_backward_impl(const G& grad_y, const E& x, const S& rstd, composite_mode mode) {
  const auto scope = composite_trace(composite_id::rms_norm_backward, mode);
  using T = composite_value_t<E>;
  static_assert(composite_real_v<T>,
                "xshard::rms_norm_backward(grad_y, x, rstd) requires x's value_type to be float or double");
  static_assert(std::is_same_v<composite_value_t<G>, T>,
                "xshard::rms_norm_backward(grad_y, x, rstd) requires grad_y and x to have the same value_type");
  using R = composite_result_t<E>;
  std::optional<R> keep_x, keep_g, keep_s;
  const R& xc = contiguous<R>(x, keep_x);
  if (xc.dimension() == 0) throw error("xshard: rms_norm_backward: x has rank 0; it normalises over the last dim");
  require_same_shape(grad_y, xc, "rms_norm_backward", "grad_y", "x");
  const R& gc = contiguous<R>(grad_y, keep_g);
  const auto sshape = stats_shape(xc.shape());
  require_same_shape(rstd, shape_ref<decltype(sshape)>{sshape}, "rms_norm_backward", "rstd",
                     "x's shape with the last extent 1");
  const R& sc = contiguous<R>(rstd, keep_s);
  const std::size_t n = xc.shape()[xc.dimension() - 1];
  R dx = composite_out<R>(xc.shape());
  if (xc.size() == 0) return dx;
  const auto run =
      mode == composite_mode::decompose ? &rms_norm_backward_decomposition<T> : &rms_norm_backward_kernel<T>;
  run(gc.data(), xc.data(), sc.data(), dx.data(), xc.size() / n, n);
  return dx;
}

}  // namespace detail

/// xshard.rms_norm over the last dim, with an explicit mode.
/// @pre x has rank >= 1 and value_type float or double.
/// @post output has x's shape; rstd has x's shape with the last extent 1.
template <class E>
rms_norm_result<detail::composite_result_t<E>> rms_norm(const E& x, double eps, composite_mode mode) {
  return detail::rms_norm_impl(x, eps, mode);
}
/// xshard.rms_norm, mode chosen by composite_policy ("rms_norm"). eps
/// defaults to 1e-6 (T5, LLaMA).
template <class E>
rms_norm_result<detail::composite_result_t<E>> rms_norm(const E& x, double eps = 1e-6) {
  return rms_norm(x, eps, composite_policy::get(composite_id::rms_norm));
}

/// xshard.rms_norm_backward, explicit mode: the input gradient. rstd is what
/// rms_norm returned. Throws xshard::error if grad_y's shape is not x's or
/// rstd's is not x's with the last extent 1.
template <class G, class E, class S>
detail::composite_result_t<E> rms_norm_backward(const G& grad_y, const E& x, const S& rstd, composite_mode mode) {
  return detail::rms_norm_backward_impl(grad_y, x, rstd, mode);
}
/// xshard.rms_norm_backward, mode chosen by composite_policy ("rms_norm_backward").
template <class G, class E, class S>
detail::composite_result_t<E> rms_norm_backward(const G& grad_y, const E& x, const S& rstd) {
  return rms_norm_backward(grad_y, x, rstd, composite_policy::get(composite_id::rms_norm_backward));
}

}  // namespace xshard
