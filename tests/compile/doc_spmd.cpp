// The examples in the top comments of include/xshard/spmd/*.hpp, compiled
// (never run): each header's `// Example (compiled in ...)` block is copied
// here line for line, and scripts/check_doc_examples.sh (CTest
// docs.examples) fails when a line of it is missing. Anything else in this
// file is the context an example takes for granted (its mesh, its tensors,
// a user's function), and run-time statements sit in functions that are
// never called. mpi_mesh.hpp's example needs <mpi.h>: it is compiled where
// the build has MPI (tests/CMakeLists.txt gives this file xshard::mpi's
// include dirs and XSHARD_WITH_MPI).
#include <cstdint>
#include <vector>
#include <xshard/spmd/einsum.hpp>
#include <xshard/spmd/global.hpp>
#include <xshard/spmd/sharded.hpp>
#include <xshard/spmd/thread_mesh.hpp>
#include <xtensor/xtensor.hpp>
#if defined(XSHARD_WITH_MPI)  // set by the CMake target xshard::mpi
#include <xshard/spmd/mpi_mesh.hpp>
#endif

// clang-format off
namespace {

// --- xshard/spmd/einsum.hpp ---
namespace einsum_hpp {
using M = xshard::mesh<"data=2, model=2">;
constexpr auto plan = xshard::einsum_plan<"...n,mn->...m", M, xshard::spec<"data, None, None">,
                                          xshard::spec<"model, None">>();
static_assert(plan.collective_count() == 0);        // column-parallel: no traffic

[[maybe_unused]] void example(const xshard::sharded<float, 3, M, xshard::spec<"data, None, None">>& x,
                              const xshard::sharded<float, 2, M, xshard::spec<"model, None">>& w) {
  auto y = xshard::einsum<"...n,mn->...m">(x, w);     // x, w: xshard::sharded<...>
}
}  // namespace einsum_hpp

// --- xshard/spmd/global.hpp ---
namespace global_hpp {
using M = xshard::mesh<"data=2, model=2">;

[[maybe_unused]] void example(const xt::xtensor<float, 3>& x, const xt::xtensor<float, 2>& w) {
  xshard::thread_mesh<M> mesh;
  auto X = xshard::distribute<xshard::spec<"data, None, None">>(mesh, x);  // every device's block
  auto W = xshard::distribute<xshard::spec<"model, None">>(mesh, w);
  xt::xtensor<float, 3> y = xshard::gather(xshard::einsum<"...n,mn->...m">(X, W));
}
}  // namespace global_hpp

// --- xshard/spmd/sharded.hpp ---
namespace sharded_hpp {
using M = xshard::mesh<"data=2, model=2">;

[[maybe_unused]] void example(const xt::xtensor<float, 2>& global_x) {
  xshard::thread_mesh<M> devices;
  devices.run([&](auto& dev) {
    auto x = xshard::distribute<xshard::spec<"data, None">>(dev, global_x);  // no traffic
    auto y = xshard::redistribute<xshard::spec<"None, model">>(x);          // one all-to-all
    xt::xtensor<float, 2> back = xshard::gather(y);                          // all-gather
  });
}
}  // namespace sharded_hpp

// --- xshard/spmd/thread_mesh.hpp ---
namespace thread_mesh_hpp {
std::vector<float> local_gradient(std::int64_t position) { return std::vector<float>(4, static_cast<float>(position)); }

[[maybe_unused]] void example() {
  using M = xshard::mesh<"data=4, model=2">;
  xshard::thread_mesh<M> devices;          // up to 8 worker threads, kept for later runs
  devices.run([&](auto& dev) {              // dev: xshard::thread_device<M>&, on a worker thread
    std::vector<float> g = local_gradient(dev.position());
    dev.all_reduce(g, xshard::reduce_op::sum, dev.axes("data"));   // over the 4 devices of a column
  });
}
}  // namespace thread_mesh_hpp

}  // namespace

#if defined(XSHARD_WITH_MPI)
// --- xshard/spmd/mpi_mesh.hpp --- In a namespace its `main` is an ordinary
// function (never called, in a named namespace so that it is not an unused
// one), which gets no implicit `return 0;`.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wreturn-type"
namespace doc_spmd_mpi_mesh_hpp {
std::vector<float> grad(8);

using M = xshard::mesh<"data=2, model=2">;
int main() {                               // mpiexec -n 4 ./program
  xshard::mpi_mesh<M> devices;             // initialises MPI if needed
  devices.run([&](auto& dev) {             // once, on this rank's device
    dev.all_reduce(grad, xshard::reduce_op::sum, dev.axes("data"));
  });
}
}  // namespace doc_spmd_mpi_mesh_hpp
#pragma GCC diagnostic pop
#endif
// clang-format on
