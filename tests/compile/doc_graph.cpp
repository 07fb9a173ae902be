// The examples in the top comments of include/xshard/graph/*.hpp, compiled
// (never run): each header's `// Example (compiled in ...)` block is copied
// here line for line, and scripts/check_doc_examples.sh (CTest
// docs.examples) fails when a line of it is missing. Anything else in this
// file is the context an example takes for granted (the definition around a
// forward) or uses what it defines, so that its forward and vjp are
// instantiated; run-time statements sit in functions that are never called.
#include <array>
#include <string_view>
#include <tuple>
#include <xshard/graph/graph.hpp>
#include <xtensor/xtensor.hpp>

// clang-format off
namespace {

// --- xshard/graph/graph.hpp ---
namespace graph_hpp {
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
using L = xshard::graph::layer<mlp_def>;   // forward, vjp, remat, plans

[[maybe_unused]] void use(const L::params& p, const L::input& x, const L::output& gy) {
  auto [y, residuals] = L{}.forward(p, x);
  auto [grads, dx] = L{}.vjp(p, residuals, gy);
}
}  // namespace graph_hpp

// --- xshard/graph/node.hpp ---
namespace node_hpp {
struct residual_mlp_def {
  using input = xt::xtensor<float, 2>;
  using params = std::tuple<xt::xtensor<float, 2>, xt::xtensor<float, 1>, xt::xtensor<float, 2>,
                            xt::xtensor<float, 1>>;
  static constexpr std::array<std::string_view, 4> param_names{"w1", "b1", "w2", "b2"};

  template <class X, class W1, class B1, class W2, class B2>
  static auto forward(X x, W1 w1, B1 b1, W2 w2, B2 b2) {
    using namespace xshard::graph;
    auto h = save<"h">(einsum<"...n,mn->...m">(x, w1) + b1);
    return x + einsum<"...m,km->...k">(gelu(h), w2) + b2;
  }
};
using L = xshard::graph::layer<residual_mlp_def>;

[[maybe_unused]] void use(const L::params& p, const L::input& x, const L::output& gy) {
  auto [y, residuals] = L{}.forward(p, x);
  auto [grads, dx] = L{}.vjp(p, residuals, gy);
}
}  // namespace node_hpp

}  // namespace
// clang-format on
