// xshard/nn/linear.hpp - the einsum linear layer (torch_xla's patched linear).
//
//   y = einsum("...n,mn->...m", x, weight) + bias
//
// Two forms: `linear<T>`, a module that owns its weight and bias, and the
// layers `linear_layer<T, R>` and `tanh_linear_layer<T, R>` (the layer
// protocol of nn/layer.hpp, parameters outside, for scan_layers), written
// once as graphs (graph/graph.hpp): their vjp and remat residuals are
// derived.
//
// The leading dims of x are never flattened: a 2-D sharding of x (batch and
// sequence) survives the layer, which is why torch_xla moved its linear to
// einsum. The backward is derived, never written by hand:
//   dx = einsum_grad<"...n,mn->...m", 0>  = "...m,mn->...n"
//   dW = einsum_grad<"...n,mn->...m", 1>  = "...m,...n->mn"
//   db = broadcast_grad<"...m", "m">      = "...m->m"
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <tuple>
#include <utility>
#include <xtensor/xtensor.hpp>

#include "../einsum/einsum.hpp"
#include "../einsum/grad.hpp"
#include "../graph/graph.hpp"

namespace xshard {

namespace detail {

/// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", 2014): the initialisation's generator. Small enough to keep
/// <random> (about 0.07 s of every including TU with g++ 12) out of this
/// header; its stream is fixed by the seed on every platform.
class splitmix64 {
 public:
  constexpr explicit splitmix64(std::uint64_t seed) noexcept : state_(seed) {}

  constexpr std::uint64_t operator()() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  /// Uniform on [lo, hi): the top 53 bits as a double in [0, 1), scaled.
  constexpr double uniform(double lo, double hi) noexcept {
    const double u = static_cast<double>((*this)() >> 11) * 0x1.0p-53;
    return lo + (hi - lo) * u;
  }

 private:
  std::uint64_t state_;
};

}  // namespace detail

template <class T>
class linear {
 public:
  static constexpr fixed_string equation = "...n,mn->...m";

  struct gradients {
    xt::xtensor<T, 2> weight;
    std::optional<xt::xtensor<T, 1>> bias;
  };

  /// PyTorch's default initialisation: U(-1/sqrt(in), 1/sqrt(in)), the
  /// weight's elements in row-major order then the bias's, drawn from a
  /// SplitMix64 stream started at `seed` (the same values on every platform).
  linear(std::size_t in_features, std::size_t out_features, bool with_bias = true, std::uint64_t seed = 0)
      : weight_(xt::xtensor<T, 2>::from_shape({out_features, in_features})) {
    detail::splitmix64 rng(seed);
    const double bound = in_features ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0.0;
    // (In float, rounding can give +bound itself.)
    for (T& w : weight_) w = static_cast<T>(rng.uniform(-bound, bound));
    if (with_bias) {
      bias_ = xt::xtensor<T, 1>::from_shape({out_features});
      for (T& b : *bias_) b = static_cast<T>(rng.uniform(-bound, bound));
    }
  }
  linear(xt::xtensor<T, 2> weight, std::optional<xt::xtensor<T, 1>> bias = std::nullopt)
      : weight_(std::move(weight)), bias_(std::move(bias)) {
    if (bias_ && bias_->shape()[0] != weight_.shape()[0])
      throw error("xshard: linear bias has " + std::to_string(bias_->shape()[0]) + " entries but the weight has " +
                  std::to_string(weight_.shape()[0]) + " output features");
  }

  const xt::xtensor<T, 2>& weight() const { return weight_; }
  xt::xtensor<T, 2>& weight() { return weight_; }
  const std::optional<xt::xtensor<T, 1>>& bias() const { return bias_; }
  std::optional<xt::xtensor<T, 1>>& bias() { return bias_; }

  /// y[..., m] = sum_n x[..., n] W[m, n] + b[m]; keeps every leading dim.
  template <class X>
  auto forward(const X& x) const {
    auto y = einsum<equation>(x, weight_);
    if (bias_) y += *bias_;
    return y;
  }

  /// Input gradient and parameter gradients for the output gradient gy.
  template <class X, class G>
  auto backward(const X& x, const G& gy) const {
    auto dx = einsum_vjp<equation, 0>(gy, x, weight_);
    gradients g{einsum_vjp<equation, 1>(gy, x, weight_), std::nullopt};
    if (bias_) g.bias = broadcast_vjp<"...m", "m">(gy);
    return std::pair{std::move(dx), std::move(g)};
  }

 private:
  xt::xtensor<T, 2> weight_;
  std::optional<xt::xtensor<T, 1>> bias_;
};

/// The definitions of the layers below (graph::layer takes them).
template <class T, std::size_t R>
struct linear_def {
  using input = xt::xtensor<T, R>;
  using params = std::tuple<xt::xtensor<T, 2>, xt::xtensor<T, 1>>;  // W [m, n], b [m]
  static constexpr std::array<std::string_view, 2> param_names{"weight", "bias"};
  template <class X, class W, class B>
  static auto forward(X x, W w, B b) {
    return graph::einsum<"...n,mn->...m">(x, w) + b;
  }
};
template <class T, std::size_t R>
struct tanh_linear_def : linear_def<T, R> {
  template <class X, class W, class B>
  static auto forward(X x, W w, B b) {
    return graph::tanh(linear_def<T, R>::forward(x, w, b));
  }
};

/// y = einsum("...n,mn->...m", x, W) + b on rank-R activations (the einsum
/// linear: leading dims are never flattened). The vjp is derived:
///   dx = einsum_grad<"...n,mn->...m", 0>  = "...m,mn->...n"
///   dW = einsum_grad<"...n,mn->...m", 1>  = "...m,...n->mn"
///   db = the sum of gy over its broadcast dims
template <class T, std::size_t R = 2>
struct linear_layer : graph::layer<linear_def<T, R>> {};

/// y = tanh(x W^T + b): a linear followed by an elementwise activation.
/// remat::dots_saveable keeps the einsum's output and recomputes the bias
/// add and tanh in the backward.
template <class T, std::size_t R = 2>
struct tanh_linear_layer : graph::layer<tanh_linear_def<T, R>> {};

}  // namespace xshard
