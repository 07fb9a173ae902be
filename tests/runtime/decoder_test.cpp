// The transformer decoder of nn/decoder.hpp: the block's, the embedding's
// and the head's derived vjps against central finite differences (double,
// small sizes); the tensor- and sequence-parallel layouts equal the same
// layers on one device (forward and backward) on 2x2 and 4x1 thread meshes,
// with collective counters equal to the compile-time plans; a user's fused
// kernel (graph::custom with its sharding rule) inside the decoder layer,
// scanned over a stack on a mesh, equal to one device and traced.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <string_view>
#include <tuple>
#include <vector>
#include <xshard/nn/decoder.hpp>
#include <xshard/scan/scan_layers.hpp>
#include <xshard/spmd/thread_mesh.hpp>
#include <xshard/trace/trace.hpp>
#include <xtensor/xrandom.hpp>

#include "../spmd/decoder_cases.hpp"
#include "../support/graph_helpers.hpp"

namespace {

using namespace xshard_test;
using T = double;

// Sizes: batch, sequence, model width, heads, head dim, MLP hidden, vocab.
constexpr std::size_t B = 4, S = 4, D = 4, H = 2, E = 2, F = 8, V = 8;

using Block = xshard::decoder_block<T, E>;
using Embed = xshard::embedding_layer<T>;
using Head = xshard::head_layer<T>;

static_assert(xshard::stackable_layer<Block>);

/// Random parameters of the block's shapes; the norms' gains near 1.
Block::params block_params() {
  auto gain = [] { return xt::xtensor<T, 1>(1.0 + 0.2 * randn<T, 1>({D})); };
  return {gain(),
          randn<T, 3>({H, E, D}) * 0.7,
          randn<T, 3>({H, E, D}) * 0.7,
          randn<T, 3>({H, E, D}) * 0.7,
          randn<T, 3>({H, E, D}) * 0.7,
          gain(),
          randn<T, 2>({F, D}) * 0.5,
          randn<T, 1>({F}) * 0.1,
          randn<T, 2>({D, F}) * 0.5,
          randn<T, 1>({D}) * 0.1};
}
Head::params head_params() { return {xt::xtensor<T, 1>(1.0 + 0.2 * randn<T, 1>({D})), randn<T, 2>({V, D})}; }

/// f(p, x) = sum(L(p, x) * c): every input entry and parameter entry against
/// the central difference of f.
template <class L>
void expect_matches_finite_differences(typename L::params p, typename L::input x, const typename L::output& c) {
  const auto value = [&] { return xt::sum(L{}.forward(p, x).first * c)(); };
  const auto run = L{}.forward(p, x);
  const auto grads = L{}.vjp(p, run.second, c);
  auto check = [&](auto& arg, const auto& grad, const char* what) {
    SCOPED_TRACE(what);
    const double h = 1e-6;
    double worst = 0;
    for (std::size_t i = 0; i < arg.size(); ++i) {
      const double keep = arg.data()[i];
      arg.data()[i] = keep + h;
      const double up = value();
      arg.data()[i] = keep - h;
      const double down = value();
      arg.data()[i] = keep;
      const double fd = (up - down) / (2 * h);
      worst = std::max(worst, std::abs(fd - grad.data()[i]) / std::max(1.0, std::abs(fd)));
    }
    EXPECT_LT(worst, 1e-6);
  };
  check(x, grads.second, "input");
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (check(std::get<I>(p), std::get<I>(grads.first), L::param_names[I].data()), ...);
  }
  (std::make_index_sequence<std::tuple_size_v<typename L::params>>{});
}

TEST(Decoder, BlockVjpMatchesFiniteDifferences) {
  xt::random::seed(21);
  expect_matches_finite_differences<Block>(block_params(), randn<T, 3>({2, 3, D}), randn<T, 3>({2, 3, D}));
}

TEST(Decoder, EmbeddingAndHeadVjpsMatchFiniteDifferences) {
  xt::random::seed(22);
  expect_matches_finite_differences<Embed>({randn<T, 2>({V, D})}, randn<T, 3>({2, 3, V}), randn<T, 3>({2, 3, D}));
  expect_matches_finite_differences<Head>(head_params(), randn<T, 3>({2, 3, D}), randn<T, 3>({2, 3, V}));
}

// The attention is causal: changing a later position leaves the earlier
// outputs unchanged.
TEST(Decoder, AttentionIsCausal) {
  xt::random::seed(23);
  const auto p = block_params();
  xt::xtensor<T, 3> x = randn<T, 3>({1, S, D});
  const auto y0 = Block{}.forward(p, x).first;
  for (std::size_t d = 0; d < D; ++d) x(0, S - 1, d) += 1.0;
  const auto y1 = Block{}.forward(p, x).first;
  for (std::size_t s = 0; s + 1 < S; ++s)
    for (std::size_t d = 0; d < D; ++d) EXPECT_EQ(y0(0, s, d), y1(0, s, d)) << "position " << s;
  EXPECT_NE(y0(0, S - 1, 0), y1(0, S - 1, 0));
}

/// Every gathered sharded tensor of `got` within 1e-12 of `want`'s.
template <class Got, class Want, std::size_t N>
void expect_each_near(const Got& got, const Want& want, const std::array<std::string_view, N>& names) {
  auto one = [&](auto i) {
    constexpr std::size_t I = decltype(i)::value;
    EXPECT_LT(max_diff(xshard::gather(std::get<I>(got)), std::get<I>(want)), 1e-12) << names[I];
  };
  [&]<std::size_t... I>(std::index_sequence<I...>) { (one(std::integral_constant<std::size_t, I>{}), ...); }
  (std::make_index_sequence<N>{});
}

/// Layer L on Layout (mesh M) against the same layer on one device P: the
/// forward, the input gradient and every parameter gradient, and the
/// counters of both passes against the plans.
template <class M, class L, class P>
void expect_equals_one_device(const typename P::params& p, const typename P::input& x, const typename P::output& gy) {
  const auto one = P{}.forward(p, x);
  const auto one_grads = P{}.vjp(p, one.second, gy);
  using In = typename L::input;
  using Out = typename L::output;
  xshard::thread_mesh<M> mesh;
  mesh.run([&](auto& dev) {
    const typename L::params ps = [&]<std::size_t... I>(std::index_sequence<I...>) {
      return typename L::params{
          xshard::distribute<typename std::tuple_element_t<I, typename L::params>::spec_type>(dev, std::get<I>(p))...};
    }
    (std::make_index_sequence<std::tuple_size_v<typename P::params>>{});
    const auto xs = xshard::distribute<typename In::spec_type>(dev, x);
    dev.reset_counters();
    const auto fwd = L{}.forward(ps, xs);
    EXPECT_EQ(dev.counters().total_calls(), L::forward_collectives());
    dev.reset_counters();
    const auto grads = L{}.vjp(ps, fwd.second, xshard::distribute<typename Out::spec_type>(dev, gy));
    EXPECT_EQ(dev.counters().total_calls(), L::backward_collectives());
    EXPECT_LT(max_diff(xshard::gather(fwd.first), one.first), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(grads.second), one_grads.second), 1e-12);
    expect_each_near(grads.first, one_grads.first, L::param_names);
  });
}

template <class M, template <class> class Layout>
void expect_layout_equals_one_device() {
  using Lay = Layout<M>;
  xt::random::seed(24);
  expect_equals_one_device<M, xshard::decoder_block<T, E, Lay>, Block>(block_params(), randn<T, 3>({B, S, D}),
                                                                       randn<T, 3>({B, S, D}));
  expect_equals_one_device<M, xshard::embedding_layer<T, Lay>, Embed>({randn<T, 2>({V, D})}, randn<T, 3>({B, S, V}),
                                                                      randn<T, 3>({B, S, D}));
  expect_equals_one_device<M, xshard::head_layer<T, Lay>, Head>(head_params(), randn<T, 3>({B, S, D}),
                                                                randn<T, 3>({B, S, V}));
}

using Mesh2x2 = xshard::mesh<"data=2, model=2">;
using Mesh4x1 = xshard::mesh<"data=4, model=1">;

// Megatron: one all-reduce over model after the attention and one after the
// MLP, nothing else in the forward.
using TpBlock = xshard::decoder_block<float, 32, xshard::tensor_parallel_decoder<Mesh2x2>>;
static_assert(TpBlock::forward_collectives() == 2);
// Sequence parallel: an all-gather and a reduce-scatter around each, no
// all-reduce.
using SpBlock = xshard::decoder_block<float, 32, xshard::sequence_parallel_decoder<Mesh2x2>>;
static_assert(SpBlock::forward_collectives() == 4);
static_assert(SpBlock::forward_plan()[0].collectives[0].kind == xshard::collective_kind::all_gather);
static_assert(SpBlock::forward_plan()[1].collectives[0].kind == xshard::collective_kind::reduce_scatter);
// Backward: the model all-reduces of the input gradients, then the data
// all-reduces of the parameter gradients as one all_reduce_many per axis
// set at the end (tensor parallel: 2 + 1, where q, k and v, the three
// readers of the normed input, sum their partial gradients before one
// all-reduce at the norm's constrain, and the MLP's first projection's
// gradient is reduced at its constrain too; sequence parallel: the two
// projections whose gradient is gathered first keep their own reduce over
// data, and the deferred ones form two sets, over {data, model} and over
// {data}); sequence parallel gathers the gradient after each reduce-scatter
// (once per operand) and needs no all-to-all.
static_assert(TpBlock::backward_collectives() == 3 && SpBlock::backward_collectives() == 10);
static_assert(TpBlock::backward_plan()[2].node == xshard::graph::no_node &&
              TpBlock::backward_plan()[2].collectives.size() == 1 &&
              TpBlock::backward_plan()[2].collectives[0].axes == 0b01);
// The two norms' constrains reduce their readers' summed partial
// gradients: an all-reduce over model in tp, where the normed input is
// laid out as the block's input; a reduce-scatter over model in sp, where
// the block's input splits the sequence over model (not an all-reduce and
// a slice).
template <class Block, xshard::collective_kind Kind>
constexpr bool constrains_reduce() {
  std::size_t n = 0;
  for (const auto& node : Block::backward_plan())
    if (node.op == "constrain")
      n += node.collectives.size() == 1 && node.collectives[0].kind == Kind && node.collectives[0].axes == 0b10;
  return n == 2;
}
static_assert(constrains_reduce<TpBlock, xshard::collective_kind::all_reduce>());
static_assert(constrains_reduce<SpBlock, xshard::collective_kind::reduce_scatter>());
static_assert([] {
  for (const auto& node : SpBlock::backward_plan())
    for (const auto& c : node.collectives)
      if (c.kind == xshard::collective_kind::all_to_all) return false;
  return true;
}());
// The vocabulary-parallel embedding: the partial lookups all-reduced; the
// head: the log-softmax's partial max and sum.
static_assert(xshard::embedding_layer<float, xshard::tensor_parallel_decoder<Mesh2x2>>::forward_collectives() == 1);
static_assert(xshard::head_layer<float, xshard::tensor_parallel_decoder<Mesh2x2>>::forward_collectives() == 2);

TEST(Decoder, TensorParallelOn2x2EqualsOneDevice) {
  expect_layout_equals_one_device<Mesh2x2, xshard::tensor_parallel_decoder>();
}
TEST(Decoder, SequenceParallelOn2x2EqualsOneDevice) {
  expect_layout_equals_one_device<Mesh2x2, xshard::sequence_parallel_decoder>();
}
TEST(Decoder, TensorParallelOn4x1EqualsOneDevice) {
  expect_layout_equals_one_device<Mesh4x1, xshard::tensor_parallel_decoder>();
}
TEST(Decoder, SequenceParallelOn4x1EqualsOneDevice) {
  expect_layout_equals_one_device<Mesh4x1, xshard::sequence_parallel_decoder>();
}

// The cases the MPI test program runs too (tests/spmd/decoder_cases.hpp),
// on the thread backend.
TEST(Decoder, SharedCasesOnTheThreadBackend) {
  xshard::thread_mesh<xshard_test::graph_mesh> devices;
  for (const std::string& f : xshard_test::run_decoder_cases(devices)) ADD_FAILURE() << f;
}

// ---- a user's fused kernel inside the scanned decoder layer

/// gelu(h + b) in one pass, "bsf,f->bsf": f is split alike in both
/// operands, so on a mesh it runs on each device's blocks; b's gradient sums
/// over b and s (all-reduced over data by the signature's rule).
struct bias_gelu {
  static constexpr double c = 0.70710678118654752440;  // 1 / sqrt(2)
  template <class H, class Bias>
  static auto forward(const H& h, const Bias& b) {
    xt::xtensor<T, 3> u = h + b;
    for (T& v : u) v = 0.5 * v * (1.0 + std::erf(v * c));
    return u;
  }
  template <std::size_t K, class G, class Y, class H, class Bias>
  static auto vjp(const G& g, const Y&, const H& h, const Bias& b) {
    xt::xtensor<T, 3> u = h + b;
    for (std::size_t i = 0; i < u.size(); ++i) {
      const T v = u.data()[i];
      const T d = 0.5 * (1.0 + std::erf(v * c)) + v * std::exp(-0.5 * v * v) * 0.39894228040143267794;
      u.data()[i] = g.data()[i] * d;
    }
    if constexpr (K == 0)
      return u;
    else
      return xt::xtensor<T, 1>(xt::sum(u, {0, 1}));
  }
};
struct fused_activation {
  template <class Hn, class Bn>
  static constexpr auto apply(Hn h, Bn b) {
    return xshard::graph::custom<"user.bias_gelu", "bsf,f->bsf", bias_gelu>(h, b);
  }
};

TEST(Decoder, UserKernelInsideTheScannedLayerEqualsOneDeviceAndIsTraced) {
  using Fused = xshard::decoder_block<T, E, xshard::replicated_decoder, fused_activation>;
  using FusedTp = xshard::decoder_block<T, E, xshard::tensor_parallel_decoder<Mesh2x2>, fused_activation>;
  xt::random::seed(25);
  // The fused kernel computes the same function as the graph's gelu(h + b).
  const std::vector<Block::params> layers{block_params(), block_params(), block_params()};
  const xt::xtensor<T, 3> x = randn<T, 3>({B, S, D}), gy = randn<T, 3>({B, S, D});
  const auto stack = xshard::stack_params<Block>(layers);
  const auto ref = xshard::scan_layers(Block{}, stack, x);
  const auto fused_stack = xshard::stack_params<Fused>(layers);
  // (No structured bindings: Clang 14 cannot capture them.)
  auto run1 = xshard::scan_layers_vjp(Fused{}, fused_stack, x, xshard::remat::recompute);
  const auto& y1 = run1.first;
  EXPECT_LT(max_diff(y1, ref), 1e-12);
  const auto grads1 = run1.second(gy);

  auto& tracer = xshard::tracer::instance();
  tracer.stop();
  tracer.clear();
  xshard::thread_mesh<Mesh2x2> mesh;
  std::atomic<std::int64_t> collectives{0};
  tracer.start();
  mesh.run([&](auto& dev) {
    std::vector<FusedTp::params> per_layer;
    for (const auto& p : layers)
      per_layer.push_back([&]<std::size_t... I>(std::index_sequence<I...>) {
        return FusedTp::params{
            xshard::distribute<typename std::tuple_element_t<I, FusedTp::params>::spec_type>(dev, std::get<I>(p))...};
      }(std::make_index_sequence<10>{}));
    const auto params = xshard::stack_params<FusedTp>(per_layer);
    dev.reset_counters();
    auto [y, pull] = xshard::scan_layers_vjp(FusedTp{}, params, xshard::distribute<FusedTp::input::spec_type>(dev, x),
                                             xshard::remat::recompute);
    const auto grads = pull(xshard::distribute<FusedTp::input::spec_type>(dev, gy));
    EXPECT_LT(max_diff(xshard::gather(y), y1), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(grads.second), grads1.second), 1e-12);
    expect_each_near(grads.first, grads1.first, FusedTp::param_names);
    collectives += dev.counters().total_calls();  // the gathers' too
  });
  tracer.stop();
  // On each of the 4 devices, for each of the 3 layers: the kernel's
  // forward in the forward and again in the backward's recompute, and its
  // vjp for both operands; the attention scope in both passes.
  std::size_t forward = 0, backward = 0, attention = 0;
  std::int64_t traced_collectives = 0;
  for (const auto& e : tracer.events()) {
    if (e.name == "all-reduce" || e.name == "all-gather" || e.name == "reduce-scatter") ++traced_collectives;
    if (e.name == "user.bias_gelu") (e.args.empty() ? forward : backward) += 1;
    if (e.name == "attention") ++attention;
  }
  EXPECT_EQ(forward, 4 * 2 * layers.size());
  EXPECT_EQ(backward, 4 * 2 * layers.size());
  EXPECT_GE(attention, 4 * 2 * layers.size());
  // Every collective of every device is a trace event (kind, bytes, group).
  EXPECT_GT(traced_collectives, 0);
  EXPECT_EQ(traced_collectives, collectives.load());
  tracer.clear();
}

}  // namespace
