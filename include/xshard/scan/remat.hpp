// xshard/scan/remat.hpp - rematerialisation policies: what a layer's
// forward keeps for its backward. One rule, used by the run-time loop
// (scan_layers.hpp) and the unrolled form (scan_layers_unrolled.hpp).
//
//   remat::save_all       the layer's residuals
//   remat::recompute      only the layer's input; the backward reruns the
//                         forward, so residual memory is one layer's,
//                         whatever the depth
//   remat::dots_saveable  the input and the einsum outputs (JAX's
//                         dots_saveable), for layers that provide
//                         forward_saving_dots / restore; others save all.
//                         A layer whose dots hold its input (the graph
//                         layers) restores from them alone and moves them
//                         (restore(p, dots&&)): no second copy of the input
//
// remat_name(policy) spells a policy as above; remat_policies lists them.
//
// Gradients are identical (bit for bit) under every policy.
//
// Also shared by both forms: detail::in_layer, which names the layer and
// the pass in an xshard::error thrown from inside a layer.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "../core/error.hpp"
#include "../core/workspace.hpp"
#include "../nn/layer.hpp"

namespace xshard {

enum class remat { save_all, recompute, dots_saveable };

/// Every policy, in declaration order.
inline constexpr remat remat_policies[] = {remat::save_all, remat::recompute, remat::dots_saveable};

/// The policy's name as spelled in code: "save_all", "recompute",
/// "dots_saveable" (for command lines, traces and benchmark labels).
constexpr std::string_view remat_name(remat policy) noexcept {
  switch (policy) {
    case remat::save_all:
      return "save_all";
    case remat::recompute:
      return "recompute";
    case remat::dots_saveable:
      return "dots_saveable";
  }
  return "?";
}

namespace detail {

template <class L>
concept saves_dots = requires(const L& l, const typename L::params& p, const typename L::input& x,
                              const typename L::dots& d) {
  { l.forward_saving_dots(p, x) } -> std::same_as<std::pair<typename L::output, typename L::dots>>;
  { l.restore(p, x, d) } -> std::same_as<typename L::residuals>;
};

/// A layer whose kept dots alone give back its residuals (the graph layers:
/// their dots hold the input) also has restore(p, dots&&); remat then keeps
/// no copy of the input beside them.
template <class L>
concept restores_from_dots = saves_dots<L> && requires(const L& l, const typename L::params& p, typename L::dots&& d) {
  { l.restore(p, std::move(d)) } -> std::same_as<typename L::residuals>;
};

/// Runs f() as layer i's `pass` ("forward" or "backward") of a stack: an
/// xshard::error from inside the layer (an einsum's shape check, say) is
/// rethrown with the layer named, "<message> (scan_layers: layer 2, forward)".
template <class F>
decltype(auto) in_layer(std::size_t i, const char* pass, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const error& e) {
    throw error(std::string(e.what()) + " (scan_layers: layer " + std::to_string(i) + ", " + pass + ")");
  }
}

template <class L, bool Saves>
struct dots_of {
  struct type {};
};
template <class L>
struct dots_of<L, true> {
  using type = typename L::dots;
};

}  // namespace detail

/// The policy a layer actually runs: dots_saveable falls back to save_all
/// for layers without forward_saving_dots / restore.
template <layer L>
constexpr remat effective_policy(remat policy) {
  if (policy == remat::dots_saveable && !detail::saves_dots<L>) return remat::save_all;
  return policy;
}

/// What one layer's forward kept for its backward under a policy.
template <layer L>
struct remat_saved {
  std::optional<typename L::residuals> residuals;  // save_all
  std::optional<typename L::input> input;          // recompute; dots_saveable unless restores_from_dots
  std::optional<typename detail::dots_of<L, detail::saves_dots<L>>::type> dots;  // dots_saveable
  /// Hands what it holds to the current workspace (detail::recycle).
  friend void recycle_parts(remat_saved&& s) {
    detail::recycle(std::move(s.residuals));
    detail::recycle(std::move(s.input));
    detail::recycle(std::move(s.dots));
  }
};

/// One layer's forward under `policy`: its output and what it keeps. `p`
/// is the layer's params or anything its forward accepts in their place.
template <layer L, class P>
std::pair<typename L::output, remat_saved<L>> remat_forward(const L& l, const P& p, const typename L::input& x,
                                                            remat policy) {
  remat_saved<L> s;
  switch (effective_policy<L>(policy)) {
    case remat::save_all: {
      auto [y, r] = l.forward(p, x);
      s.residuals.emplace(std::move(r));
      return {std::move(y), std::move(s)};
    }
    case remat::recompute: {
      s.input.emplace(detail::fresh_copy_of(x));
      auto [y, r] = l.forward(p, x);
      detail::recycle(std::move(r));  // not kept: to the workspace, if any
      return {std::move(y), std::move(s)};
    }
    case remat::dots_saveable:
      if constexpr (detail::saves_dots<L>) {
        if constexpr (!detail::restores_from_dots<L>) s.input.emplace(detail::fresh_copy_of(x));
        auto [y, d] = l.forward_saving_dots(p, x);
        s.dots.emplace(std::move(d));
        return {std::move(y), std::move(s)};
      }
      break;
  }
  throw error("xshard: remat_forward: unknown policy");
}

/// The layer's residuals again, from what remat_forward kept (consumed).
template <layer L, class P>
typename L::residuals remat_residuals(const L& l, const P& p, remat_saved<L>&& s) {
  if (s.residuals) return std::move(*s.residuals);
  if constexpr (detail::saves_dots<L>)
    if (s.dots) {
      if constexpr (detail::restores_from_dots<L>)
        return l.restore(p, std::move(*s.dots));
      else
        return l.restore(p, *s.input, *s.dots);
    }
  if (s.input) {
    auto [y, r] = l.forward(p, *s.input);
    detail::recycle(std::move(y));  // not needed: to the workspace, if any
    return std::move(r);
  }
  throw error("xshard: remat_residuals: nothing was saved for this layer");
}

}  // namespace xshard
