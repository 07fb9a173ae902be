// xshard/spmd/einsum.hpp - einsum on sharded tensors, its output sharding
// and collectives decided at compile time.
//
// Example (compiled in tests/compile/doc_spmd.cpp):
//   using M = xshard::mesh<"data=2, model=2">;
//   constexpr auto plan = xshard::einsum_plan<"...n,mn->...m", M, xshard::spec<"data, None, None">,
//                                             xshard::spec<"model, None">>();
//   static_assert(plan.collective_count() == 0);        // column-parallel: no traffic
//   auto y = xshard::einsum<"...n,mn->...m">(x, w);     // x, w: xshard::sharded<...>
//
// The rule (one constexpr function, plan_sharded_einsum):
//  1. Each label gets one sharding: the first operand dim carrying it (in
//     operand order) whose mesh axes no earlier label took; a label repeated
//     inside an operand (a diagonal) stays replicated.
//  2. Each operand is redistributed to those label shardings (layout.hpp's
//     rule table: all-gather, all-to-all, or a local slice of a replicated
//     operand, which costs nothing).
//  3. The local einsum runs on the blocks. The output dims take their
//     labels' shardings; a contracted label sharded over axes X leaves a
//     partial sum over X.
//  4. The result is redistributed to the requested output spec (partial ->
//     shard: reduce-scatter; partial -> replicate: all-reduce), or by default
//     the partial axes are all-reduced and the dims keep their shardings.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <xtensor/xtensor.hpp>

#include "../core/diagnostics.hpp"
#include "../core/fixed_string.hpp"
#include "../core/text.hpp"
#include "../einsum/einsum.hpp"
#include "../einsum/grad.hpp"
#include "../einsum/parse.hpp"
#include "layout.hpp"
#include "sharded.hpp"

namespace xshard {

/// One collective of a sharded einsum: its kind, mesh axes, and the tensor
/// it acts on (operand index, or -1 for the output).
struct planned_collective {
  collective_kind kind = collective_kind::all_gather;
  axis_set axes = 0;
  int tensor = -1;
  friend constexpr bool operator==(const planned_collective&, const planned_collective&) = default;
};

/// What a sharded einsum does, decided from the equation, the mesh and the
/// operands' layouts alone.
struct sharded_einsum_plan {
  static_vector<redist_plan, max_einsum_operands> operands{};  ///< each operand to its target layout
  static_vector<dim_axes, max_einsum_labels> label_axes{};     ///< the sharding chosen per label id
  sharded_layout local_output{};  ///< the local einsum's result: output shardings + partial axes
  redist_plan output{};           ///< from local_output to the result
  resolved_spec result{};         ///< the result's spec

  /// The collectives in execution order.
  constexpr static_vector<planned_collective, max_einsum_operands * max_redist_steps + max_redist_steps> collectives()
      const {
    static_vector<planned_collective, max_einsum_operands * max_redist_steps + max_redist_steps> r;
    for (std::size_t i = 0; i < operands.size(); ++i)
      for (const redist_step& s : operands[i].steps)
        if (is_collective(s.kind)) r.push_back({collective_of(s.kind), s.axes, static_cast<int>(i)});
    for (const redist_step& s : output.steps)
      if (is_collective(s.kind)) r.push_back({collective_of(s.kind), s.axes, -1});
    return r;
  }
  constexpr std::size_t collective_count() const { return collectives().size(); }
  constexpr std::size_t count(collective_kind k) const {
    std::size_t n = 0;
    for (const planned_collective& c : collectives()) n += c.kind == k ? 1 : 0;
    return n;
  }
  /// Whether the local einsum leaves partial sums (over local_output.partial).
  constexpr bool partial() const { return local_output.partial != 0; }
};

/// The plan for a bound equation on a mesh of `mesh` with operand layouts
/// `ops`; `requested` (if not null) is the output spec asked for.
constexpr sharded_einsum_plan plan_sharded_einsum(const einsum_binding& b, std::span<const std::int64_t> mesh,
                                                  std::span<const sharded_layout> ops, const resolved_spec* requested) {
  sharded_einsum_plan p;
  auto drop_unit = [&](const dim_axes& d) {
    dim_axes r;
    for (int a : d)
      if (mesh[static_cast<std::size_t>(a)] > 1) r.push_back(a);
    return r;
  };
  for (std::size_t l = 0; l < max_einsum_labels; ++l) p.label_axes.push_back({});
  bool decided[max_einsum_labels]{}, diagonal[max_einsum_labels]{};
  for (const auto& labels : b.operand_labels)
    for (std::size_t d = 0; d < labels.size(); ++d)
      for (std::size_t e = d + 1; e < labels.size(); ++e)
        if (labels[d] == labels[e]) diagonal[labels[d]] = true;
  // 1. One sharding per label.
  axis_set used = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const auto& labels = b.operand_labels[i];
    for (std::size_t d = 0; d < labels.size(); ++d) {
      const int l = labels[d];
      if (decided[l] || diagonal[l]) continue;
      const dim_axes cand = drop_unit(ops[i].spec.dims[d]);
      if (cand.empty() || (axes_of(cand) & used)) continue;
      p.label_axes[static_cast<std::size_t>(l)] = cand;
      used |= axes_of(cand);
      decided[l] = true;
    }
  }
  // 2. Operands to their targets.
  for (std::size_t i = 0; i < ops.size(); ++i) {
    resolved_spec target;
    for (int l : b.operand_labels[i]) target.dims.push_back(p.label_axes[static_cast<std::size_t>(l)]);
    p.operands.push_back(plan_redistribute(ops[i], target, mesh));
  }
  // 3. The local result.
  bool in_output[max_einsum_labels]{};
  for (int l : b.output_labels) {
    in_output[l] = true;
    p.local_output.spec.dims.push_back(p.label_axes[static_cast<std::size_t>(l)]);
  }
  for (std::size_t l = 0; l < max_einsum_labels; ++l)
    if (!in_output[l]) p.local_output.partial |= axes_of(p.label_axes[l]);
  // 4. The result.
  p.output = plan_redistribute(p.local_output, requested ? *requested : p.local_output.spec, mesh);
  p.result = p.output.result.spec;
  return p;
}

/// Bytes each device sends for the whole plan, given the operands' global
/// shapes and the element size.
constexpr std::int64_t plan_bytes_sent(const sharded_einsum_plan& p, const einsum_binding& b,
                                       std::span<const std::int64_t> mesh,
                                       std::span<const std::span<const std::int64_t>> shapes, std::int64_t elem) {
  std::int64_t total = 0;
  std::int64_t extent[max_einsum_labels]{};
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    for (std::size_t d = 0; d < shapes[i].size(); ++d) {
      const int l = b.operand_labels[i][d];
      extent[l] = extent[l] > shapes[i][d] ? extent[l] : shapes[i][d];
    }
    total += plan_bytes_sent(p.operands[i], mesh, shapes[i], elem);
  }
  static_vector<std::int64_t, max_einsum_rank> out;
  for (int l : b.output_labels) out.push_back(extent[l]);
  total += plan_bytes_sent(p.output, mesh, std::span<const std::int64_t>(out.begin(), out.end()), elem);
  return total;
}

namespace detail {

template <fixed_string Eq, std::size_t... R>
constexpr einsum_binding sharded_binding() {
  static_assert(raise<parsed_equation<Eq>.diag>());
  constexpr std::array<std::int64_t, sizeof...(R)> ranks{static_cast<std::int64_t>(R)...};
  constexpr auto b = bind_einsum(parsed_equation<Eq>.value, ranks);
  static_assert(raise<b.diag>());
  return b.value;
}

/// A resolved spec back as spec text on mesh M ("data, None, (x, y)").
template <Mesh M>
constexpr text_builder resolved_text(const resolved_spec& s) {
  return spec_text(unresolve_spec(s, M::axes));
}

template <Mesh M, resolved_spec S>
struct spec_of_resolved {
  static constexpr text_builder make() { return resolved_text<M>(S); }
  using type = spec<to_fixed_string<&make>()>;
};

}  // namespace detail

/// The plan of `einsum<Eq>` on operands sharded by Specs over mesh M (the
/// operands' ranks are the specs' ranks). Optional requested output spec Out
/// (void: the default).
template <fixed_string Eq, Mesh M, Spec... Specs>
constexpr sharded_einsum_plan einsum_plan() {
  constexpr einsum_binding b = detail::sharded_binding<Eq, Specs::rank()...>();
  constexpr std::array<sharded_layout, sizeof...(Specs)> ops{sharded_layout{detail::typed_resolved<M, Specs>(), 0}...};
  return plan_sharded_einsum(b, M::mesh_shape(), ops, nullptr);
}

/// The same with a requested output spec.
template <fixed_string Eq, Mesh M, Spec Out, Spec... Specs>
constexpr sharded_einsum_plan einsum_plan_to() {
  constexpr einsum_binding b = detail::sharded_binding<Eq, Specs::rank()...>();
  constexpr std::array<sharded_layout, sizeof...(Specs)> ops{sharded_layout{detail::typed_resolved<M, Specs>(), 0}...};
  constexpr resolved_spec out = detail::typed_resolved<M, Out>();
  return plan_sharded_einsum(b, M::mesh_shape(), ops, &out);
}

namespace detail {

/// The plan for sharded operands X... (their layouts, partial axes
/// included), to Out (a Spec) or, for Out = void, the default result.
template <fixed_string Eq, class Out, class X0, class... X>
constexpr sharded_einsum_plan sharded_plan_for() {
  using M = typename X0::mesh_type;
  static_assert((std::is_same_v<typename X::mesh_type, M> && ...),
                "xshard::einsum: sharded operands must live on the same mesh");
  static_assert((std::is_same_v<typename X::value_type, typename X0::value_type> && ...),
                "xshard::einsum: all operands must have the same value type");
  constexpr einsum_binding b = sharded_binding<Eq, X0::rank, X::rank...>();
  constexpr std::array<sharded_layout, 1 + sizeof...(X)> ops{X0::layout, X::layout...};
  if constexpr (std::is_void_v<Out>) {
    return plan_sharded_einsum(b, M::mesh_shape(), ops, nullptr);
  } else {
    constexpr resolved_spec out = typed_resolved<M, Out>();
    return plan_sharded_einsum(b, M::mesh_shape(), ops, &out);
  }
}

template <fixed_string Eq, class Out, class X0, class... X>
auto sharded_einsum_run(const X0& x0, const X&... xs) {
  using M = typename X0::mesh_type;
  using T = typename X0::value_type;
  // static: a constexpr local whose address is taken is built on the stack
  // at every call (the plan is about 15 KB of stores).
  static constexpr einsum_binding b = sharded_binding<Eq, X0::rank, X::rank...>();
  static constexpr sharded_einsum_plan plan = sharded_plan_for<Eq, Out, X0, X...>();
  static constexpr mesh_shape_t mesh = M::mesh_shape();
  constexpr std::size_t n_out = b.output_labels.size();
  const device_ref<T>& dev = x0.device();
  // Label extents (size-1 broadcasting: the larger one), and no sharding of
  // a broadcast dim of extent 1.
  std::int64_t extent[max_einsum_labels]{};
  const std::array<std::span<const std::int64_t>, 1 + sizeof...(X)> shapes{
      std::span<const std::int64_t>(x0.global_shape()), std::span<const std::int64_t>(xs.global_shape())...};
  for (std::size_t i = 0; i < shapes.size(); ++i)
    for (std::size_t d = 0; d < shapes[i].size(); ++d) {
      const int l = b.operand_labels[i][d];
      extent[l] = std::max(extent[l], shapes[i][d]);
    }
  for (std::size_t i = 0; i < shapes.size(); ++i)
    for (std::size_t d = 0; d < shapes[i].size(); ++d) {
      const int l = b.operand_labels[i][d];
      if (shapes[i][d] == 1 && extent[l] > 1 && dim_tiles(mesh, plan.label_axes[static_cast<std::size_t>(l)]) > 1)
        throw error("xshard: einsum \"" + std::string(Eq.view()) + "\": operand " + std::to_string(i) +
                    " broadcasts dim " + std::to_string(d) + " (extent 1) against a sharded extent " +
                    std::to_string(extent[l]) + "; replicate that dim");
    }
  // Operand I's block as the contraction reads it: the device's own block
  // when its plan moves nothing (no copy), else the plan's result.
  auto block = [&]<std::size_t I>(std::integral_constant<std::size_t, I>, const auto& x) -> decltype(auto) {
    using D = std::remove_cvref_t<decltype(x)>;
    if constexpr (plan.operands[I].steps.empty())
      return x.local();
    else
      return run_plan<T, D::rank>(dev, plan.operands[I], mesh, x.global_shape(), x.local());
  };
  xt::xtensor<T, n_out> local = [&]<std::size_t... I>(std::index_sequence<I...>) {
    // A braced list runs the operands' plans in order (their collectives
    // are the plan's, in its order, on every device).
    const auto operands = std::forward_as_tuple(x0, xs...);
    const std::tuple<decltype(block(std::integral_constant<std::size_t, I>{}, std::get<I>(operands)))...> blocks{
        block(std::integral_constant<std::size_t, I>{}, std::get<I>(operands))...};
    return std::apply([](const auto&... a) { return xshard::einsum<Eq>(a...); }, blocks);
  }
  (std::make_index_sequence<1 + sizeof...(X)>{});
  std::array<std::int64_t, n_out> out_shape{};
  for (std::size_t d = 0; d < n_out; ++d) out_shape[d] = extent[b.output_labels[d]];
  xt::xtensor<T, n_out> result = run_plan<T, n_out>(dev, plan.output, mesh, out_shape, std::move(local));
  using S = typename spec_of_resolved<M, plan.result>::type;
  return sharded<T, n_out, M, S>(dev, out_shape, std::move(result));
}

}  // namespace detail

/// einsum on sharded operands (same mesh): the plan einsum_plan gives, run on
/// this device; returns the sharded result (partial sums reduced).
template <fixed_string Eq, Sharded X0, Sharded... X>
auto einsum(const X0& x0, const X&... xs) {
  return detail::sharded_einsum_run<Eq, void>(x0, xs...);
}

/// The same, with the result redistributed to spec Out as part of the plan
/// (e.g. a reduce-scatter instead of an all-reduce).
template <fixed_string Eq, Spec Out, Sharded X0, Sharded... X>
auto einsum_to(const X0& x0, const X&... xs) {
  return detail::sharded_einsum_run<Eq, Out>(x0, xs...);
}

namespace detail {
template <std::size_t I, class First, class... Rest>
struct nth_type : nth_type<I - 1, Rest...> {};
template <class First, class... Rest>
struct nth_type<0, First, Rest...> {
  using type = First;
};
}  // namespace detail

/// The gradient of operand I of a sharded einsum: the sharded einsum of the
/// derived gradient equation (einsum_grad<Eq, I>(): the output gradient,
/// then the other operands), its result laid out like operand I. With the
/// batch sharded on `data`, a weight gradient is a partial sum over data and
/// its all-reduce is part of the plan (einsum_vjp_plan).
/// @pre operand I has no repeated or operand-only letters (the gradient
/// equation's output is then exactly its term).
template <fixed_string Eq, std::size_t I, Sharded G, Sharded... X>
auto einsum_vjp(const G& gy, const X&... xs) {
  using XI = typename detail::nth_type<I, std::remove_cvref_t<X>...>::type;
  constexpr auto grad_eq = einsum_grad<Eq, I>();
  return [&]<std::size_t... J>(std::index_sequence<J...>) {
    const auto all = std::forward_as_tuple(xs...);
    return einsum_to<grad_eq, typename XI::spec_type>(gy, std::get < J < I ? J : J + 1 > (all)...);
  }
  (std::make_index_sequence<sizeof...(X) - 1>{});
}

/// The plan einsum_vjp<Eq, I> runs for these operand types.
template <fixed_string Eq, std::size_t I, Sharded G, Sharded... X>
constexpr sharded_einsum_plan einsum_vjp_plan() {
  using XI = typename detail::nth_type<I, std::remove_cvref_t<X>...>::type;
  constexpr auto grad_eq = einsum_grad<Eq, I>();
  return [&]<std::size_t... J>(std::index_sequence<J...>) {
    return detail::sharded_plan_for<
        grad_eq, typename XI::spec_type, std::remove_cvref_t<G>,
        typename detail::nth_type<(J < I ? J : J + 1), std::remove_cvref_t<X>...>::type...>();
  }
  (std::make_index_sequence<sizeof...(X) - 1>{});
}

/// The plan a call einsum<Eq>(xs...) (or einsum_to<Eq, Out>) would run, from
/// the operand types.
template <fixed_string Eq, Sharded X0, Sharded... X>
constexpr sharded_einsum_plan einsum_plan_of() {
  return detail::sharded_plan_for<Eq, void, std::remove_cvref_t<X0>, std::remove_cvref_t<X>...>();
}

}  // namespace xshard
