// xshard/ops/layer_norm.hpp - the composites xshard.layer_norm (version 1,
// attribute eps) and xshard.layer_norm_backward (version 1), normalised over
// the last dim (torch's layer_norm with normalized_shape = [x.shape[-1]]):
//
//   mean = mean_last(x),  rstd = 1 / sqrt(mean_last((x - mean)^2) + eps)
//   xhat = (x - mean) * rstd,  y = xhat * weight + bias   (weight, bias optional)
//
// Backward, with g' = g * weight (g without a weight) and n the last extent:
//   dx      = rstd * (g' - mean_last(g') - xhat * mean_last(g' * xhat))
//   dweight = sum over rows of g * xhat,  dbias = sum over rows of g
//
// layer_norm returns y with the saved mean and rstd (x's shape with the last
// extent 1) that layer_norm_backward takes. The variance is the biased one
// and is computed from the deviations (two passes), never as E[x^2] - E[x]^2,
// so rows far from zero (1e4 + noise in float) keep their precision.
// The decomposition is xt::mean, xt::sqrt and broadcasting arithmetic, each
// evaluated; the kernel does a row in three passes (sum; squared deviations;
// write), the backward in two per row, along the row on the CPU's widest
// vectors for floats on x86-64 (ops/arch/x86.hpp, by active_isa()), with
// xsimd otherwise.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <xtensor/xmath.hpp>     // xt::sqrt
#include <xtensor/xreducer.hpp>  // xt::mean, xt::sum
#include <xtensor/xstrided_view.hpp>

#include "../core/isa.hpp"
#include "arch/x86.hpp"
#include "composite_policy.hpp"
#include "composite_support.hpp"

namespace xshard {

/// layer_norm's output and what its backward needs.
template <class R>
struct layer_norm_result {
  R output;
  R mean;  ///< x's shape with the last extent 1
  R rstd;  ///< 1 / sqrt(var + eps), same shape as mean
};

/// layer_norm_backward's gradients. `weight` and `bias` have the last
/// extent of x (the gradients of an affine weight and bias, whether or not
/// the forward had them).
template <class R>
struct layer_norm_gradients {
  using value_type = typename R::value_type;
  R input;
  xt::xtensor<value_type, 1> weight;
  xt::xtensor<value_type, 1> bias;
};

namespace detail {

template <class T>
struct layer_norm_params {
  const T* weight = nullptr;  // last extent, or null
  const T* bias = nullptr;
};

// ---- decomposition ----------------------------------------------------------
// On (rows, n) views of the contiguous buffers (statistics (rows, 1)), with
// the kernels' signatures.

template <class T>
void layer_norm_decomposition(const T* x_data, T* y_data, T* mean_data, T* rstd_data, std::size_t rows, std::size_t n,
                              layer_norm_params<T> p, T eps) {
  const std::array<std::size_t, 2> shape{rows, n}, stats{rows, 1};
  const std::array<std::size_t, 1> ax{1}, last{n};
  const auto x = adapt_buffer(x_data, shape);
  auto y = adapt_buffer(y_data, shape);
  auto mean = adapt_buffer(mean_data, stats);
  auto rstd = adapt_buffer(rstd_data, stats);
  mean = xt::mean(x, ax, keep_dims_now());
  const xt::xtensor<T, 2> centred = x - mean;
  const xt::xtensor<T, 2> var = xt::mean(centred * centred, ax, keep_dims_now());
  rstd = T(1) / xt::sqrt(var + eps);
  y = centred * rstd;
  if (p.weight) y *= adapt_buffer(p.weight, last);
  if (p.bias) y += adapt_buffer(p.bias, last);
}

template <class T>
void layer_norm_backward_decomposition(const T* g_data, const T* x_data, const T* mean_data, const T* rstd_data,
                                       const T* weight_data, T* dx_data, T* dw_data, T* db_data, std::size_t rows,
                                       std::size_t n) {
  const std::array<std::size_t, 2> shape{rows, n}, stats{rows, 1};
  const std::array<std::size_t, 1> ax{1}, first{0}, last{n};
  const auto g = adapt_buffer(g_data, shape);
  const auto x = adapt_buffer(x_data, shape);
  const auto mean = adapt_buffer(mean_data, stats);
  const auto rstd = adapt_buffer(rstd_data, stats);
  auto dx = adapt_buffer(dx_data, shape);
  auto dw = adapt_buffer(dw_data, last);
  auto db = adapt_buffer(db_data, last);
  using R = xt::xtensor<T, 2>;
  const R xhat = (x - mean) * rstd;
  const R gw = weight_data ? R(g * adapt_buffer(weight_data, last)) : R(g);
  const R a = xt::mean(gw, ax, keep_dims_now());
  const R b = xt::mean(gw * xhat, ax, keep_dims_now());
  dx = rstd * (gw - a - xhat * b);
  dw = xt::sum(g * xhat, first, xt::evaluation_strategy::immediate);
  db = xt::sum(g, first, xt::evaluation_strategy::immediate);
}

// ---- fused kernel -----------------------------------------------------------

template <class T>
void layer_norm_kernel(const T* x, T* y, T* mean_out, T* rstd_out, std::size_t rows, std::size_t n,
                       layer_norm_params<T> p, T eps) {
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
          x86::layer_norm_row(isa, x + row * n, y + row * n, n, p.weight, p.bias, eps, mean_out + row, rstd_out + row);
        return;
      }
    }
#endif
    for (std::size_t row = r0; row < r1; ++row) {
      const T* xr = x + row * n;
      T* yr = y + row * n;
      B acc(T(0));
      for (std::size_t j = 0; j < full; j += L) acc += B::load_unaligned(xr + j);
      if (r) acc += load_partial(xr + full, r, T(0));
      const T mean = xsimd::hadd(acc) / static_cast<T>(n);
      const B m(mean);
      B sq(T(0));
      for (std::size_t j = 0; j < full; j += L) {
        const B d = B::load_unaligned(xr + j) - m;
        sq = xsimd::fma(d, d, sq);
      }
      if (r) {
        const B d = load_partial(xr + full, r, mean) - m;  // padding contributes 0
        sq = xsimd::fma(d, d, sq);
      }
      const T rstd = T(1) / std::sqrt(xsimd::hadd(sq) * inv_n + eps);
      mean_out[row] = mean;
      rstd_out[row] = rstd;
      const B s(rstd);
      auto affine = [&](const B& v, std::size_t j, bool tail) {
        B out = (v - m) * s;
        if (p.weight) out = out * (tail ? load_partial(p.weight + j, r, T(0)) : B::load_unaligned(p.weight + j));
        if (p.bias) out = out + (tail ? load_partial(p.bias + j, r, T(0)) : B::load_unaligned(p.bias + j));
        return out;
      };
      for (std::size_t j = 0; j < full; j += L) affine(B::load_unaligned(xr + j), j, false).store_unaligned(yr + j);
      if (r) store_partial(yr + full, r, affine(load_partial(xr + full, r, T(0)), full, true));
    }
  });
}

template <class T>
void layer_norm_backward_kernel(const T* g, const T* x, const T* mean, const T* rstd, const T* weight, T* dx, T* dw,
                                T* db, std::size_t rows, std::size_t n) {
  using B = batch_t<T>;
  constexpr std::size_t L = B::size;
  const std::size_t full = n - n % L;
  const std::size_t r = n - full;
  std::fill(dw, dw + n, T(0));
  std::fill(db, db + n, T(0));
#if XSHARD_X86_KERNELS
  if constexpr (std::is_same_v<T, float>) {  // the CPU's widest vectors (ops/arch/x86.hpp)
    const simd_isa isa = row_isa(n);
    if (isa != simd_isa::generic) {
      for (std::size_t row = 0; row < rows; ++row)
        x86::layer_norm_backward_row(isa, g + row * n, x + row * n, mean[row], rstd[row], weight, dx + row * n, dw, db,
                                     n);
      return;
    }
  }
#endif
  for (std::size_t row = 0; row < rows; ++row) {
    const T* gr = g + row * n;
    const T* xr = x + row * n;
    T* dxr = dx + row * n;
    const B m(mean[row]), s(rstd[row]);
    // Pass 1: the two row means and the parameter gradients.
    B sa(T(0)), sb(T(0));
    auto accumulate = [&](const B& gv, const B& xv, std::size_t j, bool tail) {
      const B xhat = (xv - m) * s;
      const B gw = weight ? gv * (tail ? load_partial(weight + j, r, T(0)) : B::load_unaligned(weight + j)) : gv;
      sa += gw;
      sb += gw * xhat;
      if (tail) {
        store_partial(dw + j, r, load_partial(dw + j, r, T(0)) + gv * xhat);
        store_partial(db + j, r, load_partial(db + j, r, T(0)) + gv);
      } else {
        (B::load_unaligned(dw + j) + gv * xhat).store_unaligned(dw + j);
        (B::load_unaligned(db + j) + gv).store_unaligned(db + j);
      }
    };
    for (std::size_t j = 0; j < full; j += L)
      accumulate(B::load_unaligned(gr + j), B::load_unaligned(xr + j), j, false);
    if (r) accumulate(load_partial(gr + full, r, T(0)), load_partial(xr + full, r, T(0)), full, true);
    const B a(xsimd::hadd(sa) / static_cast<T>(n)), b(xsimd::hadd(sb) / static_cast<T>(n));
    // Pass 2: the input gradient.
    auto input_grad = [&](const B& gv, const B& xv, std::size_t j, bool tail) {
      const B xhat = (xv - m) * s;
      const B gw = weight ? gv * (tail ? load_partial(weight + j, r, T(0)) : B::load_unaligned(weight + j)) : gv;
      return s * (gw - a - xhat * b);
    };
    for (std::size_t j = 0; j < full; j += L)
      input_grad(B::load_unaligned(gr + j), B::load_unaligned(xr + j), j, false).store_unaligned(dxr + j);
    if (r)
      store_partial(dxr + full, r,
                    input_grad(load_partial(gr + full, r, T(0)), load_partial(xr + full, r, T(0)), full, true));
  }
}

template <class R, class V>
const xt::xtensor<typename R::value_type, 1>* affine_param(const V* v,
                                                           std::optional<xt::xtensor<typename R::value_type, 1>>& keep,
                                                           std::size_t n, const char* op, const char* what) {
  using P = xt::xtensor<typename R::value_type, 1>;
  if (!v) return nullptr;
  if (v->dimension() != 1 || v->size() != n)
    throw error(std::string("xshard: ") + op + ": " + what + " has shape " + shape_text(v->shape()) +
                " but the last dim of x has extent " + std::to_string(n));
  return &contiguous<P>(*v, keep);
}

template <class E, class W, class Bi>
layer_norm_result<composite_result_t<E>> layer_norm_impl(const E& x, const W* weight, const Bi* bias, double eps,
                                                         composite_mode mode) {
  const auto scope = composite_trace(composite_id::layer_norm, mode);
  using T = composite_value_t<E>;
  static_assert(composite_real_v<T>, "xshard::layer_norm(x) requires x's value_type to be float or double");
  static_assert(tensor_rank_v<E> != 0, "xshard::layer_norm(x) requires x to have rank >= 1");
  using R = composite_result_t<E>;
  using P = xt::xtensor<T, 1>;
  std::optional<R> keep;
  const R& xc = contiguous<R>(x, keep);
  if (xc.dimension() == 0) throw error("xshard: layer_norm: x has rank 0; it normalises over the last dim");
  const std::size_t n = xc.shape()[xc.dimension() - 1];
  std::optional<P> keep_w, keep_b;
  const P* w = affine_param<R>(weight, keep_w, n, "layer_norm", "weight");
  const P* b = affine_param<R>(bias, keep_b, n, "layer_norm", "bias");
  const auto sshape = stats_shape(xc.shape());
  if (xc.size() == 0) {
    R nan = R::from_shape(sshape);
    nan.fill(std::numeric_limits<T>::quiet_NaN());
    return {R::from_shape(xc.shape()), nan, nan};
  }
  layer_norm_result<R> out{composite_out<R>(xc.shape()), composite_out<R>(sshape), composite_out<R>(sshape)};
  layer_norm_params<T> p{w ? w->data() : nullptr, b ? b->data() : nullptr};
  const auto run = mode == composite_mode::decompose ? &layer_norm_decomposition<T> : &layer_norm_kernel<T>;
  run(xc.data(), out.output.data(), out.mean.data(), out.rstd.data(), xc.size() / n, n, p, static_cast<T>(eps));
  return out;
}

template <class G, class E, class M, class S, class W>
layer_norm_gradients<composite_result_t<E>> layer_norm_backward_impl(const G& grad_y, const E& x, const M& mean,
                                                                     const S& rstd, const W* weight,
                                                                     composite_mode mode) {
  const auto scope = composite_trace(composite_id::layer_norm_backward, mode);
  using T = composite_value_t<E>;
  static_assert(composite_real_v<T>,
                "xshard::layer_norm_backward(grad_y, x, mean, rstd) requires x's value_type to be float or double");
  static_assert(std::is_same_v<composite_value_t<G>, T>,
                "xshard::layer_norm_backward(grad_y, x, ...) requires grad_y and x to have the same value_type");
  using R = composite_result_t<E>;
  using P = xt::xtensor<T, 1>;
  std::optional<R> keep_x, keep_g, keep_m, keep_s;
  const R& xc = contiguous<R>(x, keep_x);
  if (xc.dimension() == 0) throw error("xshard: layer_norm_backward: x has rank 0; it normalises over the last dim");
  require_same_shape(grad_y, xc, "layer_norm_backward", "grad_y", "x");
  const R& gc = contiguous<R>(grad_y, keep_g);
  const auto sshape = stats_shape(xc.shape());
  const shape_ref<decltype(sshape)> sref{sshape};
  require_same_shape(mean, sref, "layer_norm_backward", "mean", "x's shape with the last extent 1");
  require_same_shape(rstd, sref, "layer_norm_backward", "rstd", "x's shape with the last extent 1");
  const R& mc = contiguous<R>(mean, keep_m);
  const R& sc = contiguous<R>(rstd, keep_s);
  const std::size_t n = xc.shape()[xc.dimension() - 1];
  std::optional<P> keep_w;
  const P* w = affine_param<R>(weight, keep_w, n, "layer_norm_backward", "weight");
  if (xc.size() == 0) {
    layer_norm_gradients<R> out{composite_out<R>(xc.shape()), composite_out<P>(std::array<std::size_t, 1>{n}),
                                composite_out<P>(std::array<std::size_t, 1>{n})};
    out.weight.fill(T(0));
    out.bias.fill(T(0));
    return out;
  }
  layer_norm_gradients<R> out{composite_out<R>(xc.shape()), composite_out<P>(std::array<std::size_t, 1>{n}),
                              composite_out<P>(std::array<std::size_t, 1>{n})};
  const auto run =
      mode == composite_mode::decompose ? &layer_norm_backward_decomposition<T> : &layer_norm_backward_kernel<T>;
  run(gc.data(), xc.data(), mc.data(), sc.data(), w ? w->data() : nullptr, out.input.data(), out.weight.data(),
      out.bias.data(), xc.size() / n, n);
  return out;
}

template <class W>
concept layer_norm_param =
    !std::is_arithmetic_v<std::remove_cvref_t<W>> && !std::is_same_v<std::remove_cvref_t<W>, composite_mode>;

using no_param = xt::xtensor<double, 1>;

}  // namespace detail

/// xshard.layer_norm over the last dim, without weight and bias, with an
/// explicit mode.
template <class E>
layer_norm_result<detail::composite_result_t<E>> layer_norm(const E& x, double eps, composite_mode mode) {
  return detail::layer_norm_impl(x, static_cast<const detail::no_param*>(nullptr),
                                 static_cast<const detail::no_param*>(nullptr), eps, mode);
}
/// xshard.layer_norm without weight and bias, mode chosen by composite_policy ("layer_norm").
template <class E>
layer_norm_result<detail::composite_result_t<E>> layer_norm(const E& x, double eps = 1e-5) {
  return layer_norm(x, eps, composite_policy::get(composite_id::layer_norm));
}
/// xshard.layer_norm with weight and bias (1-D, the last extent of x), explicit mode.
template <class E, detail::layer_norm_param W, detail::layer_norm_param Bi>
layer_norm_result<detail::composite_result_t<E>> layer_norm(const E& x, const W& weight, const Bi& bias, double eps,
                                                            composite_mode mode) {
  return detail::layer_norm_impl(x, &weight, &bias, eps, mode);
}
/// xshard.layer_norm with weight and bias, mode chosen by composite_policy ("layer_norm").
template <class E, detail::layer_norm_param W, detail::layer_norm_param Bi>
layer_norm_result<detail::composite_result_t<E>> layer_norm(const E& x, const W& weight, const Bi& bias,
                                                            double eps = 1e-5) {
  return layer_norm(x, weight, bias, eps, composite_policy::get(composite_id::layer_norm));
}

/// xshard.layer_norm_backward (no weight in the forward), explicit mode.
/// mean and rstd are what layer_norm returned.
template <class G, class E, class M, class S>
layer_norm_gradients<detail::composite_result_t<E>> layer_norm_backward(const G& grad_y, const E& x, const M& mean,
                                                                        const S& rstd, composite_mode mode) {
  return detail::layer_norm_backward_impl(grad_y, x, mean, rstd, static_cast<const detail::no_param*>(nullptr), mode);
}
/// xshard.layer_norm_backward (no weight), mode chosen by composite_policy ("layer_norm_backward").
template <class G, class E, class M, class S>
layer_norm_gradients<detail::composite_result_t<E>> layer_norm_backward(const G& grad_y, const E& x, const M& mean,
                                                                        const S& rstd) {
  return layer_norm_backward(grad_y, x, mean, rstd, composite_policy::get(composite_id::layer_norm_backward));
}
/// xshard.layer_norm_backward with the forward's weight, explicit mode.
template <class G, class E, class M, class S, detail::layer_norm_param W>
layer_norm_gradients<detail::composite_result_t<E>> layer_norm_backward(const G& grad_y, const E& x, const M& mean,
                                                                        const S& rstd, const W& weight,
                                                                        composite_mode mode) {
  return detail::layer_norm_backward_impl(grad_y, x, mean, rstd, &weight, mode);
}
/// xshard.layer_norm_backward with the forward's weight, mode chosen by composite_policy.
template <class G, class E, class M, class S, detail::layer_norm_param W>
layer_norm_gradients<detail::composite_result_t<E>> layer_norm_backward(const G& grad_y, const E& x, const M& mean,
                                                                        const S& rstd, const W& weight) {
  return layer_norm_backward(grad_y, x, mean, rstd, weight, composite_policy::get(composite_id::layer_norm_backward));
}

}  // namespace xshard
