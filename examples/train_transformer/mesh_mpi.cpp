// train_transformer --mpi: the same training loop under mpiexec -n 4, one MPI
// rank per device of the 2x2 mesh (xshard::mpi_mesh). Built where the
// xshard::mpi target exists.
#include <mpi.h>

#include <xshard/spmd/mpi_mesh.hpp>

#include "train_loop.hpp"

namespace train_transformer {

int mpi_rank() {
  xshard::detail::mpi_environment::ensure();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

run_result train_mpi(const Dense::params& init, const options& o, std::size_t first_step) {
  // Four processes share the machine's cores: one einsum thread each.
  xshard::set_num_threads(1);
  run_result result;
  xshard::mpi_mesh<Mesh> mesh;
  mesh.run([&](auto& dev) {
    result = o.layout == layout_kind::tp ? train_on<Tp>(dev, init, o, first_step, dev.id() == 0)
                                         : train_on<Sp>(dev, init, o, first_step, dev.id() == 0);
    // Every rank checked its own counters; rank 0 reports for all.
    int mismatches = result.mismatch.empty() ? 0 : 1;
    dev.all_reduce(std::span<int>(&mismatches, 1), xshard::reduce_op::sum, xshard::axis_set{3});
    if (mismatches > 0 && result.mismatch.empty())
      result.mismatch = std::to_string(mismatches) + " other rank(s) ran collectives that differ from the plan";
  });
  return result;
}

}  // namespace train_transformer
