// bench/mpi_allreduce.cpp - the MPI backend's all_reduce beside a raw
// MPI_Allreduce on the same buffer (float sum, in place, 1, 16 and 64 MiB).
//
//   mpiexec -n 2 build/release/bench/mpi_allreduce     (or -n 4)
//
// Per size and repetition, both are timed back to back (order alternating):
// a barrier, then `inner` calls (64 MiB / size), the slowest rank's time
// divided by `inner`. Prints the median of 5 repetitions per size, as
// milliseconds per call and algorithm bandwidth (buffer bytes / time), and
// the device's time over MPI's. The device adds one small MPI_Allgather per
// call (the group's call descriptions, checked before the data moves).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>
#include <xshard/mesh/mesh.hpp>
#include <xshard/spmd/mpi_mesh.hpp>

namespace {

constexpr std::int64_t mib = std::int64_t{1} << 20;
constexpr int repetitions = 5;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Seconds per call of `inner` calls of f, on the slowest rank.
template <class F>
double time_calls(std::int64_t inner, F&& f) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t k = 0; k < inner; ++k) f();
  const double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest / static_cast<double>(inner);
}

template <class M>
void bench() {
  xshard::mpi_mesh<M> devices;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    std::printf("mpi_allreduce: %lld ranks, float sum in place, median of %d\n", static_cast<long long>(M::size()),
                repetitions);
    std::printf("%8s %14s %14s %14s %14s %8s\n", "MiB", "xshard ms", "MPI ms", "xshard GB/s", "MPI GB/s", "ratio");
  }
  devices.run([&](auto& dev) {
    for (std::int64_t bytes : {1 * mib, 16 * mib, 64 * mib}) {
      std::vector<float> buf(static_cast<std::size_t>(bytes) / sizeof(float), 0.0f);
      const int n = static_cast<int>(buf.size());
      const std::int64_t inner = bytes >= 64 * mib ? 2 : 64 * mib / bytes;
      auto ours = [&] { dev.all_reduce(buf, xshard::reduce_op::sum, 1); };
      auto raw = [&] { MPI_Allreduce(MPI_IN_PLACE, buf.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); };
      time_calls(1, ours);  // warm up: pages, connections
      time_calls(1, raw);
      std::vector<double> t_ours, t_raw;
      for (int r = 0; r < repetitions; ++r) {
        if (r % 2 == 0) {
          t_ours.push_back(time_calls(inner, ours));
          t_raw.push_back(time_calls(inner, raw));
        } else {
          t_raw.push_back(time_calls(inner, raw));
          t_ours.push_back(time_calls(inner, ours));
        }
      }
      const double a = median(t_ours), b = median(t_raw);
      if (rank == 0)
        std::printf("%8lld %14.3f %14.3f %14.2f %14.2f %8.3f\n", static_cast<long long>(bytes / mib), a * 1e3, b * 1e3,
                    static_cast<double>(bytes) / a / 1e9, static_cast<double>(bytes) / b / 1e9, a / b);
    }
  });
}

}  // namespace

int main() {
  MPI_Init(nullptr, nullptr);
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world == 2) {
    bench<xshard::mesh<"x=2">>();
  } else if (world == 4) {
    bench<xshard::mesh<"x=4">>();
  } else {
    std::fprintf(stderr, "mpi_allreduce: run with mpiexec -n 2 or -n 4 (the world has %d ranks)\n", world);
    MPI_Finalize();
    return 1;
  }
  MPI_Finalize();
  return 0;
}
