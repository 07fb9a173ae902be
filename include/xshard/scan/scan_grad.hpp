// xshard/scan/scan_grad.hpp - gradients of xshard::scan (JAX's lax.scan VJP)
// for steps that carry their own vjp, with rematerialisation policies.
//
// Example (compiled in tests/compile/doc_scan.cpp):
//   struct rnn_step {                                   // satisfies xshard::scan_step
//     using params = std::tuple<mat, mat, vec>;         // W [n,n], U [n,m], b [n]: shared by every step
//     using carry = mat;                                // h [b,n]
//     using x = mat;                                    // x_t [b,m]: one slice of xs [T,b,m]
//     using y = mat;                                    // y_t [b,n]
//     struct residuals { mat h, x, h_next; };           // what vjp needs (it gets no carry or x)
//     std::tuple<carry, y, residuals> forward(const params&, const carry& h, const x& x_t) const;
//     std::tuple<params, carry, x> vjp(const params&, const residuals&, const carry& g_carry, const y& g_y) const;
//   };
//   auto [final, ys] = xshard::scan(rnn_step{}, params, h0, xs);   // what the lambda form gives
//   auto g = xshard::scan_vjp(rnn_step{}, params, h0, xs, g_final, g_ys, {}, xshard::remat::recompute);
//   // g.params: d/d params summed over steps; g.init: d/d h0; g.xs: d/d xs, laid out like xs
//
// The step protocol (concept scan_step):
//  - params: the values every step shares (what a JAX step closes over): a
//    std::tuple of tensors (may be std::tuple<>, may nest). The gradient has
//    the same type and is summed over the steps.
//  - carry: a tensor, a scalar, or a std::tuple of them (nested), as scan's.
//  - x: the type of one slice of xs, exactly (scan.hpp: xt::xtensor<T, R-1>
//    for an xs of rank R, T for a rank-1 xs, a std::tuple of those for a
//    tuple xs), or xshard::none_t when xs is none (then options.length).
//  - y: what a step outputs besides the carry, or none_t (no ys).
//  - residuals: anything; forward's record for vjp. vjp receives only params,
//    residuals and the output gradients, so residuals keep what it needs
//    (the incoming carry, x, activations).
//  - vjp(params, residuals, g_carry, g_y) returns (d params, d incoming carry,
//    d x). g_y is none when y is none_t. When x is none_t, vjp may return
//    std::tuple<params, carry> (no x gradient) instead.
//  - Optional (concept dots_saving_scan_step), for remat::dots_saveable:
//      using dots = ...;   // e.g. the einsum outputs
//      std::tuple<carry, y, dots> forward_saving_dots(const params&, const carry&, const x&) const;
//      residuals restore(const params&, const carry&, const x&, const dots&) const;
//    forward_saving_dots returns forward's carry and y, and restore forward's
//    residuals, bit for bit (the same operations on the same values).
//    static_assert(xshard::dots_saving_scan_step<S>) where it matters: a step
//    that misses it silently runs dots_saveable as save_all.
//
// scan(step, params, init, xs, options) is
//   scan([&](c, x) { (c', y, _) = step.forward(params, c, x); return (c', y); }, init, xs, options)
// (the lambda form does the looping, so both share one loop rule).
//
// scan_vjp(step, params, init, xs, g_final_carry, g_ys, options, policy):
// the gradients of sum(g_final_carry * final) + sum(g_ys * ys) with respect
// to params, init and xs, where (final, ys) = scan(step, params, init, xs,
// options). Returns scan_grads<S>{params, init, xs}.
//  - g_final_carry: of type carry, with the carry's shapes; or xshard::none
//    (a zero gradient).
//  - g_ys: of type scan_ys_t<S> (what scan returns as ys), leading dim =
//    length, rows shaped like y; or xshard::none (zero; the only choice when
//    y is none_t).
//  - options: as scan's. reverse: ys[t] and g_ys[t] pair with xs[t]; the
//    backward visits the steps in the opposite order of the forward. unroll:
//    passed to the forward scan; the gradients do not depend on it (the
//    backward loop runs one step per trip).
//  - policy (scan/remat.hpp), per step: remat::save_all keeps the residuals;
//    remat::recompute keeps only the incoming carry and reruns forward in the
//    backward (x_t is sliced from xs again); remat::dots_saveable keeps the
//    incoming carry and forward_saving_dots' dots and calls restore in the
//    backward, or runs as save_all for steps without them
//    (effective_scan_policy<S>). The gradients are identical, bit for bit,
//    under every policy. Saved state is freed step by step in the backward.
//  - Parameter gradients are summed from zero in the order the backward
//    visits the steps (the forward's last step first).
//  - g.xs: xt::xtensor per xs tensor, xs's shapes (a std::tuple for a tuple
//    xs; none_t when xs is none). A length-0 scan returns zero parameter
//    gradients, g.init == g_final_carry and zeros of xs's shapes.
//  - Tracing: scan's "scan/step" {t} per forward step, then "scan/backward"
//    {t} per backward step (t indexes xs and ys, as in the forward).
//  - Errors (xshard::error): scan's (xs lengths, options.length, carry shape
//    changes); "g_final_carry has shape [2,4], the carry [2,3]" (or "...
//    tensor k ..." for a tuple carry); "g_ys has length 3, the scan 4";
//    "g_ys has shape [4,2,5], the ys [4,2,3]"; a vjp whose gradient shapes
//    differ from params', the carry's or x's names the step. g_final_carry
//    and g_ys of other types than carry / scan_ys_t<S> (or none) are compile
//    errors.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <xtensor/xbuilder.hpp>  // xt::zeros_like
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "../core/error.hpp"
#include "../trace/trace.hpp"
#include "remat.hpp"  // enum class remat (the policies are shared with scan_layers)
#include "scan.hpp"   // the lambda scan, none_t, and its detail:: slicing, stacking and shape helpers

namespace xshard {

namespace detail {

/// vjp's result: (d params, d carry, d x), or (d params, d carry) when x is none_t.
template <class R, class S>
concept scan_step_vjp_result = std::same_as<R, std::tuple<typename S::params, typename S::carry, typename S::x>> ||
    (std::same_as<typename S::x, none_t>&& std::same_as<R, std::tuple<typename S::params, typename S::carry>>);

}  // namespace detail

/// A differentiable scan step (see the header comment).
template <class S>
concept scan_step = requires {
  typename S::params;
  typename S::carry;
  typename S::x;
  typename S::y;
  typename S::residuals;
}
&&requires(const S& s, const typename S::params& p, const typename S::carry& c, const typename S::x& x,
           const typename S::residuals& r, const typename S::y& gy) {
  { s.forward(p, c, x) } -> std::same_as<std::tuple<typename S::carry, typename S::y, typename S::residuals>>;
  { s.vjp(p, r, c, gy) } -> detail::scan_step_vjp_result<S>;
};

/// A scan step that remat::dots_saveable can run: it keeps `dots` (e.g. the
/// einsum outputs) instead of its residuals and restores them.
template <class S>
concept dots_saving_scan_step = scan_step<S> && requires {
  typename S::dots;
} && requires(const S& s, const typename S::params& p, const typename S::carry& c, const typename S::x& x,
              const typename S::dots& d) {
  { s.forward_saving_dots(p, c, x) } -> std::same_as<std::tuple<typename S::carry, typename S::y, typename S::dots>>;
  { s.restore(p, c, x, d) } -> std::same_as<typename S::residuals>;
};

/// The policy a step actually runs: dots_saveable falls back to save_all for
/// steps without forward_saving_dots / restore.
template <scan_step S>
constexpr remat effective_scan_policy(remat policy) {
  if (policy == remat::dots_saveable && !dots_saving_scan_step<S>) return remat::save_all;
  return policy;
}

/// What scan returns as ys for a step: y stacked on a leading dim.
template <scan_step S>
using scan_ys_t = typename detail::stacker<typename S::y>::type;

/// The gradient of xs for a step: x stacked on a leading dim (xs's layout,
/// xt::xtensor per tensor), none_t when x is none_t.
template <scan_step S>
using scan_xs_grad_t = typename detail::stacker<typename S::x>::type;

/// scan_vjp's result.
template <scan_step S>
struct scan_grads {
  typename S::params params;  ///< summed over the steps
  typename S::carry init;     ///< the initial carry's gradient
  scan_xs_grad_t<S> xs;       ///< per step, laid out like xs; none_t when xs is none
};

namespace detail {

/// Zeros of c's structure and shapes (none stays none, scalars become 0).
template <class C>
C tree_zeros_like(const C& c) {
  if constexpr (std::is_same_v<C, none_t>) {
    return c;
  } else if constexpr (is_tuple_like<C>::value) {
    return std::apply([](const auto&... e) { return C{tree_zeros_like(e)...}; }, c);
  } else if constexpr (shaped<C>) {
    C z = xt::zeros_like(c);
    return z;
  } else {
    return C{};
  }
}

/// acc += g, elementwise through the structure (shapes checked by the caller).
template <class C>
void tree_add_into(C& acc, const C& g) {
  if constexpr (std::is_same_v<C, none_t>) {
    // nothing to add
  } else if constexpr (is_tuple_like<C>::value) {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (tree_add_into(std::get<I>(acc), std::get<I>(g)), ...); }
    (std::make_index_sequence<std::tuple_size_v<C>>{});
  } else {
    acc += g;
  }
}

using scan_shape_list = std::vector<std::vector<std::size_t>>;

template <class C>
scan_shape_list scan_shapes_of(const C& c) {
  scan_shape_list s;
  collect_shapes(c, s);
  return s;
}

/// The first tensor whose shape differs between two shape lists.
struct scan_shape_mismatch {
  std::size_t tensor;
  std::vector<std::size_t> got, want;
  bool several;  // the lists hold more than one tensor (name the index)
};
inline std::optional<scan_shape_mismatch> first_scan_shape_mismatch(const scan_shape_list& got,
                                                                    const scan_shape_list& want) {
  for (std::size_t k = 0; k < got.size() && k < want.size(); ++k)
    if (got[k] != want[k]) return scan_shape_mismatch{k, got[k], want[k], want.size() > 1};
  return std::nullopt;
}

/// Throws "xshard: scan_vjp: <what> has shape [..], the <ref> [..]" ("<what>
/// tensor k ..., the <ref>'s tensor k ..." for several tensors) on a mismatch.
inline void check_scan_vjp_argument_shapes(const scan_shape_list& got, const scan_shape_list& want,
                                           const std::string& what, const std::string& ref) {
  if (const auto m = first_scan_shape_mismatch(got, want))
    throw error("xshard: scan_vjp: " + what + (m->several ? " tensor " + std::to_string(m->tensor) : "") +
                " has shape " + shape_text(m->got) + ", the " + ref +
                (m->several ? "'s tensor " + std::to_string(m->tensor) : "") + " " + shape_text(m->want));
}

/// Throws "xshard: scan_vjp: the step's vjp returned a <what> gradient of
/// shape [..] at step t, <what> has shape [..]" (naming the tensor of several).
inline void check_step_vjp_shapes(const scan_shape_list& got, const scan_shape_list& want, const char* what,
                                  std::size_t t) {
  if (const auto m = first_scan_shape_mismatch(got, want))
    throw error("xshard: scan_vjp: the step's vjp returned a " + std::string(what) + " gradient" +
                (m->several ? " whose tensor " + std::to_string(m->tensor) + " has" : " of") + " shape " +
                shape_text(m->got) + " at step " + std::to_string(t) + ", " + what +
                (m->several ? " tensor " + std::to_string(m->tensor) : "") + " has shape " + shape_text(m->want));
}

/// Zeros shaped like xs in the layout scan_xs_grad_t (xt::xtensor per tensor).
template <class G, class Xs>
void zeros_like_xs(G& out, const Xs& xs) {
  if constexpr (std::is_same_v<Xs, none_t>) {
    // no xs, no gradient
  } else if constexpr (is_tuple_like<Xs>::value) {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (zeros_like_xs(std::get<I>(out), std::get<I>(xs)), ...); }
    (std::make_index_sequence<std::tuple_size_v<Xs>>{});
  } else {
    typename G::shape_type s{};
    std::copy(xs.shape().begin(), xs.shape().end(), s.begin());
    out = xt::zeros<typename G::value_type>(s);
  }
}

/// Row t of a stacked xs gradient := the step's x gradient (shape checked).
template <class G, class X>
void put_x_grad(G& out, std::size_t t, const X& gx) {
  if constexpr (std::is_same_v<X, none_t>) {
    // no xs, no gradient
  } else if constexpr (is_tuple_like<X>::value) {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (put_x_grad(std::get<I>(out), t, std::get<I>(gx)), ...); }
    (std::make_index_sequence<std::tuple_size_v<X>>{});
  } else if constexpr (shaped<X>) {
    const std::vector<std::size_t> got(gx.shape().begin(), gx.shape().end()),
        want(out.shape().begin() + 1, out.shape().end());
    if (got != want)
      throw error("xshard: scan_vjp: the step's vjp returned an x gradient of shape " + shape_text(got) + " at step " +
                  std::to_string(t) + ", x has shape " + shape_text(want));
    xt::view(out, t) = gx;
  } else {
    out(t) = gx;  // scalar steps of a rank-1 xs
  }
}

/// The step's dots type, or an empty stand-in.
template <class S, bool Saves = dots_saving_scan_step<S>>
struct scan_step_dots {
  struct type {};
};
template <class S>
struct scan_step_dots<S, true> {
  using type = typename S::dots;
};

/// What one forward step kept for its backward under a policy.
template <class S>
struct scan_step_saved {
  std::optional<typename S::residuals> residuals;        // save_all
  std::optional<typename S::carry> carry;                // recompute, dots_saveable
  std::optional<typename scan_step_dots<S>::type> dots;  // dots_saveable
};

template <class S, class Xs>
constexpr void check_step_x() {
  using X = std::remove_cvref_t<decltype(slice_step(std::declval<const Xs&>(), 0))>;
  static_assert(std::is_same_v<X, typename S::x>,
                "xshard::scan: the step's x type must be the type of one slice of xs (xt::xtensor<T, R-1> for an "
                "xs of rank R, T for a rank-1 xs, std::tuple of those for a tuple xs, none_t for none)");
}

}  // namespace detail

/// scan over a differentiable step: (final carry, stacked ys), the same as
/// the lambda form with step.forward.
template <scan_step S, class Xs>
auto scan(const S& step, const typename S::params& params, typename S::carry init, const Xs& xs,
          scan_options options = {}) {
  detail::check_step_x<S, Xs>();
  using C = typename S::carry;
  using Y = typename S::y;
  return scan(
      [&](const C& c, const typename S::x& x_t) {
        auto r = step.forward(params, c, x_t);
        return std::pair<C, Y>{std::move(std::get<0>(r)), std::move(std::get<1>(r))};
      },
      std::move(init), xs, options);
}

namespace detail {

/// scan_vjp's forward: the lambda scan, keeping in `saved` per step what the
/// policy `run` asks for (in the order the steps ran).
template <scan_step S, class Xs>
auto scan_forward_saving(const S& step, const typename S::params& params, typename S::carry init, const Xs& xs,
                         const scan_options& options, remat run, std::vector<scan_step_saved<S>>& saved) {
  using C = typename S::carry;
  using X = typename S::x;
  using Y = typename S::y;
  if (const auto length = leading_extent(xs))
    saved.reserve(*length);
  else if (options.length)
    saved.reserve(*options.length);
  return ::xshard::scan(
      [&](const C& c, const X& x_t) -> std::pair<C, Y> {
        scan_step_saved<S>& s = saved.emplace_back();
        switch (run) {
          case remat::save_all: {
            auto [next, y, r] = step.forward(params, c, x_t);
            s.residuals.emplace(std::move(r));
            return {std::move(next), std::move(y)};
          }
          case remat::recompute: {
            s.carry.emplace(c);
            auto r = step.forward(params, c, x_t);
            return {std::move(std::get<0>(r)), std::move(std::get<1>(r))};
          }
          case remat::dots_saveable:
            if constexpr (dots_saving_scan_step<S>) {
              s.carry.emplace(c);
              auto [next, y, d] = step.forward_saving_dots(params, c, x_t);
              s.dots.emplace(std::move(d));
              return {std::move(next), std::move(y)};
            }
            break;
        }
        throw error("xshard: scan_vjp: unknown remat policy");
      },
      std::move(init), xs, options);
}

/// Step t's residuals: saved, restored from its saved dots, or recomputed
/// from its saved carry.
template <scan_step S, class Xs>
typename S::residuals step_residuals(const S& step, const typename S::params& params, scan_step_saved<S>& s,
                                     const Xs& xs, std::size_t t) {
  using X = typename S::x;
  if (s.residuals) return std::move(*s.residuals);
  if constexpr (dots_saving_scan_step<S>)
    if (s.dots) return step.restore(params, *s.carry, X(slice_step(xs, t)), *s.dots);
  return std::get<2>(step.forward(params, *s.carry, X(slice_step(xs, t))));
}

/// g_ys has the scan's length n and, when the scan ran, the ys' shapes.
template <class GYs, class Ys>
void check_g_ys(const GYs& g_ys, const Ys& ys, std::size_t n) {
  const scan_shape_list got = scan_shapes_of(g_ys);
  for (const auto& s : got)
    if (s.empty() || s[0] != n)
      throw error("xshard: scan_vjp: g_ys has length " + std::to_string(s.empty() ? 0 : s[0]) + ", the scan " +
                  std::to_string(n));
  // A length-0 scan's ys are default-constructed: only the length is known.
  if (n > 0) check_scan_vjp_argument_shapes(got, scan_shapes_of(ys), "g_ys", "ys");
}

}  // namespace detail

/// Gradients of sum(g_final_carry * final) + sum(g_ys * ys) for
/// (final, ys) = scan(step, params, init, xs, options) (see the header
/// comment). g_final_carry: a carry or xshard::none; g_ys: scan_ys_t<S> or
/// xshard::none.
template <scan_step S, class Xs, class GCarry, class GYs>
scan_grads<S> scan_vjp(const S& step, const typename S::params& params, typename S::carry init, const Xs& xs,
                       const GCarry& g_final_carry, const GYs& g_ys, scan_options options = {},
                       remat policy = remat::save_all) {
  detail::check_step_x<S, Xs>();
  using C = typename S::carry;
  using Y = typename S::y;
  static_assert(std::is_same_v<GCarry, C> || std::is_same_v<GCarry, none_t>,
                "xshard::scan_vjp: g_final_carry must be of the step's carry type, or xshard::none");
  static_assert(std::is_same_v<GYs, scan_ys_t<S>> || std::is_same_v<GYs, none_t>,
                "xshard::scan_vjp: g_ys must be of the type scan returns as ys (xshard::scan_ys_t<S>: y stacked on "
                "a leading dim), or xshard::none");

  const detail::scan_shape_list carry_shapes = detail::scan_shapes_of(init),
                                param_shapes = detail::scan_shapes_of(params);
  if constexpr (!std::is_same_v<GCarry, none_t>) {
    detail::check_scan_vjp_argument_shapes(detail::scan_shapes_of(g_final_carry), carry_shapes, "g_final_carry",
                                           "carry");
  }

  std::vector<detail::scan_step_saved<S>> saved;
  auto forward =
      detail::scan_forward_saving(step, params, std::move(init), xs, options, effective_scan_policy<S>(policy), saved);
  const C& final_carry = forward.first;  // not structured bindings: Clang 14 cannot capture those
  const scan_ys_t<S>& ys = forward.second;
  const std::size_t n = saved.size();

  if constexpr (!std::is_same_v<GYs, none_t>) detail::check_g_ys(g_ys, ys, n);
  // A zero y gradient when g_ys is none (y's shapes from the forward).
  std::optional<Y> zero_y;
  if constexpr (std::is_same_v<GYs, none_t> && !std::is_same_v<Y, none_t>)
    if (n > 0) zero_y.emplace(detail::tree_zeros_like(Y(detail::slice_step(ys, 0))));

  scan_grads<S> g{detail::tree_zeros_like(params),
                  [&]() -> C {
                    if constexpr (std::is_same_v<GCarry, none_t>)
                      return detail::tree_zeros_like(final_carry);
                    else
                      return g_final_carry;
                  }(),
                  {}};
  detail::zeros_like_xs(g.xs, xs);

  // Backward: the steps in the opposite order of the forward.
  for (std::size_t i = n; i-- > 0;) {
    const std::size_t t = options.reverse ? n - 1 - i : i;
    const trace_me scope("scan/backward", {{"t", t}});
    const typename S::residuals r = detail::step_residuals(step, params, saved[i], xs, t);
    saved.pop_back();  // free as we go (i is the last element)
    auto grads = [&] {
      if constexpr (std::is_same_v<Y, none_t>)
        return step.vjp(params, r, std::as_const(g.init), none);
      else if constexpr (std::is_same_v<GYs, none_t>)
        return step.vjp(params, r, std::as_const(g.init), *zero_y);
      else
        return step.vjp(params, r, std::as_const(g.init), Y(detail::slice_step(g_ys, t)));
    }();
    detail::check_step_vjp_shapes(detail::scan_shapes_of(std::get<0>(grads)), param_shapes, "params", t);
    detail::check_step_vjp_shapes(detail::scan_shapes_of(std::get<1>(grads)), carry_shapes, "carry", t);
    detail::tree_add_into(g.params, std::get<0>(grads));
    g.init = std::move(std::get<1>(grads));
    if constexpr (std::tuple_size_v<decltype(grads)> == 3) detail::put_x_grad(g.xs, t, std::get<2>(grads));
  }
  return g;
}

}  // namespace xshard
