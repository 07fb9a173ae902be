// A sharding constraint inside a graph that names an axis the mesh does not
// have is a compile error naming the node, then the axis and the mesh's axes.
// expect: graph_node_error<3[ul]*, *xshard::graph::graph_op<'c', *'o', *'n', *'s', *'t', *'r', *'a', *'i', *'n'>
#include <xshard/graph/graph.hpp>

namespace g = xshard::graph;
using M = xshard::mesh<"data=2, model=2">;

struct def {
  using input = xshard::sharded<float, 2, M, xshard::spec<"data, None">>;
  using params = std::tuple<xshard::sharded<float, 2, M, xshard::spec<"model, None">>>;
  static constexpr std::array<std::string_view, 1> param_names{"w"};
  template <class X, class W>
  static auto forward(X x, W w) {
#ifdef XSHARD_NEGATIVE
    return g::constrain<xshard::spec<"data, modle">>(g::einsum<"...n,mn->...m">(x, w));
#else
    return g::constrain<xshard::spec<"data, model">>(g::einsum<"...n,mn->...m">(x, w));
#endif
  }
};

static_assert(g::layer<def>::program_type::size == 4);
