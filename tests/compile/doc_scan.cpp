// The usage examples at the top of the scan/ headers, compiled: each
// header's example lines appear here verbatim (scripts/check_doc_examples.sh
// checks it), inside the context they need.
#include <boost/hana/tuple.hpp>
#include <tuple>
#include <utility>
#include <vector>
#include <xshard/nn/linear.hpp>
#include <xshard/scan/scan.hpp>
#include <xshard/scan/scan_grad.hpp>
#include <xshard/scan/scan_layers.hpp>
#include <xshard/scan/scan_layers_unrolled.hpp>
#include <xtensor/xtensor.hpp>

namespace xshard_doc_scan {  // named: the examples declare functions they never define

template <class Y>
Y loss_gradient(const Y& y) {
  return y;
}

namespace doc_scan {  // scan/scan.hpp
[[maybe_unused]] void example(const xt::xtensor<float, 1>& init, const xt::xtensor<float, 2>& xs) {
  auto [final, ys] = xshard::scan(
      [](const xt::xtensor<float, 1>& c, const xt::xtensor<float, 1>& x) {
        xt::xtensor<float, 1> next = c + x;
        return std::pair{next, next};  // (new carry, y)
      },
      init, xs);  // xs: leading dim = length
  // ys[t] = the y of step t, stacked on a new leading dim
}
}  // namespace doc_scan

namespace doc_scan_grad {  // scan/scan_grad.hpp
using mat = xt::xtensor<float, 2>;
using vec = xt::xtensor<float, 1>;
struct rnn_step {                            // satisfies xshard::scan_step
  using params = std::tuple<mat, mat, vec>;  // W [n,n], U [n,m], b [n]: shared by every step
  using carry = mat;                         // h [b,n]
  using x = mat;                             // x_t [b,m]: one slice of xs [T,b,m]
  using y = mat;                             // y_t [b,n]
  struct residuals {
    mat h, x, h_next;
  };  // what vjp needs (it gets no carry or x)
  std::tuple<carry, y, residuals> forward(const params&, const carry& h, const x& x_t) const;
  std::tuple<params, carry, x> vjp(const params&, const residuals&, const carry& g_carry, const y& g_y) const;
};
static_assert(xshard::scan_step<rnn_step>);
[[maybe_unused]] void example(const rnn_step::params& params, const mat& h0, const xt::xtensor<float, 3>& xs,
                              const mat& g_final, const xt::xtensor<float, 3>& g_ys) {
  auto [final, ys] = xshard::scan(rnn_step{}, params, h0, xs);  // what the lambda form gives
  auto g = xshard::scan_vjp(rnn_step{}, params, h0, xs, g_final, g_ys, {}, xshard::remat::recompute);
  // g.params: d/d params summed over steps; g.init: d/d h0; g.xs: d/d xs, laid out like xs
}
}  // namespace doc_scan_grad

namespace doc_scan_layers {  // scan/scan_layers.hpp
using P = xshard::linear_layer<float>::params;
[[maybe_unused]] void example(const std::vector<P>& per_layer_params, const xt::xtensor<float, 2>& x,
                              const xt::xtensor<float, 2>& gy) {
  xshard::linear_layer<float> L;
  auto stacked = xshard::stack_params<decltype(L)>(per_layer_params);  // tensors gain a leading layer dim
  auto y = xshard::scan_layers(L, stacked, x);                         // a run-time loop over layers
  auto [grads, dx] = xshard::scan_layers_vjp(L, stacked, x, gy, xshard::remat::recompute);
}
[[maybe_unused]] void example_pullback(const std::vector<P>& per_layer_params, const xt::xtensor<float, 2>& x) {
  xshard::linear_layer<float> L;
  auto stacked = xshard::stack_params<decltype(L)>(per_layer_params);
  auto [y, pullback] = xshard::scan_layers_vjp(L, stacked, x, xshard::remat::recompute);
  auto [grads, dx] = pullback(loss_gradient(y));  // JAX's vjp: forward once
}
}  // namespace doc_scan_layers

namespace doc_scan_layers_unrolled {  // scan/scan_layers_unrolled.hpp
using L1 = xshard::linear_layer<float>;
using L2 = xshard::tanh_linear_layer<float>;
using L3 = xshard::linear_layer<float>;
[[maybe_unused]] void example(const L1::params& p1, const L2::params& p2, const L3::params& p3,
                              const xt::xtensor<float, 2>& x, const xt::xtensor<float, 2>& gy) {
  auto layers = boost::hana::make_tuple(L1{}, L2{}, L3{});
  auto params = boost::hana::make_tuple(p1, p2, p3);  // L1::params, L2::params, L3::params
  auto y = xshard::scan_layers(layers, params, x);
  auto [grads, dx] = xshard::scan_layers_vjp(layers, params, x, gy, xshard::remat::recompute);
  // grads: hana::tuple<L1::params, L2::params, L3::params>; dx: L1::input
}
}  // namespace doc_scan_layers_unrolled

}  // namespace xshard_doc_scan
