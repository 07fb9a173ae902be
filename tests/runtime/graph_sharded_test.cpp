// Layers written once (graph/) on sharded values inside SPMD bodies: the
// data x model MLP on 2x2 and 4x1 thread meshes, softmax over a split dim,
// a sequence-parallel block. Results equal the same graph on one device;
// collective counters equal the plans derived from the graph.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <xshard/graph/graph.hpp>
#include <xshard/nn/mlp.hpp>
#include <xshard/scan/scan_layers.hpp>
#include <xshard/spmd/thread_mesh.hpp>
#include <xtensor/xrandom.hpp>

#include "../spmd/graph_cases.hpp"
#include "../support/graph_helpers.hpp"
#include "../support/hand_layers.hpp"

namespace {

using namespace xshard_test;

/// Two tuples of sharded tensors hold the same blocks, bit for bit.
template <class... S>
void expect_same_blocks(const std::tuple<S...>& a, const std::tuple<S...>& b) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ([&] { EXPECT_EQ(std::get<I>(a).local(), std::get<I>(b).local()) << "parameter " << I; }(), ...);
  }
  (std::index_sequence_for<S...>{});
}

// Hidden: the hidden width (split over model). Immediate: the parameter
// gradients whose all-reduce runs at once instead of at the backward's end
// (a parameter split unevenly), over the plans' counts.
template <class Mesh, std::size_t Forward, std::size_t Backward, std::size_t ParamsOnly, bool WithHandWritten,
          std::size_t Hidden = 8, std::int64_t Immediate = 0>
void expect_sharded_mlp_equals_one_device() {
  using T = double;
  using Layout = xshard::data_model_mlp<Mesh>;
  using L = g::layer<mlp_def<T, Layout>>;
  using Ref = xshard_test::hand::mlp_block<T, Layout>;
  // The plan is derived from the graph. On 2x2: the block's forward
  // all-reduce over model, and two in the backward (the input gradient
  // over model; then the two bias sums and two weight gradients over data
  // as one all_reduce_many), where the hand-written block's plans run the
  // four over data one by one. On 4x1 the model axis has one device: no
  // collective over it is planned.
  static_assert(L::forward_collectives() == Forward && L::backward_collectives() == Backward);
  // Without the input gradient (vjp_params): the input gradient's
  // all-reduce over model is not run, the rest are.
  static_assert(L::backward_collectives_params_only() == ParamsOnly);
  xt::random::seed(7);
  const auto p = mlp_params<T>(4, Hidden);
  const xt::xtensor<T, 2> x = randn<T, 2>({8, 4}), gy = randn<T, 2>({8, 4});
  graph_mlp<T> dense;
  // (No structured bindings: Clang 14 cannot capture them.)
  const auto run1 = dense.forward(p, x);
  const xt::xtensor<T, 2> y1 = run1.first;
  const auto grads1 = dense.vjp(p, run1.second, gy);
  const auto& gp1 = grads1.first;
  const xt::xtensor<T, 2> gx1 = grads1.second;
  xshard::thread_mesh<Mesh> mesh;
  mesh.run([&](auto& dev) {
    typename L::params ps{xshard::distribute<typename Layout::w_in>(dev, std::get<0>(p)),
                          xshard::distribute<typename Layout::b_in>(dev, std::get<1>(p)),
                          xshard::distribute<typename Layout::w_out>(dev, std::get<2>(p)),
                          xshard::distribute<typename Layout::b_out>(dev, std::get<3>(p))};
    const auto xs = xshard::distribute<typename Layout::batch>(dev, x);
    const auto gys = xshard::distribute<typename Layout::batch>(dev, gy);
    dev.reset_counters();
    L l;
    auto [y, r] = l.forward(ps, xs);
    EXPECT_EQ(dev.counters().total_calls(), L::forward_collectives());
    dev.reset_counters();
    auto [gp, gx] = l.vjp(ps, r, gys);
    EXPECT_EQ(dev.counters().total_calls(), static_cast<std::int64_t>(L::backward_collectives()) + Immediate);
    dev.reset_counters();
    const auto gp_only = l.vjp_params(ps, r, gys);
    EXPECT_EQ(dev.counters().total_calls(),
              static_cast<std::int64_t>(L::backward_collectives_params_only()) + Immediate);
    expect_same_blocks(gp_only, gp);
    EXPECT_LT(max_diff(xshard::gather(y), y1), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(gx), gx1), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(std::get<0>(gp)), std::get<0>(gp1)), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(std::get<1>(gp)), std::get<1>(gp1)), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(std::get<2>(gp)), std::get<2>(gp1)), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(std::get<3>(gp)), std::get<3>(gp1)), 1e-12);
    // Against the hand-written sharded block: bit for bit. (It needs the
    // einsums' layouts to be its declared ones, which on a mesh whose model
    // axis has size 1 they are not: the planner drops size-1 axes. The
    // graph only needs equal blocks.)
    if constexpr (WithHandWritten) {
      Ref ref;
      auto [y_ref, r_ref] = ref.forward(ps, xs);
      auto [gp_ref, gx_ref] = ref.vjp(ps, r_ref, gys);
      EXPECT_EQ(xshard::gather(y), xshard::gather(y_ref));
      EXPECT_EQ(xshard::gather(gx), xshard::gather(gx_ref));
      EXPECT_EQ(xshard::gather(std::get<0>(gp)), xshard::gather(std::get<0>(gp_ref)));
      EXPECT_EQ(xshard::gather(std::get<3>(gp)), xshard::gather(std::get<3>(gp_ref)));
    }
  });
}

// The graph runs the hand-written block's five backward collectives as two:
// its four parameter gradients' all-reduces over data become one.
static_assert(
    g::layer<mlp_def<double, xshard::data_model_mlp<xshard::mesh<"data=2, model=2">>>>::backward_collectives() + 3 ==
    xshard_test::hand::mlp_block<double,
                                 xshard::data_model_mlp<xshard::mesh<"data=2, model=2">>>::backward_collectives());

// On a mesh nothing is fused (an einsum's partial sums are all-reduced
// after its GEMM, before the bias may be added): the graph as written.
static_assert(
    std::is_same_v<g::layer<mlp_def<double, xshard::data_model_mlp<xshard::mesh<"data=2, model=2">>>>::graph_type,
                   g::layer<mlp_def<double, xshard::data_model_mlp<xshard::mesh<"data=2, model=2">>>>::written_type>);

TEST(GraphSharded, DataModelMlpOn2x2) {
  expect_sharded_mlp_equals_one_device<xshard::mesh<"data=2, model=2">, 1, 2, 1, true>();
}
// Hidden width 7 over model=2: W1, b1 and W2 are split unevenly, so their
// gradients are all-reduced at once (3 more calls than the plan); b2's
// still waits for the end. The same gradients either way.
TEST(GraphSharded, DataModelMlpOn2x2UnevenHidden) {
  expect_sharded_mlp_equals_one_device<xshard::mesh<"data=2, model=2">, 1, 2, 1, false, 7, 3>();
}
TEST(GraphSharded, DataModelMlpOn4x1) {
  expect_sharded_mlp_equals_one_device<xshard::mesh<"data=4, model=1">, 0, 1, 1, false>();
}

}  // namespace

namespace {

// softmax over a dim split across devices (a vocabulary-parallel softmax):
// partial max and sum all-reduces, never a gather of the dim.
template <int Dim, bool Log = false>
struct split_softmax_def {
  using M = xshard::mesh<"data=2, model=2">;
  using input = xshard::sharded<double, 2, M, xshard::spec<"data, model">>;
  using params = std::tuple<xshard::sharded<double, 1, M, xshard::spec<"model">>>;
  static constexpr std::array<std::string_view, 1> param_names{"b"};
  template <class X, class B>
  static auto forward(X x, B b) {
    if constexpr (Log)
      return g::log_softmax<Dim>(x + b);
    else
      return g::softmax<Dim>(x + b);
  }
};
template <int Dim, bool Log = false>
struct plain_softmax_def {
  using input = xt::xtensor<double, 2>;
  using params = std::tuple<xt::xtensor<double, 1>>;
  static constexpr std::array<std::string_view, 1> param_names{"b"};
  template <class X, class B>
  static auto forward(X x, B b) {
    if constexpr (Log)
      return g::log_softmax<Dim>(x + b);
    else
      return g::softmax<Dim>(x + b);
  }
};

template <int Dim, bool Log = false>
void expect_split_softmax_equals_one_device() {
  using L = g::layer<split_softmax_def<Dim, Log>>;
  using P = g::layer<plain_softmax_def<Dim, Log>>;
  // Forward: the max and the sum over the split dim; backward: the sum of
  // g y over it, and the bias gradient's sum over data.
  static_assert(L::forward_collectives() == 2 && L::backward_collectives() == 2);
  xt::random::seed(14);
  const xt::xtensor<double, 2> x = randn<double, 2>({5, 9}) * 3.0, gy = randn<double, 2>({5, 9});
  const xt::xtensor<double, 1> b = randn<double, 1>({9});
  const auto one = P{}.forward(std::tuple{b}, x);
  const auto one_grads = P{}.vjp(std::tuple{b}, one.second, gy);
  xshard::thread_mesh<typename split_softmax_def<Dim>::M> mesh;
  mesh.run([&](auto& dev) {
    const typename L::params p{xshard::distribute<xshard::spec<"model">>(dev, b)};
    const auto xs = xshard::distribute<xshard::spec<"data, model">>(dev, x);
    dev.reset_counters();
    const auto fwd = L{}.forward(p, xs);
    EXPECT_EQ(dev.counters().total_calls(), L::forward_collectives());
    dev.reset_counters();
    const auto grads = L{}.vjp(p, fwd.second, xshard::distribute<xshard::spec<"data, model">>(dev, gy));
    EXPECT_EQ(dev.counters().total_calls(), L::backward_collectives());
    EXPECT_LT(max_diff(xshard::gather(fwd.first), one.first), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(grads.second), one_grads.second), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(std::get<0>(grads.first)), std::get<0>(one_grads.first)), 1e-12);
  });
}

TEST(GraphSharded, SoftmaxOverTheModelSplitLastDim) { expect_split_softmax_equals_one_device<-1>(); }
TEST(GraphSharded, SoftmaxOverTheDataSplitFirstDim) { expect_split_softmax_equals_one_device<0>(); }
// log_softmax (a vocabulary-parallel cross-entropy's log-probabilities):
// the same partial max and sum, and one all-reduce of the gradient's sum.
TEST(GraphSharded, LogSoftmaxOverTheModelSplitLastDim) { expect_split_softmax_equals_one_device<-1, true>(); }
TEST(GraphSharded, LogSoftmaxOverTheDataSplitFirstDim) { expect_split_softmax_equals_one_device<0, true>(); }

}  // namespace

namespace {

// Sequence parallelism: activations split over the sequence on model
// between blocks; an all-gather before the block (constrain) and a
// reduce-scatter after it (einsum_to) instead of an all-reduce.
struct sequence_parallel_def {
  using M = xshard::mesh<"data=2, model=2">;
  using input = xshard::sharded<double, 3, M, xshard::spec<"data, model, None">>;         // [b, s, d]
  using params = std::tuple<xshard::sharded<double, 2, M, xshard::spec<"model, None">>,   // W1 [f, d]
                            xshard::sharded<double, 2, M, xshard::spec<"None, model">>>;  // W2 [d, f]
  static constexpr std::array<std::string_view, 2> param_names{"w_in", "w_out"};
  template <class X, class W1, class W2>
  static auto forward(X x, W1 w1, W2 w2) {
    auto full = g::constrain<xshard::spec<"data, None, None">>(x);                     // all-gather the sequence
    auto h = g::gelu(g::einsum<"bsd,fd->bsf">(full, w1));                              // column parallel
    return x + g::einsum_to<"bsf,df->bsd", xshard::spec<"data, model, None">>(h, w2);  // reduce-scatter
  }
};
struct sequence_plain_def {
  using input = xt::xtensor<double, 3>;
  using params = std::tuple<xt::xtensor<double, 2>, xt::xtensor<double, 2>>;
  static constexpr std::array<std::string_view, 2> param_names{"w_in", "w_out"};
  template <class X, class W1, class W2>
  static auto forward(X x, W1 w1, W2 w2) {
    auto h = g::gelu(g::einsum<"bsd,fd->bsf">(x, w1));
    return x + g::einsum_to<"bsf,df->bsd", void>(h, w2);
  }
};

using sequence_parallel = g::layer<sequence_parallel_def>;

/// The sequence-parallel block against one device, for a sequence of
/// `seq` tokens over model=2 (odd: the blocks are split unevenly, and the
/// constrain's reduce-scatter of the partial input gradient pads them).
void expect_sequence_parallel_equals_one_device(std::size_t seq) {
  using L = sequence_parallel;
  using P = g::layer<sequence_plain_def>;
  xt::random::seed(15);
  const xt::xtensor<double, 3> x = randn<double, 3>({2, seq, 3}), gy = randn<double, 3>({2, seq, 3});
  const xt::xtensor<double, 2> w1 = randn<double, 2>({6, 3}), w2 = randn<double, 2>({3, 6});
  const auto one = P{}.forward(std::tuple{w1, w2}, x);
  const auto one_grads = P{}.vjp(std::tuple{w1, w2}, one.second, gy);
  xshard::thread_mesh<sequence_parallel_def::M> mesh;
  mesh.run([&](auto& dev) {
    const L::params p{xshard::distribute<xshard::spec<"model, None">>(dev, w1),
                      xshard::distribute<xshard::spec<"None, model">>(dev, w2)};
    const auto xs = xshard::distribute<xshard::spec<"data, model, None">>(dev, x);
    dev.reset_counters();
    const auto fwd = L{}.forward(p, xs);
    EXPECT_EQ(dev.counters().total_calls(), L::forward_collectives());
    EXPECT_EQ(dev.counters().calls_of(xshard::collective_kind::all_reduce), 0);
    dev.reset_counters();
    const auto gys = xshard::distribute<xshard::spec<"data, model, None">>(dev, gy);
    const auto grads = L{}.vjp(p, fwd.second, gys);
    EXPECT_EQ(dev.counters().total_calls(), L::backward_collectives());
    EXPECT_EQ(dev.counters().calls_of(xshard::collective_kind::reduce_scatter), 1);
    // Without the input gradient: the same weight gradients, and only the
    // collectives the weights' gradients need.
    dev.reset_counters();
    const auto only = L{}.vjp_params(p, fwd.second, gys);
    EXPECT_EQ(dev.counters().total_calls(), L::backward_collectives_params_only());
    expect_same_blocks(only, grads.first);
    EXPECT_LT(max_diff(xshard::gather(fwd.first), one.first), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(grads.second), one_grads.second), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(std::get<0>(grads.first)), std::get<0>(one_grads.first)), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(std::get<1>(grads.first)), std::get<1>(one_grads.first)), 1e-12);
  });
}

TEST(GraphSharded, SequenceParallelBlockAllGathersAndReduceScatters) {
  using L = sequence_parallel;
  static_assert(L::forward_collectives() == 2);
  // The backward: g all-gathered back to the einsum_to's layout once per
  // operand's vjp (2), W2's gradient all-reduced over data, the gathered
  // input's gradient, partial over model, reduce-scattered over the
  // sequence by the constrain (not all-reduced by the einsum and sliced by
  // the constrain), and W1's all-reduced over data. Without the input
  // gradient the reduce-scatter is not run.
  static_assert(L::backward_collectives() == 5 && L::backward_collectives_params_only() == 4);
  static_assert([] {
    std::size_t scatters = 0;
    for (const auto& node : L::backward_plan())
      for (const auto& c : node.collectives) {
        if (c.kind == xshard::collective_kind::all_reduce && c.axes == 0b10) return false;
        scatters += c.kind == xshard::collective_kind::reduce_scatter && c.axes == 0b10 && node.op == "constrain";
      }
    return scatters == 1;
  }());
  expect_sequence_parallel_equals_one_device(4);
}
TEST(GraphSharded, SequenceParallelBlockSplitUnevenlyOverTheSequence) { expect_sequence_parallel_equals_one_device(5); }

}  // namespace

namespace {

// The cases the MPI test program runs too (tests/spmd/graph_cases.hpp), on
// the thread backend.
TEST(GraphSharded, SharedCasesOnTheThreadBackend) {
  xshard::thread_mesh<xshard_test::graph_mesh> devices;
  for (const std::string& f : xshard_test::run_graph_cases(devices)) ADD_FAILURE() << f;
}

}  // namespace

namespace {

// layer_norm over a last dim split across devices (partial sums) and over
// an unsplit one, times a gain along it.
template <xshard::fixed_string XSpec, xshard::fixed_string GSpec, bool Rms = false>
struct norm_def {
  using M = xshard::mesh<"data=2, model=2">;
  using input = xshard::sharded<double, 2, M, xshard::spec<XSpec>>;
  using params = std::tuple<xshard::sharded<double, 1, M, xshard::spec<GSpec>>>;
  static constexpr std::array<std::string_view, 1> param_names{"gain"};
  template <class X, class G>
  static auto forward(X x, G gain) {
    if constexpr (Rms)
      return g::rms_norm(x) * gain;
    else
      return g::layer_norm(x) * gain;
  }
};
template <bool Rms = false>
struct norm_plain_def {
  using input = xt::xtensor<double, 2>;
  using params = std::tuple<xt::xtensor<double, 1>>;
  static constexpr std::array<std::string_view, 1> param_names{"gain"};
  template <class X, class G>
  static auto forward(X x, G gain) {
    if constexpr (Rms)
      return g::rms_norm(x) * gain;
    else
      return g::layer_norm(x) * gain;
  }
};

template <xshard::fixed_string XSpec, xshard::fixed_string GSpec, std::size_t Forward, std::size_t Backward,
          bool Rms = false>
void expect_layer_norm_equals_one_device() {
  using L = g::layer<norm_def<XSpec, GSpec, Rms>>;
  using P = g::layer<norm_plain_def<Rms>>;
  static_assert(L::forward_collectives() == Forward && L::backward_collectives() == Backward);
  xt::random::seed(16);
  const xt::xtensor<double, 2> x = randn<double, 2>({5, 9}) * 2.0 + 1.0, gy = randn<double, 2>({5, 9});
  const xt::xtensor<double, 1> gain = randn<double, 1>({9});
  const auto one = P{}.forward(std::tuple{gain}, x);
  const auto one_grads = P{}.vjp(std::tuple{gain}, one.second, gy);
  xshard::thread_mesh<typename norm_def<XSpec, GSpec, Rms>::M> mesh;
  mesh.run([&](auto& dev) {
    const typename L::params p{xshard::distribute<xshard::spec<GSpec>>(dev, gain)};
    const auto xs = xshard::distribute<xshard::spec<XSpec>>(dev, x);
    dev.reset_counters();
    const auto fwd = L{}.forward(p, xs);
    EXPECT_EQ(dev.counters().total_calls(), L::forward_collectives());
    dev.reset_counters();
    const auto grads = L{}.vjp(p, fwd.second, xshard::distribute<xshard::spec<XSpec>>(dev, gy));
    EXPECT_EQ(dev.counters().total_calls(), L::backward_collectives());
    EXPECT_LT(max_diff(xshard::gather(fwd.first), one.first), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(grads.second), one_grads.second), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(std::get<0>(grads.first)), std::get<0>(one_grads.first)), 1e-12);
  });
}

// Split over model (9 columns: 5 and 4): two all-reduces for the mean and
// variance; backward: those again and one for the two means, plus the
// gain's sum over data.
TEST(GraphSharded, LayerNormOverTheModelSplitLastDim) {
  expect_layer_norm_equals_one_device<"data, model", "model", 2, 4>();
}
// Unsplit last dim: no collective for the norm; the gain's sum over data.
TEST(GraphSharded, LayerNormOverAnUnsplitLastDim) { expect_layer_norm_equals_one_device<"data, None", "None", 0, 1>(); }

// rms_norm: one all-reduce of the sums of squares forward; backward, that
// again and one for the mean of g y, plus the gain's sum over data.
TEST(GraphSharded, RmsNormOverTheModelSplitLastDim) {
  expect_layer_norm_equals_one_device<"data, model", "model", 1, 3, true>();
}
TEST(GraphSharded, RmsNormOverAnUnsplitLastDim) {
  expect_layer_norm_equals_one_device<"data, None", "None", 0, 1, true>();
}

}  // namespace

namespace {

// Division on blocks: by a rank-1 operand along the split last dim (a
// bias-like divisor) and between two values of one layout. Forward: no
// collective; backward: the divisor's gradient summed over data.
template <class X, class G>
auto divisions(X x, G gain) {
  return x / gain + x / (x * x);
}
struct div_def {
  using M = xshard::mesh<"data=2, model=2">;
  using input = xshard::sharded<double, 2, M, xshard::spec<"data, model">>;
  using params = std::tuple<xshard::sharded<double, 1, M, xshard::spec<"model">>>;
  static constexpr std::array<std::string_view, 1> param_names{"divisor"};
  template <class X, class G>
  static auto forward(X x, G gain) {
    return divisions(x, gain);
  }
};
struct div_plain_def {
  using input = xt::xtensor<double, 2>;
  using params = std::tuple<xt::xtensor<double, 1>>;
  static constexpr std::array<std::string_view, 1> param_names{"divisor"};
  template <class X, class G>
  static auto forward(X x, G gain) {
    return divisions(x, gain);
  }
};

TEST(GraphSharded, DivisionByARank1OperandAndBetweenValuesOfOneLayout) {
  using L = g::layer<div_def>;
  using P = g::layer<div_plain_def>;
  static_assert(L::forward_collectives() == 0 && L::backward_collectives() == 1);
  xt::random::seed(17);
  // Away from zero: 1 .. 2.
  const xt::xtensor<double, 2> x = xt::random::rand<double>({5, 9}) + 1.0, gy = randn<double, 2>({5, 9});
  const xt::xtensor<double, 1> divisor = xt::random::rand<double>({9}) + 1.0;
  const auto one = P{}.forward(std::tuple{divisor}, x);
  const auto one_grads = P{}.vjp(std::tuple{divisor}, one.second, gy);
  xshard::thread_mesh<div_def::M> mesh;
  mesh.run([&](auto& dev) {
    const L::params p{xshard::distribute<xshard::spec<"model">>(dev, divisor)};
    const auto xs = xshard::distribute<xshard::spec<"data, model">>(dev, x);
    dev.reset_counters();
    const auto fwd = L{}.forward(p, xs);
    EXPECT_EQ(dev.counters().total_calls(), L::forward_collectives());
    dev.reset_counters();
    const auto grads = L{}.vjp(p, fwd.second, xshard::distribute<xshard::spec<"data, model">>(dev, gy));
    EXPECT_EQ(dev.counters().total_calls(), L::backward_collectives());
    EXPECT_LT(max_diff(xshard::gather(fwd.first), one.first), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(grads.second), one_grads.second), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(std::get<0>(grads.first)), std::get<0>(one_grads.first)), 1e-12);
  });
}

}  // namespace

namespace {

// Two readers of one node whose gradients are partial over model (q and k
// of a replicated input, as a decoder's q, k and v of its normed input):
// their partial blocks are summed in the node's gradient, and one
// all-reduce over model runs on the sum (the node's own backward entry)
// instead of one per reader.
template <class X, class Q, class K, class O>
auto two_readers(X x, Q wq, K wk, O wo) {
  auto n = g::tanh(x);                           // node 1: read by q and k
  auto q = g::einsum<"bd,fd->bf">(n, wq);        // column parallel
  auto k = g::einsum<"bd,fd->bf">(n, wk);        // column parallel
  return x + g::einsum<"bf,fd->bd">(q * k, wo);  // row parallel
}
struct two_readers_def {
  using M = xshard::mesh<"data=2, model=2">;
  using input = xshard::sharded<double, 2, M, xshard::spec<"data, None">>;  // [b, d]
  using W = xshard::sharded<double, 2, M, xshard::spec<"model, None">>;     // [f, d]
  using params = std::tuple<W, W, W>;
  static constexpr std::array<std::string_view, 3> param_names{"w_q", "w_k", "w_o"};
  template <class X, class W1, class W2, class W3>
  static auto forward(X x, W1 wq, W2 wk, W3 wo) {
    return two_readers(x, wq, wk, wo);
  }
};
struct two_readers_plain_def {
  using input = xt::xtensor<double, 2>;
  using W = xt::xtensor<double, 2>;
  using params = std::tuple<W, W, W>;
  static constexpr std::array<std::string_view, 3> param_names{"w_q", "w_k", "w_o"};
  template <class X, class W1, class W2, class W3>
  static auto forward(X x, W1 wq, W2 wk, W3 wo) {
    return two_readers(x, wq, wk, wo);
  }
};

using TwoReaders = g::layer<two_readers_def>;
// The backward plan: node 1's (tanh's) summed all-reduce over model, the
// only collective over model; the parameters' gradients over data at the
// end. Before the readers summed first: two all-reduces over model.
constexpr std::size_t model_all_reduces(const auto& plan) {
  std::size_t n = 0;
  for (const auto& node : plan)
    for (const auto& c : node.collectives) n += c.kind == xshard::collective_kind::all_reduce && c.axes == 0b10;
  return n;
}
static_assert(model_all_reduces(TwoReaders::backward_plan()) == 1);
static_assert([] {
  for (const auto& node : TwoReaders::backward_plan())
    if (node.node == 1)
      return node.collectives.size() == 1 && node.collectives[0].kind == xshard::collective_kind::all_reduce &&
             node.collectives[0].axes == 0b10;
  return false;
}());
static_assert(TwoReaders::backward_plan().back().node == xshard::graph::no_node);
// Without the input gradient node 1 gets none (it depends on no
// parameter), so its all-reduce is not run.
static_assert(TwoReaders::backward_collectives_params_only() + 1 == TwoReaders::backward_collectives());

/// Batch rows over data and a hidden width `hidden` over model (odd: the
/// weights split unevenly, their gradients all-reduced at once, three calls
/// instead of the one all_reduce_many at the end).
template <std::size_t Batch>
void expect_two_readers_equal_one_device(std::size_t hidden = 4) {
  using L = TwoReaders;
  using P = g::layer<two_readers_plain_def>;
  xt::random::seed(31);
  const xt::xtensor<double, 2> x = randn<double, 2>({Batch, 3}), gy = randn<double, 2>({Batch, 3});
  const xt::xtensor<double, 2> wq = randn<double, 2>({hidden, 3}), wk = randn<double, 2>({hidden, 3}),
                               wo = randn<double, 2>({hidden, 3});
  const std::int64_t uneven_weights = hidden % 2 == 0 ? 0 : 2;
  const auto one = P{}.forward(std::tuple{wq, wk, wo}, x);
  const auto one_grads = P{}.vjp(std::tuple{wq, wk, wo}, one.second, gy);
  xshard::thread_mesh<two_readers_def::M> mesh;
  mesh.run([&](auto& dev) {
    using S = xshard::spec<"model, None">;
    const L::params p{xshard::distribute<S>(dev, wq), xshard::distribute<S>(dev, wk), xshard::distribute<S>(dev, wo)};
    const auto xs = xshard::distribute<xshard::spec<"data, None">>(dev, x);
    const auto fwd = L{}.forward(p, xs);
    const auto gys = xshard::distribute<xshard::spec<"data, None">>(dev, gy);
    dev.reset_counters();
    const auto grads = L{}.vjp(p, fwd.second, gys);
    // An odd batch splits unevenly over data: node 1's gradient blocks
    // are padded, so each reader's contribution is reduced at once (one
    // all-reduce over model more than planned; the weights' gradients,
    // split evenly, still wait for the end).
    const std::int64_t immediate = (Batch % 2 == 0 ? 0 : 1) + uneven_weights;
    EXPECT_EQ(dev.counters().total_calls(), static_cast<std::int64_t>(L::backward_collectives()) + immediate);
    EXPECT_LT(max_diff(xshard::gather(grads.second), one_grads.second), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(std::get<0>(grads.first)), std::get<0>(one_grads.first)), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(std::get<1>(grads.first)), std::get<1>(one_grads.first)), 1e-12);
    EXPECT_LT(max_diff(xshard::gather(std::get<2>(grads.first)), std::get<2>(one_grads.first)), 1e-12);
    dev.reset_counters();
    const auto only = L{}.vjp_params(p, fwd.second, gys);
    EXPECT_EQ(dev.counters().total_calls(),
              static_cast<std::int64_t>(L::backward_collectives_params_only()) + uneven_weights);
    expect_same_blocks(only, grads.first);
  });
}

TEST(GraphSharded, ReadersOfOneNodeSumTheirPartialGradientsBeforeOneAllReduce) {
  expect_two_readers_equal_one_device<6>();
}
TEST(GraphSharded, ReadersOfOneNodeSplitUnevenlyReduceAtOnce) { expect_two_readers_equal_one_device<5>(); }
// The node's gradient split evenly, the readers' weights not: node 1 still
// sums its readers' partial blocks before one all-reduce.
TEST(GraphSharded, ReadersOfOneNodeSumWhenTheirWeightsSplitUnevenly) { expect_two_readers_equal_one_device<6>(5); }

}  // namespace
