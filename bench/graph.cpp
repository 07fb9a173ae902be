// bench/graph.cpp - a layer written once as a graph (nn/mlp.hpp) against
// the hand-written one it replaced (tests/support/hand_layers.hpp, kept as
// the tests' reference): forward + vjp of the MLP block at
// train_mlp's sizes (batch 64, width 128, hidden 512, float), one thread.
//
//   build/release/bench/graph --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// mlp/<policy>/<impl>: one forward (keeping what the policy keeps) and one
// vjp. <policy> save_all (forward) or dots_saveable (forward_saving_dots,
// restore); <impl> hand (xshard_test::hand::mlp_block) or graph
// (xshard::mlp_block).
// mlp_paired/<policy>: both in one benchmark, interleaved (rotating order,
// 200 rounds), each timed on its own: counters hand_us, graph_us (medians)
// and ratio = hand_us / graph_us (the goal: >= 0.97). Use the
// paired figures on a loaded machine.
// Before timing, each case checks the graph's results equal the hand-written
// block's bit for bit.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>
#include <xshard/core/thread_pool.hpp>
#include <xshard/nn/mlp.hpp>
#include <xtensor/xrandom.hpp>

#include "../tests/support/hand_layers.hpp"

namespace {

using T = float;
using Hand = xshard_test::hand::mlp_block<T>;
using Graph = xshard::mlp_block<T>;
constexpr std::size_t batch = 64, width = 128, hidden = 512;

struct inputs {
  Hand::params p;
  xt::xtensor<T, 2> x, gy;
};

const inputs& data() {
  static const inputs d = [] {
    xt::random::seed(1);
    inputs i;
    i.p = {xt::random::randn<T>({hidden, width}), xt::random::randn<T>({hidden}), xt::random::randn<T>({hidden, width}),
           xt::random::randn<T>({width})};
    i.x = xt::random::randn<T>({batch, width});
    i.gy = xt::random::randn<T>({batch, width});
    return i;
  }();
  return d;
}

enum class policy { save_all, dots_saveable };

template <class L>
auto step(const L& l, policy pol) {
  const inputs& d = data();
  if (pol == policy::save_all) {
    auto [y, r] = l.forward(d.p, d.x);
    return l.vjp(d.p, r, d.gy);
  }
  auto [y, dots] = l.forward_saving_dots(d.p, d.x);
  return l.vjp(d.p, l.restore(d.p, d.x, dots), d.gy);
}

void check_equal(policy pol) {
  const auto a = step(Hand{}, pol);
  const auto b = step(Graph{}, pol);
  if (a.second != b.second || a.first != b.first)
    throw std::runtime_error("bench/graph: the graph's gradients differ from the hand-written block's");
}

template <class L>
void bm_mlp(benchmark::State& state, policy pol) {
  xshard::set_num_threads(1);
  check_equal(pol);
  const L l;
  for (auto _ : state) benchmark::DoNotOptimize(step(l, pol));
}

template <class L>
double time_us(const L& l, policy pol) {
  const auto t0 = std::chrono::steady_clock::now();
  benchmark::DoNotOptimize(step(l, pol));
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bm_paired(benchmark::State& state, policy pol) {
  xshard::set_num_threads(1);
  check_equal(pol);
  const Hand hand;
  const Graph graph;
  std::vector<double> h, g;
  for (auto _ : state) {
    h.clear();
    g.clear();
    for (int round = 0; round < 200; ++round) {
      if (round % 2 == 0) {
        h.push_back(time_us(hand, pol));
        g.push_back(time_us(graph, pol));
      } else {
        g.push_back(time_us(graph, pol));
        h.push_back(time_us(hand, pol));
      }
    }
  }
  state.counters["hand_us"] = median(h);
  state.counters["graph_us"] = median(g);
  state.counters["ratio"] = median(h) / median(g);
}

void bm_hand(benchmark::State& state, policy pol) { bm_mlp<Hand>(state, pol); }
void bm_graph(benchmark::State& state, policy pol) { bm_mlp<Graph>(state, pol); }

BENCHMARK_CAPTURE(bm_hand, save_all, policy::save_all)->Name("mlp/save_all/hand");
BENCHMARK_CAPTURE(bm_graph, save_all, policy::save_all)->Name("mlp/save_all/graph");
BENCHMARK_CAPTURE(bm_hand, dots_saveable, policy::dots_saveable)->Name("mlp/dots_saveable/hand");
BENCHMARK_CAPTURE(bm_graph, dots_saveable, policy::dots_saveable)->Name("mlp/dots_saveable/graph");
BENCHMARK_CAPTURE(bm_paired, save_all, policy::save_all)->Name("mlp_paired/save_all")->Iterations(1);
BENCHMARK_CAPTURE(bm_paired, dots_saveable, policy::dots_saveable)->Name("mlp_paired/dots_saveable")->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
