// xshard/scan/scan_layers_unrolled.hpp - a heterogeneous stack: a
// boost::hana::tuple of layers (nn/layer.hpp; each its own type, params a
// hana::tuple of their params), unrolled at compile time.
//
// Example (compiled in tests/compile/doc_scan.cpp):
//   auto layers = boost::hana::make_tuple(L1{}, L2{}, L3{});
//   auto params = boost::hana::make_tuple(p1, p2, p3);  // L1::params, L2::params, L3::params
//   auto y = xshard::scan_layers(layers, params, x);
//   auto [grads, dx] = xshard::scan_layers_vjp(layers, params, x, gy, xshard::remat::recompute);
//   // grads: hana::tuple<L1::params, L2::params, L3::params>; dx: L1::input
//
// Activations may change type between layers: layer i's output type must be
// layer i+1's input type. A stack that breaks this, a params entry of another
// type than its layer's params, or an entry that is not a layer, is a compile
// error naming the index, e.g.
//
//   'xshard::layer_output_is_not_next_input<1, L2, L3>::value' evaluates to false
//   static assertion failed: xshard::scan_layers: layer I's output type is not layer I+1's input type
//
// Instantiation depth is flat in the number of layers: every layer is one
// element of a comma fold over an index_sequence (no recursion through the
// layers), and activations, saved residuals and gradients live in
// hana::basic_tuple slots (flat multiple inheritance; hana::at_c is one
// derived-to-base cast). A layer's output replaces its input in the slots as
// the fold goes, so the forward holds two activations at a time.
//
// Policies (what each layer keeps for its backward): scan/remat.hpp; the
// gradients are identical (bit for bit) under every policy and equal those
// of the homogeneous run-time loop (scan/scan_layers.hpp) on the same layers.
#pragma once

#include <array>
#include <boost/hana/at.hpp>           // at_c on hana::tuple
#include <boost/hana/basic_tuple.hpp>  // the slots: flat, default-constructible
#include <boost/hana/tuple.hpp>
#include <cstddef>
#include <optional>
#include <type_traits>
#include <utility>

#include "../nn/layer.hpp"
#include "../trace/trace.hpp"
#include "remat.hpp"

namespace xshard {

// Compile-time diagnostics of a heterogeneous stack: each carries the
// offending index (and the layer types involved), so GCC and Clang both
// print it (`'...<1, L2, L3>::value' evaluates to false`).
// clang-format off
template <int Index, class Entry> struct scan_layers_entry_is_not_a_layer { static constexpr bool value = false; };
template <int Layers, int Params> struct scan_layers_params_count_mismatch { static constexpr bool value = false; };
template <int Index, class Layer, class NextLayer> struct layer_output_is_not_next_input { static constexpr bool value = false; };
template <int Index, class Layer> struct params_entry_is_not_layer_params { static constexpr bool value = false; };
// clang-format on

namespace detail {

/// What a stack that failed its checks returns, so that the static_assert
/// naming the problem is the only error: converts to anything (declared,
/// never defined: the program does not compile anyway), and
/// `auto [grads, dx] = ...` decomposes the pair.
struct invalid_scan_stack {
  template <class T>
  operator T() const;  // NOLINT(google-explicit-constructor)
};
struct invalid_scan_stack_pair {
  invalid_scan_stack first, second;
};

/// The checks below compare types by plain loops over constexpr arrays of
/// std::is_same_v, each array made by one flat pack expansion instead of
/// recursive templates. (Not by comparing addresses of one variable per
/// type: GCC 12 with -fsanitize=undefined does not fold `&a != &b` for two
/// distinct variables in a constant expression, which replaced the named
/// diagnostics with "is not a constant expression".)
template <class... T>
struct type_list {};

/// same_types(type_list<A...>, type_list<B...>)[i] == std::is_same_v<A_i, B_i>
/// (one extra `true` at the end, so that the array is never empty).
/// @pre sizeof...(A) == sizeof...(B)
template <class... A, class... B>
constexpr std::array<bool, sizeof...(A) + 1> same_types(type_list<A...>, type_list<B...>) {
  return {std::is_same_v<A, B>..., true};
}

/// type_list<T...> without its first element, flat.
template <class First, class... Rest>
constexpr type_list<Rest...> drop_first(type_list<First, Rest...>) {
  return {};
}

/// The first element of a pack, flat (no recursion).
template <class First, class...>
struct first_of {
  using type = First;
};
/// The last element of a pack, flat: a comma fold of type_identity values.
template <class... T>
using last_of = typename decltype((std::type_identity<T>{}, ...))::type;

/// A stack's input (layer 0's input) and output (the last layer's output).
template <class... L>
using stack_input_t = typename first_of<L...>::type::input;
template <class... L>
using stack_output_t = typename last_of<L...>::output;

/// Index of the first entry of L... that is not a layer, or -1.
template <class... L>
constexpr int first_non_layer() {
  constexpr bool ok[] = {layer<L>..., true};  // never empty
  for (std::size_t i = 0; i < sizeof...(L); ++i)
    if (!ok[i]) return static_cast<int>(i);
  return -1;
}

/// Index i of the first layer whose output type is not layer i+1's input
/// type, or -1. @pre every L is a layer.
template <class... L>
constexpr int first_chain_mismatch() {
  // same[i]: layer i's output is the input of layer i + 1 (of `void` for the last).
  constexpr auto same =
      same_types(type_list<typename L::output...>{}, drop_first(type_list<typename L::input..., void>{}));
  for (std::size_t i = 0; i + 1 < sizeof...(L); ++i)
    if (!same[i]) return static_cast<int>(i);
  return -1;
}

/// Index of the first params entry whose type is not its layer's params
/// type, or -1. @pre every L is a layer; as many P as L.
template <class... L, class... P>
constexpr int first_params_mismatch(std::type_identity<P>...) {
  constexpr auto same = same_types(type_list<typename L::params...>{}, type_list<P...>{});
  for (std::size_t i = 0; i < sizeof...(L); ++i)
    if (!same[i]) return static_cast<int>(i);
  return -1;
}

/// The layer and params type lists of a stack, checked in order: every entry
/// a layer, one params entry per layer, outputs feed inputs, params types.
template <class Layers, class Params>
struct scan_stack;
template <class... L, class... P>
struct scan_stack<boost::hana::tuple<L...>, boost::hana::tuple<P...>> {
  static constexpr std::size_t depth = sizeof...(L);
  static constexpr int non_layer = first_non_layer<L...>();
  static constexpr bool counts_agree = sizeof...(L) == sizeof...(P);
  static constexpr int chain = [] {
    if constexpr (non_layer < 0) return first_chain_mismatch<L...>();
    return -1;
  }();
  static constexpr int params = [] {
    if constexpr (non_layer < 0 && counts_agree) return first_params_mismatch<L...>(std::type_identity<P>{}...);
    return -1;
  }();
  static constexpr bool ok = (depth > 0) && (non_layer < 0) && counts_agree && (chain < 0) && (params < 0);

  /// A static_assert naming the first problem; returns true so the caller's
  /// static_assert adds no second, anonymous error.
  static constexpr bool diagnose() {
    if constexpr (depth == 0) {
      static_assert(depth > 0, "xshard::scan_layers: a stack needs at least one layer");
    } else if constexpr (non_layer >= 0) {
      using entry =
          std::remove_cvref_t<decltype(boost::hana::at_c<non_layer>(std::declval<boost::hana::tuple<L...>>()))>;
      static_assert(scan_layers_entry_is_not_a_layer<non_layer, entry>::value,
                    "xshard::scan_layers: entry I of the layers tuple is not a layer (nn/layer.hpp)");
    } else if constexpr (!counts_agree) {
      static_assert(scan_layers_params_count_mismatch<int(sizeof...(L)), int(sizeof...(P))>::value,
                    "xshard::scan_layers: one params entry per layer");
    } else if constexpr (chain >= 0) {
      using tuple = boost::hana::tuple<L...>;
      using layer_i = std::remove_cvref_t<decltype(boost::hana::at_c<chain>(std::declval<tuple>()))>;
      using layer_next = std::remove_cvref_t<decltype(boost::hana::at_c<chain + 1>(std::declval<tuple>()))>;
      static_assert(layer_output_is_not_next_input<chain, layer_i, layer_next>::value,
                    "xshard::scan_layers: layer I's output type is not layer I+1's input type");
    } else if constexpr (params >= 0) {
      using layer_i =
          std::remove_cvref_t<decltype(boost::hana::at_c<params>(std::declval<boost::hana::tuple<L...>>()))>;
      static_assert(params_entry_is_not_layer_params<params, layer_i>::value,
                    "xshard::scan_layers: params entry I is not of layer I's params type");
    }
    return true;
  }
};

/// Forward through a checked stack; each layer one element of a comma fold.
template <class... L, class... P, std::size_t... I>
auto unrolled_forward(const boost::hana::tuple<L...>& layers, const boost::hana::tuple<P...>& params,
                      const stack_input_t<L...>& x, std::index_sequence<I...>) {
  constexpr std::size_t n = sizeof...(L);
  // acts[i]: layer i's output, while layer i+1 needs it.
  boost::hana::basic_tuple<std::optional<typename L::output>...> acts;
  (
      [&] {
        const trace_me t("scan_layers/forward", {{"layer", I}});
        const auto& l = boost::hana::at_c<I>(layers);
        const auto& p = boost::hana::at_c<I>(params);
        auto step = [&](const auto& in) {
          in_layer(I, "forward", [&] { boost::hana::at_c<I>(acts).emplace(l.forward(p, in).first); });
        };
        if constexpr (I == 0) {
          step(x);
        } else {
          auto& in = boost::hana::at_c<I - 1>(acts);
          step(*in);
          in.reset();
        }
      }(),
      ...);
  return std::move(*boost::hana::at_c<n - 1>(acts));
}

/// Forward under a remat policy, then the backward in reverse layer order.
template <class... L, class... P, std::size_t... I>
auto unrolled_vjp(const boost::hana::tuple<L...>& layers, const boost::hana::tuple<P...>& params,
                  const stack_input_t<L...>& x, const stack_output_t<L...>& gy, remat policy,
                  std::index_sequence<I...>) {
  constexpr std::size_t n = sizeof...(L);
  boost::hana::basic_tuple<remat_saved<L>...> saved;
  {
    boost::hana::basic_tuple<std::optional<typename L::output>...> acts;
    (
        [&] {
          const trace_me t("scan_layers/forward", {{"layer", I}});
          const auto& l = boost::hana::at_c<I>(layers);
          const auto& p = boost::hana::at_c<I>(params);
          auto step = [&](const auto& in) {
            auto [y, s] = in_layer(I, "forward", [&] { return remat_forward(l, p, in, policy); });
            boost::hana::at_c<I>(saved) = std::move(s);
            if constexpr (I + 1 < n) boost::hana::at_c<I>(acts).emplace(std::move(y));  // the last output is unused
          };
          if constexpr (I == 0) {
            step(x);
          } else {
            auto& in = boost::hana::at_c<I - 1>(acts);
            step(*in);
            in.reset();
          }
        }(),
        ...);
  }
  // gx[i]: the gradient with respect to layer i's input; grads[i]: layer i's
  // parameter gradients. Backward: the fold visits i = n-1, ..., 0.
  boost::hana::basic_tuple<std::optional<typename L::input>...> gx;
  boost::hana::basic_tuple<std::optional<typename L::params>...> grads;
  (
      [&] {
        constexpr std::size_t i = n - 1 - I;
        const trace_me t("scan_layers/backward", {{"layer", i}});
        const auto& l = boost::hana::at_c<i>(layers);
        const auto& p = boost::hana::at_c<i>(params);
        auto& s = boost::hana::at_c<i>(saved);
        auto step = [&](const auto& g) {
          auto [gp, gin] = in_layer(i, "backward", [&] { return l.vjp(p, remat_residuals(l, p, std::move(s)), g); });
          s = {};  // free as we go
          boost::hana::at_c<i>(grads).emplace(std::move(gp));
          boost::hana::at_c<i>(gx).emplace(std::move(gin));
        };
        if constexpr (i + 1 == n) {
          step(gy);
        } else {
          auto& g = boost::hana::at_c<i + 1>(gx);
          step(*g);
          g.reset();
        }
      }(),
      ...);
  return std::pair<boost::hana::tuple<typename L::params...>, stack_input_t<L...>>{
      boost::hana::tuple<typename L::params...>(std::move(*boost::hana::at_c<I>(grads))...),
      std::move(*boost::hana::at_c<0>(gx))};
}

}  // namespace detail

/// Forward through a heterogeneous stack, unrolled: layer i's forward on
/// layer i-1's output, with its own params. `x` must convert to layer 0's
/// input type. Returns the last layer's output.
template <class... L, class... P, class X>
auto scan_layers(const boost::hana::tuple<L...>& layers, const boost::hana::tuple<P...>& params, const X& x) {
  using stack = detail::scan_stack<boost::hana::tuple<L...>, boost::hana::tuple<P...>>;
  static_assert(stack::diagnose());
  if constexpr (!stack::ok) {
    return detail::invalid_scan_stack{};
  } else if constexpr (!std::is_convertible_v<const X&, detail::stack_input_t<L...>>) {
    static_assert(std::is_convertible_v<const X&, detail::stack_input_t<L...>>,
                  "xshard::scan_layers: x must convert to layer 0's input type");
    return detail::invalid_scan_stack{};
  } else {
    return detail::unrolled_forward(layers, params, x, std::index_sequence_for<L...>{});
  }
}

/// Gradients of sum(gy * scan_layers(layers, params, x)) under remat policy
/// `policy`: {hana::tuple of each layer's parameter gradients (its params
/// type), the input gradient (layer 0's input type)}. `gy` must convert to
/// the last layer's output type.
template <class... L, class... P, class X, class G>
auto scan_layers_vjp(const boost::hana::tuple<L...>& layers, const boost::hana::tuple<P...>& params, const X& x,
                     const G& gy, remat policy) {
  using stack = detail::scan_stack<boost::hana::tuple<L...>, boost::hana::tuple<P...>>;
  static_assert(stack::diagnose());
  if constexpr (!stack::ok) {
    return detail::invalid_scan_stack_pair{};
  } else if constexpr (!std::is_convertible_v<const X&, detail::stack_input_t<L...>>) {
    static_assert(std::is_convertible_v<const X&, detail::stack_input_t<L...>>,
                  "xshard::scan_layers_vjp: x must convert to layer 0's input type");
    return detail::invalid_scan_stack_pair{};
  } else if constexpr (!std::is_convertible_v<const G&, detail::stack_output_t<L...>>) {
    static_assert(std::is_convertible_v<const G&, detail::stack_output_t<L...>>,
                  "xshard::scan_layers_vjp: gy must convert to the last layer's output type");
    return detail::invalid_scan_stack_pair{};
  } else {
    return detail::unrolled_vjp(layers, params, x, gy, policy, std::index_sequence_for<L...>{});
  }
}

}  // namespace xshard
