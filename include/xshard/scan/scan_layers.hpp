// xshard/scan/scan_layers.hpp - a stack of layers (nn/layer.hpp), forward
// and backward, with rematerialisation policies.
//
//   xshard::linear_layer<float> L;
//   auto stacked = xshard::stack_params<decltype(L)>(per_layer_params);  // tensors gain a leading layer dim
//   auto y = xshard::scan_layers(L, stacked, x);                          // a run-time loop over layers
//   auto [grads, dx] = xshard::scan_layers_vjp(L, stacked, x, gy, xshard::remat::recompute);
//
//   auto layers = boost::hana::make_tuple(L1{}, L2{}, L3{});              // different types:
//   auto y2 = xshard::scan_layers(layers, hana_params, x);                 // unrolled at compile time
//
// Policies: scan/remat.hpp. The heterogeneous (unrolled) form:
// scan/scan_layers_unrolled.hpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "../core/error.hpp"
#include "../nn/layer.hpp"
#include "remat.hpp"
#include "../trace/trace.hpp"

namespace xshard {

namespace detail {

template <class T>
struct stacked_tensor;
template <class T, std::size_t R>
struct stacked_tensor<xt::xtensor<T, R>> {
  using type = xt::xtensor<T, R + 1>;
};
template <class P>
struct stacked_params_of;
template <class... E>
struct stacked_params_of<std::tuple<E...>> {
  using type = std::tuple<typename stacked_tensor<E>::type...>;
};

}  // namespace detail

/// The parameters of a homogeneous stack: each of the layer's parameter
/// tensors with a leading layer dim.
template <layer L>
using stacked_params = typename detail::stacked_params_of<typename L::params>::type;

/// Stacks per-layer parameters; a layer whose parameter shape differs from
/// layer 0's is an xshard::error naming the layer index and the parameter.
template <layer L>
stacked_params<L> stack_params(const std::vector<typename L::params>& layers) {
  if (layers.empty()) throw error("xshard: stack_params: no layers");
  stacked_params<L> out;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          const auto& first = std::get<I>(layers[0]);
          for (std::size_t l = 1; l < layers.size(); ++l)
            if (!std::equal(first.shape().begin(), first.shape().end(), std::get<I>(layers[l]).shape().begin()))
              throw error("xshard: stack_params: layer " + std::to_string(l) + "'s parameter \"" +
                          std::string(L::param_names[I]) + "\" has another shape than layer 0's");
          using S = std::tuple_element_t<I, stacked_params<L>>;
          std::array<std::size_t, S::rank> shape{};
          shape[0] = layers.size();
          for (std::size_t d = 0; d + 1 < S::rank; ++d) shape[d + 1] = first.shape()[d];
          std::get<I>(out) = S::from_shape(shape);
          for (std::size_t l = 0; l < layers.size(); ++l) xt::view(std::get<I>(out), l) = std::get<I>(layers[l]);
        }(),
        ...);
  }
  (std::make_index_sequence<std::tuple_size_v<typename L::params>>{});
  return out;
}

/// Layer l's parameters out of a stack.
template <layer L>
typename L::params layer_params(const stacked_params<L>& s, std::size_t l) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return typename L::params{std::tuple_element_t<I, typename L::params>(xt::view(std::get<I>(s), l))...};
  }
  (std::make_index_sequence<std::tuple_size_v<typename L::params>>{});
}

/// Number of layers in a stack (checked equal across its tensors).
template <layer L>
std::size_t stack_depth(const stacked_params<L>& s) {
  const std::size_t n = std::get<0>(s).shape()[0];
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          if (std::get<I>(s).shape()[0] != n)
            throw error("xshard: scan_layers: parameter \"" + std::string(L::param_names[I]) + "\" stacks " +
                        std::to_string(std::get<I>(s).shape()[0]) + " layers, \"" + std::string(L::param_names[0]) +
                        "\" " + std::to_string(n));
        }(),
        ...);
  }
  (std::make_index_sequence<std::tuple_size_v<typename L::params>>{});
  return n;
}

/// Forward through a homogeneous stack: a run-time loop over the layers.
template <stackable_layer L>
typename L::output scan_layers(const L& l, const stacked_params<L>& params, typename L::input x) {
  const std::size_t n = stack_depth<L>(params);
  for (std::size_t i = 0; i < n; ++i) {
    const trace_me t("scan_layers/forward", {{"layer", i}});
    x = l.forward(layer_params<L>(params, i), x).first;
  }
  return x;
}

/// Gradients of sum(gy * scan_layers(l, params, x)): the stacked parameter
/// gradients and the input gradient, under remat policy `policy`.
template <stackable_layer L>
std::pair<stacked_params<L>, typename L::input> scan_layers_vjp(const L& l, const stacked_params<L>& params,
                                                                const typename L::input& x,
                                                                const typename L::output& gy, remat policy) {
  const std::size_t n = stack_depth<L>(params);
  std::vector<remat_saved<L>> saved;
  saved.reserve(n);
  typename L::input cur = x;
  for (std::size_t i = 0; i < n; ++i) {
    const trace_me t("scan_layers/forward", {{"layer", i}});
    auto [y, s] = remat_forward(l, layer_params<L>(params, i), cur, policy);
    saved.push_back(std::move(s));
    cur = std::move(y);
  }
  std::vector<typename L::params> grads;
  grads.reserve(n);
  typename L::output g = gy;
  for (std::size_t i = n; i-- > 0;) {
    const trace_me t("scan_layers/backward", {{"layer", i}});
    const auto p = layer_params<L>(params, i);
    auto [gp, gx] = l.vjp(p, remat_residuals(l, p, std::move(saved[i])), g);
    saved.pop_back();  // free as we go
    grads.push_back(std::move(gp));
    g = std::move(gx);
  }
  std::reverse(grads.begin(), grads.end());
  return {stack_params<L>(grads), std::move(g)};
}

}  // namespace xshard
