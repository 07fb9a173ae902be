// scan_layers on a heterogeneous hana tuple (scan/scan_layers_unrolled.hpp):
// the forward equals the hand-chained layer calls; scan_layers_vjp equals a
// hand-unrolled backward bit for bit, matches central finite differences,
// and is identical under every remat policy; on a homogeneous tuple both
// equal the run-time loop of scan/scan_layers.hpp on stacked params; every
// layer shows in the trace.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <boost/hana/at.hpp>
#include <boost/hana/tuple.hpp>
#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>
#include <xshard/nn/linear.hpp>
#include <xshard/scan/scan_layers.hpp>  // the run-time loop, stack_params: the homogeneous reference
#include <xshard/scan/scan_layers_unrolled.hpp>
#include <xshard/trace/trace.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xreducer.hpp>
#include <xtensor/xtensor.hpp>

#include "../support/expect_error.hpp"

namespace {

namespace hana = boost::hana;
using T = double;
using mat = xt::xtensor<T, 2>;
using vec = xt::xtensor<T, 1>;
using cube = xt::xtensor<T, 3>;

/// A layer that changes the activation's rank: y[b, g, k] = x[b, g*K + k] *
/// gamma[g*K + k] for G groups of K = n / G features. Its residuals are its
/// input; it has no forward_saving_dots, so dots_saveable saves all for it.
template <std::size_t G>
struct split_scale_layer {
  using params = std::tuple<vec>;  // gamma [n]
  using input = mat;
  using output = cube;
  using residuals = input;
  static constexpr std::array<std::string_view, 1> param_names{"gamma"};

  std::pair<output, residuals> forward(const params& p, const input& x) const {
    const std::size_t b = x.shape()[0], n = x.shape()[1];
    if (n % G != 0) throw xshard::error("split_scale_layer: width " + std::to_string(n) + " is not a multiple of G");
    const mat scaled = x * std::get<0>(p);
    output y = output::from_shape({b, G, n / G});
    std::copy(scaled.begin(), scaled.end(), y.begin());  // both row-major
    return {std::move(y), x};
  }
  std::pair<params, input> vjp(const params& p, const residuals& x, const output& gy) const {
    mat g = mat::from_shape(x.shape());
    std::copy(gy.begin(), gy.end(), g.begin());
    vec dgamma = xt::sum(g * x, {0});
    mat dx = g * std::get<0>(p);
    return {params{std::move(dgamma)}, std::move(dx)};
  }
};

using lin2 = xshard::linear_layer<T>;
using tanh2 = xshard::tanh_linear_layer<T>;
using split = split_scale_layer<2>;
using lin3 = xshard::linear_layer<T, 3>;
using tanh3 = xshard::tanh_linear_layer<T, 3>;

static_assert(xshard::layer<split>);

using lin_params = lin2::params;  // the same for all four einsum layers

lin_params random_linear(std::size_t out, std::size_t in) {
  return {mat(xt::random::randn<T>({out, in}) * 0.5), vec(xt::random::randn<T>({out}) * 0.1)};
}

// x [3, 4] -> lin2 [3, 6] -> tanh2 [3, 6] -> split [3, 2, 3] -> lin3 [3, 2, 5] -> tanh3 [3, 2, 4]
struct hetero {
  hana::tuple<lin2, tanh2, split, lin3, tanh3> layers;
  hana::tuple<lin_params, lin_params, split::params, lin_params, lin_params> params;
  mat x;
  cube gy;
};

hetero make_hetero(unsigned seed) {
  xt::random::seed(seed);
  hetero h;
  hana::at_c<0>(h.params) = random_linear(6, 4);
  hana::at_c<1>(h.params) = random_linear(6, 6);
  hana::at_c<2>(h.params) = split::params{vec(1.0 + 0.5 * xt::random::randn<T>({6}))};
  hana::at_c<3>(h.params) = random_linear(5, 3);
  hana::at_c<4>(h.params) = random_linear(4, 5);
  h.x = xt::random::randn<T>({3, 4});
  h.gy = xt::random::randn<T>({3, 2, 4});
  return h;
}

cube hand_forward(const hetero& h) {
  const auto& [l0, l1, l2, l3, l4] = std::tuple{lin2{}, tanh2{}, split{}, lin3{}, tanh3{}};
  const mat a0 = l0.forward(hana::at_c<0>(h.params), h.x).first;
  const mat a1 = l1.forward(hana::at_c<1>(h.params), a0).first;
  const cube a2 = l2.forward(hana::at_c<2>(h.params), a1).first;
  const cube a3 = l3.forward(hana::at_c<3>(h.params), a2).first;
  return l4.forward(hana::at_c<4>(h.params), a3).first;
}

TEST(ScanLayersUnrolled, ForwardEqualsTheHandChainedLayers) {
  const hetero h = make_hetero(11);
  const cube y = xshard::scan_layers(h.layers, h.params, h.x);
  const cube want = hand_forward(h);
  ASSERT_EQ(y.shape(), want.shape());
  EXPECT_EQ(y, want);  // identical bits
  // x may be an expression that converts to layer 0's input.
  EXPECT_EQ(xshard::scan_layers(h.layers, h.params, h.x * 1.0), want);
}

// The hand-unrolled backward: every layer's forward saving its residuals,
// then every vjp in reverse order.
struct hand_grads {
  hana::tuple<lin_params, lin_params, split::params, lin_params, lin_params> params;
  mat dx;
};

hand_grads hand_backward(const hetero& h) {
  const lin2 l0;
  const tanh2 l1;
  const split l2;
  const lin3 l3;
  const tanh3 l4;
  const auto [a0, r0] = l0.forward(hana::at_c<0>(h.params), h.x);
  const auto [a1, r1] = l1.forward(hana::at_c<1>(h.params), a0);
  const auto [a2, r2] = l2.forward(hana::at_c<2>(h.params), a1);
  const auto [a3, r3] = l3.forward(hana::at_c<3>(h.params), a2);
  const auto [a4, r4] = l4.forward(hana::at_c<4>(h.params), a3);
  (void)a4;
  hand_grads out;
  auto [p4, g3] = l4.vjp(hana::at_c<4>(h.params), r4, h.gy);
  auto [p3, g2] = l3.vjp(hana::at_c<3>(h.params), r3, g3);
  auto [p2, g1] = l2.vjp(hana::at_c<2>(h.params), r2, g2);
  auto [p1, g0] = l1.vjp(hana::at_c<1>(h.params), r1, g1);
  auto [p0, dx] = l0.vjp(hana::at_c<0>(h.params), r0, g0);
  out.params = hana::make_tuple(p0, p1, p2, p3, p4);
  out.dx = dx;
  return out;
}

template <class Grads>
void expect_grads_equal(const Grads& got, const hand_grads& want, const std::string& what) {
  EXPECT_EQ(std::get<0>(hana::at_c<0>(got)), std::get<0>(hana::at_c<0>(want.params))) << what << ": layer 0 weight";
  EXPECT_EQ(std::get<1>(hana::at_c<0>(got)), std::get<1>(hana::at_c<0>(want.params))) << what << ": layer 0 bias";
  EXPECT_EQ(std::get<0>(hana::at_c<1>(got)), std::get<0>(hana::at_c<1>(want.params))) << what << ": layer 1 weight";
  EXPECT_EQ(std::get<1>(hana::at_c<1>(got)), std::get<1>(hana::at_c<1>(want.params))) << what << ": layer 1 bias";
  EXPECT_EQ(std::get<0>(hana::at_c<2>(got)), std::get<0>(hana::at_c<2>(want.params))) << what << ": layer 2 gamma";
  EXPECT_EQ(std::get<0>(hana::at_c<3>(got)), std::get<0>(hana::at_c<3>(want.params))) << what << ": layer 3 weight";
  EXPECT_EQ(std::get<1>(hana::at_c<3>(got)), std::get<1>(hana::at_c<3>(want.params))) << what << ": layer 3 bias";
  EXPECT_EQ(std::get<0>(hana::at_c<4>(got)), std::get<0>(hana::at_c<4>(want.params))) << what << ": layer 4 weight";
  EXPECT_EQ(std::get<1>(hana::at_c<4>(got)), std::get<1>(hana::at_c<4>(want.params))) << what << ": layer 4 bias";
}

TEST(ScanLayersUnrolled, GradientsEqualTheHandUnrolledBackwardUnderEveryPolicy) {
  const hetero h = make_hetero(12);
  const hand_grads want = hand_backward(h);
  for (const auto policy : xshard::remat_policies) {
    const auto [grads, dx] = xshard::scan_layers_vjp(h.layers, h.params, h.x, h.gy, policy);
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(grads)>, decltype(want.params)>);
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(dx)>, mat>);
    EXPECT_EQ(dx, want.dx) << std::string(xshard::remat_name(policy));  // identical bits, not a tolerance
    expect_grads_equal(grads, want, std::string(xshard::remat_name(policy)));
  }
}

// Central differences of loss = sum(gy * scan_layers(...)) in every element
// of every parameter tensor and of x.
template <class Tensor, class Grad, class Loss>
void expect_finite_differences(Tensor& tensor, const Grad& grad, const Loss& loss, const std::string& what) {
  ASSERT_EQ(tensor.shape(), grad.shape()) << what;
  const T eps = 1e-6;
  for (std::size_t k = 0; k < tensor.size(); ++k) {
    const T old = tensor.flat(k);
    tensor.flat(k) = old + eps;
    const T up = loss();
    tensor.flat(k) = old - eps;
    const T down = loss();
    tensor.flat(k) = old;
    EXPECT_NEAR(grad.flat(k), (up - down) / (2 * eps), 1e-6) << what << " element " << k;
  }
}

template <std::size_t I, class Params, class Grads, class Loss, std::size_t... K>
void expect_layer_finite_differences(Params& params, const Grads& grads, const Loss& loss, std::index_sequence<K...>) {
  (expect_finite_differences(std::get<K>(hana::at_c<I>(params)), std::get<K>(hana::at_c<I>(grads)), loss,
                             "layer " + std::to_string(I) + " param " + std::to_string(K)),
   ...);
}

template <class Params, class Grads, class Loss, std::size_t... I>
void expect_params_finite_differences(Params& params, const Grads& grads, const Loss& loss, std::index_sequence<I...>) {
  (expect_layer_finite_differences<I>(
       params, grads, loss,
       std::make_index_sequence<std::tuple_size_v<std::remove_cvref_t<decltype(hana::at_c<I>(params))>>>{}),
   ...);
}

TEST(ScanLayersUnrolled, GradientsMatchFiniteDifferences) {
  hetero h = make_hetero(13);
  const auto r = xshard::scan_layers_vjp(h.layers, h.params, h.x, h.gy, xshard::remat::dots_saveable);
  auto loss = [&h] { return T(xt::sum(xshard::scan_layers(h.layers, h.params, h.x) * h.gy)()); };
  expect_params_finite_differences(h.params, r.first, loss, std::make_index_sequence<5>{});
  expect_finite_differences(h.x, r.second, loss, "x");
}

TEST(ScanLayersUnrolled, RunTimeWidthMismatchIsAnError) {
  hetero h = make_hetero(14);
  hana::at_c<3>(h.params) = random_linear(5, 4);  // layer 3 expects 4 features; layer 2 gives 3
  // The einsum's own message, then the layer and the pass.
  const auto names_layer_3 = [](auto&& run) {
    EXPECT_XSHARD_ERROR(run(), "einsum");
    const std::string what = xshard_test::error_of(run);
    EXPECT_TRUE(what.starts_with("xshard") && what.ends_with(" (scan_layers: layer 3, forward)")) << what;
  };
  names_layer_3([&] { (void)xshard::scan_layers(h.layers, h.params, h.x); });
  for (const auto policy : {xshard::remat::save_all, xshard::remat::recompute, xshard::remat::dots_saveable})
    names_layer_3([&] { (void)xshard::scan_layers_vjp(h.layers, h.params, h.x, h.gy, policy); });
}

// A homogeneous tuple of tanh layers against the run-time loop on the
// stacked params: same bits forward and backward.
TEST(ScanLayersUnrolled, HomogeneousTupleEqualsTheRunTimeLoop) {
  constexpr std::size_t depth = 5;
  xt::random::seed(15);
  std::vector<tanh2::params> ps;
  for (std::size_t i = 0; i < depth; ++i) ps.push_back(random_linear(4, 4));
  const auto stacked = xshard::stack_params<tanh2>(ps);
  const mat x = xt::random::randn<T>({3, 4});
  const mat gy = xt::random::randn<T>({3, 4});
  const auto layers = hana::make_tuple(tanh2{}, tanh2{}, tanh2{}, tanh2{}, tanh2{});
  const auto params = hana::make_tuple(ps[0], ps[1], ps[2], ps[3], ps[4]);

  EXPECT_EQ(xshard::scan_layers(layers, params, x), xshard::scan_layers(tanh2{}, stacked, x));
  for (const auto policy : xshard::remat_policies) {
    const auto [want_grads, want_dx] = xshard::scan_layers_vjp(tanh2{}, stacked, x, gy, policy);
    const auto [grads, dx] = xshard::scan_layers_vjp(layers, params, x, gy, policy);
    EXPECT_EQ(dx, want_dx) << std::string(xshard::remat_name(policy));
    const auto got = xshard::stack_params<tanh2>(
        {hana::at_c<0>(grads), hana::at_c<1>(grads), hana::at_c<2>(grads), hana::at_c<3>(grads), hana::at_c<4>(grads)});
    EXPECT_EQ(std::get<0>(got), std::get<0>(want_grads)) << std::string(xshard::remat_name(policy)) << ": weights";
    EXPECT_EQ(std::get<1>(got), std::get<1>(want_grads)) << std::string(xshard::remat_name(policy)) << ": biases";
  }
}

// One scope per layer: forward 0..4 in order, backward 4..0, each carrying
// its layer index.
TEST(ScanLayersUnrolled, TraceShowsEveryLayer) {
  const hetero h = make_hetero(16);
  auto& tr = xshard::tracer::instance();
  auto scan_events = [&] {
    auto events = tr.events();
    std::sort(events.begin(), events.end(), [](const auto& a, const auto& b) { return a.ts_ns < b.ts_ns; });
    std::vector<std::pair<std::string, std::int64_t>> out;
    for (const auto& e : events) {
      if (e.name.rfind("scan_layers/", 0) != 0) continue;
      EXPECT_EQ(e.args.size(), 1u) << e.name;
      if (e.args.size() != 1 || e.args[0].key != "layer") continue;
      out.emplace_back(e.name, std::get<std::int64_t>(e.args[0].value));
    }
    return out;
  };
  using seq = std::vector<std::pair<std::string, std::int64_t>>;
  const seq forward{{"scan_layers/forward", 0},
                    {"scan_layers/forward", 1},
                    {"scan_layers/forward", 2},
                    {"scan_layers/forward", 3},
                    {"scan_layers/forward", 4}};
  seq forward_backward = forward;
  for (std::int64_t i = 4; i >= 0; --i) forward_backward.emplace_back("scan_layers/backward", i);

  tr.clear();
  tr.start();
  (void)xshard::scan_layers(h.layers, h.params, h.x);
  tr.stop();
  EXPECT_EQ(scan_events(), forward);

  for (const auto policy : xshard::remat_policies) {
    tr.clear();
    tr.start();
    (void)xshard::scan_layers_vjp(h.layers, h.params, h.x, h.gy, policy);
    tr.stop();
    EXPECT_EQ(scan_events(), forward_backward) << std::string(xshard::remat_name(policy));
  }

  tr.clear();  // off: nothing recorded
  (void)xshard::scan_layers_vjp(h.layers, h.params, h.x, h.gy, xshard::remat::save_all);
  EXPECT_TRUE(scan_events().empty());
  tr.clear();
}

}  // namespace
