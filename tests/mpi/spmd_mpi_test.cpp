// The MPI backend, run under mpiexec (tests/CMakeLists.txt registers it):
//
//   spmd_mpi_test 4       the 4-device meshes  (mpiexec -n 4), the
//                         sharded-tensor cases of tests/spmd/sharded_cases.hpp
//                         and the graph-layer cases of tests/spmd/graph_cases.hpp
//                         and tests/spmd/decoder_cases.hpp
//   spmd_mpi_test 8       the 8-device meshes  (mpiexec -n 8 --oversubscribe)
//   spmd_mpi_test abort   a body throws on position 1 while the others wait
//                         in a collective: every rank must end (MPI_Abort),
//                         with "xshard: device 1 (rank 1) failed: boom"
//   spmd_mpi_test abort_late
//                         on "x=2, y=2" with device ids 3, 2, 1, 0, position 3
//                         throws after two rounds of all-reduces over y and x,
//                         while the others wait in the next sub-group
//                         all-reduce: "xshard: device 0 (rank 3) failed: late boom"
//   spmd_mpi_test abort_unknown
//                         position 2 throws something that is not a
//                         std::exception while the others wait in a barrier:
//                         "xshard: device 2 (rank 2) failed: unknown exception"
//
// Every rank runs the cases of tests/spmd/collective_cases.hpp on its own
// device and prints its failures; an MPI reduction of the failure counts
// decides the exit code. A world of the wrong size fails at the first mesh
// with the constructor's message.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>
#include <xshard/mesh/mesh.hpp>
#include <xshard/spmd/mpi_mesh.hpp>

#include "../spmd/collective_cases.hpp"
#include "../spmd/decoder_cases.hpp"
#include "../spmd/graph_cases.hpp"
#include "../spmd/sharded_cases.hpp"

namespace {

int rank_of_world() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

/// Runs every case on mesh M; returns this rank's failure count.
template <class M>
long run_mesh() {
  xshard::mpi_mesh<M> devices;
  long failures = 0;
  for (int round = 0; round < 2; ++round)
    for (const std::string& f : xshard_test::run_collective_cases(devices)) {
      std::fprintf(stderr, "FAIL rank %d: %s\n", rank_of_world(), f.c_str());
      ++failures;
    }
  // The counters by hand on one call: an all-reduce of 1000 floats over all
  // devices sends 2 (G - 1) / G of its 4000 bytes.
  devices.run([&](auto& dev) {
    dev.reset_counters();
    std::vector<float> v(1000, 1.0f);
    const xshard::axis_set all = (xshard::axis_set{1} << M::rank()) - 1;
    dev.all_reduce(v, xshard::reduce_op::sum, all);
    const std::int64_t g = M::size();
    if (dev.counters().bytes_of(xshard::collective_kind::all_reduce) != 2 * (g - 1) * 4000 / g ||
        v[999] != static_cast<float>(g)) {
      std::fprintf(stderr, "FAIL rank %d: counters or sum of the all-reduce of 1000 floats\n", rank_of_world());
      ++failures;
    }
  });
  if (rank_of_world() == 0) std::printf("mesh \"%s\": done\n", std::string(M::text.view()).c_str());
  return failures;
}

void abort_case() {
  using M = xshard::mesh<"x=4">;
  xshard::mpi_mesh<M> devices;
  devices.run([&](auto& dev) {
    if (dev.position() == 1) throw std::runtime_error("boom");
    std::vector<int> v(16, 1);
    for (int k = 0; k < 3; ++k) dev.all_reduce(v, xshard::reduce_op::sum, 1);
  });
  std::fprintf(stderr, "rank %d: run() returned after a failure\n", rank_of_world());
}

/// A failure after some collectives have completed, inside sub-group
/// collectives, on a mesh whose device ids are not the ranks.
void abort_late_case() {
  using M = xshard::mesh<"x=2, y=2", 3, 2, 1, 0>;
  xshard::mpi_mesh<M> devices;
  devices.run([&](auto& dev) {
    std::vector<float> v(8, 1.0f);
    for (int round = 0; round < 4; ++round) {
      if (round == 2 && dev.position() == 3) throw std::runtime_error("late boom");
      dev.all_reduce(v, xshard::reduce_op::sum, dev.axes("y"));
      dev.all_reduce(v, xshard::reduce_op::sum, dev.axes("x"));
    }
  });
  std::fprintf(stderr, "rank %d: run() returned after a failure\n", rank_of_world());
}

/// A body that throws something other than a std::exception.
void abort_unknown_case() {
  using M = xshard::mesh<"x=4">;
  xshard::mpi_mesh<M> devices;
  devices.run([&](auto& dev) {
    if (dev.position() == 2) throw 42;
    dev.barrier(1);
  });
  std::fprintf(stderr, "rank %d: run() returned after a failure\n", rank_of_world());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what != "4" && what != "8" && what != "abort" && what != "abort_late" && what != "abort_unknown") {
    std::fprintf(stderr, "usage: spmd_mpi_test 4|8|abort|abort_late|abort_unknown\n");
    return 2;
  }
  long failures = 0;
  try {
    if (what == "abort" || what == "abort_late" || what == "abort_unknown") {
      if (what == "abort") abort_case();
      if (what == "abort_late") abort_late_case();
      if (what == "abort_unknown") abort_unknown_case();
      return 1;  // not reached: the body's failure aborts every rank
    }
    if (what == "4") {
      failures += run_mesh<xshard::mesh<"x=4">>();
      failures += run_mesh<xshard::mesh<"x=1, y=4">>();
      failures += run_mesh<xshard::mesh<"x=2, y=2">>();
      failures += run_mesh<xshard::mesh<"x=2, y=2", 3, 2, 1, 0>>();
      xshard::mpi_mesh<xshard::mesh<"x=2, y=2">> devices;
      for (const std::string& f : xshard_test::run_sharded_cases(devices)) {
        std::fprintf(stderr, "FAIL rank %d: %s\n", rank_of_world(), f.c_str());
        ++failures;
      }
      xshard::mpi_mesh<xshard_test::graph_mesh> graph_devices;
      for (const std::string& f : xshard_test::run_graph_cases(graph_devices)) {
        std::fprintf(stderr, "FAIL rank %d: %s\n", rank_of_world(), f.c_str());
        ++failures;
      }
      for (const std::string& f : xshard_test::run_decoder_cases(graph_devices)) {
        std::fprintf(stderr, "FAIL rank %d: %s\n", rank_of_world(), f.c_str());
        ++failures;
      }
    } else {
      failures += run_mesh<xshard::mesh<"x=2, y=2, z=2">>();
      failures += run_mesh<xshard::mesh<"x=2, y=2, z=2", 5, 7, 1, 0, 2, 6, 4, 3>>();
      failures += run_mesh<xshard::mesh<"x=8">>();
    }
  } catch (const std::exception& e) {
    // E.g. the world has the wrong size: every rank gets the same error.
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  long total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank_of_world() == 0) std::printf("%ld failures\n", total);
  return total == 0 ? 0 : 1;
}
