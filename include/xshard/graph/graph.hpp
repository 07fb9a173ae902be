// xshard/graph/graph.hpp - a forward written once (graph/node.hpp), run and
// differentiated: evaluation on plain or sharded values, the reverse pass,
// remat policies, the collectives of both passes as constants, and the
// layer protocol (nn/layer.hpp) for scan_layers.
//
// Example (compiled in tests/compile/doc_graph.cpp):
//   struct mlp_def {
//     using input = xt::xtensor<float, 2>;
//     using params = std::tuple<xt::xtensor<float, 2>, xt::xtensor<float, 1>>;
//     static constexpr std::array<std::string_view, 2> param_names{"w", "b"};
//     template <class X, class W, class B>
//     static auto forward(X x, W w, B b) {
//       namespace g = xshard::graph;
//       return g::gelu(g::einsum<"...n,mn->...m">(x, w) + b);
//     }
//   };
//   using L = xshard::graph::layer<mlp_def>;   // forward, vjp, remat, plans
//
// Remat policies (graph::policy): save_all keeps what each vjp reads;
// recompute keeps only the input; dots_saveable keeps einsum outputs;
// save_only<"h", ...> keeps the nodes named by graph::save. The reverse pass
// recomputes whatever a policy did not keep, so every policy gives the same
// gradients (bit for bit). Residuals are one type for every policy: a slot
// per node, filled by the policy (residuals.bytes() says what it holds).
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../core/diagnostics.hpp"
#include "../core/error.hpp"
#include "../core/workspace.hpp"
#include "../trace/trace.hpp"
#include "node.hpp"
#include "ops.hpp"

namespace xshard::graph {

// ---------------------------------------------------------------------------
// Remat policies: which nodes' values a forward keeps for the backward.

namespace policy {
struct save_all {
  static constexpr bool keeps(const node_info& n) { return n.kind != op_kind::leaf; }
};
struct recompute {
  static constexpr bool keeps(const node_info&) { return false; }
};
struct dots_saveable {
  static constexpr bool keeps(const node_info& n) { return n.kind == op_kind::einsum; }
};
template <fixed_string... Names>
struct save_only {
  static constexpr bool keeps(const node_info& n) { return !n.name.empty() && ((n.name == Names.view()) || ...); }
};
/// Nothing at all, not even the input (a forward whose residuals are
/// dropped).
struct nothing {
  static constexpr bool keeps_input = false;
  static constexpr bool keeps(const node_info&) { return false; }
};
}  // namespace policy

/// The nodes whose values some vjp reads.
template <std::size_t N>
constexpr node_set<N> vjp_reads(const std::array<node_info, N>& g) {
  node_set<N> r{};
  for (std::size_t i = 0; i < N; ++i) {
    if (g[i].kind == op_kind::leaf) continue;
    if (g[i].needs_output) r[i] = true;
    if (g[i].needs_operands)
      for (std::size_t k = 0; k < g[i].arity; ++k) r[g[i].operands[k]] = true;
  }
  return r;
}

/// `required` closed under recomputation: a required node that is not
/// `present` (and not a leaf) needs its operands.
template <std::size_t N>
constexpr node_set<N> close_required(const std::array<node_info, N>& g, node_set<N> required,
                                     const node_set<N>& present) {
  for (std::size_t i = N; i-- > 0;)
    if (required[i] && !present[i] && g[i].kind != op_kind::leaf)
      for (std::size_t k = 0; k < g[i].arity; ++k) required[g[i].operands[k]] = true;
  return required;
}

/// The nodes whose value depends on a parameter (a leaf other than the
/// input, leaf 0): the only nodes whose cotangents a backward that makes no
/// input gradient needs (operands precede their nodes).
template <std::size_t N>
constexpr node_set<N> depends_on_params(const std::array<node_info, N>& g) {
  node_set<N> d{};
  for (std::size_t i = 0; i < N; ++i) {
    if (g[i].kind == op_kind::leaf) {
      d[i] = g[i].leaf != 0;
      continue;
    }
    for (std::size_t k = 0; k < g[i].arity; ++k) d[i] = d[i] || d[g[i].operands[k]];
  }
  return d;
}

/// The nodes a forward under Policy keeps: those the backward reads, or
/// needs to recompute what it reads, that the policy keeps; and the input
/// (leaf 0) when the backward needs it.
template <class Policy, std::size_t N>
constexpr node_set<N> kept_nodes(const std::array<node_info, N>& g) {
  node_set<N> keeps{};
  constexpr bool input = [] {
    if constexpr (requires { Policy::keeps_input; })
      return Policy::keeps_input;
    else
      return true;
  }();
  for (std::size_t i = 0; i < N; ++i)
    keeps[i] = g[i].kind == op_kind::leaf ? input && g[i].leaf == 0 : Policy::keeps(g[i]);
  const node_set<N> required = close_required(g, vjp_reads(g), keeps);
  node_set<N> out{};
  for (std::size_t i = 0; i < N; ++i) out[i] = required[i] && keeps[i];
  return out;
}

// ---------------------------------------------------------------------------
// Checks: every node's operands fit it (ranks; the einsum and custom
// signatures), found by constexpr functions over the node table before
// anything is instantiated, and reported naming the node.

/// A compile error's subject: graph_node_error<position, op<...>, name<...>>.
template <char... C>
struct graph_op {};
template <char... C>
struct node_name {};
template <std::size_t Position, class Op, class Name>
struct graph_node_error {
  static constexpr bool value = false;
};
template <std::int64_t Dim, std::int64_t Rank>
struct graph_dim_out_of_range {
  static constexpr bool value = false;
};

enum class node_errc : std::uint8_t { ok, signature, dim_out_of_range };

/// The first node whose operands do not fit it.
struct node_check {
  std::size_t node = no_node;
  node_errc code = node_errc::ok;
  diagnostic diag{};  // the signature's (einsum, custom)
  std::int64_t dim = 0, rank = 0;
  static_string<64> op{};
  static_string<32> name{};
  constexpr bool ok() const { return code == node_errc::ok; }
};

namespace detail {

template <class Op>
struct signature_of {
  static constexpr bool has = false;
};
template <fixed_string Eq>
struct signature_of<einsum_op<Eq>> {
  static constexpr bool has = true;
  static constexpr checked<einsum_equation> eq = ::xshard::detail::parsed_equation<Eq>;
  static constexpr std::size_t trailing = 0;  // operands after the signature's (none)
};
template <fixed_string Eq>
struct signature_of<einsum_bias_op<Eq>> : signature_of<einsum_op<Eq>> {
  static constexpr std::size_t trailing = 1;  // the bias
};
template <fixed_string Eq, class S>
struct signature_of<einsum_to_op<Eq, S>> : signature_of<einsum_op<Eq>> {};
template <fixed_string Name, fixed_string Sig, class Kernel>
struct signature_of<custom_op<Name, Sig, Kernel>> {
  static constexpr bool has = true;
  static constexpr checked<einsum_equation> eq = ::xshard::detail::parsed_equation<Sig>;
  static constexpr std::size_t trailing = 0;
};
template <fixed_string Name, class Op>
struct signature_of<named_op<Name, Op>> : signature_of<Op> {};
template <fixed_string Scope, class Op>
struct signature_of<traced_op<Scope, Op>> : signature_of<Op> {};

template <class Op>
struct dims_of {
  static constexpr std::array<int, 0> dims{};
};
template <int D>
struct dims_of<softmax_op<D>> {
  static constexpr std::array<int, 1> dims{D};
};
template <int D>
struct dims_of<log_softmax_op<D>> {
  static constexpr std::array<int, 1> dims{D};
};
template <int Q, int K>
struct dims_of<causal_mask_op<Q, K>> {
  static constexpr std::array<int, 2> dims{Q, K};
};
template <fixed_string Name, class Op>
struct dims_of<named_op<Name, Op>> : dims_of<Op> {};
template <fixed_string Scope, class Op>
struct dims_of<traced_op<Scope, Op>> : dims_of<Op> {};

template <class Op>
struct constrained_spec {
  using type = void;
};
template <class S>
struct constrained_spec<constrain_op<S>> {
  using type = S;
};
template <fixed_string Name, class Op>
struct constrained_spec<named_op<Name, Op>> : constrained_spec<Op> {};
template <fixed_string Scope, class Op>
struct constrained_spec<traced_op<Scope, Op>> : constrained_spec<Op> {};

/// The mesh of the first sharded type among Ts (void if none).
template <class... Ts>
struct mesh_of {
  using type = void;
};
template <class T>
struct mesh_type_of {
  using type = typename std::remove_cvref_t<T>::mesh_type;
};
template <class T0, class... Ts>
struct mesh_of<T0, Ts...> {
  using type = typename std::conditional_t<Sharded<T0>, mesh_type_of<T0>, mesh_of<Ts...>>::type;
};
template <class Tuple>
struct mesh_of_tuple;
template <class... Ts>
struct mesh_of_tuple<std::tuple<Ts...>> : mesh_of<Ts...> {};

/// Node I's rank from its operands' (ranks[j] for j < I), or a failure. M:
/// the mesh of the layer's sharded values (void: plain).
template <class Op, class M, std::size_t N>
constexpr node_check rank_of(const node_info& n, std::array<std::int64_t, N>& ranks, std::size_t i) {
  node_check c;
  std::array<std::int64_t, max_arity> in{};
  for (std::size_t k = 0; k < n.arity; ++k) in[k] = ranks[n.operands[k]];
  using S = typename constrained_spec<Op>::type;
  if constexpr (!std::is_void_v<S> && !std::is_void_v<M>) {
    constexpr auto r = ::xshard::detail::resolved_v<M, S>;
    if (!r.ok()) {
      c.code = node_errc::signature;
      c.diag = r.diag;
      return c;
    }
    if (static_cast<std::int64_t>(r.value.rank()) != in[0]) {
      c.code = node_errc::signature;
      c.diag.code = errc::spec_rank_mismatch;
      c.diag.a = static_cast<std::int64_t>(r.value.rank());
      c.diag.b = in[0];
      return c;
    }
  }
  if constexpr (signature_of<Op>::has) {
    constexpr auto eq = signature_of<Op>::eq;
    if (!eq.ok()) {
      c.code = node_errc::signature;
      c.diag = eq.diag;
      return c;
    }
    const auto b =
        bind_einsum(eq.value, std::span<const std::int64_t>(in.data(), n.arity - signature_of<Op>::trailing));
    if (!b.ok()) {
      c.code = node_errc::signature;
      c.diag = b.diag;
      return c;
    }
    ranks[i] = static_cast<std::int64_t>(b.value.output_labels.size());
  } else if (n.kind == op_kind::elementwise && n.arity == 2) {
    ranks[i] = std::max(in[0], in[1]);
  } else {
    ranks[i] = in[0];
  }
  for (const int d : dims_of<Op>::dims)
    if (d >= ranks[i] || -d > ranks[i]) {
      c.code = node_errc::dim_out_of_range;
      c.dim = d;
      c.rank = ranks[i];
    }
  return c;
}

}  // namespace detail

// ---------------------------------------------------------------------------
// Values.

template <class N, class Leaves>
struct value_of;
template <std::size_t I, class Leaves>
struct value_of<node<arg_op<I>>, Leaves> {
  using type = std::remove_cvref_t<std::tuple_element_t<I, Leaves>>;
};
template <class Op, class... A, class Leaves>
struct value_of<node<Op, A...>, Leaves> {
  using type =
      std::remove_cvref_t<decltype(rule<Op>::eval(std::declval<const typename value_of<A, Leaves>::type&>()...))>;
};
template <class N, class Leaves>
using value_t = typename value_of<N, Leaves>::type;

// ---------------------------------------------------------------------------
// Fusion: `einsum<Eq>(...) + b`, b a rank-1 value along the result's last
// dim (a linear layer's bias), becomes one einsum_bias_op node whose GEMM
// adds b in its epilogue: one pass over the result instead of two. Decided
// at compile time from the graph and the declared types, on one device
// only (a sharded einsum may sum partial results across devices after its
// GEMM), and only where nothing else reads the einsum's own value.

namespace detail {

/// Whether Op is +, possibly named (save) or traced (scope); rewrap<New>:
/// New under the same name and scope.
template <class Op>
struct add_of {
  static constexpr bool value = false;
  template <class New>
  using rewrap = New;
};
template <>
struct add_of<binary_op<binary::add>> {
  static constexpr bool value = true;
  template <class New>
  using rewrap = New;
};
template <fixed_string Name, class Op>
struct add_of<named_op<Name, Op>> : add_of<Op> {
  template <class New>
  using rewrap = named_op<Name, typename add_of<Op>::template rewrap<New>>;
};
template <fixed_string Scope, class Op>
struct add_of<traced_op<Scope, Op>> : add_of<Op> {
  template <class New>
  using rewrap = traced_op<Scope, typename add_of<Op>::template rewrap<New>>;
};

/// The graph being fused: its nodes (for use counts) and leaf types.
template <class Nodes, class Leaves>
struct fusion_context {
  using nodes = Nodes;
  using leaves = Leaves;
  static constexpr auto uses = use_counts(structure<Nodes>::nodes);
};

template <class N, class Ctx>
struct fuse {
  using type = N;  // a leaf
};

template <class Op>
inline constexpr bool is_einsum_op_v = false;
template <fixed_string Eq>
inline constexpr bool is_einsum_op_v<einsum_op<Eq>> = true;

/// An einsum (unnamed, untraced) whose value only the + reads, plus a plain
/// rank-1 tensor of its value type, on one device.
template <class Ctx, class E, class B>
constexpr bool fuses_with_bias() {
  if constexpr (!is_einsum_op_v<typename E::op>) {
    return false;
  } else {
    using Leaves = typename Ctx::leaves;
    using VE = value_t<E, Leaves>;
    using VB = value_t<B, Leaves>;
    if constexpr (Sharded<VE> || Sharded<VB> || E::arity + 1 > max_arity) {
      return false;
    } else {
      using T = typename VE::value_type;
      return Ctx::uses[index_in_v<E, typename Ctx::nodes>] == 1 && rank_v<VB> == 1 && rank_v<VE> >= 1 &&
             std::is_same_v<VB, xt::xtensor<T, 1>> && std::is_same_v<VE, xt::xtensor<T, rank_v<VE>>>;
    }
  }
}

template <class Ctx, class AddOp, class E, class B>
struct fused_bias;
template <class Ctx, class AddOp, fixed_string Eq, class... A, class B>
struct fused_bias<Ctx, AddOp, node<einsum_op<Eq>, A...>, B> {
  using type = node<typename add_of<AddOp>::template rewrap<einsum_bias_op<Eq>>, typename fuse<A, Ctx>::type...,
                    typename fuse<B, Ctx>::type>;
};

/// Op over its operands fused.
template <class Ctx, class Op, class... A>
struct rebuilt {
  using type = node<Op, typename fuse<A, Ctx>::type...>;
};
template <class Ctx, class Op, class... A>
struct fuse_node : rebuilt<Ctx, Op, A...> {};
template <class Ctx, class Op, class L, class R>
requires add_of<Op>::value struct fuse_node<Ctx, Op, L, R> {
  static constexpr bool left = fuses_with_bias<Ctx, L, R>();
  static constexpr bool right = !left && fuses_with_bias<Ctx, R, L>();
  using type =
      typename std::conditional_t<left, fused_bias<Ctx, Op, L, R>,
                                  std::conditional_t<right, fused_bias<Ctx, Op, R, L>, rebuilt<Ctx, Op, L, R>>>::type;
};

template <class Op, class... A, class Ctx>
struct fuse<node<Op, A...>, Ctx> {
  using type = typename fuse_node<Ctx, Op, A...>::type;
};

template <bool Fuse, class R, class Leaves>
struct fuse_biases {
  using type = R;
};
template <class R, class Leaves>
struct fuse_biases<true, R, Leaves> {
  using type = typename fuse<R, fusion_context<nodes_of<R>, Leaves>>::type;
};

}  // namespace detail

/// A node's value during a pass: owned, or a reference to a leaf or to a
/// kept residual.
template <class V>
struct slot {
  std::optional<V> own;
  const V* ref = nullptr;
  bool has() const { return ref != nullptr || own.has_value(); }
  const V& get() const { return ref ? *ref : *own; }
};

template <class Nodes, class Leaves>
struct values;
template <class... N, class Leaves>
struct values<list<N...>, Leaves> {
  std::tuple<slot<value_t<N, Leaves>>...> slots;
  std::array<shape_rec, sizeof...(N)> shapes{};
};

/// What a forward kept: a slot per node (the policy fills some) and every
/// node's shape. One type for every policy.
template <class Nodes, class Decl>
struct residual_store;
template <class... N, class Decl>
struct residual_store<list<N...>, Decl> {
  std::tuple<std::optional<value_t<N, Decl>>...> kept;
  std::array<shape_rec, sizeof...(N)> shapes{};

  /// Bytes of the tensors held (this device's blocks for sharded values).
  std::size_t bytes() const {
    std::size_t b = 0;
    auto add = [&](const auto& o) {
      if (!o) return;
      using V = std::remove_cvref_t<decltype(*o)>;
      if constexpr (Sharded<V>)
        b += o->local().size() * sizeof(typename V::value_type);
      else
        b += o->size() * sizeof(typename V::value_type);
    };
    std::apply([&](const auto&... o) { (add(o), ...); }, kept);
    return b;
  }
  /// How many nodes' values are held.
  std::size_t count() const {
    return std::apply([](const auto&... o) { return (std::size_t{o.has_value()} + ... + 0); }, kept);
  }
  /// Hands the held tensors to the current workspace (detail::recycle).
  friend void recycle_parts(residual_store&& r) { ::xshard::detail::recycle(std::move(r.kept)); }
};

/// c as a CT: a sharded value whose spec differs from CT's only by mesh
/// axes of size 1 (the einsum planner drops them) has the same blocks.
template <class CT, class C>
CT as_type(C&& c) {
  using D = std::remove_cvref_t<C>;
  if constexpr (::xshard::detail::is_pooled_tensor<CT>::value && std::is_same_v<D, CT> &&
                std::is_lvalue_reference_v<C>) {
    return ::xshard::detail::fresh_copy<typename CT::value_type, std::tuple_size_v<typename CT::shape_type>>(
        c);  // the current workspace's, if any
  } else if constexpr (std::is_same_v<D, CT> || std::is_same_v<owning_sharded_t<D>, CT> || !Sharded<CT>) {
    return CT(std::forward<C>(c));
  } else {
    static_assert(
        D::rank == CT::rank && D::partial_axes == CT::partial_axes &&
            [] {
              for (std::size_t d = 0; d < D::rank; ++d)
                if (!detail::same_blocks<D, CT>(d, d)) return false;
              return true;
            }(),
        "xshard::graph: two values of one node have different layouts (constrain one of them)");
    constexpr bool view = requires { typename D::owning_type; };  // a sharded_view: no block of its own
    if constexpr (std::is_lvalue_reference_v<C> || view)
      return CT(c.device(), c.global_shape(),
                ::xshard::detail::fresh_copy<typename CT::value_type, CT::rank>(c.local()));  // the workspace's
    else
      return CT(c.device(), c.global_shape(), std::move(c.local()));  // an owning rvalue: its block moves
  }
}

template <class CT, class C>
void accumulate(std::optional<CT>& ct, C&& c) {
  if (!ct) {
    ct.emplace(as_type<CT>(std::forward<C>(c)));
    return;
  }
  // In place (xtensor's += on a container would go through a temporary),
  // then c, if it is ours, goes to the workspace.
  const auto add = [](auto& to, const auto& from) {
    using To = std::remove_cvref_t<decltype(to)>;
    if constexpr (std::is_same_v<To, std::remove_cvref_t<decltype(from)>> &&
                  std::is_same_v<To, xt::xtensor<typename To::value_type, detail::rank_v<To>>>) {
      if (to.shape() == from.shape()) {
        detail::add_in_place(to.data(), from.data(), to.size());  // row-major both: element by element
        return;
      }
    }
    xt::noalias(to) += from;
  };
  if constexpr (Sharded<CT>) {
    static_assert(detail::rank_v<CT> == detail::rank_v<C>);
    add(ct->local(), c.local());
  } else {
    add(*ct, c);
  }
  if constexpr (!std::is_lvalue_reference_v<C>) ::xshard::detail::recycle(std::move(c));
}

/// A zero gradient shaped like `v` (a leaf no path reaches).
template <class CT, class V>
CT zeros_like(const V& v) {
  CT z(v);
  if constexpr (Sharded<CT>)
    z.local().fill(0);
  else
    z.fill(0);
  return z;
}

/// The compile-time face of a node_check: the node (its position in the
/// graph, operands first; its op; its name or none), then the signature's
/// own diagnostic naming the column and character or operand.
template <node_check C>
constexpr bool report() {
  if constexpr (!C.ok()) {
    static_assert(graph_node_error<C.node, ::xshard::detail::spelled<C.op, graph_op>,
                                   ::xshard::detail::spelled<C.name, node_name>>::value,
                  "xshard::graph: a node's operands do not fit it (the node's position, op and name follow)");
    if constexpr (C.code == node_errc::signature)
      static_assert(raise<C.diag>());
    else
      static_assert(graph_dim_out_of_range<C.dim, C.rank>::value, "xshard::graph: a dim beyond the node's rank");
  }
  return true;
}

/// "graph node 3 (einsum ...n,mn->...m, named h)": a run-time error's
/// context.
inline std::string node_context(std::size_t i, const node_info& n) {
  std::string s = "graph node " + std::to_string(i) + " (";
  if (n.kind == op_kind::einsum) s += "einsum ";
  if (n.kind == op_kind::custom) s += "custom ";
  s += n.text;
  if (!n.name.empty()) s += ", named " + std::string(n.name);
  return s + ")";
}

/// One node of a pass that runs collectives: its position, its op (the
/// equation, kernel name or op), the name save<...> gave it, and the
/// collectives every device runs for it, in order.
struct node_plan {
  std::size_t node = 0;
  std::string_view op;
  std::string_view name;
  node_collectives collectives{};
};

/// A node's collectives as text, in order, each with the names of its mesh
/// axes (axis_set_text): "all-reduce over {model}, all-reduce over {data}"
/// ("" for none). `axes` are the mesh's (mesh<...>::axes).
inline std::string collectives_text(const node_plan& step, const mesh_axes& axes) {
  std::string s;
  for (const planned_collective& c : step.collectives) {
    if (!s.empty()) s += ", ";
    s += collective_name(c.kind);
    s += " over ";
    s += axis_set_text(axes, c.axes).view();
  }
  return s;
}

namespace detail {
/// The element type of the first parameter of Decl (std::tuple<input,
/// params...>) when it is sharded; void otherwise.
template <class Decl>
struct first_param_value {
  using type = void;
};
template <class X, class P0, class... P>
requires Sharded<std::remove_cvref_t<P0>>
struct first_param_value<std::tuple<X, P0, P...>> {
  using type = typename std::remove_cvref_t<P0>::value_type;
};
}  // namespace detail

namespace detail {
/// One graph backward's deferred all-reduces (program::defers_reduce): recorded while a deferring vjp
/// runs (capture), then run as one all_reduce_many per axis set.
template <class T, std::size_t n>
class deferred_reduces {
  std::array<::xshard::detail::deferred_all_reduce<T>, (n > 0 ? n : 1)> items_{};
  ::xshard::detail::deferred_all_reduces<T> sink_{items_.data(), n, 0};

 public:
  std::size_t recorded() const { return sink_.count; }
  /// f(), its all-reduces recorded (none waits: f's one collective is the one recorded).
  template <class F>
  auto capture(F&& f) {
    struct window {
      ::xshard::detail::deferred_all_reduces<T>* prev;
      explicit window(::xshard::detail::deferred_all_reduces<T>* s)
          : prev(std::exchange(::xshard::detail::deferring_all_reduces<T>, s)) {}
      ~window() { ::xshard::detail::deferring_all_reduces<T> = prev; }
    } const open(&sink_);
    return f();
  }
  /// The all-reduce recorded since `before`, if any, must be of the
  /// buffer [data, data + count) (the gradient moved into its slot).
  void check_moved(std::size_t before, const T* data, std::size_t count) const {
    for (std::size_t i = before; i < sink_.count; ++i)
      if (items_[i].data.data() != data || items_[i].data.size() != count)
        throw error("xshard::graph: internal error: a deferred all-reduce is not of the gradient's block");
  }
  /// Whether an all-reduce of the buffer at `data` waits.
  bool holds(const T* data) const { return find(data) != sink_.count; }
  /// Forgets the all-reduces recorded since `before` (a contribution
  /// summed, partial, into a gradient whose all-reduce waits).
  void drop(std::size_t before) { sink_.count = before; }
  /// Runs the waiting all-reduce of the buffer at `data`, if any (a
  /// summed gradient, before its node's backward reads it).
  void run_one(const T* data) {
    if (const auto d = take(data)) d->dev.all_reduce(d->dev.device, d->data, d->op, d->axes);
  }
  /// Whether an all-reduce of the buffer at `data` waited; it no longer
  /// does (the node's backward reduces the partial sums itself).
  bool forget(const T* data) { return take(data).has_value(); }

 private:
  /// The index of the waiting all-reduce of the buffer at `data`
  /// (recorded(): none waits).
  std::size_t find(const T* data) const {
    std::size_t i = 0;
    while (i < sink_.count && items_[i].data.data() != data) ++i;
    return i;
  }
  std::optional<::xshard::detail::deferred_all_reduce<T>> take(const T* data) {
    const std::size_t i = find(data);
    if (i == sink_.count) return std::nullopt;
    const ::xshard::detail::deferred_all_reduce<T> d = items_[i];
    for (std::size_t j = i + 1; j < sink_.count; ++j) items_[j - 1] = items_[j];
    --sink_.count;
    return d;
  }

 public:
  /// The recorded all-reduces, one all_reduce_many per axis set (and
  /// reduce op), in the order each first appears.
  void run() {
    std::array<std::span<T>, (n > 0 ? n : 1)> parts{};
    std::array<bool, (n > 0 ? n : 1)> done{};
    for (std::size_t i = 0; i < sink_.count; ++i) {
      if (done[i]) continue;
      std::size_t m = 0;
      for (std::size_t j = i; j < sink_.count; ++j)
        if (!done[j] && items_[j].axes == items_[i].axes && items_[j].op == items_[i].op &&
            items_[j].dev.device == items_[i].dev.device) {
          parts[m++] = items_[j].data;
          done[j] = true;
        }
      const auto& dev = items_[i].dev;
      dev.all_reduce_many(dev.device, std::span<const std::span<T>>(parts.data(), m), items_[i].op, items_[i].axes);
    }
    sink_.count = 0;
  }
};
}  // namespace detail

// ---------------------------------------------------------------------------
// The program of a result node R with leaves of declared types Decl
// (std::tuple<input, params...>).

template <Node R, class Decl>
struct program {
  using nodes = nodes_of<R>;
  static constexpr std::size_t size = nodes::size;
  static constexpr const std::array<node_info, size>& g = structure<nodes>::nodes;
  static constexpr std::size_t leaves = std::tuple_size_v<Decl>;

  using mesh_type = typename detail::mesh_of_tuple<Decl>::type;  // void: plain values
  /// The first node whose operands do not fit it (ranks from Decl).
  static constexpr node_check check = [] {
    std::array<std::int64_t, size> ranks{};
    node_check c;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (
          [&] {
            if (!c.ok()) return;
            if constexpr (g[I].kind == op_kind::leaf) {
              if constexpr (g[I].leaf < std::tuple_size_v<Decl>)
                ranks[I] = static_cast<std::int64_t>(detail::rank_v<std::tuple_element_t<g[I].leaf, Decl>>);
            } else {
              c = detail::rank_of<typename at_t<I, nodes>::op, mesh_type>(g[I], ranks, I);
              if (!c.ok()) {
                c.node = I;
                c.op = g[I].text;
                c.name = g[I].name;
              }
            }
          }(),
          ...);
    }
    (std::make_index_sequence<size>{});
    return c;
  }();
  static_assert(report<check>());
  using residuals = residual_store<nodes, Decl>;
  template <std::size_t I>
  using node_t = at_t<I, nodes>;
  template <std::size_t I>
  using op_t = typename node_t<I>::op;
  using output = value_t<R, Decl>;

  static_assert(
      [] {
        for (const node_info& n : g)
          if (n.kind == op_kind::leaf && n.leaf >= std::tuple_size_v<Decl>) return false;
        return true;
      }(),
      "xshard::graph: a leaf index beyond the layer's input and parameters");

  /// Operand k of node i may be moved from: not a leaf, not kept, used
  /// once by i and by no later node.
  template <class Policy>
  static constexpr auto movable = [] {
    const node_set<size> kept = kept_nodes<Policy>(g);
    std::array<std::size_t, size> last{};
    for (std::size_t i = 0; i < size; ++i)
      for (std::size_t k = 0; k < g[i].arity; ++k) last[g[i].operands[k]] = i;
    std::array<std::array<bool, max_arity>, size> m{};
    for (std::size_t i = 0; i < size; ++i)
      for (std::size_t k = 0; k < g[i].arity; ++k) {
        const std::size_t j = g[i].operands[k];
        std::size_t uses = 0;
        for (std::size_t q = 0; q < g[i].arity; ++q) uses += g[i].operands[q] == j;
        m[i][k] = g[j].kind != op_kind::leaf && !kept[j] && last[j] == i && uses == 1;
      }
    return m;
  }();

  template <class Leaves>
  using values_t = values<nodes, Leaves>;

  /// Trace scopes (graph::scope): node t's scope opens before node
  /// scope_start[t] and closes after t: the run of nodes just before t that
  /// t reaches (in operands-first order, the nodes computed for it).
  static constexpr bool has_scopes = [] {
    for (const node_info& n : g)
      if (!n.trace.empty()) return true;
    return false;
  }();
  static constexpr std::array<std::size_t, size> scope_start = [] {
    std::array<std::size_t, size> start{};
    for (std::size_t t = 0; t < size; ++t) {
      start[t] = no_node;
      if (g[t].trace.empty()) continue;
      node_set<size> reach{};
      reach[t] = true;
      for (std::size_t j = t + 1; j-- > 0;)
        if (reach[j])
          for (std::size_t k = 0; k < g[j].arity; ++k) reach[g[j].operands[k]] = true;
      std::size_t s = t;
      while (s > 0 && reach[s - 1]) --s;
      while (g[s].kind == op_kind::leaf) ++s;  // leaves are not computed: the scope opens at the first op
      start[t] = s;
    }
    return start;
  }();
  using scopes_t = std::array<std::optional<trace_me>, has_scopes ? size : 0>;
  static void open_scopes([[maybe_unused]] scopes_t& open, [[maybe_unused]] std::size_t i) {
    if constexpr (has_scopes)
      for (std::size_t t = size; t-- > i;)
        if (scope_start[t] == i) open[t].emplace(g[t].trace);
  }
  static void close_scopes_from([[maybe_unused]] scopes_t& open, [[maybe_unused]] std::size_t i) {
    if constexpr (has_scopes)
      for (std::size_t t = i; t < size; ++t)
        if (scope_start[t] == i) open[t].reset();
  }

  template <std::size_t I, std::size_t K, bool Move, class V>
  static decltype(auto) operand(V& v) {
    constexpr std::size_t j = g[I].operands[K];
    if constexpr (Move)
      return std::move(*std::get<j>(v.slots).own);
    else
      return std::get<j>(v.slots).get();
  }

  /// Evaluates node I into v (its operands are there). Policy decides
  /// which operands it may consume (void: none).
  template <std::size_t I, class Policy, class V>
  static void compute(V& v) {
    auto& out = std::get<I>(v.slots);
    try {
      [&]<std::size_t... K>(std::index_sequence<K...>) {
        if constexpr (std::is_void_v<Policy>)
          out.own.emplace(rule<op_t<I>>::eval(operand<I, K, false>(v)...));
        else
          out.own.emplace(rule<op_t<I>>::eval(operand<I, K, movable<Policy>[I][K]>(v)...));
      }
      (std::make_index_sequence<g[I].arity>{});
    } catch (const error& e) {
      throw error(std::string(e.what()) + " (" + node_context(I, g[I]) + ")");
    }
    v.shapes[I] = shape_of(out.get());
  }

  template <class Leaves, class... L>
  static void bind_leaves(values_t<Leaves>& v, const std::tuple<const L*...>& leaf) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (
          [&] {
            if constexpr (g[I].kind == op_kind::leaf && g[I].leaf != 0) {
              std::get<I>(v.slots).ref = std::get<g[I].leaf>(leaf);
              v.shapes[I] = shape_of(std::get<I>(v.slots).get());
            }
          }(),
          ...);
    }
    (std::make_index_sequence<size>{});
  }

  /// The forward under Policy: the result, and the residuals it keeps.
  template <class Policy, class X, class... P>
  static std::pair<output, residuals> forward(const X& x, const P&... p) {
    using Leaves = std::tuple<X, P...>;
    constexpr node_set<size> kept = kept_nodes<Policy>(g);
    values_t<Leaves> v;
    bind_leaves<Leaves>(v, std::tuple<const X*, const P*...>(std::addressof(x), std::addressof(p)...));
    residuals r;
    scopes_t scopes;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (
          [&] {
            if constexpr (g[I].kind == op_kind::leaf) {
              if constexpr (g[I].leaf == 0) {
                std::get<I>(v.slots).ref = std::addressof(x);
                v.shapes[I] = shape_of(x);
              }
            } else {
              open_scopes(scopes, I);
              compute<I, Policy>(v);
              if constexpr (has_scopes)
                if (!g[I].trace.empty()) scopes[I].reset();
            }
          }(),
          ...);
      (
          [&] {
            if constexpr (kept[I]) {
              if constexpr (g[I].kind == op_kind::leaf || I == size - 1)
                std::get<I>(r.kept).emplace(as_type<value_t<node_t<I>, Decl>>(std::get<I>(v.slots).get()));
              else
                std::get<I>(r.kept).emplace(as_type<value_t<node_t<I>, Decl>>(std::move(*std::get<I>(v.slots).own)));
            }
          }(),
          ...);
    }
    (std::make_index_sequence<size>{});
    r.shapes = v.shapes;
    auto& root = std::get<size - 1>(v.slots);
    std::pair<output, residuals> out = [&] {
      if constexpr (g[size - 1].kind == op_kind::leaf)
        return std::pair<output, residuals>{output(root.get()), std::move(r)};
      else
        return std::pair<output, residuals>{output(std::move(*root.own)), std::move(r)};
    }();
    release(v);  // what no one kept goes back to the workspace
    return out;
  }

  /// Hands the values a pass computed and still owns to the current
  /// workspace (moved-from ones hold nothing).
  template <class Leaves>
  static void release(values_t<Leaves>& v) {
    std::apply([](auto&... s) { (::xshard::detail::recycle(std::move(s.own)), ...); }, v.slots);
  }

  /// The result alone (nothing kept).
  template <class X, class... P>
  static output evaluate(const X& x, const P&... p) {
    return forward<policy::nothing>(x, p...).first;
  }

  template <std::size_t I, class Leaves>
  using ct_t = value_t<node_t<I>, Decl>;

  /// The reverse pass: the gradients of the input and of every parameter,
  /// from the residuals r of a forward under any policy (what it did not
  /// keep is recomputed first) and the result's gradient gy. Without Input,
  /// no cotangent is made for a node whose value does not depend on a
  /// parameter (depends_on_params): the input's gradient and the products
  /// that only feed it are skipped (the input's cotangent stays empty).
  template <bool Input = true, class G, class... P>
  static auto backward(const residuals& r, G&& gy, const P&... p) {
    using X = std::tuple_element_t<0, Decl>;
    using Leaves = std::tuple<X, P...>;
    values_t<Leaves> v;
    v.shapes = r.shapes;
    bind_leaves<Leaves>(v, std::tuple<const X*, const P*...>(nullptr, std::addressof(p)...));
    node_set<size> present{};
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (
          [&] {
            if constexpr (g[I].kind != op_kind::leaf || g[I].leaf == 0)
              if (std::get<I>(r.kept)) std::get<I>(v.slots).ref = std::addressof(*std::get<I>(r.kept));
            present[I] = std::get<I>(v.slots).has();
          }(),
          ...);
      const node_set<size> required = close_required(g, vjp_reads(g), present);
      (
          [&] {
            if (!required[I] || present[I]) return;
            if constexpr (g[I].kind == op_kind::leaf)
              throw error("xshard::graph: the backward needs the layer's input, which the residuals do not hold");
            else
              compute<I, void>(v);
          }(),
          ...);
    }
    (std::make_index_sequence<size>{});
    // Cotangents, the result's first, then each node's in reverse order.
    auto ct = [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::tuple<std::optional<ct_t<I, Leaves>>...>{};
    }
    (std::make_index_sequence<size>{});
    if (const shape_rec got = shape_of(gy); !(got == v.shapes[size - 1]))
      throw error("xshard::graph: the result's gradient has shape " +
                  ::xshard::detail::shape_text(std::span(got.extents.data(), got.rank)) + " but the result " +
                  ::xshard::detail::shape_text(std::span(v.shapes[size - 1].extents.data(), v.shapes[size - 1].rank)) +
                  " (backward)");
    using root_ct = std::remove_cvref_t<decltype(*std::get<size - 1>(ct))>;
    // The declared output may name size-1 mesh axes; a gy handed over is moved, not copied.
    std::get<size - 1>(ct).emplace(as_type<root_ct>(std::forward<G>(gy)));
    scopes_t scopes;
    // Room for every deferred parameter gradient, every summed gradient and
    // the contribution being summed.
    detail::deferred_reduces<std::conditional_t<std::is_void_v<deferred_value_t>, float, deferred_value_t>,
                             deferred_count() + (summed_count() != 0 ? summed_count() + 1 : 0)>
        deferred;
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      (
          [&] {
            constexpr std::size_t i = size - 1 - J;
            if constexpr (has_scopes)
              if (!g[i].trace.empty())
                scopes[i].emplace(g[i].trace, std::initializer_list<trace_arg_view>{{"pass", "backward"}});
            // Its readers' partial gradients summed: reduced now, or by its
            // own backward (absorbs_partial), if their reduction waits.
            bool partial = false;
            if constexpr (summed_reduce_axes<i>() != 0)
              if (const auto& gi = std::get<i>(ct)) {
                if constexpr (absorbs_partial<i>())
                  partial = deferred.forget(gi->local().data());
                else
                  deferred.run_one(gi->local().data());
              }
            pullback<i, Input>(v, ct, deferred, partial);
            close_scopes_from(scopes, i);
          }(),
          ...);
    }
    (std::make_index_sequence<size>{});
    deferred.run();  // the parameters' gradients, all-reduced together
    release(v);      // the values recomputed for this pass
    return ct;
  }

  template <std::size_t I, bool Input, class V, class CT, class D>
  static void pullback(const V& v, CT& ct, D& deferred, bool partial) {
    if constexpr (g[I].kind != op_kind::leaf) {
      auto& gi = std::get<I>(ct);
      if (!gi) return;
      [&]<std::size_t... K>(std::index_sequence<K...>) {
        using Y = std::remove_cvref_t<decltype(std::get<I>(v.slots).get())>;
        vjp_context<Y, std::remove_cvref_t<decltype(std::get<g[I].operands[K]>(v.slots).get())>...> c;
        if (std::get<I>(v.slots).has()) c.y = std::addressof(std::get<I>(v.slots).get());
        ((c.a_shapes[K] = v.shapes[g[I].operands[K]]), ...);
        c.y_shape = v.shapes[I];
        ((std::get<K>(c.a) = std::get<g[I].operands[K]>(v.slots).has()
                                 ? std::addressof(std::get<g[I].operands[K]>(v.slots).get())
                                 : nullptr),
         ...);
        // Operands last to first; the first gets the cotangent itself.
        try {
          (contribute<I, g[I].arity - 1 - K, Input>(ct, c, *gi, deferred, partial), ...);
        } catch (const error& e) {
          throw error(std::string(e.what()) + " (" + node_context(I, g[I]) + ", backward)");
        }
      }
      (std::make_index_sequence<g[I].arity>{});
      ::xshard::detail::recycle(std::move(gi));  // done with it: to the workspace, if any (else freed)
      gi.reset();
    }
  }

  static constexpr node_set<size> param_dependent = depends_on_params(g);

  template <std::size_t I, std::size_t K, bool Input, class CT, class C, class G, class D>
  static void contribute(CT& ct, const C& c, G& gi, D& deferred, bool partial) {
    if constexpr (!Input && !param_dependent[g[I].operands[K]]) return;  // feeds only the input's gradient
    auto& to = std::get<g[I].operands[K]>(ct);
    if constexpr (K == 0 && absorbs_partial<I>() && summed_reduce_axes<I>() != 0)
      if (partial) {  // gi holds partial sums: the rule reduces them on the way to the operand's layout
        accumulate(to, rule<op_t<I>>::template vjp_partial<summed_reduce_axes<I>()>(std::move(gi), c));
        return;
      }
    const auto vjp = [&] {
      if constexpr (K == 0)
        return rule<op_t<I>>::template vjp<K>(std::move(gi), c);
      else
        return rule<op_t<I>>::template vjp<K>(std::as_const(gi), c);
    };
    if constexpr (defers_reduce<I, K>() || sums_before_reduce<I, K>()) {
      // Only an all-reduce that runs in place is captured: a gradient split
      // unevenly (padded blocks) is reduced at once, on every device alike
      // (can_capture).
      if (!can_capture<K>(c)) {
        accumulate(to, vjp());
        return;
      }
    }
    if constexpr (defers_reduce<I, K>()) {
      // The all-reduce of the gradient's partial sums is recorded, not run;
      // the block it would reduce is the gradient's, moved into `to` (the
      // parameter's only contribution): deferred.run() reduces it there.
      const std::size_t before = deferred.recorded();
      auto r = deferred.capture(vjp);
      accumulate(to, std::move(r));
      deferred.check_moved(before, to->local().data(), to->local().size());
    } else if constexpr (sums_before_reduce<I, K>()) {
      // The contribution's all-reduce is recorded, not run. The first
      // contribution's block becomes the gradient, whose recorded all-reduce
      // runs once every reader has added its partial block into it (before
      // node o's own backward); a later one's record is dropped.
      const std::size_t before = deferred.recorded();
      auto r = deferred.capture(vjp);
      const bool recorded = deferred.recorded() != before;
      if (!to) {
        accumulate(to, std::move(r));
        deferred.check_moved(before, to->local().data(), to->local().size());
        return;
      }
      deferred.check_moved(before, r.local().data(), r.local().size());
      if (recorded != deferred.holds(to->local().data()))
        throw error("xshard::graph: internal error: a gradient summed from partial and reduced contributions");
      deferred.drop(before);
      accumulate(to, std::move(r));
    } else {
      accumulate(to, vjp());
    }
  }

  // ---- the parameters' gradients: their all-reduces deferred

  /// Whether operand K's contribution may run inside deferred.capture: its
  /// gradient splits evenly over the mesh (evenly_split, the operand's
  /// global shape), so run_step reduces its partial sums in place and
  /// records that all-reduce instead of waiting for the group. The capture
  /// window is the thread's, not the device's: on a thread mesh a device
  /// that waits inside one lets another device's fiber run on this thread
  /// with the window still open, and that device's all-reduces would be
  /// recorded here (run_step throws instead). Decided the same way on every
  /// device.
  template <std::size_t K, class C>
  static bool can_capture(const C& c) {
    if (std::get<K>(c.a) == nullptr) return false;
    const auto& a = c.template operand<K>();
    using A = std::remove_cvref_t<decltype(a)>;
    return ::xshard::evenly_split(A::mesh_shape, A::resolved, a.global_shape());
  }

  /// How many operand slots of the graph read node j.
  static consteval std::size_t uses_of(std::size_t j) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < size; ++i)
      for (std::size_t k = 0; k < g[i].arity; ++k) n += g[i].operands[k] == j;
    return n;
  }
  /// The element type of the first sharded parameter (void: none): the
  /// deferred gradients' (others run their all-reduces at once).
  using deferred_value_t = typename detail::first_param_value<Decl>::type;
  /// Whether operand K of node I is a parameter whose gradient's one
  /// collective, the all-reduce of its partial sums (which the rule runs
  /// last, in place, on the block vjp<K> returns: reduces_gradient_last),
  /// waits for the end of the backward, to run with the other parameters'
  /// as one all_reduce_many per axis set: one rendezvous per layer instead
  /// of one per parameter (a 2x2 thread mesh's data replicas on two cores
  /// met four times per layer). Only for a parameter read once by the
  /// graph, so its gradient is that block, never summed with another. The
  /// plans count the deferred all-reduces as run; a parameter whose dims do
  /// not divide evenly over the mesh reduces at once instead (its blocks
  /// are padded), so its layer's counters differ from the plan.
  template <std::size_t I, std::size_t K>
  static consteval bool defers_reduce() {
    if constexpr (g[I].kind == op_kind::leaf) {
      return false;
    } else {
      constexpr std::size_t o = g[I].operands[K];
      if constexpr (g[o].kind != op_kind::leaf || g[o].leaf == 0 || uses_of(o) != 1)
        return false;
      else
        return reduces_last<I, K>();
    }
  }
  /// Whether node I's rule runs operand K's one backward collective, the
  /// all-reduce of the gradient's partial sums, last and in place on the
  /// block vjp<K> returns (reduces_gradient_last), on a sharded gradient
  /// of the deferred element type.
  template <std::size_t I, std::size_t K>
  static consteval bool reduces_last() {
    if constexpr (g[I].kind == op_kind::leaf || std::is_void_v<deferred_value_t>) {
      return false;
    } else {
      constexpr std::size_t o = g[I].operands[K];
      return [&]<std::size_t... J>(std::index_sequence<J...>) {
        using Y = value_t<node_t<I>, Decl>;
        using Rule = rule<op_t<I>>;
        using P = std::remove_cvref_t<value_t<node_t<o>, Decl>>;
        if constexpr (requires {
                        Rule::template reduces_gradient_last<K, Y, value_t<node_t<g[I].operands[J]>, Decl>...>();
                      }) {
          if constexpr (Sharded<P>)
            return std::is_same_v<typename P::value_type, deferred_value_t> &&
                   Rule::template reduces_gradient_last<K, Y, value_t<node_t<g[I].operands[J]>, Decl>...>();
          else
            return false;
        } else {
          return false;
        }
      }
      (std::make_index_sequence<g[I].arity>{});
    }
  }
  /// The axes over which node o's gradient is reduced once, after its
  /// contributions are summed (0: not so). A node read several times, every
  /// reader's contribution partial over the same axes and reduced last in
  /// place (reduces_last: q, k and v all read a decoder's normed input):
  /// each contribution's all-reduce is recorded, the partial blocks are
  /// summed in o's gradient slot, and one all-reduce runs on the sum before
  /// o's own backward (node o's entry of the backward plan): one collective
  /// instead of one per reader, over a third of the data for three. A node
  /// whose rule reduces partial sums itself (absorbs_partial: a constrain)
  /// is handed even one reader's partial gradient. A sum of
  /// partial sums reduced once: the same value as the reduced
  /// contributions summed, not the same rounding.
  template <std::size_t o>
  static consteval axis_set summed_reduce_axes() {
    if constexpr (g[o].kind == op_kind::leaf || uses_of(o) < (absorbs_partial<o>() ? 1 : 2)) {
      return 0;
    } else {
      const reader_reduces r = readers_of<o>(std::make_index_sequence<size>{});
      return r.every ? r.axes : 0;
    }
  }
  /// What summed_reduce_axes gathers from node o's readers (plain
  /// consteval functions: a lambda would not be an immediate context).
  struct reader_reduces {
    bool every = true;
    axis_set axes = 0;
  };
  template <std::size_t o, std::size_t... I>
  static consteval reader_reduces readers_of(std::index_sequence<I...>) {
    reader_reduces r;
    (reader_node<o, I>(r), ...);
    return r;
  }
  template <std::size_t o, std::size_t I>
  static consteval void reader_node(reader_reduces& r) {
    if constexpr (g[I].kind != op_kind::leaf) reader_operands<o, I>(r, std::make_index_sequence<g[I].arity>{});
  }
  template <std::size_t o, std::size_t I, std::size_t... K>
  static consteval void reader_operands(reader_reduces& r, std::index_sequence<K...>) {
    (reader_operand<o, I, K>(r), ...);
  }
  template <std::size_t o, std::size_t I, std::size_t K>
  static consteval void reader_operand(reader_reduces& r) {
    if constexpr (g[I].operands[K] == o) {
      if constexpr (reduces_last<I, K>()) {
        constexpr node_collectives c = operand_collectives_of<I, K>();
        if (c.size() != 1 || (r.axes != 0 && c[0].axes != r.axes)) r.every = false;
        if (c.size() == 1) r.axes = c[0].axes;
      } else {
        r.every = false;
      }
    }
  }
  /// Whether operand K of node I gets a contribution that is summed with
  /// the others, partial, and reduced once (summed_reduce_axes).
  template <std::size_t I, std::size_t K>
  static consteval bool sums_before_reduce() {
    if constexpr (g[I].kind == op_kind::leaf)
      return false;
    else
      return summed_reduce_axes<g[I].operands[K]>() != 0;
  }
  /// How many nodes sum their contributions before one all-reduce.
  static consteval std::size_t summed_count() {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return (std::size_t{0} + ... + std::size_t{summed_reduce_axes<I>() != 0});
    }
    (std::make_index_sequence<size>{});
  }
  /// Whether node o's rule takes its gradient holding partial sums and
  /// reduces them on the way to its operand's layout (a constrain: a
  /// reduce-scatter where its operand splits a dim over those axes). Such a
  /// node sums even a single reader's partial gradient (summed_reduce_axes).
  template <std::size_t o>
  static consteval bool absorbs_partial() {
    if constexpr (g[o].kind == op_kind::leaf || g[o].arity != 1) {
      return false;
    } else {
      using Rule = rule<op_t<o>>;
      if constexpr (requires { Rule::takes_partial_gradient; })
        return Sharded<std::remove_cvref_t<value_t<node_t<g[o].operands[0]>, Decl>>>;
      else
        return false;
    }
  }
  /// Node o's summed reduction, in the backward plan: an all-reduce, or
  /// what its rule runs on the partial gradient (absorbs_partial), which
  /// then replaces the rule's own backward collectives.
  template <std::size_t o>
  static consteval node_collectives summed_collectives_of() {
    node_collectives r;
    if constexpr (summed_reduce_axes<o>() != 0) {
      if constexpr (absorbs_partial<o>())
        detail::append(
            r, rule<op_t<o>>::template backward_collectives_partial<summed_reduce_axes<o>(), value_t<node_t<o>, Decl>,
                                                                    value_t<node_t<g[o].operands[0]>, Decl>>());
      else
        detail::append(r, std::array{planned_collective{collective_kind::all_reduce, summed_reduce_axes<o>(), -1}});
    }
    return r;
  }

  /// How many of node I's operands defer their gradient's all-reduce.
  template <std::size_t I>
  static consteval std::size_t deferred_of() {
    if constexpr (g[I].kind == op_kind::leaf)
      return 0;
    else
      return [&]<std::size_t... K>(std::index_sequence<K...>) {
        return (std::size_t{0} + ... + std::size_t{defers_reduce<I, K>()});
      }
    (std::make_index_sequence<g[I].arity>{});
  }
  template <std::size_t I>
  static consteval bool defers_any() {
    return deferred_of<I>() != 0;
  }
  template <std::size_t I>
  static consteval bool sums_any() {
    if constexpr (g[I].kind == op_kind::leaf)
      return false;
    else
      return [&]<std::size_t... K>(std::index_sequence<K...>) { return (false || ... || sums_before_reduce<I, K>()); }
    (std::make_index_sequence<g[I].arity>{});
  }
  /// The axis sets of the deferred all-reduces, each once, in the order
  /// the backward first records one (nodes last to first, a node's
  /// operands last to first): deferred_reduces::run's collectives.
  static consteval static_vector<axis_set, size> deferred_axes() {
    static_vector<axis_set, size> r;
    const auto add = [&](axis_set a) {
      for (axis_set b : r)
        if (b == a) return;
      r.push_back(a);
    };
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      (
          [&] {
            constexpr std::size_t i = size - 1 - J;
            if constexpr (g[i].kind != op_kind::leaf) [&]<std::size_t... K>(std::index_sequence<K...>) {
                (
                    [&] {
                      constexpr std::size_t k = g[i].arity - 1 - K;
                      if constexpr (defers_reduce<i, k>()) add(operand_collectives_of<i, k>()[0].axes);
                    }(),
                    ...);
              }
            (std::make_index_sequence<g[i].arity>{});
          }(),
          ...);
    }
    (std::make_index_sequence<size>{});
    return r;
  }
  /// How many gradients the backward defers.
  static consteval std::size_t deferred_count() {
    return [&]<std::size_t... I>(std::index_sequence<I...>) { return (std::size_t{0} + ... + deferred_of<I>()); }
    (std::make_index_sequence<size>{});
  }

  /// The leaf gradients of a backward's cotangents: the input's and the
  /// parameters', zeros where the result does not depend on a leaf.
  template <std::size_t Leaf, class CT, class Like>
  static auto leaf_gradient(CT& ct, const Like& like) {
    using D = std::remove_cvref_t<std::tuple_element_t<Leaf, Decl>>;
    constexpr std::size_t i = [] {
      for (std::size_t j = 0; j < size; ++j)
        if (g[j].kind == op_kind::leaf && g[j].leaf == Leaf) return j;
      return no_node;
    }();
    if constexpr (i == no_node) {
      return zeros_like<D>(like);
    } else {
      auto& o = std::get<i>(ct);
      if (!o) return zeros_like<D>(like);
      return D(std::move(*o));
    }
  }

  // ---- collectives (sharded values), from the plans of each op

  /// Node I's collectives in the forward (Backward = false) or backward.
  template <bool Backward, std::size_t I>
  static consteval node_collectives collectives_of() {
    if constexpr (g[I].kind == op_kind::leaf)
      return {};
    else
      return [&]<std::size_t... K>(std::index_sequence<K...>) {
        using Y = value_t<node_t<I>, Decl>;
        if constexpr (Backward)
          return rule<op_t<I>>::template backward_collectives<Y, value_t<node_t<g[I].operands[K]>, Decl>...>();
        else
          return rule<op_t<I>>::template forward_collectives<Y, value_t<node_t<g[I].operands[K]>, Decl>...>();
      }
    (std::make_index_sequence<g[I].arity>{});
  }
  /// Operand K's part of node I's backward collectives (a rule that splits
  /// them: backward_collectives_of<K>).
  template <std::size_t I, std::size_t K>
  static consteval node_collectives operand_collectives_of() {
    return [&]<std::size_t... J>(std::index_sequence<J...>) {
      using Y = value_t<node_t<I>, Decl>;
      return rule<op_t<I>>::template backward_collectives_of<K, Y, value_t<node_t<g[I].operands[J]>, Decl>...>();
    }
    (std::make_index_sequence<g[I].arity>{});
  }
  /// Node I's backward collectives: first the summed all-reduce of its
  /// own gradient (summed_reduce_axes), then its rule's (rule_kept_...).
  template <std::size_t I>
  static consteval node_collectives kept_backward_collectives_of() {
    node_collectives r = summed_collectives_of<I>();
    if constexpr (summed_reduce_axes<I>() == 0 || !absorbs_partial<I>())
      detail::append(r, rule_kept_collectives_of<I>());
    return r;
  }
  /// Node I's rule's backward collectives but the deferred ones
  /// (defers_reduce, which the pass runs at its end) and those of
  /// contributions summed before one all-reduce (sums_before_reduce).
  template <std::size_t I>
  static consteval node_collectives rule_kept_collectives_of() {
    node_collectives r;
    if constexpr (!defers_any<I>() && !sums_any<I>()) {
      detail::append(r, collectives_of<true, I>());
    } else {
      [&]<std::size_t... K>(std::index_sequence<K...>) {
        (
            [&] {
              if constexpr (!defers_reduce<I, K>() && !sums_before_reduce<I, K>())
                detail::append(r, operand_collectives_of<I, K>());
            }(),
            ...);
      }
      (std::make_index_sequence<g[I].arity>{});
    }
    return r;
  }
  /// The backward's last step: one all-reduce per deferred axis set (none
  /// when nothing is deferred).
  static consteval node_collectives deferred_collectives() {
    node_collectives r;
    for (axis_set a : deferred_axes())
      detail::append(r, std::array{planned_collective{collective_kind::all_reduce, a, -1}});
    return r;
  }

  /// Node I's collectives in a backward that makes no input gradient: none
  /// where the node does not depend on a parameter (it gets no cotangent);
  /// else those of its operands that do (the rule's
  /// backward_collectives_of<K>, where splits_backward_collectives says it
  /// has them), or all of them when every operand does.
  template <std::size_t I>
  static consteval node_collectives params_only_collectives_of() {
    if constexpr (g[I].kind == op_kind::leaf || !param_dependent[I]) {
      return {};
    } else if constexpr (summed_reduce_axes<I>() != 0 && absorbs_partial<I>()) {
      if constexpr (param_dependent[g[I].operands[0]])
        return summed_collectives_of<I>();
      else
        return {};  // its vjp, which reduces, is not run
    } else if constexpr (summed_reduce_axes<I>() != 0) {
      node_collectives r = summed_collectives_of<I>();
      detail::append(r, params_only_operand_collectives_of<I>());
      return r;
    } else {
      return params_only_operand_collectives_of<I>();
    }
  }
  /// params_only_collectives_of but node I's summed all-reduce.
  template <std::size_t I>
  static consteval node_collectives params_only_operand_collectives_of() {
    if constexpr (g[I].kind == op_kind::leaf) {
      return {};
    } else {
      constexpr bool every = [] {
        for (std::size_t k = 0; k < g[I].arity; ++k)
          if (!param_dependent[g[I].operands[k]]) return false;
        return true;
      }();
      if constexpr (every) {
        return rule_kept_collectives_of<I>();
      } else {
        return [&]<std::size_t... K>(std::index_sequence<K...>) {
          using Y = value_t<node_t<I>, Decl>;
          using Rule = rule<op_t<I>>;
          if constexpr (requires { Rule::splits_backward_collectives; }) {
            node_collectives r;
            (
                [&] {
                  if constexpr (param_dependent[g[I].operands[K]] && !defers_reduce<I, K>() &&
                                !sums_before_reduce<I, K>())
                    detail::append(
                        r, Rule::template backward_collectives_of<K, Y, value_t<node_t<g[I].operands[K]>, Decl>...>());
                }(),
                ...);
            return r;
          } else {
            constexpr node_collectives whole = collectives_of<true, I>();
            static_assert(whole.empty(),
                          "xshard::graph: a node with collectives in its backward and an operand that needs no "
                          "gradient: its rule must split them by operand (backward_collectives_of<K>)");
            return whole;
          }
        }
        (std::make_index_sequence<g[I].arity>{});
      }
    }
  }
  /// The nodes of a pass that run collectives, in the pass's order (the
  /// backward visits the nodes last to first, then runs the parameters'
  /// deferred all-reduces: an entry of node no_node, op
  /// "parameter gradients").
  template <bool Backward>
  static consteval static_vector<node_plan, size> plan() {
    static_vector<node_plan, size> r;
    auto add = [&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
      node_collectives c;
      if constexpr (Backward)
        c = kept_backward_collectives_of<I>();
      else
        c = collectives_of<false, I>();
      if (!c.empty()) r.push_back({I, g[I].text, g[I].name, c});
    };
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      if constexpr (Backward)
        (add(std::integral_constant<std::size_t, size - 1 - I>{}), ...);
      else
        (add(std::integral_constant<std::size_t, I>{}), ...);
    }
    (std::make_index_sequence<size>{});
    if constexpr (Backward)
      if (!deferred_collectives().empty()) r.push_back({no_node, "parameter gradients", "", deferred_collectives()});
    return r;
  }
  /// Collectives per forward and per backward on every device.
  static consteval std::size_t forward_collectives() { return total(plan<false>()); }
  static consteval std::size_t backward_collectives() { return total(plan<true>()); }
  /// Collectives per backward that makes no input gradient (backward<false>).
  static consteval std::size_t backward_collectives_params_only() {
    const std::size_t nodes = [&]<std::size_t... I>(std::index_sequence<I...>) {
      return (std::size_t{0} + ... + params_only_collectives_of<I>().size());
    }
    (std::make_index_sequence<size>{});
    return nodes + deferred_collectives().size();
  }

 private:
  static consteval std::size_t total(const static_vector<node_plan, size>& p) {
    std::size_t n = 0;
    for (const node_plan& s : p) n += s.collectives.size();
    return n;
  }
};

// ---------------------------------------------------------------------------
// The layer protocol.

/// R with each `einsum<Eq>(...) + b` whose einsum value nothing else reads
/// and whose b is a rank-1 tensor fused into an einsum_bias_op node (the
/// bias in the GEMM's epilogue), when every leaf of Leaves is a plain
/// tensor and R's written graph checks (else R: its errors name the nodes
/// as written).
template <Node R, class Leaves>
using fuse_biases_t = typename detail::fuse_biases<
    std::is_void_v<typename detail::mesh_of_tuple<Leaves>::type> && program<R, Leaves>::check.ok(), R, Leaves>::type;

namespace detail {
template <class Def, std::size_t... I>
auto result_node(std::index_sequence<I...>) {
  return Def::forward(arg<0>{}, arg<I + 1>{}...);
}
template <class Def>
using result_node_t = decltype(result_node<Def>(std::make_index_sequence<std::tuple_size_v<typename Def::params>>{}));
template <class Def>
using decl_t =
    decltype(std::tuple_cat(std::declval<std::tuple<typename Def::input>>(), std::declval<typename Def::params>()));
template <class Def>
struct output_of {
  using type = typename Def::input;
};
template <class Def>
requires requires { typename Def::output; }
struct output_of<Def> {
  using type = typename Def::output;
};
}  // namespace detail

/// A layer (nn/layer.hpp) whose forward is Def::forward over symbolic
/// tensors: forward, vjp, the dots_saveable pair (forward_saving_dots /
/// restore) for scan_layers, forward_with<Policy> for any graph policy, and
/// the plans' collective counts.
template <class Def>
struct layer {
  using params = typename Def::params;
  using input = typename Def::input;
  using output = typename detail::output_of<Def>::type;
  /// The graph as written (its positions name compile-time errors), and
  /// the one evaluated: on one device, each einsum + bias fused
  /// (fuse_biases_t).
  using written_type = detail::result_node_t<Def>;
  using graph_type = fuse_biases_t<written_type, detail::decl_t<Def>>;
  using program_type = program<graph_type, detail::decl_t<Def>>;
  using residuals = typename program_type::residuals;
  using dots = residuals;
  static constexpr auto param_names = Def::param_names;
  static constexpr std::size_t param_count = std::tuple_size_v<params>;

  /// The forward under a graph remat policy.
  template <class Policy, class P = params>
  static std::pair<output, residuals> forward_with(const P& p, const input& x) {
    auto r = std::apply([&](const auto&... q) { return program_type::template forward<Policy>(x, q...); }, p);
    if constexpr (std::is_same_v<decltype(r.first), output>)
      return r;
    else  // the declared output names mesh axes of size 1 that the planner dropped: the same blocks
      return {as_type<output>(std::move(r.first)), std::move(r.second)};
  }
  template <class P = params>
  std::pair<output, residuals> forward(const P& p, const input& x) const {
    return forward_with<policy::save_all>(p, x);
  }
  /// The gradients from the result's gradient gy. A gy handed over (an
  /// output rvalue: scan_layers' pullback hands each layer the gradient the
  /// next one made) is where the backward starts, instead of a copy. One
  /// template, whose GY defaults to `const output&`: scan_layers takes
  /// `&vjp<views>` to see that a layer reads its parameters through views.
  template <class P = params, class GY = const output&>
  std::pair<params, input> vjp(const P& p, const residuals& r,
                               GY&& gy) const requires std::convertible_to<GY&&, output> {
    if constexpr (std::is_same_v<std::remove_cvref_t<GY>, output>)
      return vjp_from(p, r, std::forward<GY>(gy));
    else
      return vjp_from(p, r, output(std::forward<GY>(gy)));
  }
  /// The parameters' gradients alone, as vjp's first: the input's
  /// gradient, and every product that only feeds it, is not made (a first
  /// layer's input is data, which needs no gradient).
  template <class P = params, class GY = const output&>
  params vjp_params(const P& p, const residuals& r, GY&& gy) const requires std::convertible_to<GY&&, output> {
    if constexpr (std::is_same_v<std::remove_cvref_t<GY>, output>)
      return params_from<false>(p, r, std::forward<GY>(gy));
    else
      return params_from<false>(p, r, output(std::forward<GY>(gy)));
  }
  template <class P = params>
  std::pair<output, dots> forward_saving_dots(const P& p, const input& x) const {
    return forward_with<policy::dots_saveable>(p, x);
  }
  /// The residuals from what dots_saveable kept; vjp recomputes the rest.
  /// The graph's policy keeps them as residuals, the input among them, so
  /// the dots alone restore them: handed over (remat_residuals consumes
  /// them) they are moved, and remat keeps no second copy of the input.
  template <class P = params>
  residuals restore(const P&, const input&, const dots& d) const {
    return d;
  }
  template <class P = params>
  residuals restore(const P&, dots&& d) const {
    return std::move(d);
  }

  /// Collectives per forward and per backward on every device, and the
  /// nodes that run them (node_plan: position, op, name, collectives).
  static consteval std::size_t forward_collectives() { return program_type::forward_collectives(); }
  static consteval std::size_t backward_collectives() { return program_type::backward_collectives(); }
  /// Per backward of vjp_params (no input gradient).
  static consteval std::size_t backward_collectives_params_only() {
    return program_type::backward_collectives_params_only();
  }
  static consteval auto forward_plan() { return program_type::template plan<false>(); }
  static consteval auto backward_plan() { return program_type::template plan<true>(); }

 private:
  /// The backward's cotangents and the parameters' gradients among them;
  /// with Input, also the input's gradient.
  template <bool Input, class P, class GY>
  static auto params_from(const P& p, const residuals& r, GY&& gy) {
    return std::apply(
        [&](const auto&... q) {
          auto ct = program_type::template backward<Input>(r, std::forward<GY>(gy), q...);
          return [&]<std::size_t... I>(std::index_sequence<I...>) {
            params grads{program_type::template leaf_gradient<I + 1>(ct, std::get<I>(p))...};
            if constexpr (Input)
              return std::pair<params, input>{std::move(grads), input_gradient(ct, r)};
            else
              return grads;
          }
          (std::make_index_sequence<param_count>{});
        },
        p);
  }
  template <class P, class GY>
  static std::pair<params, input> vjp_from(const P& p, const residuals& r, GY&& gy) {
    return params_from<true>(p, r, std::forward<GY>(gy));
  }

  template <class CT>
  static input input_gradient(CT& ct, const residuals& r) {
    constexpr std::size_t i = [] {
      for (std::size_t j = 0; j < program_type::size; ++j)
        if (program_type::g[j].kind == op_kind::leaf && program_type::g[j].leaf == 0) return j;
      return no_node;
    }();
    static_assert(i != no_node, "xshard::graph: the layer's result does not depend on its input");
    auto& o = std::get<i>(ct);
    if (o) return input(std::move(*o));
    if (!std::get<i>(r.kept)) throw error("xshard::graph: no gradient reaches the input and its shape was not kept");
    return zeros_like<input>(*std::get<i>(r.kept));
  }
};

}  // namespace xshard::graph
