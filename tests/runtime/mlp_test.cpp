// The layers of nn/, written once as graphs: linear_layer, tanh_linear_layer
// and mlp_block equal the hand-written layers they replaced
// (tests/support/hand_layers.hpp) bit for bit, under every remat path.
// The MLP block (nn/mlp.hpp): its vjp against central finite differences;
// a stack of them through scan_layers under every remat policy; the same
// block sharded data x model on a 2x2 thread mesh, alone and stacked in
// scan_layers / scan_layers_vjp, against the single-device block, with the
// per-device collectives equal to the compile-time plans.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <string>
#include <vector>
#include <xshard/nn/linear.hpp>
#include <xshard/nn/mlp.hpp>
#include <xshard/scan/scan_layers.hpp>
#include <xshard/spmd/thread_mesh.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>

#include "../support/hand_layers.hpp"

namespace {

using T = double;
using Dense = xshard::mlp_block<T>;
using mat = xt::xtensor<T, 2>;
using vec = xt::xtensor<T, 1>;
using M = xshard::mesh<"data=2, model=2">;
using ML = xshard::data_model_mlp<M>;
using Sharded = xshard::mlp_block<T, ML>;
using xshard::collective_kind;
constexpr xshard::axis_set data = 1, model = 2;

// The plans, derived from the graph: one all-reduce over model in the
// forward (the row-parallel einsum), none for the output constraint; in the
// backward (nodes last to first) one all-reduce over data per parameter
// gradient and one over model for dx.
constexpr auto forward_plan = Sharded::forward_plan();
static_assert(forward_plan.size() == 1 && forward_plan[0].op == "...m,mk->...k" &&
              forward_plan[0].collectives.size() == 1 &&
              forward_plan[0].collectives[0].kind == collective_kind::all_reduce &&
              forward_plan[0].collectives[0].axes == model);
static_assert(Sharded::forward_collectives() == 1);
static_assert(Sharded::backward_collectives() == 2);
constexpr bool backward_axes_ok = [] {
  // The first einsum's dx over model; then, at the end, d b2, d W2, d b1
  // and d W1 (partial over data) in one all_reduce_many.
  const auto b = Sharded::backward_plan();
  return b.size() == 2 && b[0].op == "...n,mn->...m" && b[0].collectives.size() == 1 &&
         b[0].collectives[0].kind == collective_kind::all_reduce && b[0].collectives[0].axes == model &&
         b[1].node == xshard::graph::no_node && b[1].op == "parameter gradients" && b[1].collectives.size() == 1 &&
         b[1].collectives[0].kind == collective_kind::all_reduce && b[1].collectives[0].axes == data;
}();
static_assert(backward_axes_ok);
// scan_layers hands the layers views of the stack (no copy): xt::xview of a
// plain stack, sharded_view of a sharded one.
static_assert(xshard::detail::takes_param_views<Dense>);
static_assert(xshard::detail::takes_param_views<Sharded>);
static_assert(std::is_same_v<
              decltype(xshard::detail::layer_args<Sharded>(std::declval<const xshard::stacked_params<Sharded>&>(), 0)),
              std::tuple<xshard::sharded_view<T, 2, M, ML::w_in>, xshard::sharded_view<T, 1, M, ML::b_in>,
                         xshard::sharded_view<T, 2, M, ML::w_out>, xshard::sharded_view<T, 1, M, ML::b_out>>>);

Dense::params random_params(std::size_t d, std::size_t f, unsigned seed) {
  xt::random::seed(seed);
  return {mat(xt::random::randn<T>({f, d}) * 0.4), vec(xt::random::randn<T>({f}) * 0.1),
          mat(xt::random::randn<T>({f, d}) * 0.4), vec(xt::random::randn<T>({d}) * 0.1)};
}

T loss(const Dense& l, const Dense::params& p, const mat& x, const mat& gy) {
  return xt::sum(l.forward(p, x).first * gy)();
}

// The plans as text (what train_mlp prints): each node's collectives in
// order, with the mesh's axis names.
TEST(MlpBlock, PlansReadAsTextWithTheMeshAxisNames) {
  EXPECT_EQ(xshard::graph::collectives_text(forward_plan[0], M::axes), "all-reduce over {model}");
  const auto b = Sharded::backward_plan();
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(xshard::graph::collectives_text(b[0], M::axes), "all-reduce over {model}");
  EXPECT_EQ(xshard::graph::collectives_text(b[1], M::axes), "all-reduce over {data}");
  EXPECT_EQ(xshard::graph::collectives_text(xshard::graph::node_plan{}, M::axes), "");
}

TEST(MlpBlock, VjpMatchesFiniteDifferences) {
  const std::size_t d = 3, f = 5;
  auto p = random_params(d, f, 1);
  const mat x = xt::random::randn<T>(std::array<std::size_t, 2>{4, d});
  const mat gy = xt::random::randn<T>(std::array<std::size_t, 2>{4, d});
  Dense l;
  const auto [y, r] = l.forward(p, x);
  const auto [gp, gx] = l.vjp(p, r, gy);
  const T eps = 1e-6;
  auto check = [&](auto& tensor, const auto& grad, const char* what) {
    for (std::size_t i = 0; i < tensor.size(); ++i) {
      const T keep = tensor.flat(i);
      tensor.flat(i) = keep + eps;
      const T up = loss(l, p, x, gy);
      tensor.flat(i) = keep - eps;
      const T down = loss(l, p, x, gy);
      tensor.flat(i) = keep;
      EXPECT_NEAR(grad.flat(i), (up - down) / (2 * eps), 1e-7) << what << " element " << i;
    }
  };
  check(std::get<0>(p), std::get<0>(gp), "w_in");
  check(std::get<1>(p), std::get<1>(gp), "b_in");
  check(std::get<2>(p), std::get<2>(gp), "w_out");
  check(std::get<3>(p), std::get<3>(gp), "b_out");
  mat xm = x;
  for (std::size_t i = 0; i < xm.size(); ++i) {
    const T keep = xm.flat(i);
    xm.flat(i) = keep + eps;
    const T up = loss(l, p, xm, gy);
    xm.flat(i) = keep - eps;
    const T down = loss(l, p, xm, gy);
    xm.flat(i) = keep;
    EXPECT_NEAR(gx.flat(i), (up - down) / (2 * eps), 1e-7) << "x element " << i;
  }
}

TEST(MlpBlock, StackedGradientsAreIdenticalUnderEveryPolicy) {
  std::vector<Dense::params> ps;
  for (unsigned i = 0; i < 4; ++i) ps.push_back(random_params(4, 8, 10 + i));
  const auto stacked = xshard::stack_params<Dense>(ps);
  const mat x = xt::random::randn<T>({3, 4});
  const mat gy = xt::random::randn<T>({3, 4});
  Dense l;
  const auto [want, want_dx] = xshard::scan_layers_vjp(l, stacked, x, gy, xshard::remat::save_all);
  for (auto policy : {xshard::remat::recompute, xshard::remat::dots_saveable}) {
    auto [y, pullback] = xshard::scan_layers_vjp(l, stacked, x, policy);
    EXPECT_EQ(y, xshard::scan_layers(l, stacked, x));
    const auto [g, dx] = pullback(gy);
    EXPECT_EQ(dx, want_dx);
    EXPECT_EQ(std::get<0>(g), std::get<0>(want));
    EXPECT_EQ(std::get<1>(g), std::get<1>(want));
    EXPECT_EQ(std::get<2>(g), std::get<2>(want));
    EXPECT_EQ(std::get<3>(g), std::get<3>(want));
    EXPECT_THROW(pullback(gy), xshard::error);  // runs once
  }
}

struct failures {
  std::mutex mu;
  std::vector<std::string> list;
  void add(std::string s) {
    std::lock_guard lock(mu);
    list.push_back(std::move(s));
  }
};

template <class S, class D>
void expect_close(const S& s, const D& want, const std::string& what, failures& f) {
  const auto got = xshard::gather(s);
  if (got.shape() != want.shape()) return f.add(what + ": shape differs");
  const T err = xt::amax(xt::abs(got - want))();
  if (err > 1e-12) f.add(what + ": max error " + std::to_string(err));
}

template <class Dev>
Sharded::params distribute_params(Dev& dev, const Dense::params& p) {
  using L = xshard::data_model_mlp<M>;
  return {xshard::distribute<L::w_in>(dev, std::get<0>(p)), xshard::distribute<L::b_in>(dev, std::get<1>(p)),
          xshard::distribute<L::w_out>(dev, std::get<2>(p)), xshard::distribute<L::b_out>(dev, std::get<3>(p))};
}

using Batch = xshard::data_model_mlp<M>::batch;

TEST(MlpBlock, ShardedBlockEqualsTheSingleDeviceBlock) {
  const auto p = random_params(6, 10, 3);
  const mat x = xt::random::randn<T>({5, 6});  // 5 rows over data: uneven blocks of 3 and 2
  const mat gy = xt::random::randn<T>({5, 6});
  Dense dense;
  // (No structured bindings: Clang 14 lambdas cannot capture them.)
  const auto fwd_ref = dense.forward(p, x);
  const mat& y_ref = fwd_ref.first;
  const Dense::residuals& r_ref = fwd_ref.second;
  const auto bwd_ref = dense.vjp(p, r_ref, gy);
  const Dense::params& gp_ref = bwd_ref.first;
  const mat& gx_ref = bwd_ref.second;
  xshard::thread_mesh<M> mesh;
  failures f;
  mesh.run([&](auto& dev) {
    Sharded l;
    const auto ps = distribute_params(dev, p);
    const auto xs = xshard::distribute<Batch>(dev, x);
    const auto gys = xshard::distribute<Batch>(dev, gy);
    dev.reset_counters();
    const auto [y, r] = l.forward(ps, xs);
    if (dev.counters().total_calls() != static_cast<std::int64_t>(Sharded::forward_collectives()))
      f.add("forward: " + std::to_string(dev.counters().total_calls()) + " collectives, the plan says 1");
    dev.reset_counters();
    const auto [gp, gx] = l.vjp(ps, r, gys);
    if (dev.counters().total_calls() != static_cast<std::int64_t>(Sharded::backward_collectives()) ||
        dev.counters().calls_of(collective_kind::all_reduce) != 2)
      f.add("backward: " + std::to_string(dev.counters().total_calls()) + " collectives, the plan says 2 all-reduces");
    expect_close(y, y_ref, "y", f);
    expect_close(gx, gx_ref, "dx", f);
    expect_close(std::get<0>(gp), std::get<0>(gp_ref), "d w_in", f);
    expect_close(std::get<1>(gp), std::get<1>(gp_ref), "d b_in", f);
    expect_close(std::get<2>(gp), std::get<2>(gp_ref), "d w_out", f);
    expect_close(std::get<3>(gp), std::get<3>(gp_ref), "d b_out", f);
  });
  for (const auto& s : f.list) ADD_FAILURE() << s;
}

TEST(MlpBlock, ShardedScanLayersEqualsTheSingleDeviceStack) {
  const std::size_t depth = 3;
  std::vector<Dense::params> ps;
  for (unsigned i = 0; i < depth; ++i) ps.push_back(random_params(4, 6, 20 + i));
  const mat x = xt::random::randn<T>({6, 4});
  const mat gy = xt::random::randn<T>({6, 4});
  Dense dense;
  const auto dense_stack = xshard::stack_params<Dense>(ps);
  const mat y_ref = xshard::scan_layers(dense, dense_stack, x);
  const auto grads_ref = xshard::scan_layers_vjp(dense, dense_stack, x, gy, xshard::remat::save_all);
  const auto& g_ref = grads_ref.first;
  const mat& dx_ref = grads_ref.second;
  xshard::thread_mesh<M> mesh;
  failures f;
  mesh.run([&](auto& dev) {
    Sharded l;
    std::vector<Sharded::params> per_layer;
    for (const auto& p : ps) per_layer.push_back(distribute_params(dev, p));
    const auto stack = xshard::stack_params<Sharded>(per_layer);
    // A stacked weight keeps the layer's sharding behind an unsharded layer dim.
    static_assert(std::is_same_v<std::tuple_element_t<0, xshard::stacked_params<Sharded>>::spec_type,
                                 xshard::spec<"None, model, None">>);
    if (std::get<0>(stack).local().shape()[0] != depth) f.add("the stack's local block lost layers");
    const auto xs = xshard::distribute<Batch>(dev, x);
    const auto gys = xshard::distribute<Batch>(dev, gy);
    dev.reset_counters();
    const auto ys = xshard::scan_layers(l, stack, xs);
    const auto forward_calls = dev.counters().total_calls();
    expect_close(ys, y_ref, "scan_layers", f);
    if (forward_calls != static_cast<std::int64_t>(depth * Sharded::forward_collectives()))
      f.add("scan_layers: " + std::to_string(forward_calls) + " collectives");
    for (auto policy : {xshard::remat::save_all, xshard::remat::recompute, xshard::remat::dots_saveable}) {
      dev.reset_counters();
      auto [y, pullback] = xshard::scan_layers_vjp(l, stack, xs, policy);
      const auto [g, dx] = pullback(gys);
      // Recompute reruns each layer's forward (and its all-reduce) in the
      // backward; dots_saveable reruns only gelu.
      const std::int64_t extra = policy == xshard::remat::recompute ? 1 : 0;
      const auto want = static_cast<std::int64_t>(
          depth * (Sharded::forward_collectives() * (1 + extra) + Sharded::backward_collectives()));
      const std::string name = "policy " + std::to_string(static_cast<int>(policy));
      if (dev.counters().total_calls() != want)
        f.add(name + ": " + std::to_string(dev.counters().total_calls()) + " collectives, want " +
              std::to_string(want));
      expect_close(y, y_ref, name + " y", f);
      expect_close(dx, dx_ref, name + " dx", f);
      expect_close(std::get<0>(g), std::get<0>(g_ref), name + " d w_in", f);
      expect_close(std::get<1>(g), std::get<1>(g_ref), name + " d b_in", f);
      expect_close(std::get<2>(g), std::get<2>(g_ref), name + " d w_out", f);
      expect_close(std::get<3>(g), std::get<3>(g_ref), name + " d b_out", f);
    }
  });
  for (const auto& s : f.list) ADD_FAILURE() << s;
}

TEST(MlpBlock, MismatchedStackedShardedParametersNameTheLayer) {
  xshard::thread_mesh<M> mesh;
  failures f;
  // Drawn before the run: xt::random's engine is one global, not for threads.
  const Dense::params p0 = random_params(4, 6, 1), p1 = random_params(4, 8, 2);
  mesh.run([&](auto& dev) {
    std::vector<Sharded::params> per_layer{distribute_params(dev, p0), distribute_params(dev, p1)};
    try {
      (void)xshard::stack_params<Sharded>(per_layer);
      f.add("no error");
    } catch (const xshard::error& e) {
      if (std::string(e.what()).find("layer 1's parameter \"w_in\"") == std::string::npos)
        f.add(std::string("message: ") + e.what());
    }
  });
  for (const auto& s : f.list) ADD_FAILURE() << s;
}

// ---- the graph-defined layers against the hand-written ones

template <class L, class H, std::size_t R>
void expect_layer_equals_hand_written(unsigned seed) {
  SCOPED_TRACE(::testing::Message() << "rank " << R);
  xt::random::seed(seed);
  std::array<std::size_t, R> shape{};
  shape.fill(3);
  shape[R - 1] = 4;
  const xt::xtensor<T, R> x = xt::random::randn<T>(shape);
  std::array<std::size_t, R> out_shape = shape;
  out_shape[R - 1] = 5;
  const xt::xtensor<T, R> gy = xt::random::randn<T>(out_shape);
  const typename L::params p{mat(xt::random::randn<T>({5, 4})), vec(xt::random::randn<T>({5}))};
  const L l;
  const H h;
  const auto fwd = l.forward(p, x);
  const auto fwd_ref = h.forward(p, x);
  EXPECT_EQ(fwd.first, fwd_ref.first);
  const auto bwd = l.vjp(p, fwd.second, gy);
  const auto bwd_ref = h.vjp(p, fwd_ref.second, gy);
  EXPECT_EQ(bwd.second, bwd_ref.second);
  EXPECT_EQ(std::get<0>(bwd.first), std::get<0>(bwd_ref.first));
  EXPECT_EQ(std::get<1>(bwd.first), std::get<1>(bwd_ref.first));
  // dots_saveable's pair (scan_layers' remat path): the same gradients.
  const auto dots = l.forward_saving_dots(p, x);
  EXPECT_EQ(dots.first, fwd_ref.first);
  const auto bwd_dots = l.vjp(p, l.restore(p, x, dots.second), gy);
  EXPECT_EQ(bwd_dots.second, bwd_ref.second);
  EXPECT_EQ(bwd_dots.first, bwd.first);
}

TEST(NnLayers, LinearLayersEqualTheHandWrittenOnesBitForBit) {
  using hand = xshard_test::hand::linear_layer<T>;
  static_assert(xshard::stackable_layer<xshard::linear_layer<T>> && xshard::stackable_layer<hand>);
  expect_layer_equals_hand_written<xshard::linear_layer<T>, hand, 2>(11);
  expect_layer_equals_hand_written<xshard::linear_layer<T, 3>, xshard_test::hand::linear_layer<T, 3>, 3>(12);
  expect_layer_equals_hand_written<xshard::tanh_linear_layer<T>, xshard_test::hand::tanh_linear_layer<T>, 2>(13);
  expect_layer_equals_hand_written<xshard::tanh_linear_layer<T, 3>, xshard_test::hand::tanh_linear_layer<T, 3>, 3>(14);
}

TEST(NnLayers, MlpBlockEqualsTheHandWrittenOneBitForBit) {
  const auto p = random_params(6, 10, 15);
  xt::random::seed(16);
  const mat x = xt::random::randn<T>({5, 6}), gy = xt::random::randn<T>({5, 6});
  const auto check = [&](const auto& l, const auto& h) {
    const auto fwd = l.forward(p, x);
    const auto fwd_ref = h.forward(p, x);
    EXPECT_EQ(fwd.first, fwd_ref.first);
    const auto bwd = l.vjp(p, fwd.second, gy);
    const auto bwd_ref = h.vjp(p, fwd_ref.second, gy);
    EXPECT_EQ(bwd.second, bwd_ref.second);
    EXPECT_EQ(bwd.first, bwd_ref.first);
  };
  check(Dense{}, xshard_test::hand::mlp_block<T>{});
  xshard_test::hand::mlp_block<T> tanh_ref;
  tanh_ref.approximate = xshard::gelu_approximate::tanh;
  check(xshard::mlp_block<T, xshard::replicated_mlp, xshard::graph::gelu_kind::tanh>{}, tanh_ref);
}

// At a training step's size, each GEMM split over a pool of two threads
// (a weight gradient's rows, an input gradient's columns): the gradients
// equal the hand-written block's bit for bit, on one thread and on two.
TEST(NnLayers, GradientsOnTwoThreadsKeepTheBits) {
  const auto p = random_params(128, 512, 18);
  xt::random::seed(19);
  const mat x = xt::random::randn<T>({64, 128}), gy = xt::random::randn<T>({64, 128});
  const xshard_test::hand::mlp_block<T> hand;
  const auto ref_fwd = hand.forward(p, x);
  const auto ref = hand.vjp(p, ref_fwd.second, gy);
  const std::size_t before = xshard::num_threads();
  for (const std::size_t threads : {1, 2}) {
    xshard::set_num_threads(threads);
    const Dense l;
    const auto fwd = l.forward(p, x);
    const auto bwd = l.vjp(p, fwd.second, gy);
    EXPECT_EQ(bwd.first, ref.first) << threads << " threads";
    EXPECT_EQ(bwd.second, ref.second) << threads << " threads";
  }
  xshard::set_num_threads(before);
}

// dots_saveable through remat (scan_layers' path): a graph layer's dots
// hold its input, so remat keeps no copy of it and restores the residuals
// from the dots alone (moved); a layer whose restore reads the input (the
// hand-written block) keeps it. Gradients equal save_all's bit for bit.
static_assert(xshard::detail::restores_from_dots<Dense>);
static_assert(xshard::detail::saves_dots<xshard_test::hand::mlp_block<T>> &&
              !xshard::detail::restores_from_dots<xshard_test::hand::mlp_block<T>>);

TEST(NnLayers, DotsSaveableRematKeepsTheInputOnlyWhereRestoreReadsIt) {
  const auto p = random_params(6, 10, 17);
  xt::random::seed(18);
  const mat x = xt::random::randn<T>({5, 6}), gy = xt::random::randn<T>({5, 6});
  const auto check = [&](const auto& l, bool keeps_input) {
    auto [y, saved] = xshard::remat_forward(l, p, x, xshard::remat::dots_saveable);
    EXPECT_EQ(saved.input.has_value(), keeps_input);
    EXPECT_TRUE(saved.dots.has_value());
    EXPECT_FALSE(saved.residuals.has_value());
    const auto all = l.forward(p, x);
    EXPECT_EQ(y, all.first);
    const auto bwd = l.vjp(p, xshard::remat_residuals(l, p, std::move(saved)), gy);
    const auto bwd_all = l.vjp(p, all.second, gy);
    EXPECT_EQ(bwd.second, bwd_all.second);
    EXPECT_EQ(bwd.first, bwd_all.first);
  };
  check(Dense{}, false);
  check(xshard_test::hand::mlp_block<T>{}, true);
}

}  // namespace
