// The usage examples at the top of the spmd/ headers, compiled: each
// header's example lines appear here verbatim (scripts/check_doc_examples.sh
// checks it), inside the context they need. (spmd/mpi_mesh.hpp's needs
// <mpi.h>: it is compiled by tests/mpi/.)
#include <vector>
#include <xshard/spmd/global.hpp>
#include <xshard/spmd/thread_mesh.hpp>
#include <xtensor/xtensor.hpp>

namespace {

template <class Position>
std::vector<float> local_gradient(const Position&) {
  return std::vector<float>(16, 1.0f);
}

namespace doc_thread_mesh {  // spmd/thread_mesh.hpp
[[maybe_unused]] void example() {
  using M = xshard::mesh<"data=4, model=2">;
  xshard::thread_mesh<M> devices;  // starts 8 worker threads, kept for later runs
  devices.run([&](auto& dev) {     // dev: xshard::thread_device<M>&, on its own thread
    std::vector<float> g = local_gradient(dev.position());
    dev.all_reduce(g, xshard::reduce_op::sum, dev.axes("data"));  // over the 4 devices of a column
  });
}
}  // namespace doc_thread_mesh

namespace doc_sharded {  // spmd/sharded.hpp
using M = xshard::mesh<"data=2, model=2">;
[[maybe_unused]] void example(const xt::xtensor<float, 2>& global_x) {
  xshard::thread_mesh<M> devices;
  devices.run([&](auto& dev) {
    auto x = xshard::distribute<xshard::spec<"data, None">>(dev, global_x);  // no traffic
    auto y = xshard::redistribute<xshard::spec<"None, model">>(x);           // one all-to-all
    xt::xtensor<float, 2> back = xshard::gather(y);                          // all-gather
  });
}
}  // namespace doc_sharded

namespace doc_global {  // spmd/global.hpp
using M = xshard::mesh<"data=2, model=2">;
using xshard::spec;
[[maybe_unused]] void example(const xt::xtensor<float, 3>& x, const xt::xtensor<float, 2>& w) {
  xshard::thread_mesh<M> mesh;
  auto X = xshard::distribute<spec<"data, None, None">>(mesh, x);  // every device's block
  auto W = xshard::distribute<spec<"model, None">>(mesh, w);
  xt::xtensor<float, 3> y = xshard::gather(xshard::einsum<"...n,mn->...m">(X, W));
}
}  // namespace doc_global

namespace doc_spmd_einsum {  // spmd/einsum.hpp
using M = xshard::mesh<"data=2, model=2">;
constexpr auto plan =
    xshard::einsum_plan<"...n,mn->...m", M, xshard::spec<"data, None, None">, xshard::spec<"model, None">>();
static_assert(plan.collective_count() == 0);  // column-parallel: no traffic
[[maybe_unused]] void example(const xt::xtensor<float, 3>& gx, const xt::xtensor<float, 2>& gw) {
  xshard::thread_mesh<M> devices;
  devices.run([&](auto& dev) {
    auto x = xshard::distribute<xshard::spec<"data, None, None">>(dev, gx);
    auto w = xshard::distribute<xshard::spec<"model, None">>(dev, gw);
    auto y = xshard::einsum<"...n,mn->...m">(x, w);  // x, w: xshard::sharded<...>
  });
}
}  // namespace doc_spmd_einsum

}  // namespace
