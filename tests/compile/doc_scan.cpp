// The examples in the top comments of include/xshard/scan/*.hpp, compiled
// (never run): each header's `// Example (compiled in ...)` block is copied
// here line for line, and scripts/check_doc_examples.sh (CTest
// docs.examples) fails when a line of it is missing. Anything else in this
// file is the context an example takes for granted (its tensors, layers,
// mesh, a user's function), and run-time statements sit in functions that
// are never called.
#include <boost/hana/tuple.hpp>
#include <tuple>
#include <utility>
#include <vector>
#include <xshard/nn/linear.hpp>
#include <xshard/nn/mlp.hpp>
#include <xshard/scan/global.hpp>
#include <xshard/scan/scan.hpp>
#include <xshard/scan/scan_grad.hpp>
#include <xshard/scan/scan_layers.hpp>
#include <xshard/scan/scan_layers_unrolled.hpp>
#include <xtensor/xtensor.hpp>

// clang-format off
// --- xshard/scan/scan_grad.hpp --- The step declares forward and vjp without
// defining them: outside the unnamed namespace they may stay undefined.
namespace doc_scan_grad_hpp {
using mat = xt::xtensor<float, 2>;
using vec = xt::xtensor<float, 1>;

struct rnn_step {                                   // satisfies xshard::scan_step
  using params = std::tuple<mat, mat, vec>;         // W [n,n], U [n,m], b [n]: shared by every step
  using carry = mat;                                // h [b,n]
  using x = mat;                                    // x_t [b,m]: one slice of xs [T,b,m]
  using y = mat;                                    // y_t [b,n]
  struct residuals { mat h, x, h_next; };           // what vjp needs (it gets no carry or x)
  std::tuple<carry, y, residuals> forward(const params&, const carry& h, const x& x_t) const;
  std::tuple<params, carry, x> vjp(const params&, const residuals&, const carry& g_carry, const y& g_y) const;
};
static_assert(xshard::scan_step<rnn_step>);

[[maybe_unused]] void example(const rnn_step::params& params, const mat& h0, const xt::xtensor<float, 3>& xs,
                              const mat& g_final, const xt::xtensor<float, 3>& g_ys) {
  auto [final, ys] = xshard::scan(rnn_step{}, params, h0, xs);   // what the lambda form gives
  auto g = xshard::scan_vjp(rnn_step{}, params, h0, xs, g_final, g_ys, {}, xshard::remat::recompute);
  // g.params: d/d params summed over steps; g.init: d/d h0; g.xs: d/d xs, laid out like xs
}
}  // namespace doc_scan_grad_hpp

namespace {

// --- xshard/scan/scan.hpp ---
namespace scan_hpp {
[[maybe_unused]] void example(const xt::xtensor<float, 1>& init, const xt::xtensor<float, 2>& xs) {
  auto [final, ys] = xshard::scan(
      [](const xt::xtensor<float, 1>& c, const xt::xtensor<float, 1>& x) {
        xt::xtensor<float, 1> next = c + x;
        return std::pair{next, next};                    // (new carry, y)
      },
      init, xs);                                         // xs: leading dim = length
  // ys[t] = the y of step t, stacked on a new leading dim
}
}  // namespace scan_hpp

// --- xshard/scan/scan_layers.hpp ---
namespace scan_layers_hpp {
xt::xtensor<float, 2> loss_gradient(const xt::xtensor<float, 2>& y) { return 2.0f * y; }

[[maybe_unused]] void example(const std::vector<xshard::linear_layer<float>::params>& per_layer_params,
                              const xt::xtensor<float, 2>& x, const xt::xtensor<float, 2>& gy) {
  xshard::linear_layer<float> L;
  auto stacked = xshard::stack_params<decltype(L)>(per_layer_params);  // tensors gain a leading layer dim
  auto y = xshard::scan_layers(L, stacked, x);                          // a run-time loop over layers
  auto [grads, dx] = xshard::scan_layers_vjp(L, stacked, x, gy, xshard::remat::recompute);
  {
  auto [y, pullback] = xshard::scan_layers_vjp(L, stacked, x, xshard::remat::recompute);
  auto [grads, dx] = pullback(loss_gradient(y));                        // JAX's vjp: forward once
  }
}
}  // namespace scan_layers_hpp

// --- xshard/scan/scan_layers_unrolled.hpp ---
namespace scan_layers_unrolled_hpp {
using L1 = xshard::linear_layer<float>;
using L2 = xshard::tanh_linear_layer<float>;
using L3 = xshard::linear_layer<float>;

[[maybe_unused]] void example(const L1::params& p1, const L2::params& p2, const L3::params& p3, const L1::input& x,
                              const L3::output& gy) {
  auto layers = boost::hana::make_tuple(L1{}, L2{}, L3{});
  auto params = boost::hana::make_tuple(p1, p2, p3);  // L1::params, L2::params, L3::params
  auto y = xshard::scan_layers(layers, params, x);
  auto [grads, dx] = xshard::scan_layers_vjp(layers, params, x, gy, xshard::remat::recompute);
  // grads: hana::tuple<L1::params, L2::params, L3::params>; dx: L1::input
}
}  // namespace scan_layers_unrolled_hpp

// --- xshard/scan/global.hpp ---
namespace global_hpp {
using M = xshard::mesh<"data=2, model=2">;

[[maybe_unused]] void example(const xt::xtensor<float, 3>& stacked_w1, const xt::xtensor<float, 2>& stacked_b1,
                              const xt::xtensor<float, 3>& stacked_w2, const xt::xtensor<float, 2>& stacked_b2,
                              const xt::xtensor<float, 2>& x, const xt::xtensor<float, 2>& gy) {
  xshard::thread_mesh<M> mesh;
  auto X = xshard::distribute<xshard::spec<"data, None">>(mesh, x);
  auto GY = xshard::distribute<xshard::spec<"data, None">>(mesh, gy);
  xshard::mlp_block<float, xshard::data_model_mlp<M>> block;                      // Megatron on data x model
  auto W1 = xshard::distribute<xshard::spec<"None, model, None">>(mesh, stacked_w1);  // [layers, f, d]
  // ... B1, W2 and B2 alike: each the layer's spec with an unsharded leading dim
  auto B1 = xshard::distribute<xshard::spec<"None, model">>(mesh, stacked_b1);
  auto W2 = xshard::distribute<xshard::spec<"None, model, None">>(mesh, stacked_w2);  // [layers, f, d]
  auto B2 = xshard::distribute<xshard::spec<"None, None">>(mesh, stacked_b2);
  auto params = std::tuple{W1, B1, W2, B2};
  auto Y = xshard::scan_layers(block, params, X);                                      // a global
  auto [grads, dX] = xshard::scan_layers_vjp(block, params, X, GY, xshard::remat::dots_saveable);
}
}  // namespace global_hpp

}  // namespace
// clang-format on
