// tests/support/hand_layers.hpp - the layers as they were written by hand
// before nn/ re-expressed them through the graph: linear_layer,
// tanh_linear_layer and mlp_block with hand-derived vjps, dots_saveable
// pairs and einsum plans. The tests hold the graph-defined layers to them
// (bit for bit) besides finite differences; bench/graph.cpp times both.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <xshard/einsum/einsum.hpp>
#include <xshard/einsum/grad.hpp>
#include <xshard/nn/mlp.hpp>  // the layouts
#include <xshard/ops/gelu.hpp>
#include <xshard/spmd/einsum.hpp>
#include <xshard/spmd/sharded.hpp>
#include <xtensor/xtensor.hpp>

namespace xshard_test::hand {

using namespace xshard;  // NOLINT: the code below was written inside namespace xshard

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

namespace detail {

template <class X>
using tensor_value_t = typename std::remove_cvref_t<X>::value_type;

/// x + b with b broadcast along x's last dim (same layout on that dim).
template <class X, class B>
X add_last_dim(X x, const B& b) {
  if constexpr (Sharded<X>) {
    static_assert(X::resolved.dims[X::rank - 1] == B::resolved.dims[0],
                  "xshard: a bias must be sharded like the last dim it is added to");
    x.local() += b.local();
  } else {
    x += b;
  }
  return x;
}

template <class X, class F>
X map_elements(const X& x, F&& f) {
  if constexpr (Sharded<X>)
    return local_map(x, f);
  else
    return f(x);
}

template <class X, class Y, class F>
X zip_elements(const X& x, const Y& y, F&& f) {
  if constexpr (Sharded<X>)
    return local_zip(x, y, f);
  else
    return f(x, y);
}

/// sum over every dim but the last: a bias gradient laid out by BSpec.
template <class B, class G>
B sum_to_last_dim(const G& g) {
  if constexpr (Sharded<G>)
    return einsum_to<"...m->m", typename B::spec_type>(g);
  else
    return broadcast_vjp<"...m", "m">(g);
}

template <class S, class X>
X constrain_to(const X& x) {
  if constexpr (Sharded<X>)
    return constrain<S>(x);
  else
    return x;
}

}  // namespace detail

template <class T, class Layout = replicated_mlp>
struct mlp_block {
  template <std::size_t R, class S>
  using tensor = typename Layout::template tensor<T, R, S>;
  using activation = tensor<2, typename Layout::batch>;
  using hidden_activation = tensor<2, typename Layout::hidden>;
  using params = std::tuple<tensor<2, typename Layout::w_in>, tensor<1, typename Layout::b_in>,
                            tensor<2, typename Layout::w_out>, tensor<1, typename Layout::b_out>>;
  using input = activation;
  using output = activation;
  struct residuals {
    input x;
    hidden_activation h, a;
  };
  using dots = hidden_activation;  // h
  static constexpr std::array<std::string_view, 4> param_names{"w_in", "b_in", "w_out", "b_out"};

  xshard::gelu_approximate approximate = xshard::gelu_approximate::none;

  /// One einsum of the block and its compile-time plan (sharded layouts).
  struct step_plan {
    std::string_view what;
    sharded_einsum_plan plan;
  };
  /// The forward's einsums, in order.
  static consteval std::array<step_plan, 2> forward_plans() requires Sharded<input> {
    using W1 = std::tuple_element_t<0, params>;
    using W2 = std::tuple_element_t<2, params>;
    return {{{"h = x W1^T + b1", einsum_plan_of<"...n,mn->...m", input, W1>()},
             {"y = x + gelu(h) W2 + b2", einsum_plan_of<"...m,mk->...k", hidden_activation, W2>()}}};
  }
  /// The output constraint's plan (the batch layout again).
  static consteval redist_plan constrain_plan() requires Sharded<input> {
    using W2 = std::tuple_element_t<2, params>;
    using Z = decltype(einsum<"...m,mk->...k">(std::declval<const hidden_activation&>(), std::declval<const W2&>()));
    return redistribute_plan<Z, typename Layout::batch>();
  }
  /// The backward's einsums, in order.
  static consteval std::array<step_plan, 6> backward_plans() requires Sharded<input> {
    using W1 = std::tuple_element_t<0, params>;
    using B1 = std::tuple_element_t<1, params>;
    using W2 = std::tuple_element_t<2, params>;
    using B2 = std::tuple_element_t<3, params>;
    using M = typename input::mesh_type;
    return {{
        {"d b2 = sum gy", einsum_plan_to<"...m->m", M, typename B2::spec_type, typename output::spec_type>()},
        {"d W2 = a^T gy", einsum_vjp_plan<"...m,mk->...k", 1, output, hidden_activation, W2>()},
        {"d a = gy W2^T", einsum_vjp_plan<"...m,mk->...k", 0, output, hidden_activation, W2>()},
        {"d b1 = sum dh",
         einsum_plan_to<"...m->m", M, typename B1::spec_type, typename hidden_activation::spec_type>()},
        {"d W1 = dh^T x", einsum_vjp_plan<"...n,mn->...m", 1, hidden_activation, input, W1>()},
        {"d x = gy + dh W1", einsum_vjp_plan<"...n,mn->...m", 0, hidden_activation, input, W1>()},
    }};
  }
  /// Collectives per layer: forward (with the constraint) and backward.
  static consteval std::size_t forward_collectives() requires Sharded<input> {
    std::size_t n = constrain_plan().collective_count();
    for (const step_plan& s : forward_plans()) n += s.plan.collective_count();
    return n;
  }
  static consteval std::size_t backward_collectives() requires Sharded<input> {
    std::size_t n = 0;
    for (const step_plan& s : backward_plans()) n += s.plan.collective_count();
    return n;
  }

  template <class P>
  static hidden_activation pre_activation(const P& p, const input& x) {
    return detail::add_last_dim(hidden_activation(einsum<"...n,mn->...m">(x, std::get<0>(p))), std::get<1>(p));
  }
  hidden_activation activate(const hidden_activation& h) const {
    return detail::map_elements(h, [&](const auto& v) { return gelu(v, approximate); });
  }
  template <class P>
  output finish(const P& p, const input& x, const hidden_activation& a) const {
    output z = detail::add_last_dim(output(einsum<"...m,mk->...k">(a, std::get<2>(p))), std::get<3>(p));
    z = detail::zip_elements(z, x, [](const auto& u, const auto& v) { return u + v; });
    return detail::constrain_to<typename Layout::batch>(z);
  }

  template <class P = params>
  std::pair<output, residuals> forward(const P& p, const input& x) const {
    hidden_activation h = pre_activation(p, x);
    hidden_activation a = activate(h);
    output y = finish(p, x, a);
    return {std::move(y), residuals{x, std::move(h), std::move(a)}};
  }

  template <class P = params>
  std::pair<params, input> vjp(const P& p, const residuals& r, const output& gy) const {
    using W1 = std::tuple_element_t<0, params>;
    using B1 = std::tuple_element_t<1, params>;
    using W2 = std::tuple_element_t<2, params>;
    using B2 = std::tuple_element_t<3, params>;
    B2 gb2 = detail::sum_to_last_dim<B2>(gy);
    W2 gw2 = einsum_vjp<"...m,mk->...k", 1>(gy, r.a, std::get<2>(p));
    hidden_activation ga = einsum_vjp<"...m,mk->...k", 0>(gy, r.a, std::get<2>(p));
    // The erf form reads the cdf off the kept output a = gelu(h), as the graph's gelu does.
    const auto& a_block = [&]() -> const auto& {
      if constexpr (Sharded<hidden_activation>)
        return r.a.local();
      else
        return r.a;
    }
    ();
    hidden_activation gh = detail::zip_elements(ga, r.h, [&](const auto& g, const auto& h) {
      return approximate == gelu_approximate::none ? gelu_backward_from_output(g, h, a_block)
                                                   : gelu_backward(g, h, approximate);
    });
    B1 gb1 = detail::sum_to_last_dim<B1>(gh);
    W1 gw1 = einsum_vjp<"...n,mn->...m", 1>(gh, r.x, std::get<0>(p));
    input gx = einsum_vjp<"...n,mn->...m", 0>(gh, r.x, std::get<0>(p));
    gx = detail::zip_elements(gx, gy, [](const auto& u, const auto& v) { return u + v; });
    return {params{std::move(gw1), std::move(gb1), std::move(gw2), std::move(gb2)}, std::move(gx)};
  }

  /// remat::dots_saveable: keep the einsum output h.
  template <class P = params>
  std::pair<output, dots> forward_saving_dots(const P& p, const input& x) const {
    hidden_activation h = pre_activation(p, x);
    output y = finish(p, x, activate(h));
    return {std::move(y), std::move(h)};
  }
  template <class P = params>
  residuals restore(const P&, const input& x, const dots& h) const {
    return residuals{x, h, activate(h)};
  }
};

}  // namespace xshard_test::hand
