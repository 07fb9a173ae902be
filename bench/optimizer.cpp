// bench/optimizer.cpp - one AdamW step of xshard::optimizer over a tuple of
// tensors against the fused loop written by hand over the same arrays.
//
//   adamw/xshard/<floats>   optimizer<adamw, tuple>::step(params, grads)
//   adamw/hand/<floats>     one loop per tensor: m, v, p updated in one pass
//
// The tuple is train_mlp's stacked parameters scaled up: W1 [L, 1024, 256],
// b1 [L, 1024], W2 [L, 256, 1024], b2 [L, 256] (float32), L = 4 (2.1M
// floats) or 32 (16.8M floats, 64 MiB of parameters: memory-bound). Counter
// bytes/s: p, g, m, v read and p, m, v written (28 bytes per float).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstddef>
#include <tuple>
#include <xshard/optim/optimizer.hpp>
#include <xtensor/xtensor.hpp>

namespace {

using P = std::tuple<xt::xtensor<float, 3>, xt::xtensor<float, 2>, xt::xtensor<float, 3>, xt::xtensor<float, 2>>;

P make(std::size_t layers, float v) {
  return {xt::xtensor<float, 3>(xt::full_like(xt::xtensor<float, 3>::from_shape({layers, 1024, 256}), v)),
          xt::xtensor<float, 2>(xt::full_like(xt::xtensor<float, 2>::from_shape({layers, 1024}), v)),
          xt::xtensor<float, 3>(xt::full_like(xt::xtensor<float, 3>::from_shape({layers, 256, 1024}), v)),
          xt::xtensor<float, 2>(xt::full_like(xt::xtensor<float, 2>::from_shape({layers, 256}), v))};
}

std::size_t floats(const P& p) {
  return std::get<0>(p).size() + std::get<1>(p).size() + std::get<2>(p).size() + std::get<3>(p).size();
}

constexpr xshard::adamw rule{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};

void adamw_xshard(benchmark::State& state) {
  P p = make(static_cast<std::size_t>(state.range(0)), 0.5f);
  const P g = make(static_cast<std::size_t>(state.range(0)), 0.01f);
  xshard::optimizer<xshard::adamw, P> opt(rule, p);
  for (auto _ : state) {
    opt.step(p, g);
    benchmark::DoNotOptimize(std::get<0>(p).data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * floats(p) * 28));
  state.counters["floats"] = static_cast<double>(floats(p));
}

/// The loop a person writes for AdamW (PyTorch's formula), fused.
void hand_step(float* p, const float* g, float* m, float* v, std::size_t n, long t) {
  const float b1 = 0.9f, b2 = 0.999f, c1 = 1 - b1, c2 = 1 - b2;
  const float step = static_cast<float>(1e-3 / (1 - std::pow(0.9, t)));
  const float root_bc2 = static_cast<float>(std::sqrt(1 - std::pow(0.999, t)));
  const float decay = static_cast<float>(1 - 1e-3 * 0.01), eps = 1e-8f;
  for (std::size_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + c1 * g[i];
    v[i] = b2 * v[i] + c2 * g[i] * g[i];
    p[i] = p[i] * decay - step * m[i] / (std::sqrt(v[i]) / root_bc2 + eps);
  }
}

void adamw_hand(benchmark::State& state) {
  P p = make(static_cast<std::size_t>(state.range(0)), 0.5f);
  const P g = make(static_cast<std::size_t>(state.range(0)), 0.01f);
  P m = make(static_cast<std::size_t>(state.range(0)), 0.0f), v = m;
  long t = 0;
  for (auto _ : state) {
    ++t;
    hand_step(std::get<0>(p).data(), std::get<0>(g).data(), std::get<0>(m).data(), std::get<0>(v).data(),
              std::get<0>(p).size(), t);
    hand_step(std::get<1>(p).data(), std::get<1>(g).data(), std::get<1>(m).data(), std::get<1>(v).data(),
              std::get<1>(p).size(), t);
    hand_step(std::get<2>(p).data(), std::get<2>(g).data(), std::get<2>(m).data(), std::get<2>(v).data(),
              std::get<2>(p).size(), t);
    hand_step(std::get<3>(p).data(), std::get<3>(g).data(), std::get<3>(m).data(), std::get<3>(v).data(),
              std::get<3>(p).size(), t);
    benchmark::DoNotOptimize(std::get<0>(p).data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * floats(p) * 28));
  state.counters["floats"] = static_cast<double>(floats(p));
}

}  // namespace

BENCHMARK(adamw_xshard)->Name("adamw/xshard")->Arg(4)->Arg(32)->Unit(benchmark::kMillisecond);
BENCHMARK(adamw_hand)->Name("adamw/hand")->Arg(4)->Arg(32)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
