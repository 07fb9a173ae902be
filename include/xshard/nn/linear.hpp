// xshard/nn/linear.hpp - the einsum linear layer (torch_xla's patched linear).
//
//   y = einsum("...n,mn->...m", x, weight) + bias
//
// The leading dims of x are never flattened: a 2-D sharding of x (batch and
// sequence) survives the layer, which is why torch_xla moved its linear to
// einsum. The backward is derived, never written by hand:
//   dx = einsum_grad<"...n,mn->...m", 0>  = "...m,mn->...n"
//   dW = einsum_grad<"...n,mn->...m", 1>  = "...m,...n->mn"
//   db = broadcast_grad<"...m", "m">      = "...m->m"
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <utility>
#include <xtensor/xtensor.hpp>

#include "../einsum/einsum.hpp"
#include "../einsum/grad.hpp"

namespace xshard {

template <class T>
class linear {
 public:
  static constexpr fixed_string equation = "...n,mn->...m";

  struct gradients {
    xt::xtensor<T, 2> weight;
    std::optional<xt::xtensor<T, 1>> bias;
  };

  /// PyTorch's default initialisation: U(-1/sqrt(in), 1/sqrt(in)).
  linear(std::size_t in_features, std::size_t out_features, bool with_bias = true, std::uint64_t seed = 0)
      : weight_(xt::xtensor<T, 2>::from_shape({out_features, in_features})) {
    std::mt19937_64 rng(seed);
    const T bound = in_features ? T(1) / std::sqrt(static_cast<T>(in_features)) : T(0);
    std::uniform_real_distribution<T> u(-bound, bound);
    for (T& w : weight_) w = u(rng);
    if (with_bias) {
      bias_ = xt::xtensor<T, 1>::from_shape({out_features});
      for (T& b : *bias_) b = u(rng);
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

}  // namespace xshard
