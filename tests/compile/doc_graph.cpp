// The usage examples at the top of the graph/ headers, compiled: each
// header's example lines appear here verbatim (scripts/check_doc_examples.sh
// checks it), inside the context they need.
#include <array>
#include <string_view>
#include <tuple>
#include <xshard/graph/graph.hpp>
#include <xshard/nn/layer.hpp>
#include <xtensor/xtensor.hpp>

namespace {

namespace doc_graph {  // graph/graph.hpp
struct mlp_def {
  using input = xt::xtensor<float, 2>;
  using params = std::tuple<xt::xtensor<float, 2>, xt::xtensor<float, 1>>;
  static constexpr std::array<std::string_view, 2> param_names{"w", "b"};
  template <class X, class W, class B>
  static auto forward(X x, W w, B b) {
    namespace g = xshard::graph;
    return g::gelu(g::einsum<"...n,mn->...m">(x, w) + b);
  }
};
using L = xshard::graph::layer<mlp_def>;  // forward, vjp, remat, plans
static_assert(xshard::layer<L>);
}  // namespace doc_graph

namespace doc_node {  // graph/node.hpp
struct block_def {
  template <class X, class W1, class B1, class W2, class B2>
  static auto forward(X x, W1 w1, B1 b1, W2 w2, B2 b2) {
    using namespace xshard::graph;
    auto h = save<"h">(einsum<"...n,mn->...m">(x, w1) + b1);
    return x + einsum<"...m,km->...k">(gelu(h), w2) + b2;
  }
};
namespace g = xshard::graph;
using result = decltype(block_def::forward(g::arg<0>{}, g::arg<1>{}, g::arg<2>{}, g::arg<3>{}, g::arg<4>{}));
static_assert(g::Node<result>);  // writing the forward built a node type; nothing was computed
}  // namespace doc_node

}  // namespace
