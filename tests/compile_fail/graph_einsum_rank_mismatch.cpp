// An einsum inside a graph whose subscripts do not fit its operands' ranks
// is a compile error naming the node (its position, operands first; its
// equation; its name if it has one), then the einsum's own diagnostic.
// expect: graph_node_error<3[ul]*, *xshard::graph::graph_op<'b', *'s', *'d', *',', *'e', *'d'
#include <xshard/graph/graph.hpp>

namespace g = xshard::graph;

struct def {
  using input = xt::xtensor<float, 2>;
  using params = std::tuple<xt::xtensor<float, 2>>;
  static constexpr std::array<std::string_view, 1> param_names{"w"};
  template <class X, class W>
  static auto forward(X x, W w) {
    auto h = g::einsum<"...n,mn->...m">(x, w);
#ifdef XSHARD_NEGATIVE
    return g::einsum<"bsd,ed->bse">(h, w);  // h has rank 2, not 3
#else
    return g::einsum<"bd,ed->be">(h, w);
#endif
  }
};

static_assert(g::layer<def>::program_type::size == 4);
