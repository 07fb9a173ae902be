// Layers written once (graph/): evaluation, the derived vjp against central
// finite differences in double and against the hand-written mlp_block,
// remat policies (what each keeps, identical gradients), scan_layers over a
// graph layer, layer_norm, the causal mask, user kernels (also on a mesh),
// errors naming the node, trace scopes. Sharded graphs: graph_sharded_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>
#include <tuple>
#include <xshard/graph/graph.hpp>
#include <xshard/nn/mlp.hpp>
#include <xshard/scan/scan_layers.hpp>
#include <xshard/spmd/thread_mesh.hpp>
#include <xtensor/xrandom.hpp>

#include "../support/expect_error.hpp"
#include "../support/graph_helpers.hpp"
#include "../support/hand_layers.hpp"

namespace {

using namespace xshard_test;

static_assert(xshard::layer<graph_mlp<float>>);
static_assert(xshard::stackable_layer<graph_mlp<double>>);

TEST(Graph, MlpEqualsTheHandWrittenBlockBitForBit) {
  xt::random::seed(3);
  using T = double;
  const auto p = mlp_params<T>(4, 6);
  const xt::xtensor<T, 2> x = randn<T, 2>({5, 4}), gy = randn<T, 2>({5, 4});
  graph_mlp<T> l;
  xshard_test::hand::mlp_block<T> ref;
  auto [y, r] = l.forward(p, x);
  auto [y_ref, r_ref] = ref.forward(p, x);
  EXPECT_EQ(y, y_ref);
  auto [gp, gx] = l.vjp(p, r, gy);
  auto [gp_ref, gx_ref] = ref.vjp(p, r_ref, gy);
  EXPECT_EQ(gx, gx_ref);
  EXPECT_EQ(std::get<0>(gp), std::get<0>(gp_ref));
  EXPECT_EQ(std::get<1>(gp), std::get<1>(gp_ref));
  EXPECT_EQ(std::get<2>(gp), std::get<2>(gp_ref));
  EXPECT_EQ(std::get<3>(gp), std::get<3>(gp_ref));
}

// What each policy keeps of the MLP (x [5,4], h and gelu(h) [5,6], the
// first einsum's output [5,6]; doubles), and that the gradients agree.
TEST(Graph, RematPoliciesKeepWhatTheyNameAndGiveIdenticalGradients) {
  xt::random::seed(4);
  using T = double;
  using L = graph_mlp<T>;
  const auto p = mlp_params<T>(4, 6);
  const xt::xtensor<T, 2> x = randn<T, 2>({5, 4}), gy = randn<T, 2>({5, 4});
  const std::size_t x_bytes = 5 * 4 * sizeof(T), h_bytes = 5 * 6 * sizeof(T);
  struct row {
    const char* policy;
    std::pair<L::output, L::residuals> run;
    std::size_t kept, bytes;
  };
  const row rows[] = {
      // x, h (gelu's operand) and gelu(h) (the second einsum's operand)
      {"save_all", L::forward_with<g::policy::save_all>(p, x), 3, x_bytes + 2 * h_bytes},
      // x only: the backward reruns the forward
      {"recompute", L::forward_with<g::policy::recompute>(p, x), 1, x_bytes},
      // x and x W1^T + b1, one einsum node with its bias (gelu(h) is recomputed from it)
      {"dots_saveable", L::forward_with<g::policy::dots_saveable>(p, x), 2, x_bytes + h_bytes},
      // x and the node named "h"
      {"save_only<h>", L::forward_with<g::policy::save_only<"h">>(p, x), 2, x_bytes + h_bytes},
      {"save_only<other>", L::forward_with<g::policy::save_only<"other">>(p, x), 1, x_bytes},
  };
  const auto want = L{}.vjp(p, rows[0].run.second, gy);
  for (const row& r : rows) {
    SCOPED_TRACE(r.policy);
    EXPECT_EQ(r.run.first, rows[0].run.first);
    EXPECT_EQ(r.run.second.count(), r.kept);
    EXPECT_EQ(r.run.second.bytes(), r.bytes);
    const auto got = L{}.vjp(p, r.run.second, gy);
    EXPECT_EQ(got.second, want.second);
    EXPECT_EQ(got.first, want.first);
  }
  // The compile-time sets behind them.
  using P = L::program_type;
  static_assert(std::ranges::count(g::kept_nodes<g::policy::save_all>(P::g), true) == 3);
  static_assert(std::ranges::count(g::kept_nodes<g::policy::recompute>(P::g), true) == 1);
}

// ---- einsum + bias: one node on one device

// A layer whose forward is F (input [5,4], parameters w [6,4], b [6], m [5,6]).
template <class F>
struct bias_def {
  using input = xt::xtensor<double, 2>;
  using params = std::tuple<xt::xtensor<double, 2>, xt::xtensor<double, 1>, xt::xtensor<double, 2>>;
  static constexpr std::array<std::string_view, 3> param_names{"w", "b", "m"};
  template <class X, class W, class B, class M>
  static auto forward(X x, W w, B b, M m) {
    return F{}(x, w, b, m);
  }
};
// The forwards of the fusion tests (x, w, b, m as above).
struct bias_plain {
  auto operator()(auto x, auto w, auto b, auto) const { return g::einsum<"...n,mn->...m">(x, w) + b; }
};
struct bias_left {
  auto operator()(auto x, auto w, auto b, auto) const { return b + g::einsum<"...n,mn->...m">(x, w); }
};
struct bias_read_twice {
  auto operator()(auto x, auto w, auto b, auto) const {
    auto u = g::einsum<"...n,mn->...m">(x, w);
    return (u + b) * u;
  }
};
struct bias_named {
  auto operator()(auto x, auto w, auto b, auto) const { return g::save<"u">(g::einsum<"...n,mn->...m">(x, w)) + b; }
};
struct bias_matrix {
  auto operator()(auto x, auto w, auto, auto m) const { return g::einsum<"...n,mn->...m">(x, w) + m; }
};

/// How many nodes of L's evaluated graph are an einsum with its bias.
template <class L>
constexpr std::size_t fused_nodes() {
  return static_cast<std::size_t>(
      std::ranges::count_if(L::program_type::g, [](const g::node_info& n) { return n.text.ends_with(" + bias"); }));
}

// The MLP's two linear layers each become one node (the bias added in the
// GEMM's epilogue): two nodes fewer, and the same bits as the graph as
// written, where the einsum and the + are separate passes.
TEST(Graph, EinsumPlusBiasIsOneNodeOnOneDevice) {
  using L = graph_mlp<double>;
  using written = g::program<L::written_type, g::detail::decl_t<mlp_def<double>>>;
  static_assert(fused_nodes<L>() == 2);
  static_assert(written::size == L::program_type::size + 2);
  xt::random::seed(12);
  const auto p = mlp_params<double>(4, 6);
  const xt::xtensor<double, 2> x = randn<double, 2>({5, 4});
  const auto fused = L::program_type::evaluate(x, std::get<0>(p), std::get<1>(p), std::get<2>(p), std::get<3>(p));
  const auto apart = written::evaluate(x, std::get<0>(p), std::get<1>(p), std::get<2>(p), std::get<3>(p));
  EXPECT_EQ(fused, apart);
  // A bias on the left fuses too.
  static_assert(fused_nodes<g::layer<bias_def<bias_left>>>() == 1);
}

// Where fusing would change what is computed or kept, the graph stays as
// written: the einsum's value read elsewhere, named for a remat policy, or
// added to something that is not a rank-1 bias; and numpy's broadcast of a
// length-1 bias still works through the fused node.
TEST(Graph, EinsumPlusBiasStaysApartWhereItMust) {
  static_assert(fused_nodes<g::layer<bias_def<bias_read_twice>>>() == 0);
  static_assert(fused_nodes<g::layer<bias_def<bias_named>>>() == 0);
  static_assert(fused_nodes<g::layer<bias_def<bias_matrix>>>() == 0);
  using L = g::layer<bias_def<bias_plain>>;
  static_assert(fused_nodes<L>() == 1);
  xt::random::seed(13);
  const xt::xtensor<double, 2> x = randn<double, 2>({5, 4}), w = randn<double, 2>({6, 4}), m = randn<double, 2>({5, 6});
  const xt::xtensor<double, 1> one = randn<double, 1>({1});
  const xt::xtensor<double, 2> gy = randn<double, 2>({5, 6});
  auto [y, r] = L{}.forward(L::params{w, one, m}, x);
  const xt::xtensor<double, 2> want = xshard::einsum<"...n,mn->...m">(x, w) + one(0);
  EXPECT_EQ(y, want);
  auto [gp, gx] = L{}.vjp(L::params{w, one, m}, r, gy);
  EXPECT_NEAR(std::get<1>(gp)(0), xt::sum(gy)(), 1e-12);
  EXPECT_LT(max_diff(gx, xt::xtensor<double, 2>(xshard::einsum<"...m,mn->...n">(gy, w))), 1e-12);
}

// ---- every op against central finite differences (double)

struct every_op_def {
  using T = double;
  using input = xt::xtensor<T, 3>;  // [b, s, d]
  using params = std::tuple<xt::xtensor<T, 2>, xt::xtensor<T, 1>, xt::xtensor<T, 2>, xt::xtensor<T, 3>>;
  static constexpr std::array<std::string_view, 4> param_names{"w", "bias", "v", "gate"};
  template <class X, class W, class B, class V, class G>
  static auto forward(X x, W w, B b, V v, G gate) {
    auto h = g::save<"h">(g::einsum<"bsd,ed->bse">(x, w) + b);              // einsum, bias broadcast
    auto s = g::softmax<-1>(g::scale<1, 2>(h));                             // scale, softmax
    auto a = g::gelu<g::gelu_kind::tanh>(h) * s - g::gelu(h) + g::tanh(h)   // * - + of one shape, tanh
             + g::scale<1, 4>(g::log_softmax<-1>(h));                       // log_softmax
    auto m = a * gate;                                                      // gate [1, s, e]: size-1 broadcast
    return g::constrain<void>(x + g::einsum<"bse,de->bsd">(m, v) - x * x);  // x used three times
  }
};
using every_op = g::layer<every_op_def>;

/// f(params, x) = sum(y * c) for a fixed c, and its gradient by the graph.
struct objective {
  every_op::params p;
  xt::xtensor<double, 3> x, c;
  double value() const {
    return xt::sum(every_op::program_type::evaluate(x, std::get<0>(p), std::get<1>(p), std::get<2>(p), std::get<3>(p)) *
                   c)();
  }
};

template <class E>
void expect_matches_finite_differences(objective& f, E& param, const E& grad, const char* what) {
  SCOPED_TRACE(what);
  const double h = 1e-6;
  double worst = 0;
  for (std::size_t i = 0; i < param.size(); ++i) {
    const double keep = param.data()[i];
    param.data()[i] = keep + h;
    const double up = f.value();
    param.data()[i] = keep - h;
    const double down = f.value();
    param.data()[i] = keep;
    const double fd = (up - down) / (2 * h);
    const double g = grad.data()[i];
    worst = std::max(worst, std::abs(fd - g) / std::max(1.0, std::abs(fd)));
  }
  EXPECT_LT(worst, 1e-6);
}

TEST(Graph, EveryOpsVjpMatchesFiniteDifferences) {
  xt::random::seed(5);
  objective f;
  f.p = {randn<double, 2>({3, 4}), randn<double, 1>({3}), randn<double, 2>({4, 3}), randn<double, 3>({1, 2, 3})};
  f.x = randn<double, 3>({2, 2, 4}) * 0.5;
  f.c = randn<double, 3>({2, 2, 4});
  every_op l;
  auto [y, r] = l.forward(f.p, f.x);
  auto [gp, gx] = l.vjp(f.p, r, f.c);
  expect_matches_finite_differences(f, f.x, gx, "x");
  expect_matches_finite_differences(f, std::get<0>(f.p), std::get<0>(gp), "w");
  expect_matches_finite_differences(f, std::get<1>(f.p), std::get<1>(gp), "bias");
  expect_matches_finite_differences(f, std::get<2>(f.p), std::get<2>(gp), "v");
  expect_matches_finite_differences(f, std::get<3>(f.p), std::get<3>(gp), "gate");
  // Same gradients under every policy.
  for (const auto& rr : {every_op::forward_with<g::policy::recompute>(f.p, f.x).second,
                         every_op::forward_with<g::policy::dots_saveable>(f.p, f.x).second,
                         every_op::forward_with<g::policy::save_only<"h">>(f.p, f.x).second}) {
    const auto [gp2, gx2] = l.vjp(f.p, rr, f.c);
    EXPECT_EQ(gx2, gx);
    EXPECT_EQ(gp2, gp);
  }
}

// A value broadcast from size-1 and missing leading dims, summed back.
TEST(Graph, BroadcastGradientSumsTheBroadcastDims) {
  const xt::xtensor<double, 3> gy = xt::reshape_view(xt::arange<double>(24), {2, 3, 4});
  g::shape_rec s;
  s.rank = 2;
  s.extents[0] = 1;
  s.extents[1] = 4;
  // [1, 4] broadcast to [2, 3, 4]: summed over dims 0 and 1.
  const xt::xtensor<double, 2> got = g::detail::sum_to<2>(gy, s);
  const xt::xtensor<double, 2> want = {{60, 66, 72, 78}};
  EXPECT_EQ(got, want);
  s.extents[0] = 3;
  s.extents[1] = 1;
  // [3, 1]: summed over dims 0 and 2.
  const xt::xtensor<double, 2> want2 = {{6 + 54}, {22 + 70}, {38 + 86}};
  EXPECT_EQ(g::detail::sum_to<2>(gy, s), want2);
}

// The bias add (rows split over the pool) and its gradient (column ranges
// over the pool), on shapes above the split grain: equal to the hand-written
// block bit for bit at 1, 2 and 3 threads, and the bias gradient equal to a
// naive column sum.
TEST(Graph, BiasAndItsGradientAreTheSameForOneTwoAndThreeThreads) {
  xt::random::seed(11);
  using T = float;
  const auto p = mlp_params<T>(40, 517);  // hidden 517: rows of a width off the SIMD width
  const xt::xtensor<T, 2> x = randn<T, 2>({300, 40}), gy = randn<T, 2>({300, 40});
  graph_mlp<T> l;
  xshard_test::hand::mlp_block<T> ref;
  const std::size_t before = xshard::num_threads();
  for (std::size_t threads : {1, 2, 3}) {
    xshard::set_num_threads(threads);
    auto [y, r] = l.forward(p, x);
    auto [y_ref, r_ref] = ref.forward(p, x);
    EXPECT_EQ(y, y_ref) << threads << " threads";
    auto [gp, gx] = l.vjp(p, r, gy);
    auto [gp_ref, gx_ref] = ref.vjp(p, r_ref, gy);
    EXPECT_EQ(gx, gx_ref) << threads << " threads";
    EXPECT_EQ(std::get<1>(gp), std::get<1>(gp_ref)) << threads << " threads";
    EXPECT_EQ(std::get<3>(gp), std::get<3>(gp_ref)) << threads << " threads";
    // db2 = gy summed over rows, in row order.
    xt::xtensor<T, 1> want = xt::zeros<T>({std::size_t{40}});
    for (std::size_t i = 0; i < 300; ++i)
      for (std::size_t j = 0; j < 40; ++j) want(j) += gy(i, j);
    EXPECT_EQ(std::get<3>(gp), want) << threads << " threads";
  }
  xshard::set_num_threads(before);
}

// ---- scan_layers over a graph layer equals scan_layers over mlp_block

TEST(Graph, ScanLayersOverAGraphLayerEqualsTheHandWrittenStack) {
  xt::random::seed(6);
  using T = double;
  std::vector<graph_mlp<T>::params> layers;
  for (int i = 0; i < 3; ++i) layers.push_back(mlp_params<T>(4, 6));
  const xt::xtensor<T, 2> x = randn<T, 2>({5, 4}), gy = randn<T, 2>({5, 4});
  auto stacked = xshard::stack_params<graph_mlp<T>>(layers);
  auto stacked_ref = xshard::stack_params<xshard_test::hand::mlp_block<T>>(layers);
  // The layers outlive the pullbacks (which keep a pointer to them).
  const graph_mlp<T> layer;
  const xshard_test::hand::mlp_block<T> layer_ref;
  for (const xshard::remat policy : {xshard::remat::save_all, xshard::remat::recompute, xshard::remat::dots_saveable}) {
    auto [y, pullback] = xshard::scan_layers_vjp(layer, stacked, x, policy);
    auto [y_ref, pullback_ref] = xshard::scan_layers_vjp(layer_ref, stacked_ref, x, policy);
    EXPECT_EQ(y, y_ref);
    const auto [gp, gx] = pullback(gy);
    const auto [gp_ref, gx_ref] = pullback_ref(gy);
    EXPECT_EQ(gx, gx_ref);
    EXPECT_EQ(gp, gp_ref);
  }
}

/// y = x * w along the last dim ("bd,d->bd"), counting its input-gradient
/// vjps (K = 0).
struct counted_scale {
  static inline int input_vjps = 0;
  template <class X, class W>
  static auto forward(const X& x, const W& w) {
    return x * w;
  }
  template <std::size_t K, class G, class Y, class X, class W>
  static auto vjp(const G& g, const Y&, const X& x, const W& w) {
    if constexpr (K == 0) {
      ++input_vjps;
      return xt::xtensor<typename X::value_type, 2>(g * w);
    } else {
      return xt::xtensor<typename X::value_type, 1>(xt::sum(g * x, {0}));
    }
  }
};

/// x -> layer_norm(x) * gain -> the MLP's body, plus x: the layer_norm node
/// depends on the input alone, so a backward without the input gradient
/// makes neither its cotangent nor counted_scale's input vjp.
struct scaled_mlp_def {
  using T = double;
  using input = xt::xtensor<T, 2>;
  using params = std::tuple<xt::xtensor<T, 1>, xt::xtensor<T, 2>, xt::xtensor<T, 2>>;
  static constexpr std::array<std::string_view, 3> param_names{"gain", "w1", "w2"};
  template <class X, class Gain, class W1, class W2>
  static auto forward(X x, Gain gain, W1 w1, W2 w2) {
    auto n = g::custom<"counted_scale", "bd,d->bd", counted_scale>(g::layer_norm(x), gain);
    return x + g::einsum<"bf,df->bd">(g::gelu(g::einsum<"bd,fd->bf">(n, w1)), w2);
  }
};

// vjp_params: the parameters' gradients of vjp, bit for bit, under each
// policy's residuals, without the input's gradient or the products that only
// feed it (counted_scale's input vjp is not called).
TEST(Graph, VjpParamsEqualsVjpsParameterGradientsAndSkipsTheInputs) {
  xt::random::seed(9);
  {
    using L = graph_mlp<double>;
    const auto p = mlp_params<double>(4, 6);
    const xt::xtensor<double, 2> x = randn<double, 2>({5, 4}), gy = randn<double, 2>({5, 4});
    const L l;
    auto [y, r] = l.forward(p, x);
    const auto [want, gx] = l.vjp(p, r, gy);
    EXPECT_EQ(l.vjp_params(p, r, gy), want);
    auto [y2, d] = l.forward_saving_dots(p, x);
    EXPECT_EQ(l.vjp_params(p, l.restore(p, x, d), gy), want);
  }
  using L = g::layer<scaled_mlp_def>;
  const L::params p{randn<double, 1>({4}), randn<double, 2>({6, 4}), randn<double, 2>({4, 6})};
  const xt::xtensor<double, 2> x = randn<double, 2>({5, 4}), gy = randn<double, 2>({5, 4});
  const L l;
  auto [y, r] = l.forward(p, x);
  counted_scale::input_vjps = 0;
  const auto [want, gx] = l.vjp(p, r, gy);
  EXPECT_EQ(counted_scale::input_vjps, 1);
  const auto got = l.vjp_params(p, r, gy);
  EXPECT_EQ(counted_scale::input_vjps, 1) << "vjp_params made the input's gradient";
  EXPECT_EQ(got, want);
}

// scan_layers' params_only hands over the same gradients as the pullback
// with the input gradient, for a graph layer (vjp_params on layer 0) and a
// hand-written one (its vjp, the input gradient dropped).
TEST(Graph, ScanLayersParamsOnlyHandsOverTheSameGradients) {
  xt::random::seed(10);
  using T = double;
  std::vector<graph_mlp<T>::params> layers;
  for (int i = 0; i < 3; ++i) layers.push_back(mlp_params<T>(4, 6));
  const xt::xtensor<T, 2> x = randn<T, 2>({5, 4}), gy = randn<T, 2>({5, 4});
  auto run = [&](const auto& layer, bool params_only) {
    using L = std::remove_cvref_t<decltype(layer)>;
    auto stacked = xshard::stack_params<L>(layers);
    std::vector<std::pair<std::size_t, typename L::params>> got;
    auto take = [&](std::size_t i, const typename L::params& gp) { got.emplace_back(i, gp); };
    auto vjp = xshard::scan_layers_vjp(layer, stacked, x, xshard::remat::dots_saveable);
    if (params_only)
      vjp.second.params_only(gy, take);
    else
      (void)vjp.second(gy, take);
    return got;
  };
  const graph_mlp<T> graph_layer;
  const xshard_test::hand::mlp_block<T> hand_layer;
  const auto want = run(graph_layer, false);
  ASSERT_EQ(want.size(), 3u);
  EXPECT_EQ(want.back().first, 0u);
  EXPECT_EQ(run(graph_layer, true), want);
  EXPECT_EQ(run(hand_layer, true), run(hand_layer, false));
}

}  // namespace

namespace {

// ---- layer_norm, causal mask and a user kernel

/// y = x * w along the last dim: "bsd,d->bsd".
struct scale_last_dim {
  template <class X, class W>
  static auto forward(const X& x, const W& w) {
    return x * w;
  }
  template <std::size_t K, class G, class Y, class X, class W>
  static auto vjp(const G& g, const Y&, const X& x, const W& w) {
    if constexpr (K == 0)
      return xt::xtensor<typename X::value_type, 3>(g * w);
    else
      return xt::xtensor<typename X::value_type, 1>(xt::sum(g * x, {0, 1}));
  }
};

struct attention_like_def {
  using T = double;
  using input = xt::xtensor<T, 3>;  // [b, s, d]
  using params = std::tuple<xt::xtensor<T, 1>, xt::xtensor<T, 2>>;
  static constexpr std::array<std::string_view, 2> param_names{"gain", "w"};
  template <class X, class Gain, class W>
  static auto forward(X x, Gain gain, W w) {
    auto n = g::custom<"scale_last_dim", "bsd,d->bsd", scale_last_dim>(g::layer_norm(x), gain);
    auto scores = g::causal_mask<-2, -1>(g::einsum<"bsd,btd->bst">(n, n));  // [b, s, s]
    auto p = g::softmax<-1>(scores);
    return g::einsum<"bst,btd->bsd">(p, g::einsum<"bsd,ed->bse">(n, w));
  }
};
using attention_like = g::layer<attention_like_def>;

TEST(Graph, LayerNormCausalMaskAndAUserKernelMatchFiniteDifferences) {
  xt::random::seed(8);
  attention_like::params p{randn<double, 1>({4}), randn<double, 2>({4, 4})};
  xt::xtensor<double, 3> x = randn<double, 3>({2, 3, 4});
  const xt::xtensor<double, 3> c = randn<double, 3>({2, 3, 4});
  attention_like l;
  auto [y, r] = l.forward(p, x);
  // The mask: query 0 sees key 0 only, so y[:, 0] is V's row 0.
  const auto v = xshard::einsum<"bsd,ed->bse">(xt::xtensor<double, 3>(xshard::layer_norm(x).output * std::get<0>(p)),
                                               std::get<1>(p));
  EXPECT_LT(max_diff(xt::view(y, xt::all(), 0, xt::all()), xt::view(v, xt::all(), 0, xt::all())), 1e-12);
  auto [gp, gx] = l.vjp(p, r, c);
  auto value = [&] { return xt::sum(attention_like::program_type::evaluate(x, std::get<0>(p), std::get<1>(p)) * c)(); };
  auto check = [&](auto& t, const auto& grad, const char* what) {
    SCOPED_TRACE(what);
    double worst = 0;
    for (std::size_t i = 0; i < t.size(); ++i) {
      const double keep = t.data()[i], h = 1e-6;
      t.data()[i] = keep + h;
      const double up = value();
      t.data()[i] = keep - h;
      const double down = value();
      t.data()[i] = keep;
      const double fd = (up - down) / (2 * h);
      worst = std::max(worst, std::abs(fd - grad.data()[i]) / std::max(1.0, std::abs(fd)));
    }
    EXPECT_LT(worst, 1e-6);
  };
  check(x, gx, "x");
  check(std::get<0>(p), std::get<0>(gp), "gain");
  check(std::get<1>(p), std::get<1>(gp), "w");
}

// The causal mask's fill, for every placement of the query and key dims,
// against a naive loop over multi-indices.
TEST(Graph, CausalMaskFillsExactlyTheEntriesAboveTheDiagonal) {
  const std::vector<std::size_t> shape{2, 3, 4, 5};
  std::size_t size = 1;
  for (const std::size_t e : shape) size *= e;
  for (std::size_t qd = 0; qd < 4; ++qd)
    for (std::size_t kd = 0; kd < 4; ++kd) {
      if (qd == kd) continue;
      std::vector<double> got(size, 1.0);
      g::detail::fill_above_diagonal(shape, qd, kd, got.data(), -7.0);
      std::size_t i = 0, wrong = 0;
      for (std::size_t a = 0; a < 2; ++a)
        for (std::size_t b = 0; b < 3; ++b)
          for (std::size_t c = 0; c < 4; ++c)
            for (std::size_t d = 0; d < 5; ++d, ++i) {
              const std::array<std::size_t, 4> idx{a, b, c, d};
              wrong += got[i] != (idx[kd] > idx[qd] ? -7.0 : 1.0);
            }
      EXPECT_EQ(wrong, 0u) << "q dim " << qd << ", k dim " << kd;
    }
  // The copying form (the mask's forward: one pass from the scores), on a
  // block of many rows split over the pool: every entry the source's or the
  // fill, by the same rule.
  const std::array<std::size_t, 4> big{2, 3, 64, 96};
  std::vector<float> src(2 * 3 * 64 * 96);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i % 1009) + 0.5f;
  for (const auto& [qd, kd] : {std::pair<std::size_t, std::size_t>{2, 3}, {3, 2}, {1, 2}}) {
    std::vector<float> dst(src.size(), 3.0f);
    g::detail::mask_above_diagonal(big, qd, kd, src.data(), dst.data(), -1.0f);
    std::size_t i = 0, wrong = 0;
    for (std::size_t a = 0; a < big[0]; ++a)
      for (std::size_t b = 0; b < big[1]; ++b)
        for (std::size_t c = 0; c < big[2]; ++c)
          for (std::size_t d = 0; d < big[3]; ++d, ++i) {
            const std::array<std::size_t, 4> idx{a, b, c, d};
            wrong += dst[i] != (idx[kd] > idx[qd] ? -1.0f : src[i]);
          }
    EXPECT_EQ(wrong, 0u) << "copying form, q dim " << qd << ", k dim " << kd;
  }
}

struct custom_plain_def {
  using input = xt::xtensor<double, 3>;
  using params = std::tuple<xt::xtensor<double, 1>>;
  static constexpr std::array<std::string_view, 1> param_names{"gain"};
  template <class X, class Gain>
  static auto forward(X x, Gain gain) {
    return g::custom<"scale_last_dim", "bsd,d->bsd", scale_last_dim>(g::layer_norm(x), gain);
  }
};

// The user kernel on sharded values: the batch split over data, the gain's
// gradient a partial sum all-reduced over data (one collective, planned).
struct custom_sharded_def {
  using M = xshard::mesh<"data=2, model=2">;
  using input = xshard::sharded<double, 3, M, xshard::spec<"data, None, None">>;
  using params = std::tuple<xshard::sharded<double, 1, M, xshard::spec<"None">>>;
  static constexpr std::array<std::string_view, 1> param_names{"gain"};
  template <class X, class Gain>
  static auto forward(X x, Gain gain) {
    return g::custom<"scale_last_dim", "bsd,d->bsd", scale_last_dim>(g::layer_norm(x), gain);
  }
};

TEST(GraphSharded, UserKernelRunsOnBlocksByItsSignaturesRule) {
  using L = g::layer<custom_sharded_def>;
  static_assert(L::forward_collectives() == 0 && L::backward_collectives() == 1);
  xt::random::seed(9);
  const xt::xtensor<double, 3> x = randn<double, 3>({6, 2, 4}), gy = randn<double, 3>({6, 2, 4});
  const xt::xtensor<double, 1> gain = randn<double, 1>({4});
  // One device: the same graph on plain values.
  using P = g::layer<custom_plain_def>;
  const auto run1 = P{}.forward(std::tuple{gain}, x);
  const auto grads1 = P{}.vjp(std::tuple{gain}, run1.second, gy);
  xshard::thread_mesh<custom_sharded_def::M> mesh;
  mesh.run([&](auto& dev) {
    const L::params p{xshard::distribute<xshard::spec<"None">>(dev, gain)};
    const auto xs = xshard::distribute<xshard::spec<"data, None, None">>(dev, x);
    dev.reset_counters();
    const auto fwd = L{}.forward(p, xs);
    const auto grads = L{}.vjp(p, fwd.second, xshard::distribute<xshard::spec<"data, None, None">>(dev, gy));
    EXPECT_EQ(dev.counters().total_calls(), L::backward_collectives());
    EXPECT_LT(max_diff(xshard::gather(fwd.first), run1.first), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(grads.second), grads1.second), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(std::get<0>(grads.first)), std::get<0>(grads1.first)), 1e-12);
  });
}

}  // namespace

namespace {

// A run-time shape error inside a graph names the node, with the words the
// compile-time face uses (position, op, name).
TEST(Graph, RunTimeErrorsNameTheNode) {
  using T = double;
  graph_mlp<T>::params p{xt::zeros<T>({6, 3}), xt::zeros<T>({6}), xt::zeros<T>({4, 6}), xt::zeros<T>({4})};
  const xt::xtensor<T, 2> x = xt::zeros<T>({5, 4});  // 4 columns, W1 has 3
  // On one device the layer evaluates x W1^T + b1 as one node (the bias in
  // the GEMM's epilogue), the + named h: errors name that node.
  EXPECT_XSHARD_ERROR((void)graph_mlp<T>{}.forward(p, x),
                      "in \"...n,mn->...m\" (graph node 3 (einsum ...n,mn->...m + bias, named h))");
  // Its bias of the wrong length.
  p = {xt::zeros<T>({6, 4}), xt::zeros<T>({5}), xt::zeros<T>({4, 6}), xt::zeros<T>({4})};
  EXPECT_XSHARD_ERROR((void)graph_mlp<T>{}.forward(p, x),
                      "xshard::graph: + of shapes [5,6] and [5] does not broadcast (dim -1: 6 vs 5) (graph node 3 "
                      "(einsum ...n,mn->...m + bias, named h))");
}

}  // namespace

namespace {

// A named trace scope around a sub-graph: one event per pass, enclosing the
// events of the composites inside it (graph layers keep their trace
// annotations, also under scan_layers: seed issue 8691).
struct scoped_def {
  using input = xt::xtensor<double, 2>;
  using params = std::tuple<xt::xtensor<double, 2>>;
  static constexpr std::array<std::string_view, 1> param_names{"w"};
  template <class X, class W>
  static auto forward(X x, W w) {
    return x + g::scope<"graph/mlp">(g::einsum<"...m,mn->...n">(g::gelu(g::einsum<"...n,mn->...m">(x, w)), w));
  }
};

TEST(Graph, TraceScopeEnclosesItsSubGraphForwardAndBackward) {
  using L = g::layer<scoped_def>;
  static_assert(L::program_type::has_scopes);
  // The scope opens at the first einsum (node 2: x and w are 0 and 1) and
  // closes after the second (node 4, the scoped one).
  static_assert(L::program_type::scope_start[4] == 2);
  auto& tracer = xshard::tracer::instance();
  tracer.stop();
  tracer.clear();
  const L::params p{randn<double, 2>({3, 3})};
  const xt::xtensor<double, 2> x = randn<double, 2>({2, 3});
  tracer.start();
  auto [y, r] = L{}.forward(p, x);
  (void)L{}.vjp(p, r, y);
  (void)xshard::scan_layers(L{}, xshard::stack_params<L>(std::vector<L::params>{p, p}), x);
  tracer.stop();
  std::vector<xshard::trace_event> scopes, gelus;
  for (const auto& e : tracer.events()) {
    if (e.name == "graph/mlp") scopes.push_back(e);
    if (e.name == "xshard.gelu") gelus.push_back(e);
  }
  ASSERT_EQ(scopes.size(), 4u);  // forward, backward, and two layers of the stack
  EXPECT_TRUE(scopes[0].args.empty());
  ASSERT_EQ(scopes[1].args.size(), 1u);
  EXPECT_EQ(scopes[1].args[0].key, "pass");
  ASSERT_FALSE(gelus.empty());
  // The gelu of the first forward ran inside the first scope.
  EXPECT_GE(gelus[0].ts_ns, scopes[0].ts_ns);
  EXPECT_LE(gelus[0].ts_ns + gelus[0].dur_ns, scopes[0].ts_ns + scopes[0].dur_ns);
  tracer.clear();
}

}  // namespace

namespace {

// rms_norm (the xshard.rms_norm composite and its backward) in a graph,
// against central finite differences.
struct rms_def {
  using input = xt::xtensor<double, 2>;
  using params = std::tuple<xt::xtensor<double, 1>, xt::xtensor<double, 2>>;
  static constexpr std::array<std::string_view, 2> param_names{"gain", "w"};
  template <class X, class Gain, class W>
  static auto forward(X x, Gain gain, W w) {
    return g::einsum<"...n,mn->...m">(g::rms_norm(x) * gain, w);
  }
};

TEST(Graph, RmsNormMatchesFiniteDifferences) {
  using L = g::layer<rms_def>;
  xt::random::seed(17);
  L::params p{randn<double, 1>({5}), randn<double, 2>({3, 5})};
  xt::xtensor<double, 2> x = randn<double, 2>({4, 5});
  const xt::xtensor<double, 2> c = randn<double, 2>({4, 3});
  const auto run = L{}.forward(p, x);
  const auto grads = L{}.vjp(p, run.second, c);
  auto value = [&] { return xt::sum(L::program_type::evaluate(x, std::get<0>(p), std::get<1>(p)) * c)(); };
  auto worst = [&](auto& t, const auto& grad) {
    double w = 0;
    for (std::size_t i = 0; i < t.size(); ++i) {
      const double keep = t.data()[i], h = 1e-6;
      t.data()[i] = keep + h;
      const double up = value();
      t.data()[i] = keep - h;
      const double down = value();
      t.data()[i] = keep;
      const double fd = (up - down) / (2 * h);
      w = std::max(w, std::abs(fd - grad.data()[i]) / std::max(1.0, std::abs(fd)));
    }
    return w;
  };
  EXPECT_LT(worst(x, grads.second), 1e-6);
  EXPECT_LT(worst(std::get<0>(p), std::get<0>(grads.first)), 1e-6);
  EXPECT_LT(worst(std::get<1>(p), std::get<1>(grads.first)), 1e-6);
}

}  // namespace

namespace {

// Division with broadcasting: by a rank-1 divisor, by a size-1-broadcast
// one, and with the input as the divisor; against central differences.
struct div_def {
  using input = xt::xtensor<double, 2>;  // [r, d]
  using params = std::tuple<xt::xtensor<double, 1>, xt::xtensor<double, 2>>;
  static constexpr std::array<std::string_view, 2> param_names{"a", "c"};
  template <class X, class A, class C>
  static auto forward(X x, A a, C c) {
    return x / a + c / x - x / c;  // a [d]; c [1, d]
  }
};
using div_layer = g::layer<div_def>;

TEST(Graph, DivisionMatchesFiniteDifferences) {
  xt::random::seed(18);
  div_layer::params p{xt::random::rand<double>({4}) + 1.0, xt::random::rand<double>({1, 4}) + 1.0};
  xt::xtensor<double, 2> x = xt::random::rand<double>({3, 4}) + 1.0;
  const xt::xtensor<double, 2> c = randn<double, 2>({3, 4});
  const auto value = [&] {
    return xt::sum(div_layer::program_type::evaluate(x, std::get<0>(p), std::get<1>(p)) * c)();
  };
  const auto [y, r] = div_layer{}.forward(p, x);
  const xt::xtensor<double, 2> want = x / std::get<0>(p) + std::get<1>(p) / x - x / std::get<1>(p);
  EXPECT_LT(max_diff(y, want), 1e-15);
  const auto [gp, gx] = div_layer{}.vjp(p, r, c);
  const auto check = [&](auto& t, const auto& grad, const char* what) {
    SCOPED_TRACE(what);
    const double h = 1e-6;
    for (std::size_t i = 0; i < t.size(); ++i) {
      const double keep = t.data()[i];
      t.data()[i] = keep + h;
      const double up = value();
      t.data()[i] = keep - h;
      const double down = value();
      t.data()[i] = keep;
      const double fd = (up - down) / (2 * h);
      EXPECT_LT(std::abs(fd - grad.data()[i]) / std::max(1.0, std::abs(fd)), 1e-6) << i;
    }
  };
  check(x, gx, "x");
  check(std::get<0>(p), std::get<0>(gp), "a");
  check(std::get<1>(p), std::get<1>(gp), "c");
}

}  // namespace
