// bench/checkpoint.cpp - checkpoint write and read throughput of a 256 MiB
// model on the 2x2 thread mesh against plain stdio on the same bytes, in one
// run (needs xshard::hdf5; built only where HDF5 is).
//
// The model: W1 [16, 2048, 1024] by "None, model, None" and W2 [16, 1024,
// 2048] by "None, None, model" (float32, 128 MiB each), b [16, 2048] by
// "None, model". Each device holds half of each weight (replicated over
// data); of each pair of replicas the one at data coordinate 0 writes it.
//
//   checkpoint/write/hdf5           checkpoint_writer::commit() on the mesh (incl. fsync + rename)
//   checkpoint/write/hdf5_nocheck   the same without Fletcher-32 checksums
//   checkpoint/write/fwrite         fwrite of the same 256 MiB + fflush + fsync (the physical limit)
//   checkpoint/read/hdf5_2x2        each device reads its blocks (the loaded model: 256 MiB, as MB/s)
//   checkpoint/read/hdf5_1          one process reads the whole tensors (resharding onto one device)
//   checkpoint/read/fread           fread of the 256 MiB fwrite wrote
//
// MB/s counts the model's bytes (2^20 per MB). Files go to $XSHARD_BENCH_DIR
// (default /tmp). Reads come from the page cache when the file was just
// written and memory allows: the fread peer reads under the same conditions.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>
#include <xshard/checkpoint/checkpoint.hpp>
#include <xshard/spmd/thread_mesh.hpp>
#include <xtensor/xtensor.hpp>

namespace {

using M = xshard::mesh<"data=2, model=2">;
constexpr std::size_t L = 16, H = 2048, W = 1024;
constexpr double model_bytes = 2.0 * L * H * W * 4 + L * H * 4;

std::string dir() {
  const char* d = std::getenv("XSHARD_BENCH_DIR");
  return d ? d : "/tmp";
}
std::string h5_path() { return dir() + "/xshard_bench_checkpoint.h5"; }
std::string raw_path() { return dir() + "/xshard_bench_checkpoint.raw"; }

struct model {
  xt::xtensor<float, 3> w1, w2;
  xt::xtensor<float, 2> b;
};
const model& global_model() {
  static const model m = [] {
    model g{xt::xtensor<float, 3>::from_shape({L, H, W}), xt::xtensor<float, 3>::from_shape({L, W, H}),
            xt::xtensor<float, 2>::from_shape({L, H})};
    for (std::size_t i = 0; i < g.w1.size(); ++i) g.w1.data()[i] = static_cast<float>(i % 1013) * 1e-3f;
    for (std::size_t i = 0; i < g.w2.size(); ++i) g.w2.data()[i] = static_cast<float>(i % 917) * 1e-3f;
    for (std::size_t i = 0; i < g.b.size(); ++i) g.b.data()[i] = static_cast<float>(i);
    return g;
  }();
  return m;
}

void mb_per_s(benchmark::State& state) {
  state.counters["MB/s"] = benchmark::Counter(model_bytes * static_cast<double>(state.iterations()) / (1 << 20),
                                              benchmark::Counter::kIsRate);
}

void write_hdf5(benchmark::State& state) {
  const model& g = global_model();
  xshard::thread_mesh<M> mesh;
  const bool checksum = state.range(0) != 0;
  for (auto _ : state) {
    double seconds = 0;
    mesh.run([&](auto& dev) {
      // Timed by device 0 from a barrier after the blocks exist to the end
      // of commit() (which ends with a barrier): the save alone.
      auto w1 = xshard::distribute<xshard::spec<"None, model, None">>(dev, g.w1);
      auto w2 = xshard::distribute<xshard::spec<"None, None, model">>(dev, g.w2);
      auto b = xshard::distribute<xshard::spec<"None, model">>(dev, g.b);
      dev.barrier(3);
      const auto t0 = std::chrono::steady_clock::now();
      xshard::checkpoint_writer w(dev, h5_path(), 1, {.checksum = checksum});
      w.add("w1", w1);
      w.add("w2", w2);
      w.add("b", b);
      w.commit();
      if (dev.position() == 0) seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
    state.SetIterationTime(seconds);
  }
  mb_per_s(state);
}

void write_fwrite(benchmark::State& state) {
  const model& g = global_model();
  for (auto _ : state) {
    std::FILE* f = std::fopen(raw_path().c_str(), "wb");
    std::fwrite(g.w1.data(), 4, g.w1.size(), f);
    std::fwrite(g.w2.data(), 4, g.w2.size(), f);
    std::fwrite(g.b.data(), 4, g.b.size(), f);
    std::fflush(f);
    ::fsync(::fileno(f));
    std::fclose(f);
  }
  mb_per_s(state);
}

void read_hdf5_mesh(benchmark::State& state) {
  const model& g = global_model();
  xshard::thread_mesh<M> mesh;
  bool wrong = false;
  for (auto _ : state) {
    double seconds = 0;
    mesh.run([&](auto& dev) {
      auto w1 =
          xshard::distribute<xshard::spec<"None, model, None">>(dev, xt::xtensor<float, 3>::from_shape({L, H, W}));
      auto w2 =
          xshard::distribute<xshard::spec<"None, None, model">>(dev, xt::xtensor<float, 3>::from_shape({L, W, H}));
      auto b = xshard::distribute<xshard::spec<"None, model">>(dev, xt::xtensor<float, 2>::from_shape({L, H}));
      dev.barrier(3);
      const auto t0 = std::chrono::steady_clock::now();
      xshard::checkpoint_reader r(dev, h5_path());
      r.read("w1", w1);
      r.read("w2", w2);
      r.read("b", b);
      dev.barrier(3);
      if (dev.position() == 0) {
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!(w1.local()(3, 5, 7) == g.w1(3, static_cast<std::size_t>(5 + w1.slices()[1].start), 7))) wrong = true;
      }
    });
    state.SetIterationTime(seconds);
  }
  if (wrong) state.SkipWithError("wrong value");
  mb_per_s(state);
}

void read_hdf5_one(benchmark::State& state) {
  model m{xt::xtensor<float, 3>::from_shape({L, H, W}), xt::xtensor<float, 3>::from_shape({L, W, H}),
          xt::xtensor<float, 2>::from_shape({L, H})};
  for (auto _ : state) {
    xshard::checkpoint_reader r(h5_path());
    r.read("w1", m.w1);
    r.read("w2", m.w2);
    r.read("b", m.b);
  }
  if (!(m.w2 == global_model().w2)) state.SkipWithError("wrong values");
  mb_per_s(state);
}

void read_fread(benchmark::State& state) {
  model m{xt::xtensor<float, 3>::from_shape({L, H, W}), xt::xtensor<float, 3>::from_shape({L, W, H}),
          xt::xtensor<float, 2>::from_shape({L, H})};
  for (auto _ : state) {
    std::FILE* f = std::fopen(raw_path().c_str(), "rb");
    std::size_t n = std::fread(m.w1.data(), 4, m.w1.size(), f);
    n += std::fread(m.w2.data(), 4, m.w2.size(), f);
    n += std::fread(m.b.data(), 4, m.b.size(), f);
    std::fclose(f);
    benchmark::DoNotOptimize(n);
  }
  mb_per_s(state);
}

}  // namespace

BENCHMARK(write_hdf5)
    ->Name("checkpoint/write/hdf5")
    ->Arg(1)
    ->Iterations(4)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(write_hdf5)
    ->Name("checkpoint/write/hdf5_nocheck")
    ->Arg(0)
    ->Iterations(4)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(write_fwrite)->Name("checkpoint/write/fwrite")->Iterations(4)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(write_hdf5)
    ->Name("checkpoint/write/hdf5_again")
    ->Arg(1)
    ->Iterations(4)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(read_hdf5_mesh)
    ->Name("checkpoint/read/hdf5_2x2")
    ->Iterations(4)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(read_hdf5_one)->Name("checkpoint/read/hdf5_1")->Iterations(4)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(read_fread)->Name("checkpoint/read/fread")->Iterations(4)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
