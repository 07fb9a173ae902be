// Graph-layer cases shared by the thread backend's gtest
// (runtime/graph_sharded_test.cpp) and the MPI test program
// (mpi/spmd_mpi_test.cpp): the same SPMD bodies on the 4-device mesh
// "data=2, model=2", whatever runs them.
//
// run_graph_cases(backend) runs, on every device, the graph MLP block
// (nn/mlp.hpp) in Megatron's data x model layout and a vocabulary-style
// softmax over the model-split dim, forward and vjp, and checks each
// against the same graph on plain tensors (computed on every device) and
// each pass's collective counters against the plan derived from the graph.
// Returns this process's failures (the thread backend: every device's;
// MPI: this rank's).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>
#include <xshard/nn/mlp.hpp>
#include <xtensor/xtensor.hpp>

namespace xshard_test {

using graph_mesh = xshard::mesh<"data=2, model=2">;

/// softmax over the model-split last dim of x + b.
template <class X, class B>
struct graph_softmax_def {
  using input = X;
  using params = std::tuple<B>;
  static constexpr std::array<std::string_view, 1> param_names{"b"};
  template <class A, class P>
  static auto forward(A x, P b) {
    return xshard::graph::softmax<-1>(x + b);
  }
};

/// Deterministic values in [-1, 1) (the same on every process).
template <std::size_t R>
xt::xtensor<double, R> graph_values(const std::array<std::size_t, R>& shape, unsigned seed) {
  xt::xtensor<double, R> t = xt::xtensor<double, R>::from_shape(shape);
  unsigned s = seed;
  for (double& v : t) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<double>(s >> 8) / static_cast<double>(1u << 24) * 2.0 - 1.0;
  }
  return t;
}

struct graph_failures {
  std::mutex mu;
  std::vector<std::string> list;
  void check(bool ok, int device, const std::string& what) {
    if (ok) return;
    std::lock_guard lock(mu);
    list.push_back("device " + std::to_string(device) + ": " + what);
  }
};

template <class A, class B>
bool graph_close(const A& a, const B& b) {
  return a.shape() == b.shape() && xt::amax(xt::abs(a - b))() < 1e-12;
}

template <class Backend>
std::vector<std::string> run_graph_cases(Backend& backend) {
  using M = typename Backend::mesh_type;
  static_assert(std::is_same_v<M, graph_mesh>, "the graph cases run on the mesh \"data=2, model=2\"");
  using Layout = xshard::data_model_mlp<M>;
  using Block = xshard::mlp_block<double, Layout>;
  using Dense = xshard::mlp_block<double>;
  using SX = xshard::sharded<double, 2, M, xshard::spec<"data, model">>;
  using SB = xshard::sharded<double, 1, M, xshard::spec<"model">>;
  using Softmax = xshard::graph::layer<graph_softmax_def<SX, SB>>;
  using DenseSoftmax = xshard::graph::layer<graph_softmax_def<xt::xtensor<double, 2>, xt::xtensor<double, 1>>>;
  static_assert(Block::forward_collectives() == 1 && Block::backward_collectives() == 2);
  static_assert(Softmax::forward_collectives() == 2 && Softmax::backward_collectives() == 2);

  // The MLP: uneven hidden width 10 over model=2 is even; batch 6 over data.
  const Dense::params p{graph_values<2>({10, 4}, 1), graph_values<1>({10}, 2), graph_values<2>({10, 4}, 3),
                        graph_values<1>({4}, 4)};
  const auto x = graph_values<2>({6, 4}, 5), gy = graph_values<2>({6, 4}, 6);
  const auto dense = Dense{}.forward(p, x);
  const auto dense_grads = Dense{}.vjp(p, dense.second, gy);
  // The softmax: 7 columns over model=2 (4 and 3).
  const auto s = graph_values<2>({5, 7}, 7), sg = graph_values<2>({5, 7}, 8);
  const auto sb = graph_values<1>({7}, 9);
  const auto dense_s = DenseSoftmax{}.forward(std::tuple{sb}, s);
  const auto dense_sg = DenseSoftmax{}.vjp(std::tuple{sb}, dense_s.second, sg);

  graph_failures f;
  backend.run([&](auto& dev) {
    const int id = dev.id();
    const typename Block::params ps{xshard::distribute<typename Layout::w_in>(dev, std::get<0>(p)),
                                    xshard::distribute<typename Layout::b_in>(dev, std::get<1>(p)),
                                    xshard::distribute<typename Layout::w_out>(dev, std::get<2>(p)),
                                    xshard::distribute<typename Layout::b_out>(dev, std::get<3>(p))};
    const auto xs = xshard::distribute<typename Layout::batch>(dev, x);
    const auto gys = xshard::distribute<typename Layout::batch>(dev, gy);
    dev.reset_counters();
    const auto fwd = Block{}.forward(ps, xs);
    f.check(dev.counters().total_calls() == Block::forward_collectives(), id,
            "mlp forward: collectives differ from the plan");
    dev.reset_counters();
    const auto grads = Block{}.vjp(ps, fwd.second, gys);
    f.check(dev.counters().total_calls() == Block::backward_collectives(), id,
            "mlp backward: collectives differ from the plan");
    f.check(graph_close(xshard::gather(fwd.first), dense.first), id, "mlp forward: y");
    f.check(graph_close(xshard::gather(grads.second), dense_grads.second), id, "mlp backward: dx");
    f.check(graph_close(xshard::gather(std::get<0>(grads.first)), std::get<0>(dense_grads.first)), id, "mlp: dW1");
    f.check(graph_close(xshard::gather(std::get<1>(grads.first)), std::get<1>(dense_grads.first)), id, "mlp: db1");
    f.check(graph_close(xshard::gather(std::get<2>(grads.first)), std::get<2>(dense_grads.first)), id, "mlp: dW2");
    f.check(graph_close(xshard::gather(std::get<3>(grads.first)), std::get<3>(dense_grads.first)), id, "mlp: db2");

    const typename Softmax::params sp{xshard::distribute<xshard::spec<"model">>(dev, sb)};
    const auto ss = xshard::distribute<xshard::spec<"data, model">>(dev, s);
    dev.reset_counters();
    const auto sf = Softmax{}.forward(sp, ss);
    f.check(dev.counters().total_calls() == Softmax::forward_collectives(), id, "softmax forward: collectives");
    dev.reset_counters();
    const auto sgr = Softmax{}.vjp(sp, sf.second, xshard::distribute<xshard::spec<"data, model">>(dev, sg));
    f.check(dev.counters().total_calls() == Softmax::backward_collectives(), id, "softmax backward: collectives");
    f.check(graph_close(xshard::gather(sf.first), dense_s.first), id, "softmax forward: y");
    f.check(graph_close(xshard::gather(sgr.second), dense_sg.second), id, "softmax backward: dx");
    f.check(graph_close(xshard::gather(std::get<0>(sgr.first)), std::get<0>(dense_sg.first)), id, "softmax: db");
  });
  return std::move(f.list);
}

}  // namespace xshard_test
