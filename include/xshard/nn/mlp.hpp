// xshard/nn/mlp.hpp - the transformer MLP block as a layer (nn/layer.hpp):
//
//   h = x W1^T + b1          einsum "...n,mn->...m"   (the einsum linear)
//   a = gelu(h)              composite xshard.gelu (its policy picks kernel
//                            or decomposition; the backward uses
//                            xshard.gelu_backward)
//   y = x + a W2^T + b2      einsum "...m,km->...k", residual connection
//
// The same code runs on plain tensors and on sharded ones. The Layout
// parameter names the tensor types: `replicated_mlp` (plain xt::xtensor, one
// device) or `data_model_mlp<M>` (Megatron's column-then-row parallel block
// on a mesh with axes "data" and "model": the batch on data, W1's rows and
// W2's columns on model). In the sharded layout the forward runs one
// all-reduce over model (the second einsum's partial sums) and the backward
// one over model (dx) and one over data per parameter gradient; the plans
// are compile-time values (mlp_block::plans()).
//
// The block's output is constrained to the input's layout (torch_xla's
// mark_sharding inside the scanned body); with these layouts the constraint
// is already met and costs nothing, which the plans show.
//
// Residuals: x, h and a. remat::dots_saveable keeps x and h (the einsum
// output) and recomputes a = gelu(h).
#pragma once

#include <array>
#include <cstddef>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <xtensor/xtensor.hpp>

#include "../einsum/einsum.hpp"
#include "../einsum/grad.hpp"
#include "../sharding/spec.hpp"
#include "../spmd/einsum.hpp"
#include "../spmd/sharded.hpp"
#include "../ops/gelu.hpp"
#include "layer.hpp"

namespace xshard {

/// One device, plain tensors.
struct replicated_mlp {
  template <class T, std::size_t R, class S>
  using tensor = xt::xtensor<T, R>;
  using batch = void;
  using hidden = void;
  using w_in = void;
  using b_in = void;
  using w_out = void;
  using b_out = void;
};

/// Data x model (Megatron) sharding on mesh M, whose axes include "data"
/// and "model" (a compile error names a missing one).
template <Mesh M>
struct data_model_mlp {
  template <class T, std::size_t R, class S>
  using tensor = sharded<T, R, M, S>;
  using batch = spec<"data, None">;    // x, y [b, d]
  using hidden = spec<"data, model">;  // h, a [b, f]
  using w_in = spec<"model, None">;    // W1 [f, d]: column parallel
  using b_in = spec<"model">;          // b1 [f]
  using w_out = spec<"None, model">;   // W2 [d, f]: row parallel
  using b_out = spec<"None">;          // b2 [d]
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

  gelu_approximate approximate = gelu_approximate::none;

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
             {"y = x + gelu(h) W2^T + b2", einsum_plan_of<"...m,km->...k", hidden_activation, W2>()}}};
  }
  /// The output constraint's plan (the batch layout again).
  static consteval redist_plan constrain_plan() requires Sharded<input> {
    using W2 = std::tuple_element_t<2, params>;
    using Z = decltype(einsum<"...m,km->...k">(std::declval<const hidden_activation&>(), std::declval<const W2&>()));
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
        {"d W2 = gy^T a", einsum_vjp_plan<"...m,km->...k", 1, output, hidden_activation, W2>()},
        {"d a = gy W2", einsum_vjp_plan<"...m,km->...k", 0, output, hidden_activation, W2>()},
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
    output z = detail::add_last_dim(output(einsum<"...m,km->...k">(a, std::get<2>(p))), std::get<3>(p));
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
    W2 gw2 = einsum_vjp<"...m,km->...k", 1>(gy, r.a, std::get<2>(p));
    hidden_activation ga = einsum_vjp<"...m,km->...k", 0>(gy, r.a, std::get<2>(p));
    hidden_activation gh =
        detail::zip_elements(ga, r.h, [&](const auto& g, const auto& h) { return gelu_backward(g, h, approximate); });
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

}  // namespace xshard
