// xshard/ops/gelu.hpp - the composites xshard.gelu and xshard.gelu_backward
// (version 1, attribute approximate = "none" | "tanh"), as
// torch.nn.functional.gelu defines them:
//
//   none: y  = x/2 * (1 + erf(x / sqrt 2))
//         dx = g * (1/2 (1 + erf(x / sqrt 2)) + x exp(-x^2/2) / sqrt(2 pi))
//   tanh: u  = sqrt(2/pi) (x + 0.044715 x^3),  t = tanh u
//         y  = x/2 * (1 + t)
//         dx = g * (1/2 (1 + t) + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2))
//
// e.g. gelu(1) = 0.8413447460685429 (none), 0.8411919906082768 (tanh).
// The decomposition is that formula evaluated element by element with
// std::erf, std::tanh and std::exp (what the xtensor expression of it computes); the kernel is the same
// formula on vectors, one pass over contiguous data, with float erf as
// the rational function of erf_float.hpp (within 3.9e-7 of erf) and tanh and
// exp as xsimd 8.1 computes them: for floats on x86-64 the AVX-512 or AVX2
// kernels of ops/arch/x86.hpp (both forms, picked by active_isa()), else
// xsimd batches of the compiled architecture. Which runs is
// composite_policy's choice for "gelu" / "gelu_backward" unless a
// composite_mode is passed. Both propagate NaN; gelu(+inf) = +inf, and
// gelu(-inf) is NaN (-inf * 0), as the formula (and torch's) gives.
#pragma once

#include <cmath>  // std::erf, std::tanh, std::exp: the decomposition
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "../core/isa.hpp"
#include "arch/x86.hpp"
#include "composite_policy.hpp"
#include "composite_support.hpp"
#include "erf_float.hpp"

namespace xshard {

/// The `approximate` attribute of xshard.gelu.
enum class gelu_approximate : std::uint8_t { none, tanh };

constexpr std::string_view to_string(gelu_approximate a) { return a == gelu_approximate::none ? "none" : "tanh"; }

/// "none" or "tanh"; anything else throws xshard::error naming it.
inline gelu_approximate parse_gelu_approximate(std::string_view s) {
  if (s == "none") return gelu_approximate::none;
  if (s == "tanh") return gelu_approximate::tanh;
  throw error("xshard: gelu: unknown approximate '" + std::string(s) + "' (expected \"none\" or \"tanh\")");
}

namespace detail {

template <class T>
struct gelu_constants {
  static constexpr T half = T(0.5);
  static constexpr T one = T(1);
  static constexpr T sqrt1_2 = T(0.70710678118654752440);       // 1 / sqrt 2
  static constexpr T beta = T(0.79788456080286535588);          // sqrt(2 / pi)
  static constexpr T kappa = T(0.044715);                       //
  static constexpr T three_kappa = T(3 * 0.044715);             //
  static constexpr T inv_sqrt_2pi = T(0.39894228040143267794);  // 1 / sqrt(2 pi)
  static constexpr T tiny = T(1e-30);                           // below it, gelu'(x) rounds to 1/2
};

// ---- decomposition: the formulas, element by element ------------------------
// Scalar std::erf / std::tanh / std::exp per element, exactly what the
// equivalent xtensor expression evaluates (xt::erf and kin call the std
// functions element by element), without compiling xtensor's assignment
// machinery for two formulas in every TU that uses gelu.

template <class T>
void gelu_decomposition(const T* x, T* y, std::size_t n, gelu_approximate a) {
  using c = gelu_constants<T>;
  if (a == gelu_approximate::none) {
    for (std::size_t i = 0; i < n; ++i) y[i] = c::half * x[i] * (c::one + std::erf(x[i] * c::sqrt1_2));
  } else {
    for (std::size_t i = 0; i < n; ++i)
      y[i] = c::half * x[i] * (c::one + std::tanh(c::beta * (x[i] + c::kappa * (x[i] * x[i] * x[i]))));
  }
}

template <class T>
void gelu_backward_decomposition(const T* g, const T* x, T* dx, std::size_t n, gelu_approximate a) {
  using c = gelu_constants<T>;
  if (a == gelu_approximate::none) {
    for (std::size_t i = 0; i < n; ++i) {
      const T cdf = c::half * (c::one + std::erf(x[i] * c::sqrt1_2));
      const T pdf = std::exp(-c::half * (x[i] * x[i])) * c::inv_sqrt_2pi;
      dx[i] = g[i] * (cdf + x[i] * pdf);
    }
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const T t = std::tanh(c::beta * (x[i] + c::kappa * (x[i] * x[i] * x[i])));
    const T left_derivative = c::half * (c::one + t);
    const T right_derivative = (c::one - t * t) * (c::beta * (c::one + c::three_kappa * (x[i] * x[i])));
    dx[i] = g[i] * (left_derivative + (c::half * x[i]) * right_derivative);
  }
}

// ---- fused kernel: the same formulas on xsimd batches ---------------------

/// erf(u) on a batch: for float the rational function of ops/erf_float.hpp
/// in its order (as the x86 kernels evaluate it), for double xsimd::erf.
template <class T>
batch_t<T> erf_batch(const batch_t<T>& u) {
  using B = batch_t<T>;
  if constexpr (std::is_same_v<T, float>) {
    using E = erf_float;
    const B x = xsimd::min(B(E::clamp), xsimd::max(B(-E::clamp), u));
    const B s = x * x;
    B p = xsimd::fma(B(E::p6), s, B(E::p5));
    p = xsimd::fma(p, s, B(E::p4));
    p = xsimd::fma(p, s, B(E::p3));
    p = xsimd::fma(p, s, B(E::p2));
    p = xsimd::fma(p, s, B(E::p1));
    p = xsimd::fma(p, s, B(E::p0));
    B q = xsimd::fma(B(E::q4), s, B(E::q3));
    q = xsimd::fma(q, s, B(E::q2));
    q = xsimd::fma(q, s, B(E::q1));
    q = xsimd::fma(q, s, B(1.0f));
    return xsimd::max(B(-1.0f), xsimd::min(B(1.0f), (x * p) / q));
  } else {
    return xsimd::erf(u);
  }
}

template <class T>
void gelu_kernel_range(const T* x, T* y, std::size_t n, gelu_approximate a) {
#if XSHARD_X86_KERNELS
  if constexpr (std::is_same_v<T, float>) {
    const bool erf_form = a == gelu_approximate::none;
    switch (active_isa()) {
      case simd_isa::avx512:
        return erf_form ? x86::avx512::gelu(x, y, n) : x86::avx512::gelu_tanh(x, y, n);
      case simd_isa::avx2:
        return erf_form ? x86::avx2::gelu(x, y, n) : x86::avx2::gelu_tanh(x, y, n);
      default:
        break;
    }
  }
#endif
  using c = gelu_constants<T>;
  using B = batch_t<T>;
  if (a == gelu_approximate::none) {
    simd_map<T>(
        n, y, [](const B& v) { return B(c::half) * v * (B(c::one) + erf_batch<T>(v * B(c::sqrt1_2))); }, x);
  } else {
    simd_map<T>(
        n, y,
        [](const B& v) {
          return B(c::half) * v * (B(c::one) + xsimd::tanh(B(c::beta) * (v + B(c::kappa) * (v * v * v))));
        },
        x);
  }
}

template <class T>
void gelu_backward_kernel_range(const T* g, const T* x, T* dx, std::size_t n, gelu_approximate a) {
#if XSHARD_X86_KERNELS
  if constexpr (std::is_same_v<T, float>) {
    const bool erf_form = a == gelu_approximate::none;
    switch (active_isa()) {
      case simd_isa::avx512:
        return erf_form ? x86::avx512::gelu_backward(g, x, dx, n) : x86::avx512::gelu_tanh_backward(g, x, dx, n);
      case simd_isa::avx2:
        return erf_form ? x86::avx2::gelu_backward(g, x, dx, n) : x86::avx2::gelu_tanh_backward(g, x, dx, n);
      default:
        break;
    }
  }
#endif
  using c = gelu_constants<T>;
  using B = batch_t<T>;
  if (a == gelu_approximate::none) {
    simd_map<T>(
        n, dx,
        [](const B& gv, const B& v) {
          const B cdf = B(c::half) * (B(c::one) + erf_batch<T>(v * B(c::sqrt1_2)));
          const B pdf = xsimd::exp(B(-c::half) * (v * v)) * B(c::inv_sqrt_2pi);
          return gv * (cdf + v * pdf);
        },
        g, x);
  } else {
    simd_map<T>(
        n, dx,
        [](const B& gv, const B& v) {
          const B t = xsimd::tanh(B(c::beta) * (v + B(c::kappa) * (v * v * v)));
          const B left_derivative = B(c::half) * (B(c::one) + t);
          const B right_derivative = (B(c::one) - t * t) * (B(c::beta) * (B(c::one) + B(c::three_kappa) * (v * v)));
          return gv * (left_derivative + (B(c::half) * v) * right_derivative);
        },
        g, x);
  }
}

/// The erf form's backward from the forward's output y = gelu(x):
/// cdf = y / x (1/2 where |x| < tiny, whose y would lose bits below the
/// normal range) and the density exp(-x^2 / 2) / sqrt(2 pi), so no erf is
/// evaluated. y / x carries y's relative rounding (a few ulp of the cdf).
template <class T>
void gelu_backward_from_output_kernel_range(const T* g, const T* x, const T* y, T* dx, std::size_t n) {
#if XSHARD_X86_KERNELS
  if constexpr (std::is_same_v<T, float>) {
    if (active_isa() == simd_isa::avx512) return x86::avx512::gelu_backward_from_output(g, x, y, dx, n);
    if (active_isa() == simd_isa::avx2) return x86::avx2::gelu_backward_from_output(g, x, y, dx, n);
  }
#endif
  using c = gelu_constants<T>;
  using B = batch_t<T>;
  simd_map<T>(
      n, dx,
      [](const B& gv, const B& v, const B& yv) {
        const B cdf = xsimd::select(xsimd::abs(v) < B(c::tiny), B(c::half), yv / v);
        const B pdf = xsimd::exp(B(-c::half) * (v * v)) * B(c::inv_sqrt_2pi);
        return gv * (cdf + v * pdf);
      },
      g, x, y);
}

/// The kernels over the thread pool's threads, element ranges per thread.
template <class T>
void gelu_kernel(const T* x, T* y, std::size_t n, gelu_approximate a) {
  parallel_ranges(
      n, parallel_grain, [&](std::size_t lo, std::size_t hi) { gelu_kernel_range(x + lo, y + lo, hi - lo, a); },
      parallel_unit);
}
template <class T>
void gelu_backward_kernel(const T* g, const T* x, T* dx, std::size_t n, gelu_approximate a) {
  parallel_ranges(
      n, parallel_grain,
      [&](std::size_t lo, std::size_t hi) { gelu_backward_kernel_range(g + lo, x + lo, dx + lo, hi - lo, a); },
      parallel_unit);
}

template <class T>
void gelu_backward_from_output_kernel(const T* g, const T* x, const T* y, T* dx, std::size_t n) {
  parallel_ranges(
      n, parallel_grain,
      [&](std::size_t lo, std::size_t hi) {
        gelu_backward_from_output_kernel_range(g + lo, x + lo, y + lo, dx + lo, hi - lo);
      },
      parallel_unit);
}

}  // namespace detail

/// xshard.gelu with an explicit mode. x: any rank, float or double.
template <class E>
detail::composite_result_t<E> gelu(const E& x, gelu_approximate approximate, composite_mode mode) {
  const auto scope = detail::composite_trace(composite_id::gelu, mode);
  using T = detail::composite_value_t<E>;
  static_assert(detail::composite_real_v<T>, "xshard::gelu(x) requires x's value_type to be float or double");
  using R = detail::composite_result_t<E>;
  std::optional<R> keep;
  const R& xc = detail::contiguous<R>(x, keep);
  R y = detail::composite_out<R>(xc.shape());
  if (mode == composite_mode::decompose)
    detail::gelu_decomposition<T>(xc.data(), y.data(), xc.size(), approximate);
  else
    detail::gelu_kernel<T>(xc.data(), y.data(), xc.size(), approximate);
  return y;
}

/// xshard.gelu, mode chosen by composite_policy ("gelu").
template <class E>
detail::composite_result_t<E> gelu(const E& x, gelu_approximate approximate = gelu_approximate::none) {
  return gelu(x, approximate, composite_policy::get(composite_id::gelu));
}
template <class E>
detail::composite_result_t<E> gelu(const E& x, std::string_view approximate) {
  return gelu(x, parse_gelu_approximate(approximate));
}

/// xshard.gelu_backward with an explicit mode: the gradient w.r.t. x of
/// gelu(x), given the output gradient `grad` (same shape as x).
template <class G, class E>
detail::composite_result_t<E> gelu_backward(const G& grad, const E& x, gelu_approximate approximate,
                                            composite_mode mode) {
  const auto scope = detail::composite_trace(composite_id::gelu_backward, mode);
  using T = detail::composite_value_t<E>;
  static_assert(detail::composite_real_v<T>,
                "xshard::gelu_backward(grad, x) requires x's value_type to be float or double");
  static_assert(std::is_same_v<detail::composite_value_t<G>, T>,
                "xshard::gelu_backward(grad, x) requires grad and x to have the same value_type");
  using R = detail::composite_result_t<E>;
  std::optional<R> keep_x, keep_g;
  const R& xc = detail::contiguous<R>(x, keep_x);
  detail::require_same_shape(grad, xc, "gelu_backward", "grad", "x");
  const R& gc = detail::contiguous<R>(grad, keep_g);
  R dx = detail::composite_out<R>(xc.shape());
  if (mode == composite_mode::decompose)
    detail::gelu_backward_decomposition<T>(gc.data(), xc.data(), dx.data(), xc.size(), approximate);
  else
    detail::gelu_backward_kernel<T>(gc.data(), xc.data(), dx.data(), xc.size(), approximate);
  return dx;
}

/// xshard.gelu_backward, mode chosen by composite_policy ("gelu_backward").
template <class G, class E>
detail::composite_result_t<E> gelu_backward(const G& grad, const E& x,
                                            gelu_approximate approximate = gelu_approximate::none) {
  return gelu_backward(grad, x, approximate, composite_policy::get(composite_id::gelu_backward));
}
template <class G, class E>
detail::composite_result_t<E> gelu_backward(const G& grad, const E& x, std::string_view approximate) {
  return gelu_backward(grad, x, parse_gelu_approximate(approximate));
}

/// xshard.gelu_backward given also the forward's output y = gelu(x, approximate)
/// (what a backward that kept y, or recomputed it, already holds): the
/// erf form's kernel reads the cdf off y / x instead of evaluating erf (on
/// train_mlp's step, 4.2% -> 2.5% of one AVX-512 thread's time). The result is gelu_backward(grad, x)'s to a few ulp of
/// the cdf, not bit for bit. The tanh form (whose 1 - tanh^2 would lose
/// bits taken from y) and the decomposition run gelu_backward(grad, x).
/// Same trace event and policy entry as gelu_backward.
template <class G, class E, class Y>
detail::composite_result_t<E> gelu_backward_from_output(const G& grad, const E& x, const Y& y,
                                                        gelu_approximate approximate = gelu_approximate::none) {
  const composite_mode mode = composite_policy::get(composite_id::gelu_backward);
  if (approximate != gelu_approximate::none || mode == composite_mode::decompose)
    return gelu_backward(grad, x, approximate, mode);
  const auto scope = detail::composite_trace(composite_id::gelu_backward, mode);
  using T = detail::composite_value_t<E>;
  static_assert(detail::composite_real_v<T>,
                "xshard::gelu_backward_from_output(grad, x, y) requires x's value_type to be float or double");
  static_assert(std::is_same_v<detail::composite_value_t<G>, T> && std::is_same_v<detail::composite_value_t<Y>, T>,
                "xshard::gelu_backward_from_output(grad, x, y) requires grad, x and y to have the same value_type");
  using R = detail::composite_result_t<E>;
  std::optional<R> keep_x, keep_g, keep_y;
  const R& xc = detail::contiguous<R>(x, keep_x);
  detail::require_same_shape(grad, xc, "gelu_backward_from_output", "grad", "x");
  detail::require_same_shape(y, xc, "gelu_backward_from_output", "y", "x");
  const R& gc = detail::contiguous<R>(grad, keep_g);
  const R& yc = detail::contiguous<R>(y, keep_y);
  R dx = detail::composite_out<R>(xc.shape());
  detail::gelu_backward_from_output_kernel<T>(gc.data(), xc.data(), yc.data(), dx.data(), xc.size());
  return dx;
}

}  // namespace xshard
