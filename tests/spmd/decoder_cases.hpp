// Transformer-decoder cases shared by the thread backend's gtest
// (runtime/decoder_test.cpp) and the MPI test program
// (mpi/spmd_mpi_test.cpp): on the 4-device mesh "data=2, model=2", the
// decoder block, the embedding and the head of nn/decoder.hpp in the
// tensor-parallel and the sequence-parallel layouts, forward and vjp,
// against the same layers on plain tensors (computed on every device), and
// each pass's collective counters against the plans. Returns this
// process's failures (the thread backend: every device's; MPI: this
// rank's).
#pragma once

#include <string>
#include <tuple>
#include <utility>
#include <vector>
#include <xshard/nn/decoder.hpp>

#include "graph_cases.hpp"

namespace xshard_test {

namespace decoder_sizes {
// batch, sequence, width, heads, head dim, MLP hidden, vocabulary
inline constexpr std::size_t B = 4, S = 4, D = 4, H = 2, E = 2, F = 8, V = 8;
}  // namespace decoder_sizes

/// Layer L (sharded) against P (plain) on device dev: forward, the input
/// gradient and every parameter gradient, and both passes' counters.
template <class L, class P, class Dev>
void check_decoder_layer(Dev& dev, graph_failures& f, const std::string& what, const typename P::params& p,
                         const typename P::input& x, const typename P::output& gy) {
  const int id = dev.id();
  const auto one = P{}.forward(p, x);
  const auto one_grads = P{}.vjp(p, one.second, gy);
  const typename L::params ps = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return typename L::params{
        xshard::distribute<typename std::tuple_element_t<I, typename L::params>::spec_type>(dev, std::get<I>(p))...};
  }
  (std::make_index_sequence<std::tuple_size_v<typename P::params>>{});
  const auto xs = xshard::distribute<typename L::input::spec_type>(dev, x);
  dev.reset_counters();
  const auto fwd = L{}.forward(ps, xs);
  f.check(dev.counters().total_calls() == L::forward_collectives(), id, what + " forward: collectives");
  dev.reset_counters();
  const auto grads = L{}.vjp(ps, fwd.second, xshard::distribute<typename L::output::spec_type>(dev, gy));
  f.check(dev.counters().total_calls() == L::backward_collectives(), id, what + " backward: collectives");
  f.check(graph_close(xshard::gather(fwd.first), one.first), id, what + " forward");
  f.check(graph_close(xshard::gather(grads.second), one_grads.second), id, what + " backward: input");
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (f.check(graph_close(xshard::gather(std::get<I>(grads.first)), std::get<I>(one_grads.first)), id,
             what + " backward: " + std::string(L::param_names[I])),
     ...);
  }
  (std::make_index_sequence<std::tuple_size_v<typename P::params>>{});
}

template <class Backend>
std::vector<std::string> run_decoder_cases(Backend& backend) {
  using namespace decoder_sizes;
  using M = typename Backend::mesh_type;
  static_assert(std::is_same_v<M, graph_mesh>, "the decoder cases run on the mesh \"data=2, model=2\"");
  using Block = xshard::decoder_block<double, E>;
  using Embed = xshard::embedding_layer<double>;
  using Head = xshard::head_layer<double>;
  const xt::xtensor<double, 1> ones = xt::ones<double>({D});
  const Block::params bp{ones + 0.1 * graph_values<1>({D}, 1), 0.7 * graph_values<3>({H, E, D}, 2),
                         0.7 * graph_values<3>({H, E, D}, 3),  0.7 * graph_values<3>({H, E, D}, 4),
                         0.7 * graph_values<3>({H, E, D}, 5),  ones + 0.1 * graph_values<1>({D}, 6),
                         0.5 * graph_values<2>({F, D}, 7),     0.1 * graph_values<1>({F}, 8),
                         0.5 * graph_values<2>({D, F}, 9),     0.1 * graph_values<1>({D}, 10)};
  const Embed::params ep{graph_values<2>({V, D}, 11)};
  const Head::params hp{ones + 0.1 * graph_values<1>({D}, 12), graph_values<2>({V, D}, 13)};
  const auto x = graph_values<3>({B, S, D}, 14), gy = graph_values<3>({B, S, D}, 15);
  const auto tokens = graph_values<3>({B, S, V}, 16), g_logits = graph_values<3>({B, S, V}, 17);

  graph_failures f;
  backend.run([&](auto& dev) {
    using Tp = xshard::tensor_parallel_decoder<M>;
    using Sp = xshard::sequence_parallel_decoder<M>;
    check_decoder_layer<xshard::decoder_block<double, E, Tp>, Block>(dev, f, "tp block", bp, x, gy);
    check_decoder_layer<xshard::decoder_block<double, E, Sp>, Block>(dev, f, "sp block", bp, x, gy);
    check_decoder_layer<xshard::embedding_layer<double, Tp>, Embed>(dev, f, "tp embedding", ep, tokens, gy);
    check_decoder_layer<xshard::embedding_layer<double, Sp>, Embed>(dev, f, "sp embedding", ep, tokens, gy);
    check_decoder_layer<xshard::head_layer<double, Tp>, Head>(dev, f, "tp head", hp, x, g_logits);
    check_decoder_layer<xshard::head_layer<double, Sp>, Head>(dev, f, "sp head", hp, x, g_logits);
  });
  return std::move(f.list);
}

}  // namespace xshard_test
