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
//
// Layers are rarely written this way by hand: graph::layer<Def>
// (graph/graph.hpp) derives all of it from a forward written once, and the
// layers of nn/ (linear_layer, tanh_linear_layer in nn/linear.hpp,
// mlp_block in nn/mlp.hpp) are such definitions.
#pragma once

#include <concepts>
#include <type_traits>
#include <utility>

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

}  // namespace xshard
