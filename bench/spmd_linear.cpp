// bench/spmd_linear.cpp - a data-parallel linear layer on a thread mesh of 2
// devices against 1 device (issue 5's target: 1.8x).
//
//   build/release/bench/spmd_linear --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// y = einsum("...n,mn->...m", x, w) with x (16, 256, 1024) sharded on `data`
// and w (1024, 1024) replicated: no collectives (the plan is checked at
// compile time below). Each device runs its kernels on its own thread, so 1
// device is one thread of work and 2 devices are two. The operands are
// distributed once; each iteration is one thread_mesh::run of the layer.
// Counters: GFLOP/s of the whole layer; the summary prints 2 devices / 1.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>
#include <xshard/spmd/einsum.hpp>
#include <xshard/spmd/sharded.hpp>
#include <xshard/spmd/thread_mesh.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>

namespace {

constexpr std::size_t B = 16, S = 256, N = 1024, Mo = 1024;

const xt::xtensor<float, 3>& input() {
  static const xt::xtensor<float, 3> x = xt::random::rand<float>({B, S, N});
  return x;
}
const xt::xtensor<float, 2>& weight() {
  static const xt::xtensor<float, 2> w = xt::random::rand<float>({Mo, N});
  return w;
}

template <xshard::fixed_string MeshText>
void bench_linear(benchmark::State& state) {
  using M = xshard::mesh<MeshText>;
  using XS = xshard::spec<"data, None, None">;
  using WS = xshard::spec<"None, None">;
  using X = xshard::sharded<float, 3, M, XS>;
  using W = xshard::sharded<float, 2, M, WS>;
  static_assert(xshard::einsum_plan_of<"...n,mn->...m", X, W>().collective_count() == 0);
  xshard::thread_mesh<M> mesh;
  std::vector<std::optional<X>> xs(static_cast<std::size_t>(M::size()));
  std::vector<std::optional<W>> ws(static_cast<std::size_t>(M::size()));
  mesh.run([&](auto& dev) {
    const auto p = static_cast<std::size_t>(dev.position());
    xs[p].emplace(xshard::distribute<XS>(dev, input()));
    ws[p].emplace(xshard::distribute<WS>(dev, weight()));
  });
  for (auto _ : state) {
    mesh.run([&](auto& dev) {
      const auto p = static_cast<std::size_t>(dev.position());
      auto y = xshard::einsum<"...n,mn->...m">(*xs[p], *ws[p]);
      benchmark::DoNotOptimize(y.local().data());
    });
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * B * S * N * Mo * static_cast<double>(state.iterations()) * 1e-9,
                                                 benchmark::Counter::kIsRate);
  state.counters["devices"] = static_cast<double>(M::size());
}

class summary : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
      const auto it = r.counters.find("GFLOP/s");
      if (it != r.counters.end()) gflops_[r.run_name.function_name] = it->second.value;
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    const double one = gflops_["linear/1_device"], two = gflops_["linear/2_devices"];
    std::printf("\nspmd linear: 1 device %.1f GFLOP/s, 2 devices %.1f GFLOP/s, speedup %.2fx (target 1.8x)\n", one, two,
                two / one);
  }

 private:
  std::map<std::string, double> gflops_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RegisterBenchmark("linear/1_device", bench_linear<"data=1">)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("linear/2_devices", bench_linear<"data=2">)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  summary reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
