// xshard::workspace (core/workspace.hpp): a cache of tensor buffers that a
// training step's temporaries come from and go back to.
//
//  1. The cache itself: a tensor it hands out has the layout xtensor's
//     from_shape gives (strides, backstrides, element order); a buffer given
//     back is handed out again for any shape of that element count and type;
//     it keeps no more buffers of a size than were ever out at once (a size
//     never asked for is freed); scopes nest; without a scope nothing is
//     cached.
//  2. A training step (scan_layers_vjp of train_mlp's block, and of the
//     transformer's decoder block, with the optimizer in the backward; every
//     remat policy, one and two threads):
//     step 3 makes no allocation at all (this program replaces operator new,
//     tests/support/alloc_counter.hpp), and four steps give the same
//     parameters, bit for bit, as without a workspace.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <xshard/core/thread_pool.hpp>
#include <xshard/core/workspace.hpp>
#include <xshard/einsum/einsum.hpp>
#include <xshard/nn/decoder.hpp>
#include <xshard/nn/mlp.hpp>
#include <xshard/ops/gelu.hpp>
#include <xshard/optim/optimizer.hpp>
#include <xshard/scan/scan_layers.hpp>
#include <xshard/spmd/thread_mesh.hpp>
#include <xtensor/xrandom.hpp>

#include "../support/alloc_counter.hpp"  // replaces operator new: counts every allocation

namespace {

namespace stats = xshard_test::alloc_stats;

template <std::size_t N>
void expect_layout_of_from_shape(const std::array<std::size_t, N>& shape) {
  xshard::workspace ws;
  const auto t = ws.tensor<float, N>(shape);
  const auto want = xt::xtensor<float, N>::from_shape(shape);
  EXPECT_EQ(t.shape(), want.shape());
  EXPECT_EQ(t.strides(), want.strides());
  EXPECT_EQ(t.backstrides(), want.backstrides());
  EXPECT_EQ(t.size(), want.size());
}

TEST(Workspace, TensorsHaveTheLayoutOfFromShape) {
  expect_layout_of_from_shape<1>({7});
  expect_layout_of_from_shape<2>({3, 5});
  expect_layout_of_from_shape<2>({1, 5});  // extent 1: stride 0, as xtensor makes it
  expect_layout_of_from_shape<2>({5, 1});
  expect_layout_of_from_shape<3>({2, 3, 4});
  expect_layout_of_from_shape<3>({2, 1, 4});
}

TEST(Workspace, ElementsAreRowMajor) {
  xshard::workspace ws;
  auto t = ws.tensor<double, 3>({2, 3, 4});
  for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = static_cast<double>(i);
  for (std::size_t a = 0; a < 2; ++a)
    for (std::size_t b = 0; b < 3; ++b)
      for (std::size_t c = 0; c < 4; ++c) EXPECT_EQ(t(a, b, c), static_cast<double>(a * 12 + b * 4 + c));
}

TEST(Workspace, AGivenBackBufferIsHandedOutAgainForAnyShapeOfItsSize) {
  xshard::workspace ws;
  auto t = ws.tensor<float, 2>({4, 8});
  const float* const p = t.data();
  ws.recycle(std::move(t));
  EXPECT_EQ(t.size(), 0u);  // left empty
  const std::size_t before = stats::allocations();
  auto u = ws.tensor<float, 3>({2, 2, 8});
  EXPECT_EQ(stats::allocations(), before);
  EXPECT_EQ(u.data(), p);
  const auto s = ws.stats();
  EXPECT_EQ(s.allocations, 1u);
  EXPECT_EQ(s.reuses, 1u);
  EXPECT_EQ(s.allocated_bytes, 32 * sizeof(float));
  EXPECT_EQ(s.recycled, 1u);
  EXPECT_EQ(s.held_bytes, 0u);
  EXPECT_EQ(s.peak_held_bytes, 32 * sizeof(float));
}

// What a step hands its caller (a layer's gradients: a tuple; an optional)
// goes back in one call, outside any scope; other values are left alone.
TEST(Workspace, RecycleTakesTheTensorsATupleOrOptionalHolds) {
  xshard::workspace ws;
  std::tuple<xt::xtensor<float, 2>, xt::xtensor<double, 1>, int> grads{ws.tensor<float, 2>({3, 5}),
                                                                       ws.tensor<double, 1>({7}), 4};
  const float* const p = std::get<0>(grads).data();
  ws.recycle(std::move(grads));
  EXPECT_EQ(ws.stats().recycled, 2u);
  EXPECT_EQ(std::get<2>(grads), 4);
  EXPECT_EQ((ws.tensor<float, 1>({15}).data()), p);
  std::optional<xt::xtensor<float, 2>> o = ws.tensor<float, 2>({2, 2});
  ws.recycle(std::move(o));
  EXPECT_FALSE(o.has_value());
  EXPECT_EQ(ws.stats().recycled, 3u);
  EXPECT_EQ(xshard::workspace::current(), nullptr);  // no scope left open
}

TEST(Workspace, SizesAndTypesHaveTheirOwnBuffers) {
  xshard::workspace ws;
  auto f = ws.tensor<float, 1>({32});
  auto d = ws.tensor<double, 1>({32});
  const float* const fp = f.data();
  const double* const dp = d.data();
  ws.recycle(std::move(f));
  ws.recycle(std::move(d));
  auto f33 = ws.tensor<float, 1>({33});  // another size: a new buffer
  EXPECT_EQ(ws.stats().allocations, 3u);
  auto d2 = ws.tensor<double, 2>({4, 8});
  auto f2 = ws.tensor<float, 2>({8, 4});
  EXPECT_EQ(d2.data(), dp);
  EXPECT_EQ(f2.data(), fp);
  EXPECT_NE(f33.data(), fp);
  EXPECT_EQ(ws.stats().reuses, 2u);
}

TEST(Workspace, KeepsNoMoreBuffersOfASizeThanWereEverOutAtOnce) {
  xshard::workspace ws;
  auto a = ws.tensor<float, 1>({16});
  auto b = ws.tensor<float, 1>({16});  // two out at once
  ws.recycle(std::move(a));
  ws.recycle(std::move(b));
  ws.recycle(xt::xtensor<float, 1>::from_shape({16}));  // a third, made elsewhere: freed
  ws.recycle(xt::xtensor<float, 1>::from_shape({17}));  // a size never asked for: freed
  const auto s = ws.stats();
  EXPECT_EQ(s.recycled, 4u);
  EXPECT_EQ(s.dropped, 2u);
  EXPECT_EQ(s.held_bytes, 2 * 16 * sizeof(float));
  // The same loop again, step after step, holds the same.
  for (int step = 0; step < 5; ++step) {
    auto x = ws.tensor<float, 1>({16});
    auto y = ws.tensor<float, 1>({16});
    ws.recycle(std::move(x));
    ws.recycle(std::move(y));
    ws.recycle(xt::xtensor<float, 1>::from_shape({16}));
  }
  EXPECT_EQ(ws.stats().held_bytes, 2 * 16 * sizeof(float));
  EXPECT_EQ(ws.stats().allocations, 2u);
}

TEST(Workspace, ScopesNestAndRestoreTheOuterOne) {
  EXPECT_EQ(xshard::workspace::current(), nullptr);
  xshard::workspace a, b;
  {
    const xshard::workspace::scope sa(a);
    EXPECT_EQ(xshard::workspace::current(), &a);
    {
      const xshard::workspace::scope sb(b);
      EXPECT_EQ(xshard::workspace::current(), &b);
    }
    EXPECT_EQ(xshard::workspace::current(), &a);
  }
  EXPECT_EQ(xshard::workspace::current(), nullptr);
}

TEST(Workspace, WithoutAScopeResultsAreAllocatedAndNothingIsKept) {
  auto t = xshard::detail::fresh_tensor<float, 2>(std::array<std::size_t, 2>{3, 4});
  t.fill(2.0f);
  xshard::detail::recycle(std::move(t));  // no current workspace: left as it is
  ASSERT_EQ(t.size(), 12u);
  EXPECT_EQ(t(2, 3), 2.0f);
}

TEST(Workspace, ObjectsGivenBackKeepTheirCapacity) {
  xshard::workspace ws;
  auto v = ws.take_object<std::vector<int>>();
  EXPECT_EQ(v.capacity(), 0u);
  v.reserve(100);
  v.push_back(1);
  v.clear();
  ws.give_object(std::move(v));
  const auto w = ws.take_object<std::vector<int>>();
  EXPECT_GE(w.capacity(), 100u);
  EXPECT_EQ(ws.take_object<std::vector<int>>().capacity(), 0u);  // the only one was taken
}

TEST(Workspace, ClearFreesWhatItHolds) {
  xshard::workspace ws;
  ws.recycle(ws.tensor<float, 1>({64}));
  EXPECT_EQ(ws.stats().held_bytes, 64 * sizeof(float));
  ws.clear();
  EXPECT_EQ(ws.stats().held_bytes, 0u);
  (void)ws.tensor<float, 1>({64});
  EXPECT_EQ(ws.stats().allocations, 2u);
}

TEST(Workspace, EinsumAndCompositeResultsComeFromTheCurrentWorkspace) {
  xshard::workspace ws;
  const xshard::workspace::scope use(ws);
  const xt::xtensor<float, 2> a = xt::random::randn<float>({6, 5}), b = xt::random::randn<float>({5, 7});
  auto held = ws.tensor<float, 2>({6, 7});
  const float* const p = held.data();
  ws.recycle(std::move(held));
  const auto c = xshard::einsum<"ij,jk->ik">(a, b);
  EXPECT_EQ(c.data(), p);
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t k = 0; k < 7; ++k) {
      double want = 0;
      for (std::size_t j = 0; j < 5; ++j) want += static_cast<double>(a(i, j)) * b(j, k);
      EXPECT_NEAR(c(i, k), want, 1e-5);
    }
  auto other = ws.tensor<float, 2>({6, 7});  // a second buffer of that size, given back
  const float* const q = other.data();
  ws.recycle(std::move(other));
  const auto g = xshard::gelu(c);
  EXPECT_EQ(g.data(), q);
  for (std::size_t i = 0; i < c.size(); ++i) {
    const double x = c.data()[i];
    EXPECT_NEAR(g.data()[i], 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))), 1e-5 * (1 + std::abs(x)));
  }
}

// ---------------------------------------------------------------------------
// A training step.

using T = float;
using Block = xshard::mlp_block<T>;
using Params = xshard::stacked_params<Block>;
constexpr std::size_t layers = 4, width = 16, hidden = 64, batch = 8;

template <class R>
xt::xtensor<T, R::value> random(const std::array<std::size_t, R::value>& shape, T scale) {
  return xt::xtensor<T, R::value>(xt::random::randn<T>(shape) * scale);
}
using r1 = std::integral_constant<std::size_t, 1>;
using r2 = std::integral_constant<std::size_t, 2>;
using r3 = std::integral_constant<std::size_t, 3>;

xshard::stacked_params<Block> init_params(Block) {
  xt::random::seed(3);
  std::vector<Block::params> ps;
  for (std::size_t l = 0; l < layers; ++l)
    ps.push_back({random<r2>({hidden, width}, 0.25f), random<r1>({hidden}, 0.1f), random<r2>({hidden, width}, 0.1f),
                  random<r1>({width}, 0.1f)});
  return xshard::stack_params<Block>(ps);
}

// The transformer's block (nn/decoder.hpp): rms_norm, attention with a
// causal mask and softmax, the MLP; input (batch, sequence, width).
constexpr std::size_t heads = 2, head_dim = 8, sequence = 6;
using Decoder = xshard::decoder_block<T, head_dim>;

xshard::stacked_params<Decoder> init_params(Decoder) {
  xt::random::seed(4);
  std::vector<Decoder::params> ps;
  auto gain = [] { return xt::xtensor<T, 1>(1.0f + random<r1>({width}, 0.1f)); };
  for (std::size_t l = 0; l < layers; ++l)
    ps.push_back({gain(), random<r3>({heads, head_dim, width}, 0.3f), random<r3>({heads, head_dim, width}, 0.3f),
                  random<r3>({heads, head_dim, width}, 0.3f), random<r3>({heads, head_dim, width}, 0.3f), gain(),
                  random<r2>({hidden, width}, 0.25f), random<r1>({hidden}, 0.1f), random<r2>({width, hidden}, 0.1f),
                  random<r1>({width}, 0.1f)});
  return xshard::stack_params<Decoder>(ps);
}

/// `steps` SGD steps of sum((y - target)^2) / n, the stack's input and
/// target fixed; with a workspace when ws is given. Returns the allocations
/// of each step.
template <class L>
std::vector<std::size_t> train(xshard::stacked_params<L>& params, std::size_t steps, xshard::remat policy,
                               xshard::workspace* ws) {
  using Params = xshard::stacked_params<L>;
  using X = typename L::input;
  constexpr std::size_t R = std::tuple_size_v<typename X::shape_type>;
  std::array<std::size_t, R> shape{};
  if constexpr (R == 2)
    shape = {batch, width};
  else
    shape = {batch, sequence, width};
  xt::random::seed(5);
  const X input = xt::random::randn<T>(shape);
  const X target = xt::random::randn<T>(shape);
  xshard::optimizer<xshard::sgd, Params> opt({.lr = T(0.05)}, params);
  std::optional<xshard::workspace::scope> use;
  if (ws) use.emplace(*ws);
  std::vector<std::size_t> per_step;
  L block;
  const T scale = T(2) / T(input.size());
  for (std::size_t s = 0; s < steps; ++s) {
    const std::size_t before = stats::allocations();
    X x = ws ? ws->tensor<T, R>(shape) : X::from_shape(shape);
    xt::noalias(x) = input;
    auto [y, pullback] = xshard::scan_layers_vjp(block, params, std::move(x), policy);
    X gy = ws ? ws->tensor<T, R>(shape) : X::from_shape(shape);
    xt::noalias(gy) = (y - target) * scale;
    auto dx = pullback(std::move(gy), opt.layer_updates(params));
    if (ws) {
      ws->recycle(std::move(y));
      ws->recycle(std::move(dx));
    }
    per_step.push_back(stats::allocations() - before);
  }
  return per_step;
}

struct step_case {
  xshard::remat policy;
  int threads;
};

template <class L>
void expect_step_three_allocates_nothing(const step_case& c) {
  const xshard::scoped_thread_limit limit(static_cast<std::size_t>(c.threads));  // 2: the pool's, if it has 2
  auto with = init_params(L{}), without = init_params(L{});
  xshard::workspace ws;
  const std::vector<std::size_t> allocs = train<L>(with, 4, c.policy, &ws);
  const std::vector<std::size_t> plain = train<L>(without, 4, c.policy, nullptr);
  EXPECT_EQ(allocs[2], 0u) << "step 3 allocated";
  EXPECT_EQ(allocs[3], 0u) << "step 4 allocated";
  EXPECT_GT(plain[2], 10u);  // the same step without a workspace: its tensors
  const auto s = ws.stats();
  EXPECT_EQ(s.held_bytes, s.allocated_bytes);  // every buffer came back
  EXPECT_EQ(s.dropped, 0u);
  auto same = [](const auto& a, const auto& b, std::string_view name) {
    EXPECT_TRUE(a == b) << "parameter " << name << " differs";
  };
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (same(std::get<I>(with), std::get<I>(without), L::param_names[I]), ...);
  }
  (std::make_index_sequence<std::tuple_size_v<typename L::params>>{});
}

/// The same training with the stacked gradients (pullback(gy) returns them;
/// optimizer::step applies them), given back whole with ws.recycle: what
/// train_transformer's loop does. Returns the workspace's buffers made
/// after each step.
template <class L>
std::vector<std::size_t> train_stacked(xshard::stacked_params<L>& params, std::size_t steps, xshard::workspace& ws) {
  using X = typename L::input;
  xt::random::seed(5);
  const X input = xt::random::randn<T>({batch, width});
  const X target = xt::random::randn<T>({batch, width});
  xshard::optimizer<xshard::sgd, xshard::stacked_params<L>> opt({.lr = T(0.05)}, params);
  const xshard::workspace::scope use(ws);
  std::vector<std::size_t> made;
  const T scale = T(2) / T(input.size());
  for (std::size_t s = 0; s < steps; ++s) {
    auto [y, pullback] = xshard::scan_layers_vjp(L{}, params, input, xshard::remat::dots_saveable);
    auto [grads, dx] = pullback(X((y - target) * scale));
    opt.step(params, grads);
    ws.recycle(std::move(grads));
    ws.recycle(std::move(dx));
    ws.recycle(std::move(y));
    made.push_back(ws.stats().allocations);
  }
  return made;
}

// A graph layer's vjp handed its result's gradient (an rvalue, as
// scan_layers' pullback hands each layer the next one's input gradient)
// starts the backward from that tensor: one buffer fewer from the workspace
// than for a gradient it may only read, and the same gradients, bit for bit.
// scan_layers hands a graph layer views of its stacked parameters (it tells
// by taking &vjp<views>): with an overloaded vjp it would copy every layer's
// parameters, every step.
static_assert(xshard::detail::takes_param_views<Block>);
static_assert(xshard::detail::takes_param_views<Decoder>);

TEST(Workspace, AGraphLayersVjpStartsFromAGradientHandedOver) {
  xt::random::seed(5);
  const Block l;
  const Block::params p{random<r2>({hidden, width}, 0.25f), random<r1>({hidden}, 0.1f),
                        random<r2>({hidden, width}, 0.1f), random<r1>({width}, 0.1f)};
  const Block::input x = random<r2>({batch, width}, 1.0f);
  const auto [y, r] = l.forward(p, x);
  const Block::output gy = random<r2>({batch, width}, 1.0f);
  xshard::workspace ws;
  const xshard::workspace::scope use(ws);
  const auto taken = [&] { return ws.stats().reuses + ws.stats().allocations; };
  const std::size_t t0 = taken();
  const auto read = l.vjp(p, r, gy);
  const std::size_t t1 = taken();
  Block::output handed = gy;
  const std::size_t t2 = taken();
  const auto moved = l.vjp(p, r, std::move(handed));
  const std::size_t t3 = taken();
  EXPECT_EQ((t1 - t0) - (t3 - t2), 1u) << "buffers taken: " << t1 - t0 << " reading gy, " << t3 - t2 << " handed it";
  EXPECT_TRUE(read.first == moved.first);
  EXPECT_TRUE(read.second == moved.second);
}

TEST(Workspace, StackedGradientsComeFromItAndGoBack) {
  auto with = init_params(Block{}), without = init_params(Block{});
  xshard::workspace ws;
  const auto made = train_stacked<Block>(with, 4, ws);
  EXPECT_EQ(made[3], made[1]) << "buffers made after step 2";
  // The same steps without a workspace: the same parameters, bit for bit.
  {
    xshard::optimizer<xshard::sgd, Params> opt({.lr = T(0.05)}, without);
    xt::random::seed(5);
    const Block::input input = xt::random::randn<T>({batch, width});
    const Block::input target = xt::random::randn<T>({batch, width});
    for (int s = 0; s < 4; ++s) {
      auto [y, pullback] = xshard::scan_layers_vjp(Block{}, without, input, xshard::remat::dots_saveable);
      auto [grads, dx] = pullback(Block::input((y - target) * (T(2) / T(input.size()))));
      opt.step(without, grads);
    }
  }
  EXPECT_TRUE(with == without);
}

class WorkspaceTraining : public ::testing::TestWithParam<step_case> {};

TEST_P(WorkspaceTraining, MlpStepThreeAllocatesNothingAndTheParametersAreTheSame) {
  expect_step_three_allocates_nothing<Block>(GetParam());
}
TEST_P(WorkspaceTraining, DecoderStepThreeAllocatesNothingAndTheParametersAreTheSame) {
  expect_step_three_allocates_nothing<Decoder>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(
    Policies, WorkspaceTraining,
    ::testing::Values(step_case{xshard::remat::save_all, 1}, step_case{xshard::remat::dots_saveable, 1},
                      step_case{xshard::remat::recompute, 1}, step_case{xshard::remat::save_all, 2},
                      step_case{xshard::remat::dots_saveable, 2}),
    [](const auto& info) {
      return std::string(xshard::remat_name(info.param.policy)) + "_" + std::to_string(info.param.threads) + "_threads";
    });

// The same step on a 2x2 thread mesh (train_mlp's layout: batch over data,
// the MLP's weights over model), each device with a workspace of its own:
// from step 3 on, no device allocates (its sharded values' blocks, their
// copies and the collectives' buffers included), on a thread per device
// and on fibers of two threads; and the same parameters as without one.
using Mesh = xshard::mesh<"data=2, model=2">;
using MeshLayout = xshard::data_model_mlp<Mesh>;
using MeshBlock = xshard::mlp_block<T, MeshLayout>;

/// Per step (from the process-wide count, so every device's allocations
/// show), and each device's final parameters gathered.
struct mesh_training {
  std::vector<std::size_t> allocations;
  std::vector<float> params;
};

mesh_training train_on_mesh(std::int64_t workers, bool with_workspace) {
  auto dense = init_params(Block{});
  std::vector<Block::params> per_layer;
  for (std::size_t l = 0; l < layers; ++l)
    per_layer.push_back(
        {xt::xtensor<T, 2>(xt::view(std::get<0>(dense), l)), xt::xtensor<T, 1>(xt::view(std::get<1>(dense), l)),
         xt::xtensor<T, 2>(xt::view(std::get<2>(dense), l)), xt::xtensor<T, 1>(xt::view(std::get<3>(dense), l))});
  xt::random::seed(5);
  const xt::xtensor<T, 2> input = xt::random::randn<T>({batch, width});
  const xt::xtensor<T, 2> target = xt::random::randn<T>({batch, width});
  constexpr std::size_t steps = 4;
  mesh_training out;
  out.allocations.assign(steps, 0);
  std::mutex mu;
  xshard::thread_mesh<Mesh> devices(workers);
  devices.run([&](auto& dev) {
    std::vector<MeshBlock::params> blocks;
    for (const auto& p : per_layer)
      blocks.push_back({xshard::distribute<MeshLayout::w_in>(dev, std::get<0>(p)),
                        xshard::distribute<MeshLayout::b_in>(dev, std::get<1>(p)),
                        xshard::distribute<MeshLayout::w_out>(dev, std::get<2>(p)),
                        xshard::distribute<MeshLayout::b_out>(dev, std::get<3>(p))});
    auto params = xshard::stack_params<MeshBlock>(blocks);
    xshard::optimizer<xshard::sgd, xshard::stacked_params<MeshBlock>> opt({.lr = T(0.05)}, params);
    const auto x_in = xshard::distribute<MeshLayout::batch>(dev, input);
    const auto t_in = xshard::distribute<MeshLayout::batch>(dev, target);
    using X = MeshBlock::input;
    xshard::workspace ws;
    std::optional<xshard::workspace::scope> use;
    if (with_workspace) use.emplace(ws);
    const T scale = T(2) / T(batch * width);
    MeshBlock block;
    for (std::size_t s = 0; s < steps; ++s) {
      dev.barrier(dev.axes("data, model"));
      const std::size_t before = stats::allocations();
      dev.barrier(dev.axes("data, model"));
      auto [y, pullback] =
          xshard::scan_layers_vjp(block, params, X(x_in), xshard::remat::dots_saveable);  // a copy: the workspace's
      X gy(y);  // a copy of y's block, overwritten below
      xt::noalias(gy.local()) = (y.local() - t_in.local()) * scale;
      auto dx = pullback(std::move(gy), opt.layer_updates(params));
      xshard::detail::recycle(std::move(y));
      xshard::detail::recycle(std::move(dx));
      dev.barrier(dev.axes("data, model"));
      if (dev.id() == 0) out.allocations[s] = stats::allocations() - before;
      dev.barrier(dev.axes("data, model"));
    }
    const std::lock_guard lock(mu);
    if (dev.id() != 0) return;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (out.params.insert(out.params.end(), std::get<I>(params).local().begin(), std::get<I>(params).local().end()),
       ...);
    }
    (std::make_index_sequence<4>{});
  });
  return out;
}

TEST(Workspace, AMeshStepAllocatesNothingFromStepThree) {
  for (std::int64_t workers : {std::int64_t{4}, std::int64_t{2}}) {
    SCOPED_TRACE("workers " + std::to_string(workers));
    const mesh_training with = train_on_mesh(workers, true);
    const mesh_training without = train_on_mesh(workers, false);
    EXPECT_EQ(with.allocations[2], 0u) << "step 3 allocated";
    EXPECT_EQ(with.allocations[3], 0u) << "step 4 allocated";
    EXPECT_GT(without.allocations[2], 40u);  // the same step without workspaces: its tensors
    EXPECT_EQ(with.params, without.params);  // device 0's blocks, bit for bit
  }
}

}  // namespace
