// scan_layers: a homogeneous stack as a run-time loop and a heterogeneous
// hana tuple unrolled give the unrolled program's values; scan_layers_vjp's
// gradients equal a hand-unrolled backward and finite differences, and are
// identical under every remat policy; a pullback hands each layer's
// gradients to a callback, last layer first (an optimizer's layer_updates:
// bit for bit the step on the stacked gradients).
#include <gtest/gtest.h>

#include <boost/hana/tuple.hpp>
#include <cmath>
#include <vector>
#include <xshard/nn/linear.hpp>
#include <xshard/optim/optimizer.hpp>
#include <xshard/scan/scan_layers.hpp>
#include <xshard/scan/scan_layers_unrolled.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "../support/expect_error.hpp"

namespace {

using T = double;
using L = xshard::tanh_linear_layer<T>;
using mat = xt::xtensor<T, 2>;
using vec = xt::xtensor<T, 1>;

std::vector<L::params> random_layers(std::size_t depth, std::size_t width, unsigned seed) {
  xt::random::seed(seed);
  std::vector<L::params> ps;
  for (std::size_t i = 0; i < depth; ++i)
    ps.push_back({mat(xt::random::randn<T>({width, width}) * 0.5), vec(xt::random::randn<T>({width}) * 0.1)});
  return ps;
}

TEST(ScanLayers, HomogeneousStackEqualsTheUnrolledProgram) {
  const auto ps = random_layers(6, 5, 1);
  const auto stacked = xshard::stack_params<L>(ps);
  const mat x = xt::random::randn<T>({3, 5});
  L l;
  mat want = x;
  for (const auto& p : ps) want = l.forward(p, want).first;
  EXPECT_EQ(xshard::scan_layers(l, stacked, x), want);
}

TEST(ScanLayers, HeterogeneousTupleIsUnrolled) {
  const auto ps = random_layers(2, 4, 2);
  xshard::linear_layer<T> lin;
  L th;
  const mat x = xt::random::randn<T>({2, 4});
  const auto layers = boost::hana::make_tuple(lin, th, lin);
  const auto params = boost::hana::make_tuple(ps[0], ps[1], ps[0]);
  const mat want = lin.forward(ps[0], th.forward(ps[1], lin.forward(ps[0], x).first).first).first;
  EXPECT_EQ(xshard::scan_layers(layers, params, x), want);
}

TEST(ScanLayers, GradientsEqualTheUnrolledBackwardUnderEveryPolicy) {
  const std::size_t depth = 5;
  const auto ps = random_layers(depth, 4, 3);
  const auto stacked = xshard::stack_params<L>(ps);
  const mat x = xt::random::randn<T>({3, 4});
  const mat gy = xt::random::randn<T>({3, 4});
  L l;
  // Hand-unrolled forward and backward.
  std::vector<L::residuals> rs;
  mat cur = x;
  for (const auto& p : ps) {
    auto [y, r] = l.forward(p, cur);
    rs.push_back(r);
    cur = y;
  }
  mat g = gy;
  std::vector<L::params> want(depth);
  for (std::size_t i = depth; i-- > 0;) {
    auto [gp, gx] = l.vjp(ps[i], rs[i], g);
    want[i] = gp;
    g = gx;
  }
  const auto want_stacked = xshard::stack_params<L>(want);
  for (auto policy : {xshard::remat::save_all, xshard::remat::recompute, xshard::remat::dots_saveable}) {
    const auto [grads, dx] = xshard::scan_layers_vjp(l, stacked, x, gy, policy);
    EXPECT_EQ(dx, g) << "policy " << static_cast<int>(policy);  // identical bits, not a tolerance
    EXPECT_EQ(std::get<0>(grads), std::get<0>(want_stacked)) << "policy " << static_cast<int>(policy);
    EXPECT_EQ(std::get<1>(grads), std::get<1>(want_stacked)) << "policy " << static_cast<int>(policy);
  }
}

TEST(ScanLayers, GradientsMatchFiniteDifferences) {
  const std::size_t depth = 4;
  const auto ps = random_layers(depth, 3, 4);
  auto stacked = xshard::stack_params<L>(ps);
  const mat x = xt::random::randn<T>({2, 3});
  const mat gy = xt::random::randn<T>({2, 3});
  L l;
  auto loss = [&](const xshard::stacked_params<L>& s, const mat& in) {
    return T(xt::sum(xshard::scan_layers(l, s, in) * gy)());
  };
  const auto [grads, dx] = xshard::scan_layers_vjp(l, stacked, x, gy, xshard::remat::recompute);
  const T h = 1e-6;
  auto& w = std::get<0>(stacked);
  for (std::size_t k = 0; k < w.size(); k += 5) {
    const T old = w.flat(k);
    w.flat(k) = old + h;
    const T up = loss(stacked, x);
    w.flat(k) = old - h;
    const T down = loss(stacked, x);
    w.flat(k) = old;
    EXPECT_NEAR(std::get<0>(grads).flat(k), (up - down) / (2 * h), 1e-6) << "weight element " << k;
  }
  mat xp = x;
  for (std::size_t k = 0; k < x.size(); ++k) {
    const T old = xp.flat(k);
    xp.flat(k) = old + h;
    const T up = loss(stacked, xp);
    xp.flat(k) = old - h;
    const T down = loss(stacked, xp);
    xp.flat(k) = old;
    EXPECT_NEAR(dx.flat(k), (up - down) / (2 * h), 1e-6) << "input element " << k;
  }
}

TEST(ScanLayers, ShapeErrorsInsideTheStackNameTheLayerAndPass) {
  const auto stacked = xshard::stack_params<L>(random_layers(3, 4, 7));
  const L l;
  // x has 5 features where layer 0 expects 4: the einsum's message, then the layer.
  const mat bad_x = xt::zeros<T>({2, 5});
  for (const std::string& what :
       {xshard_test::error_of([&] { (void)xshard::scan_layers(l, stacked, bad_x); }),
        xshard_test::error_of([&] { (void)xshard::scan_layers_vjp(l, stacked, bad_x, xshard::remat::save_all); })}) {
    EXPECT_EQ(what.rfind("xshard: einsum", 0), 0u) << what;
    EXPECT_TRUE(what.ends_with(" (scan_layers: layer 0, forward)")) << what;
  }
  // A gradient with 3 rows for an output of 2: the last layer's backward.
  using lin = xshard::linear_layer<T>;
  const auto lin_stacked = xshard::stack_params<lin>(
      std::vector<lin::params>(3, lin::params{mat(xt::ones<T>({4, 4})), vec(xt::zeros<T>({4}))}));
  const mat x = xt::ones<T>({2, 4});
  const mat bad_gy = xt::ones<T>({3, 4});
  for (const auto policy : {xshard::remat::save_all, xshard::remat::recompute}) {
    auto vjp = xshard::scan_layers_vjp(lin{}, lin_stacked, x, policy);  // not a structured binding: Clang 14
    const std::string what =
        xshard_test::error_of([&] { (void)vjp.second(bad_gy); });  // cannot capture one in a lambda
    EXPECT_EQ(what.rfind("xshard::graph: the result's gradient has shape [3,4] but the result [2,4]", 0), 0u) << what;
    EXPECT_TRUE(what.ends_with(" (scan_layers: layer 2, backward)")) << what;
  }
}

// The pullback writing into a stack the caller keeps (as a training loop
// keeps its gradients from step to step) gives the returned stack's bits,
// whatever the stack held before.
TEST(ScanLayers, PullbackIntoAKeptStackEqualsTheReturnedStack) {
  const std::size_t depth = 5;
  const auto stacked = xshard::stack_params<L>(random_layers(depth, 4, 8));
  auto kept = xshard::stack_params<L>(random_layers(depth, 4, 9));  // stale values, overwritten
  const mat x = xt::random::randn<T>({3, 4});
  const mat gy = xt::random::randn<T>({3, 4});
  for (const auto policy : xshard::remat_policies) {
    const auto [want, want_dx] = xshard::scan_layers_vjp(L{}, stacked, x, gy, policy);
    auto vjp = xshard::scan_layers_vjp(L{}, stacked, x, policy);
    const mat dx = vjp.second(gy, kept);
    EXPECT_EQ(dx, want_dx) << xshard::remat_name(policy);
    EXPECT_EQ(std::get<0>(kept), std::get<0>(want)) << xshard::remat_name(policy);
    EXPECT_EQ(std::get<1>(kept), std::get<1>(want)) << xshard::remat_name(policy);
  }
}

TEST(ScanLayers, PullbackHandsEachLayersGradientsOverLastFirst) {
  const std::size_t depth = 4;
  const auto stacked = xshard::stack_params<L>(random_layers(depth, 4, 12));
  const mat x = xt::random::randn<T>({3, 4});
  const mat gy = xt::random::randn<T>({3, 4});
  for (const auto policy : xshard::remat_policies) {
    const auto whole = xshard::scan_layers_vjp(L{}, stacked, x, gy, policy);  // (Clang 14: no binding in a lambda)
    const auto& want = whole.first;
    auto vjp = xshard::scan_layers_vjp(L{}, stacked, x, policy);
    std::vector<std::size_t> order;
    const mat dx = vjp.second(gy, [&](std::size_t i, const L::params& g) {
      order.push_back(i);
      EXPECT_EQ(std::get<0>(g), xt::view(std::get<0>(want), i)) << xshard::remat_name(policy) << ", layer " << i;
      EXPECT_EQ(std::get<1>(g), xt::view(std::get<1>(want), i)) << xshard::remat_name(policy) << ", layer " << i;
    });
    EXPECT_EQ(dx, whole.second) << xshard::remat_name(policy);
    EXPECT_EQ(order, (std::vector<std::size_t>{3, 2, 1, 0})) << xshard::remat_name(policy);
  }
}

TEST(ScanLayers, PullbackWithLayerUpdatesEqualsTheStackedStep) {
  // The optimizer in the backward: each layer updated as its gradients
  // appear, bit for bit the step on the stacked gradients.
  using Stack = xshard::stacked_params<L>;
  const xshard::sgd rule{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
  Stack stepped = xshard::stack_params<L>(random_layers(3, 4, 13)), layered = stepped;
  xshard::optimizer<xshard::sgd, Stack> a(rule, stepped), b(rule, layered);
  Stack grads = stepped;
  for (int s = 0; s < 3; ++s) {
    const mat x = xt::random::randn<T>({3, 4});
    const mat gy = xt::random::randn<T>({3, 4});
    auto va = xshard::scan_layers_vjp(L{}, stepped, x, xshard::remat::save_all);
    const mat dxa = va.second(gy, grads);
    a.step(stepped, grads);
    auto vb = xshard::scan_layers_vjp(L{}, layered, x, xshard::remat::save_all);
    EXPECT_EQ(vb.second(gy, b.layer_updates(layered)), dxa);
    EXPECT_EQ(std::get<0>(layered), std::get<0>(stepped)) << "step " << s;
    EXPECT_EQ(std::get<1>(layered), std::get<1>(stepped)) << "step " << s;
  }
}

TEST(ScanLayers, PullbackIntoAStackOfAnotherShapeNamesTheParameter) {
  const auto stacked = xshard::stack_params<L>(random_layers(5, 4, 10));
  auto shallow = xshard::stack_params<L>(random_layers(4, 4, 11));
  const mat x = xt::ones<T>({3, 4});
  auto vjp = xshard::scan_layers_vjp(L{}, stacked, x, xshard::remat::save_all);
  EXPECT_EQ(xshard_test::error_of([&] { (void)vjp.second(x, shallow); }),
            "xshard: scan_layers_vjp: the gradient stack's \"weight\" has shape [4,4,4], the parameters' [5,4,4]");
  auto narrow = stacked;
  std::get<1>(narrow) = xt::zeros<T>({std::size_t{5}, std::size_t{3}});
  EXPECT_EQ(xshard_test::error_of([&] { (void)vjp.second(x, narrow); }),
            "xshard: scan_layers_vjp: the gradient stack's \"bias\" has shape [5,3], the parameters' [5,4]");
  // The checks ran before the pullback did: it still runs, once.
  auto good = stacked;
  EXPECT_EQ(xshard_test::error_of([&] { (void)vjp.second(x, good); }), "no error");
  EXPECT_EQ(xshard_test::error_of([&] { (void)vjp.second(x, good); }),
            "xshard: scan_layers_vjp: a pullback runs once (its saved residuals are consumed)");
}

TEST(ScanLayers, MismatchedParameterShapesNameTheLayerAndParameter) {
  auto ps = random_layers(3, 4, 5);
  std::get<1>(ps[2]) = vec(xt::zeros<T>({5}));
  EXPECT_EQ(xshard_test::error_of([&] { (void)xshard::stack_params<L>(ps); }),
            "xshard: stack_params: layer 2's parameter \"bias\" has another shape than layer 0's");
}

}  // namespace

#include <set>
#include <xshard/trace/trace.hpp>

namespace {

// Trace scopes inside scan_layers show per layer, forward and backward.
TEST(ScanLayers, TraceShowsEveryLayer) {
  const auto ps = random_layers(4, 3, 6);
  const auto stacked = xshard::stack_params<L>(ps);
  const mat x = xt::random::randn<T>({2, 3});
  auto& tr = xshard::tracer::instance();
  tr.clear();
  tr.start();
  (void)xshard::scan_layers_vjp(L{}, stacked, x, x, xshard::remat::recompute);
  tr.stop();
  std::size_t fwd = 0, bwd = 0;
  for (const auto& e : tr.events()) {
    fwd += e.name == "scan_layers/forward";
    bwd += e.name == "scan_layers/backward";
  }
  EXPECT_EQ(fwd, 4u);  // recompute's second forward runs inside each backward scope
  EXPECT_EQ(bwd, 4u);
  tr.clear();
}

}  // namespace

namespace {

// A layer whose forward / vjp take `const params&` (not templates) gets
// copies of its stacked parameters; linear and tanh_linear take views.
struct fixed_signature_layer {
  using params = std::tuple<mat, vec>;
  using input = mat;
  using output = mat;
  using residuals = xshard::linear_layer<T>::residuals;
  static constexpr std::array<std::string_view, 2> param_names{"weight", "bias"};
  xshard::linear_layer<T> inner;
  std::pair<output, residuals> forward(const params& p, const input& x) const { return inner.forward(p, x); }
  std::pair<params, input> vjp(const params& p, const residuals& r, const output& gy) const {
    return inner.vjp(p, r, gy);
  }
};
static_assert(xshard::stackable_layer<fixed_signature_layer>);
static_assert(!xshard::detail::takes_param_views<fixed_signature_layer>);
static_assert(xshard::detail::takes_param_views<L>);
static_assert(xshard::detail::takes_param_views<xshard::linear_layer<T>>);

TEST(ScanLayers, LayersWithoutTemplateParamsGetCopies) {
  const auto ps = random_layers(3, 4, 7);
  const auto stacked = xshard::stack_params<L>(ps);
  const mat x = xt::random::randn<T>({2, 4});
  fixed_signature_layer f;
  const xshard::linear_layer<T> lin;
  EXPECT_EQ(xshard::scan_layers(f, stacked, x), xshard::scan_layers(lin, stacked, x));
  const auto [g1, dx1] = xshard::scan_layers_vjp(f, stacked, x, x, xshard::remat::recompute);
  const auto [g2, dx2] = xshard::scan_layers_vjp(lin, stacked, x, x, xshard::remat::recompute);
  EXPECT_EQ(dx1, dx2);
  EXPECT_EQ(std::get<0>(g1), std::get<0>(g2));
  EXPECT_EQ(std::get<1>(g1), std::get<1>(g2));
}

}  // namespace
