// bench/train_tp.cpp - train_mlp's model on the machine's two cores, two
// ways, beside one device on one thread:
//
//   one device, 2 threads  train_mlp --devices 1's run (examples/train_mlp/
//                          single_device.cpp, linked in): each einsum split
//                          over the pool's two threads
//   tensor parallel        the same steps on thread_mesh<mesh<"data=1,
//                          model=2">> (2 devices, a worker thread each):
//                          data_model_mlp's specs put the rows of W1 and
//                          W2 (the hidden dim) on different devices, as
//                          Megatron-LM splits an MLP, so each core keeps its half of the
//                          hidden activations and of both weights; the
//                          devices exchange one all-reduce of the [64, 128]
//                          output per layer forward and one of the input
//                          gradient per layer backward
//
//   build/release/bench/train_tp [--benchmark_filter=...]
//
// two_cores/rounds:<r>: r rounds (5 by default), each timing the one-thread
// run, the two-thread run and the tensor-parallel run back to back (this
// kind of VM drifts by a quarter within minutes, so each round's ratios are
// from adjacent runs), 300 steps each, SGD lr 0.1, remat dots_saveable.
// Counters (seconds, medians): one_t1, one_t2, tp; speedups (medians of the
// rounds' own ratios): one_t1 / one_t2 and one_t1 / tp. Before timing, the
// tensor-parallel run's losses are checked against the one-device run's
// (relative 1e-4: the model axis sums the hidden dimension in two halves).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>
#include <xshard/core/thread_pool.hpp>
#include <xshard/core/workspace.hpp>
#include <xshard/spmd/thread_mesh.hpp>

#include "../examples/train_mlp/model.hpp"

namespace {

using namespace train_mlp;
using TpMesh = xshard::mesh<"data=1, model=2">;
using TpLayout = xshard::data_model_mlp<TpMesh>;
using TpBlock = xshard::mlp_block<T, TpLayout>;
using TpParams = xshard::stacked_params<TpBlock>;

struct tp_run {
  std::vector<float> losses;
  double seconds = 0;
};

/// train_mlp's steps (single_device.cpp's loop) on the tensor-parallel mesh.
tp_run train_tensor_parallel(const data_set& data, const std::vector<DenseBlock::params>& init, std::size_t steps) {
  tp_run run;
  run.losses.resize(steps);
  xshard::thread_mesh<TpMesh> mesh;
  const auto t0 = std::chrono::steady_clock::now();
  mesh.run([&](auto& dev) {
    TpBlock block;
    std::vector<TpBlock::params> per_layer;
    for (const auto& p : init)
      per_layer.push_back({xshard::distribute<TpLayout::w_in>(dev, std::get<0>(p)),
                           xshard::distribute<TpLayout::b_in>(dev, std::get<1>(p)),
                           xshard::distribute<TpLayout::w_out>(dev, std::get<2>(p)),
                           xshard::distribute<TpLayout::b_out>(dev, std::get<3>(p))});
    auto params = xshard::stack_params<TpBlock>(per_layer);
    xshard::optimizer<xshard::sgd, TpParams> opt(make_rule<xshard::sgd>(), params);
    xshard::workspace ws;
    const xshard::workspace::scope use(ws);
    for (std::size_t step = 0; step < steps; ++step) {
      const auto place = [&](const xt::xtensor<T, 2>& all) {
        auto rows = ws.tensor<T, 2>({batch, width});
        xt::noalias(rows) = batch_rows(all, step);
        auto block_rows = xshard::distribute<TpLayout::batch>(dev, rows);
        ws.recycle(std::move(rows));
        return block_rows;
      };
      auto x = place(data.x);
      auto target = place(data.y);
      auto [y, pullback] = xshard::scan_layers_vjp(block, params, std::move(x), xshard::remat::dots_saveable);
      // Every device holds all rows (data = 1) and the same y (the forward's
      // all-reduce over model): the loss needs no collective.
      auto diff = xshard::local_zip(y, target, [](const auto& a, const auto& b) { return a - b; });
      const float loss = xt::sum(diff.local() * diff.local())() / T(batch * width);
      auto gy = xshard::local_map(diff, [](const auto& d) { return d * (T(2) / T(batch * width)); });
      pullback.params_only(std::move(gy), opt.layer_updates(params));
      ws.recycle(std::move(y));
      ws.recycle(std::move(diff));
      ws.recycle(std::move(target));
      if (dev.id() == 0) run.losses[step] = loss;
    }
  });
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return run;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

void bm_two_cores(benchmark::State& state) {
  const std::size_t rounds = static_cast<std::size_t>(state.range(0)), steps = 300;
  const data_set data = make_data();
  const auto init = init_params();
  options o;
  o.steps = steps;
  o.devices = 1;
  o.progress = false;
  const std::size_t before = xshard::num_threads();
  const auto one_device = [&](std::size_t threads) {
    xshard::set_num_threads(threads);
    return train_single_device(data, init, o, 0);
  };
  {  // the check: the same training
    const auto want = one_device(2).losses;
    const auto got = train_tensor_parallel(data, init, steps).losses;
    for (std::size_t i = 0; i < steps; ++i)
      if (!(std::abs(got[i] - want[i]) <= 1e-4 * std::abs(want[i]))) {
        state.SkipWithError(("tensor-parallel loss at step " + std::to_string(i) + " is " + std::to_string(got[i]) +
                             ", one device's " + std::to_string(want[i]))
                                .c_str());
        xshard::set_num_threads(before);
        return;
      }
  }
  std::vector<double> t1, t2, tp, r2, rtp;
  for (auto _ : state) {
    for (std::size_t r = 0; r < rounds; ++r) {
      t1.push_back(one_device(1).seconds);
      t2.push_back(one_device(2).seconds);
      tp.push_back(train_tensor_parallel(data, init, steps).seconds);
      r2.push_back(t1.back() / t2.back());
      rtp.push_back(t1.back() / tp.back());
    }
    state.SetIterationTime(median(t1) + median(t2) + median(tp));
  }
  xshard::set_num_threads(before);
  state.counters["one_t1_s"] = median(t1);
  state.counters["one_t2_s"] = median(t2);
  state.counters["tp_s"] = median(tp);
  state.counters["t1/t2"] = median(r2);
  state.counters["t1/tp"] = median(rtp);
}

BENCHMARK(bm_two_cores)->Name("two_cores/rounds")->Arg(5)->Iterations(1)->UseManualTime()->Unit(benchmark::kSecond);

}  // namespace

BENCHMARK_MAIN();
