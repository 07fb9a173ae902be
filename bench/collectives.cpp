// bench/collectives.cpp - the thread backend's all-reduce and all-gather
// beside a single-thread std::memcpy of the same size.
//
// What is timed (sizes 1, 16 and 64 MiB; thread_mesh of 2 and 4 devices,
// mesh<"x=2"> and mesh<"x=4">, a worker thread per device, created once per
// benchmark):
//
//   memcpy/<bytes>                  std::memcpy of <bytes> on one thread
//   all_reduce/<devices>/<bytes>    float sum over all devices, in place, of a
//                                   <bytes> buffer per device
//   all_gather/<devices>/<bytes>    float all-gather whose output is <bytes>
//                                   per device (each input <bytes> / devices)
//
// bytes_per_second is the algorithm bandwidth: the buffer (all-reduce) or
// output (all-gather) bytes of one device over the time of one collective,
// as nccl-tests' algbw; the memcpy line is the same size over its time. One
// benchmark iteration is one run() of the mesh whose body calls the
// collective `inner` times (64 MiB / size, so run()'s wake-up of the worker
// threads is amortised at small sizes); the buffers are touched by their
// device's thread before timing starts.
//
// And the latency of small collectives when devices outnumber cores:
//
//   latency/<workers>               thread_mesh<mesh<"x=2, y=2">> on <workers>
//                                   worker threads (4: a thread per device; 2
//                                   or 1: the devices of a thread are fibers);
//                                   each device all-reduces (max) 16 KiB over y,
//                                   then over x, 2000 times per run (a
//                                   train_mlp layer's sizes and axes);
//                                   s_per_call is the time of one.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>
#include <xshard/mesh/mesh.hpp>
#include <xshard/spmd/thread_mesh.hpp>

namespace {

constexpr std::int64_t mib = std::int64_t{1} << 20;

std::int64_t inner_calls(std::int64_t bytes) { return bytes >= 64 * mib ? 1 : 64 * mib / bytes; }

void bm_memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const std::int64_t inner = inner_calls(state.range(0));
  for (auto _ : state) {
    for (std::int64_t k = 0; k < inner; ++k) {
      std::memcpy(dst.data(), src.data(), bytes);
      benchmark::DoNotOptimize(dst.data());
      benchmark::ClobberMemory();
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * inner * state.range(0));
}

template <class M>
void bm_all_reduce(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0)) / sizeof(float);
  xshard::thread_mesh<M> devices(M::size());
  std::vector<std::vector<float>> data(static_cast<std::size_t>(M::size()));
  devices.run([&](auto& dev) { data[static_cast<std::size_t>(dev.position())].assign(n, 0.0f); });
  const std::int64_t inner = inner_calls(state.range(0));
  for (auto _ : state) {
    devices.run([&](auto& dev) {
      auto& mine = data[static_cast<std::size_t>(dev.position())];
      for (std::int64_t k = 0; k < inner; ++k) dev.all_reduce(mine, xshard::reduce_op::sum, 1);
    });
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * inner * state.range(0));
  state.counters["devices"] = static_cast<double>(M::size());
}

template <class M>
void bm_all_gather(benchmark::State& state) {
  const auto out_n = static_cast<std::size_t>(state.range(0)) / sizeof(float);
  const std::size_t in_n = out_n / static_cast<std::size_t>(M::size());
  xshard::thread_mesh<M> devices(M::size());
  std::vector<std::vector<float>> in(static_cast<std::size_t>(M::size())), out(in.size());
  devices.run([&](auto& dev) {
    const auto p = static_cast<std::size_t>(dev.position());
    in[p].assign(in_n, 1.0f);
    out[p].assign(out_n, 0.0f);
  });
  const std::int64_t inner = inner_calls(state.range(0));
  for (auto _ : state) {
    devices.run([&](auto& dev) {
      const auto p = static_cast<std::size_t>(dev.position());
      for (std::int64_t k = 0; k < inner; ++k) dev.all_gather(in[p], out[p], 1);
    });
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * inner * state.range(0));
  state.counters["devices"] = static_cast<double>(M::size());
}

void bm_latency(benchmark::State& state) {
  using M = xshard::mesh<"x=2, y=2">;
  constexpr std::int64_t inner = 2000;
  xshard::thread_mesh<M> devices(state.range(0));
  std::vector<std::vector<float>> data(static_cast<std::size_t>(M::size()));
  devices.run([&](auto& dev) { data[static_cast<std::size_t>(dev.position())].assign(4096, 1.0f); });
  for (auto _ : state) {
    devices.run([&](auto& dev) {
      auto& mine = data[static_cast<std::size_t>(dev.position())];
      for (std::int64_t k = 0; k < inner; ++k) {
        dev.all_reduce(mine, xshard::reduce_op::max, dev.axes("y"));  // max: the values stay finite
        dev.all_reduce(mine, xshard::reduce_op::max, dev.axes("x"));
      }
    });
  }
  state.counters["s_per_call"] =
      benchmark::Counter(2.0 * inner, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["workers"] = static_cast<double>(devices.workers());
}

void sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t s : {1 * mib, 16 * mib, 64 * mib}) b->Arg(s);
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(bm_memcpy)->Name("memcpy")->Apply(sizes);
BENCHMARK(bm_all_reduce<xshard::mesh<"x=2">>)->Name("all_reduce/2")->Apply(sizes);
BENCHMARK(bm_all_reduce<xshard::mesh<"x=4">>)->Name("all_reduce/4")->Apply(sizes);
BENCHMARK(bm_all_gather<xshard::mesh<"x=2">>)->Name("all_gather/2")->Apply(sizes);
BENCHMARK(bm_all_gather<xshard::mesh<"x=4">>)->Name("all_gather/4")->Apply(sizes);
BENCHMARK(bm_latency)->Name("latency")->Arg(4)->Arg(2)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
