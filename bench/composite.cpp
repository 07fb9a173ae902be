// bench/composite.cpp - composite ops: the fused kernel against the
// decomposition into xtensor expressions (ops/composite.hpp).
//
// What is timed, each case once per mode (kernel | decompose), the mode
// passed explicitly so the policy and XSHARD_COMPOSITES play no part:
//
//   gelu/<approx>/<mode>                gelu(x) on 1M floats (none = erf, tanh)
//   gelu_backward/<approx>/<mode>       gelu_backward(g, x) on 1M floats
//   gelu_backward_from_output/none/kernel  the same from x and y = gelu(x) (the
//                                       graph's backward: the cdf is y / x, no erf)
//   gelu_fwd_bwd/<approx>/<mode>        both, as one training step runs them
//   softmax/<mode>                      softmax(x) over the last dim of (1024, 1024) floats
//   softmax_backward/<mode>             softmax_backward(g, y), same shape
//   softmax_dim0/<mode>                 softmax(x) over the first dim of the same shape
//                                       (a strided dim: the column kernels)
//   softmax_dim0_backward/<mode>        softmax_backward(g, y) over the first dim
//   layer_norm/<mode>                   layer_norm(x, w, b) on (1024, 1024) floats
//   layer_norm_backward/<mode>          layer_norm_backward(g, x, mean, rstd, w)
//   rms_norm/<mode>                     rms_norm(x) on (1024, 1024) floats
//   rms_norm_backward/<mode>            rms_norm_backward(g, x, rstd)
//   rms_norm_fwd_bwd/<mode>             both, as one training step runs them
//
// Each call allocates its result (as the public API does). With glibc's
// default malloc the two 4 MB results of gelu_fwd_bwd go back to the OS every
// iteration and page faults add ~5 ms to both modes; run with
//   GLIBC_TUNABLES=glibc.malloc.mmap_threshold=67108864:glibc.malloc.trim_threshold=134217728
// to time the ops alone. Counters:
// items/s (elements of x) and bytes/s (x, plus g for backwards, plus the output).
// The target: fused gelu forward+backward at least 3x the decomposition.
#include <benchmark/benchmark.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <xshard/ops/composite.hpp>

namespace {

using xshard::composite_mode;
using xshard::gelu_approximate;

constexpr std::size_t gelu_n = std::size_t{1} << 20;
constexpr std::size_t rows = 1024, cols = 1024;

template <std::size_t N>
xt::xtensor<float, N> random_tensor(const std::array<std::size_t, N>& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  auto t = xt::xtensor<float, N>::from_shape(shape);
  for (auto& v : t) v = nd(rng);
  return t;
}

void set_counters(benchmark::State& state, std::size_t elements, std::size_t streams) {
  const auto it = static_cast<std::int64_t>(state.iterations());
  state.SetItemsProcessed(it * static_cast<std::int64_t>(elements));
  state.SetBytesProcessed(it * static_cast<std::int64_t>(elements * streams * sizeof(float)));
}

void bm_gelu(benchmark::State& state, gelu_approximate a, composite_mode m) {
  const auto x = random_tensor<1>({gelu_n}, 1);
  for (auto _ : state) {
    auto y = xshard::gelu(x, a, m);
    benchmark::DoNotOptimize(y.data());
  }
  set_counters(state, gelu_n, 2);
}

void bm_gelu_backward(benchmark::State& state, gelu_approximate a, composite_mode m) {
  const auto x = random_tensor<1>({gelu_n}, 1);
  const auto g = random_tensor<1>({gelu_n}, 2);
  for (auto _ : state) {
    auto dx = xshard::gelu_backward(g, x, a, m);
    benchmark::DoNotOptimize(dx.data());
  }
  set_counters(state, gelu_n, 3);
}

void bm_gelu_backward_from_output(benchmark::State& state) {
  const auto x = random_tensor<1>({gelu_n}, 1);
  const auto g = random_tensor<1>({gelu_n}, 2);
  const auto y = xshard::gelu(x, gelu_approximate::none, composite_mode::kernel);
  for (auto _ : state) {
    auto dx = xshard::gelu_backward_from_output(g, x, y);
    benchmark::DoNotOptimize(dx.data());
  }
  set_counters(state, gelu_n, 4);
}

void bm_gelu_fwd_bwd(benchmark::State& state, gelu_approximate a, composite_mode m) {
  const auto x = random_tensor<1>({gelu_n}, 1);
  const auto g = random_tensor<1>({gelu_n}, 2);
  for (auto _ : state) {
    auto y = xshard::gelu(x, a, m);
    auto dx = xshard::gelu_backward(g, x, a, m);
    benchmark::DoNotOptimize(y.data());
    benchmark::DoNotOptimize(dx.data());
  }
  set_counters(state, gelu_n, 5);
}

void bm_softmax(benchmark::State& state, composite_mode m) {
  const auto x = random_tensor<2>({rows, cols}, 3);
  for (auto _ : state) {
    auto y = xshard::softmax(x, -1, m);
    benchmark::DoNotOptimize(y.data());
  }
  set_counters(state, rows * cols, 2);
}

void bm_softmax_backward(benchmark::State& state, composite_mode m) {
  const auto y = xshard::softmax(random_tensor<2>({rows, cols}, 3), -1, composite_mode::kernel);
  const auto g = random_tensor<2>({rows, cols}, 4);
  for (auto _ : state) {
    auto dx = xshard::softmax_backward(g, y, -1, m);
    benchmark::DoNotOptimize(dx.data());
  }
  set_counters(state, rows * cols, 3);
}

void bm_softmax_dim0(benchmark::State& state, composite_mode m) {
  const auto x = random_tensor<2>({rows, cols}, 3);
  for (auto _ : state) {
    auto y = xshard::softmax(x, 0, m);
    benchmark::DoNotOptimize(y.data());
  }
  set_counters(state, rows * cols, 2);
}

void bm_softmax_dim0_backward(benchmark::State& state, composite_mode m) {
  const auto y = xshard::softmax(random_tensor<2>({rows, cols}, 3), 0, composite_mode::kernel);
  const auto g = random_tensor<2>({rows, cols}, 4);
  for (auto _ : state) {
    auto dx = xshard::softmax_backward(g, y, 0, m);
    benchmark::DoNotOptimize(dx.data());
  }
  set_counters(state, rows * cols, 3);
}

void bm_layer_norm(benchmark::State& state, composite_mode m) {
  const auto x = random_tensor<2>({rows, cols}, 5);
  const auto w = random_tensor<1>({cols}, 6);
  const auto b = random_tensor<1>({cols}, 7);
  for (auto _ : state) {
    auto r = xshard::layer_norm(x, w, b, 1e-5, m);
    benchmark::DoNotOptimize(r.output.data());
  }
  set_counters(state, rows * cols, 2);
}

void bm_layer_norm_backward(benchmark::State& state, composite_mode m) {
  const auto x = random_tensor<2>({rows, cols}, 5);
  const auto w = random_tensor<1>({cols}, 6);
  const auto b = random_tensor<1>({cols}, 7);
  const auto g = random_tensor<2>({rows, cols}, 8);
  const auto fwd = xshard::layer_norm(x, w, b, 1e-5, composite_mode::kernel);
  for (auto _ : state) {
    auto grads = xshard::layer_norm_backward(g, x, fwd.mean, fwd.rstd, w, m);
    benchmark::DoNotOptimize(grads.input.data());
  }
  set_counters(state, rows * cols, 3);
}

void bm_rms_norm(benchmark::State& state, composite_mode m) {
  const auto x = random_tensor<2>({rows, cols}, 9);
  for (auto _ : state) {
    auto r = xshard::rms_norm(x, 1e-6, m);
    benchmark::DoNotOptimize(r.output.data());
  }
  set_counters(state, rows * cols, 2);
}

void bm_rms_norm_backward(benchmark::State& state, composite_mode m) {
  const auto x = random_tensor<2>({rows, cols}, 9);
  const auto g = random_tensor<2>({rows, cols}, 10);
  const auto fwd = xshard::rms_norm(x, 1e-6, composite_mode::kernel);
  for (auto _ : state) {
    auto dx = xshard::rms_norm_backward(g, x, fwd.rstd, m);
    benchmark::DoNotOptimize(dx.data());
  }
  set_counters(state, rows * cols, 3);
}

void bm_rms_norm_fwd_bwd(benchmark::State& state, composite_mode m) {
  const auto x = random_tensor<2>({rows, cols}, 9);
  const auto g = random_tensor<2>({rows, cols}, 10);
  for (auto _ : state) {
    auto r = xshard::rms_norm(x, 1e-6, m);
    auto dx = xshard::rms_norm_backward(g, x, r.rstd, m);
    benchmark::DoNotOptimize(r.output.data());
    benchmark::DoNotOptimize(dx.data());
  }
  set_counters(state, rows * cols, 5);
}

const bool registered = [] {
  for (composite_mode m : {composite_mode::kernel, composite_mode::decompose}) {
    const std::string mode(xshard::to_string(m));
    for (gelu_approximate a : {gelu_approximate::none, gelu_approximate::tanh}) {
      const std::string approx(xshard::to_string(a));
      benchmark::RegisterBenchmark(("gelu/" + approx + "/" + mode).c_str(), bm_gelu, a, m)
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(("gelu_backward/" + approx + "/" + mode).c_str(), bm_gelu_backward, a, m)
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(("gelu_fwd_bwd/" + approx + "/" + mode).c_str(), bm_gelu_fwd_bwd, a, m)
          ->Unit(benchmark::kMicrosecond);
    }
    if (m == composite_mode::kernel)
      benchmark::RegisterBenchmark("gelu_backward_from_output/none/kernel", bm_gelu_backward_from_output)
          ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("softmax/" + mode).c_str(), bm_softmax, m)->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("softmax_backward/" + mode).c_str(), bm_softmax_backward, m)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("softmax_dim0/" + mode).c_str(), bm_softmax_dim0, m)->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("softmax_dim0_backward/" + mode).c_str(), bm_softmax_dim0_backward, m)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("layer_norm/" + mode).c_str(), bm_layer_norm, m)->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("layer_norm_backward/" + mode).c_str(), bm_layer_norm_backward, m)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("rms_norm/" + mode).c_str(), bm_rms_norm, m)->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("rms_norm_backward/" + mode).c_str(), bm_rms_norm_backward, m)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("rms_norm_fwd_bwd/" + mode).c_str(), bm_rms_norm_fwd_bwd, m)
        ->Unit(benchmark::kMicrosecond);
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
