// The examples in the top comments of include/xshard/checkpoint/*.hpp,
// compiled (never run): each header's `// Example (compiled in ...)` block
// is copied here line for line, and scripts/check_doc_examples.sh (CTest
// docs.examples) fails when a line of it is missing. Anything else in this
// file is the context an example takes for granted (its meshes, parameters,
// optimizer, step and random engine); run-time statements sit in a function
// that is never called. checkpoint.hpp needs <hdf5.h>: this file is compiled
// where the build has HDF5 (tests/CMakeLists.txt gives it xshard::hdf5's
// include dirs and XSHARD_WITH_HDF5) and is empty elsewhere.
#if defined(XSHARD_WITH_HDF5)  // set by the CMake target xshard::hdf5
#include <cstdint>
#include <random>
#include <xshard/checkpoint/checkpoint.hpp>
#include <xshard/nn/mlp.hpp>
#include <xshard/optim/optimizer.hpp>
#include <xshard/scan/scan_layers.hpp>  // stacked_params
#include <xshard/spmd/thread_mesh.hpp>

// A named namespace: params_on is declared only (this device's blocks of the
// parameters, however a program makes them).
// clang-format off
namespace doc_checkpoint_hpp {
using M = xshard::mesh<"data=2, model=2">;
using Block = xshard::mlp_block<float, xshard::data_model_mlp<M>>;
using M2 = xshard::mesh<"data=1, model=4">;  // another mesh: the same tensors, other blocks
using P = xshard::stacked_params<Block>;
using P2 = xshard::stacked_params<xshard::mlp_block<float, xshard::data_model_mlp<M2>>>;
template <class Params, class Device>
Params params_on(Device& dev);

[[maybe_unused]] void example(std::int64_t step, std::mt19937& engine) {
  xshard::thread_mesh<M> devices;
  xshard::thread_mesh<M2> other_mesh;
  devices.run([&](auto& dev) {                       // thread_mesh or mpi_mesh
    P params = params_on<P>(dev);
    xshard::optimizer<xshard::adamw, P> opt({}, params);
    xshard::checkpoint_writer w(dev, "run/ckpt.h5", step);
    w.add_tuple("params", params, Block::param_names);   // plain or sharded tensors
    w.add_optimizer("adamw", opt, Block::param_names);  // its states and step count
    w.add_rng("rng", engine);
    w.commit();                                      // collective; atomic
  });
  other_mesh.run([&](auto& dev) {                    // any mesh, any specs
    P2 params = params_on<P2>(dev);
    xshard::checkpoint_reader r(dev, "run/ckpt.h5");
    r.read_tuple("params", params, Block::param_names);   // checks names, dtypes, global shapes
  });
}
}  // namespace doc_checkpoint_hpp
// clang-format on
#endif
