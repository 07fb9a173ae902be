// xshard/graph/node.hpp - symbolic tensors: a layer's forward written once
// as a typed expression graph. A node is a type, node<Op, Args...>, whose
// operands are nodes; leaves are the layer's input and parameters (arg<I>).
// Writing the forward builds the type; nothing is computed:
//
// Example (compiled in tests/compile/doc_graph.cpp):
//   template <class X, class W1, class B1, class W2, class B2>
//   static auto forward(X x, W1 w1, B1 b1, W2 w2, B2 b2) {
//     using namespace xshard::graph;
//     auto h = save<"h">(einsum<"...n,mn->...m">(x, w1) + b1);
//     return x + einsum<"...m,km->...k">(gelu(h), w2) + b2;
//   }
//
// Two occurrences of the same type are the same value (ops are pure), so
// the graph is the set of distinct node types reachable from the result,
// in operands-first order (graph::nodes_of). Its structure (operands, op
// kind, names) is a constexpr table (graph::structure_of) that the
// evaluator, the reverse pass and the remat policies read with constexpr
// functions: no recursive template walks beyond collecting the node list.
//
// This header has no tensor dependency; graph/graph.hpp evaluates.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "../core/fixed_string.hpp"

namespace xshard::graph {

/// A symbolic tensor: op Op applied to operand nodes Args.
template <class Op, class... Args>
struct node {
  using op = Op;
  static constexpr std::size_t arity = sizeof...(Args);
};

template <class T>
inline constexpr bool is_node_v = false;
template <class Op, class... A>
inline constexpr bool is_node_v<node<Op, A...>> = true;

/// A symbolic tensor (a node type).
template <class T>
concept Node = is_node_v<std::remove_cvref_t<T>>;

// Each op tag says what its vjp reads (needs_operands, needs_output): the
// remat policies keep or recompute exactly those values.

/// What the graph's machinery needs to know of an op kind.
enum class op_kind : std::uint8_t { leaf, einsum, elementwise, composite, constrain, custom };

// ---------------------------------------------------------------------------
// Ops (the tags; their evaluation and vjp are in graph/ops.hpp).

/// A followed by B, as one fixed_string (an op's text).
template <fixed_string A, fixed_string B>
inline constexpr auto joined = [] {
  fixed_string<A.size() + B.size()> r;
  for (std::size_t i = 0; i < A.size(); ++i) r.data_[i] = A.data_[i];
  for (std::size_t i = 0; i < B.size(); ++i) r.data_[A.size() + i] = B.data_[i];
  return r;
}();

/// What the graph's machinery reads of an op tag: its kind, its text in
/// messages (the equation, the kernel's name, or the op), and which values
/// its vjp reads.
template <op_kind Kind, fixed_string Text, bool NeedsOperands = false, bool NeedsOutput = false>
struct op_traits {
  static constexpr op_kind kind = Kind;
  static constexpr std::string_view text = Text.view();
  static constexpr bool needs_operands = NeedsOperands;
  static constexpr bool needs_output = NeedsOutput;
};

/// Leaf I of a layer: 0 is the input, 1.. the parameters in order.
template <std::size_t I>
struct arg_op : op_traits<op_kind::leaf, "leaf"> {
  static constexpr std::string_view text = I == 0 ? "input" : "parameter";
  static constexpr std::size_t index = I;
};
template <std::size_t I>
using arg = node<arg_op<I>>;

template <fixed_string Eq>
struct einsum_op : op_traits<op_kind::einsum, Eq, true> {};
/// einsum<Eq> whose result is laid out by spec S as part of its plan (a
/// reduce-scatter instead of an all-reduce, for sequence parallelism); on
/// plain values, einsum<Eq>.
template <fixed_string Eq, class S>
struct einsum_to_op : einsum_op<Eq> {};
/// einsum<Eq> of all operands but the last, plus the last (a rank-1 bias
/// along the result's last dim) in the GEMM's epilogue: not written by
/// hand; a layer on one device turns `einsum<Eq>(...) + b` into it
/// (graph::fuse_biases_t). An einsum for dots_saveable.
template <fixed_string Eq>
struct einsum_bias_op : op_traits<op_kind::einsum, joined<Eq, fixed_string(" + bias")>, true> {};
enum class binary : std::uint8_t { add, sub, mul, div };
template <binary B>
struct binary_op : op_traits<op_kind::elementwise,
                             B == binary::add   ? fixed_string("+")
                             : B == binary::sub ? fixed_string("-")
                             : B == binary::mul ? fixed_string("*")
                                                : fixed_string("/"),
                             B == binary::mul || B == binary::div> {};
/// Multiplication by the constant C::value (a type, so the graph stays a
/// type: ratio<1, 8>, or any struct with a static constexpr value).
template <class C>
struct scale_op : op_traits<op_kind::elementwise, "scale"> {};
template <std::intmax_t Num, std::intmax_t Den = 1>
struct ratio {
  static constexpr double value = double(Num) / double(Den);
};
enum class gelu_kind : std::uint8_t { none, tanh };
/// gelu; the erf form's vjp reads its output as well as its operand (the
/// cdf is y / x: xshard::gelu_backward_from_output), the tanh form's only
/// its operand.
template <gelu_kind A>
struct gelu_op : op_traits<op_kind::composite, "gelu", true, A == gelu_kind::none> {};
/// tanh, elementwise (its vjp reads its output: g (1 - y^2)).
struct tanh_op : op_traits<op_kind::elementwise, "tanh", false, true> {};
template <int Dim>
struct softmax_op : op_traits<op_kind::composite, "softmax", false, true> {};
/// log(softmax) along Dim, computed stably (x - max - log sum exp(x - max));
/// its vjp reads its output: g - exp(y) sum(g).
template <int Dim>
struct log_softmax_op : op_traits<op_kind::composite, "log_softmax", false, true> {};
/// layer_norm over the last dim (no weight or bias: multiply and add them
/// as nodes), eps = Eps::value.
template <class Eps>
struct layer_norm_op : op_traits<op_kind::composite, "layer_norm", true> {};
/// rms_norm over the last dim (no weight: multiply it as a node), eps =
/// Eps::value.
template <class Eps>
struct rms_norm_op : op_traits<op_kind::composite, "rms_norm", true> {};
/// A causal mask: where(k <= q, x, -inf) along dims QDim (queries) and
/// KDim (keys) of x (negative dims count from the end).
template <int QDim, int KDim>
struct causal_mask_op : op_traits<op_kind::elementwise, "causal_mask"> {};
/// A user kernel (JAX's custom_partitioning at compile time): its name,
/// an einsum-like signature ("bsd,d->bsd") that gives its shape rule and
/// its sharding rule, and Kernel's forward and vjp (graph/ops.hpp).
template <fixed_string Name, fixed_string Signature, class Kernel>
struct custom_op : op_traits<op_kind::custom, Name, true, true> {};
/// Redistribution to spec S (torch_xla's mark_sharding inside a graph);
/// the identity on plain tensors.
template <class S>
struct constrain_op : op_traits<op_kind::constrain, "constrain"> {};
/// Op, its value named for named remat policies (JAX's checkpoint_name):
/// graph::save<"h">(expr) names expr's own node, so naming adds no node.
template <fixed_string Name, class Op>
struct named_op : Op {
  static constexpr std::string_view name = Name.view();
};

/// Op inside a named trace scope: graph::scope<"attention">(expr) wraps
/// the evaluation of expr's node and of the nodes computed only for it
/// (its sub-graph) in one trace event, forward and backward.
template <fixed_string Scope, class Op>
struct traced_op : Op {
  static constexpr std::string_view trace_name = Scope.view();
};

// ---------------------------------------------------------------------------
// Building nodes.

template <fixed_string Eq, Node... A>
constexpr node<einsum_op<Eq>, std::remove_cvref_t<A>...> einsum(A...) {
  return {};
}
template <fixed_string Eq, class S, Node... A>
constexpr node<einsum_to_op<Eq, S>, std::remove_cvref_t<A>...> einsum_to(A...) {
  return {};
}
template <Node A, Node B>
constexpr node<binary_op<binary::add>, A, B> operator+(A, B) {
  return {};
}
template <Node A, Node B>
constexpr node<binary_op<binary::sub>, A, B> operator-(A, B) {
  return {};
}
template <Node A, Node B>
constexpr node<binary_op<binary::mul>, A, B> operator*(A, B) {
  return {};
}
template <Node A, Node B>
constexpr node<binary_op<binary::div>, A, B> operator/(A, B) {
  return {};
}
template <class C, Node A>
constexpr node<scale_op<C>, A> scale_by(A) {
  return {};
}
template <std::intmax_t Num, std::intmax_t Den = 1, Node A>
constexpr node<scale_op<ratio<Num, Den>>, A> scale(A) {
  return {};
}
template <gelu_kind K = gelu_kind::none, Node A>
constexpr node<gelu_op<K>, A> gelu(A) {
  return {};
}
template <Node A>
constexpr node<tanh_op, A> tanh(A) {
  return {};
}
template <int Dim = -1, Node A>
constexpr node<softmax_op<Dim>, A> softmax(A) {
  return {};
}
template <int Dim = -1, Node A>
constexpr node<log_softmax_op<Dim>, A> log_softmax(A) {
  return {};
}
template <class Eps = ratio<1, 100000>, Node A>
constexpr node<layer_norm_op<Eps>, A> layer_norm(A) {
  return {};
}
template <class Eps = ratio<1, 1000000>, Node A>
constexpr node<rms_norm_op<Eps>, A> rms_norm(A) {
  return {};
}
template <int QDim = -2, int KDim = -1, Node A>
constexpr node<causal_mask_op<QDim, KDim>, A> causal_mask(A) {
  return {};
}
template <fixed_string Name, fixed_string Signature, class Kernel, Node... A>
constexpr node<custom_op<Name, Signature, Kernel>, std::remove_cvref_t<A>...> custom(A...) {
  return {};
}
template <class S, Node A>
constexpr node<constrain_op<S>, A> constrain(A) {
  return {};
}
template <fixed_string Name, class Op, class... A>
constexpr node<named_op<Name, Op>, A...> save(node<Op, A...>) {
  static_assert(Op::kind != op_kind::leaf,
                "xshard::graph::save: name an op's value, not a leaf (leaves are kept anyway)");
  return {};
}

template <fixed_string Scope, class Op, class... A>
constexpr node<traced_op<Scope, Op>, A...> scope(node<Op, A...>) {
  static_assert(Op::kind != op_kind::leaf, "xshard::graph::scope: trace an op's sub-graph, not a leaf");
  return {};
}

// ---------------------------------------------------------------------------
// The node list: distinct node types, operands first.

template <class... T>
struct list {
  static constexpr std::size_t size = sizeof...(T);
};

template <class L, class T>
struct push_unique;
template <class... T, class U>
struct push_unique<list<T...>, U> {
  using type = std::conditional_t<(std::is_same_v<T, U> || ...), list<T...>, list<T..., U>>;
};

template <class L, class N>
struct collect;
template <class L, class... N>
struct collect_all {
  using type = L;
};
template <class L, class N0, class... N>
struct collect_all<L, N0, N...> {
  using type = typename collect_all<typename collect<L, N0>::type, N...>::type;
};
template <class L, class Op, class... A>
struct collect<L, node<Op, A...>> {
  using type = typename push_unique<typename collect_all<L, A...>::type, node<Op, A...>>::type;
};

/// The graph of result node R: its distinct nodes, operands before users;
/// R is last.
template <Node R>
using nodes_of = typename collect<list<>, R>::type;

template <class N, class L>
struct index_in;
template <class N, class... T>
struct index_in<N, list<T...>> {
  static constexpr std::size_t value = [] {
    constexpr bool same[] = {std::is_same_v<N, T>...};
    for (std::size_t i = 0; i < sizeof...(T); ++i)
      if (same[i]) return i;
    return sizeof...(T);
  }();
};
template <class N, class L>
inline constexpr std::size_t index_in_v = index_in<N, L>::value;

template <std::size_t I, class L>
struct at;
template <std::size_t I, class... T>
struct at<I, list<T...>> {
  using type = std::tuple_element_t<I, std::tuple<T...>>;
};
template <std::size_t I, class L>
using at_t = typename at<I, L>::type;

// ---------------------------------------------------------------------------
// The structure as constexpr data.

inline constexpr std::size_t max_arity = 4;
inline constexpr std::size_t no_node = static_cast<std::size_t>(-1);

struct node_info {
  op_kind kind = op_kind::leaf;
  std::size_t leaf = no_node;  // arg_op's index, for leaves
  std::size_t arity = 0;
  std::array<std::size_t, max_arity> operands{no_node, no_node, no_node, no_node};
  std::string_view text;        // the op: its equation (einsum), name (custom) or kind
  std::string_view name;        // given by graph::save
  std::string_view trace;       // the trace scope it closes (graph::scope)
  bool needs_operands = false;  // its vjp reads its operands' values
  bool needs_output = false;    // its vjp reads its own value
};

template <class Op>
constexpr std::size_t leaf_index_of() {
  if constexpr (Op::kind == op_kind::leaf)
    return Op::index;
  else
    return no_node;
}
template <class Op>
constexpr std::string_view name_of() {
  if constexpr (requires { Op::name; })
    return Op::name;
  else
    return {};
}

template <class Op>
constexpr std::string_view trace_of() {
  if constexpr (requires { Op::trace_name; })
    return Op::trace_name;
  else
    return {};
}

template <class N, class L>
struct info_of;
template <class Op, class... A, class L>
struct info_of<node<Op, A...>, L> {
  static_assert(sizeof...(A) <= max_arity, "xshard::graph: an op has at most 4 operands");
  static constexpr node_info value{Op::kind,        leaf_index_of<Op>(), sizeof...(A),   {index_in_v<A, L>...},
                                   Op::text,        name_of<Op>(),       trace_of<Op>(), Op::needs_operands,
                                   Op::needs_output};
};

template <class L>
struct structure;
template <class... N>
struct structure<list<N...>> {
  static constexpr std::size_t size = sizeof...(N);
  static constexpr std::array<node_info, sizeof...(N)> nodes{info_of<N, list<N...>>::value...};
};

/// A set of nodes of a graph (by position in nodes_of).
template <std::size_t N>
using node_set = std::array<bool, N>;

/// How many nodes use each node's value.
template <std::size_t N>
constexpr std::array<std::size_t, N> use_counts(const std::array<node_info, N>& g) {
  std::array<std::size_t, N> uses{};
  for (const node_info& n : g)
    for (std::size_t k = 0; k < n.arity; ++k) ++uses[n.operands[k]];
  return uses;
}

}  // namespace xshard::graph
