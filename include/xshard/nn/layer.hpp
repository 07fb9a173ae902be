// xshard/nn/layer.hpp - the layer protocol: typed functors whose parameters
// live outside them, so a stack of layers can keep its parameters stacked on
// a leading dim (scan/scan_layers.hpp).
//
//   struct L {
//     using params = std::tuple<xt::xtensor<T, 2>, ...>;  // tensors, in order
//     using input = ...; using output = ...; using residuals = ...;
//     std::pair<output, residuals> forward(const params&, const input&) const;
//     std::pair<params, input> vjp(const params&, const residuals&, const output& gy) const;
//     // forward and vjp may be templates over the params argument (any
//     // tuple of tensor expressions, e.g. views of a stacked tensor): then
//     // scan_layers hands them views of the stack instead of copies.
//     static constexpr std::array<std::string_view, N> param_names{...};   // for error messages
//   };
//
// vjp returns the parameter gradients (same structure as params) and the
// input gradient. A layer whose input and output types agree can be stacked.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <xtensor/xtensor.hpp>

#include "../einsum/einsum.hpp"
#include "../einsum/grad.hpp"

namespace xshard {

template <class L>
concept layer = requires {
  typename L::params;
  typename L::input;
  typename L::output;
  typename L::residuals;
  L::param_names;
}
&&requires(const L& l, const typename L::params& p, const typename L::input& x, const typename L::residuals& r,
           const typename L::output& gy) {
  { l.forward(p, x) } -> std::same_as<std::pair<typename L::output, typename L::residuals>>;
  { l.vjp(p, r, gy) } -> std::same_as<std::pair<typename L::params, typename L::input>>;
};

/// A layer whose output can feed its own input (stackable).
template <class L>
concept stackable_layer = layer<L> && std::is_same_v<typename L::input, typename L::output>;

/// y = einsum("...n,mn->...m", x, W) + b on rank-R activations (the einsum
/// linear: leading dims are never flattened). Residuals: the input.
template <class T, std::size_t R = 2>
struct linear_layer {
  using params = std::tuple<xt::xtensor<T, 2>, xt::xtensor<T, 1>>;  // W [m, n], b [m]
  using input = xt::xtensor<T, R>;
  using output = xt::xtensor<T, R>;
  using residuals = input;
  static constexpr std::array<std::string_view, 2> param_names{"weight", "bias"};

  template <class P = params>
  std::pair<output, residuals> forward(const P& p, const input& x) const {
    output y = einsum<"...n,mn->...m">(x, std::get<0>(p));
    y += std::get<1>(p);
    return {std::move(y), x};
  }
  template <class P = params>
  std::pair<params, input> vjp(const P& p, const residuals& x, const output& gy) const {
    input dx = einsum_vjp<"...n,mn->...m", 0>(gy, x, std::get<0>(p));
    xt::xtensor<T, 2> dw = einsum_vjp<"...n,mn->...m", 1>(gy, x, std::get<0>(p));
    xt::xtensor<T, 1> db = broadcast_vjp<"...m", "m">(gy);
    return {params{std::move(dw), std::move(db)}, std::move(dx)};
  }
};

/// y = tanh(x W^T + b): a linear followed by an elementwise activation, so
/// its residuals hold an einsum output (h = x W^T + b) besides the input.
/// forward_saving_dots / restore let scan_layers keep only the einsum output
/// (remat::dots_saveable) and recompute the rest.
template <class T, std::size_t R = 2>
struct tanh_linear_layer {
  using params = std::tuple<xt::xtensor<T, 2>, xt::xtensor<T, 1>>;
  using input = xt::xtensor<T, R>;
  using output = xt::xtensor<T, R>;
  struct residuals {
    input x;
    output y;  // tanh(h): what the backward needs (1 - y^2)
  };
  using dots = output;  // h, the einsum's output
  static constexpr std::array<std::string_view, 2> param_names{"weight", "bias"};

  template <class P>
  static output pre_activation(const P& p, const input& x) {
    output h = einsum<"...n,mn->...m">(x, std::get<0>(p));
    h += std::get<1>(p);
    return h;
  }
  template <class P = params>
  std::pair<output, residuals> forward(const P& p, const input& x) const {
    output y = xt::tanh(pre_activation(p, x));
    return {y, residuals{x, y}};
  }
  template <class P = params>
  std::pair<params, input> vjp(const P& p, const residuals& r, const output& gy) const {
    const output gh = gy * (T(1) - r.y * r.y);
    input dx = einsum_vjp<"...n,mn->...m", 0>(gh, r.x, std::get<0>(p));
    xt::xtensor<T, 2> dw = einsum_vjp<"...n,mn->...m", 1>(gh, r.x, std::get<0>(p));
    xt::xtensor<T, 1> db = broadcast_vjp<"...m", "m">(gh);
    return {params{std::move(dw), std::move(db)}, std::move(dx)};
  }
  /// The forward that remat::dots_saveable runs: the output and the einsum
  /// output to keep.
  template <class P = params>
  std::pair<output, dots> forward_saving_dots(const P& p, const input& x) const {
    output h = pre_activation(p, x);
    output y = xt::tanh(h);
    return {std::move(y), std::move(h)};
  }
  /// The residuals again from the input and the saved einsum output (no
  /// einsum recomputed).
  template <class P = params>
  residuals restore(const P&, const input& x, const dots& h) const {
    return residuals{x, xt::tanh(h)};
  }
};

}  // namespace xshard
