// Sharded-tensor cases shared by the thread backend's gtest
// (runtime/spmd_backends_test.cpp) and the MPI test program
// (mpi/spmd_mpi_test.cpp): the same SPMD bodies on a 4-device mesh
// "x=2, y=2", whatever runs them.
//
// run_sharded_cases(backend) distributes integer-valued tensors of uneven
// shapes, checks gather(distribute(x)) == x, redistributes between specs,
// and runs sharded einsums against the single-device einsum; each device
// checks that its collective counters equal the compile-time plan. Returns
// this process's failures (the thread backend: every device's; MPI: this
// rank's).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <vector>
#include <xshard/spmd/einsum.hpp>
#include <xshard/spmd/sharded.hpp>
#include <xtensor/xtensor.hpp>

namespace xshard_test {

template <class... S>
struct spec_list {};

/// Every spec of a rank-2 tensor on a mesh with axes x and y.
using specs_2d_xy =
    spec_list<xshard::spec<"None, None">, xshard::spec<"x, None">, xshard::spec<"None, x">, xshard::spec<"y, None">,
              xshard::spec<"None, y">, xshard::spec<"x, y">, xshard::spec<"y, x">, xshard::spec<"(x, y), None">,
              xshard::spec<"(y, x), None">, xshard::spec<"None, (x, y)">, xshard::spec<"None, (y, x)">>;

/// Rank-3 specs on a mesh with axes x, y, z (a sample covering tuples,
/// every axis on every dim, and partial use of the mesh).
using specs_3d_xyz =
    spec_list<xshard::spec<"None, None, None">, xshard::spec<"x, y, z">, xshard::spec<"z, None, (x, y)">,
              xshard::spec<"(x, y, z), None, None">, xshard::spec<"None, (z, x), y">, xshard::spec<"y, None, None">,
              xshard::spec<"None, None, (y, z)">>;

/// The sample the backends share (7 of specs_2d_xy).
using sharded_specs =
    spec_list<xshard::spec<"None, None">, xshard::spec<"x, None">, xshard::spec<"None, y">, xshard::spec<"x, y">,
              xshard::spec<"y, x">, xshard::spec<"(x, y), None">, xshard::spec<"None, (y, x)">>;

template <class T, std::size_t R>
xt::xtensor<T, R> integer_tensor(const std::array<std::size_t, R>& shape, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> d(-8, 8);  // sums stay exact in float
  xt::xtensor<T, R> t(shape);
  for (auto& v : t) v = static_cast<T>(d(g));
  return t;
}

struct failure_list {
  std::mutex mu;
  std::vector<std::string> list;
  void add(std::string s) {
    std::lock_guard lock(mu);
    list.push_back(std::move(s));
  }
};

template <class Backend, class SA, class SB>
void sharded_einsum_case(Backend& backend, const xt::xtensor<float, 2>& a, const xt::xtensor<float, 2>& b,
                         const xt::xtensor<float, 2>& want, failure_list& f) {
  using M = typename Backend::mesh_type;
  using XA = xshard::sharded<float, 2, M, SA>;
  using XB = xshard::sharded<float, 2, M, SB>;
  constexpr xshard::sharded_einsum_plan plan = xshard::einsum_plan_of<"ij,jk->ik", XA, XB>();
  constexpr xshard::einsum_binding bind = xshard::detail::sharded_binding<"ij,jk->ik", 2, 2>();
  const std::array<std::int64_t, 2> sa{static_cast<std::int64_t>(a.shape()[0]),
                                       static_cast<std::int64_t>(a.shape()[1])};
  const std::array<std::int64_t, 2> sb{static_cast<std::int64_t>(b.shape()[0]),
                                       static_cast<std::int64_t>(b.shape()[1])};
  const std::span<const std::int64_t> shapes[] = {sa, sb};
  const std::int64_t bytes = xshard::plan_bytes_sent(plan, bind, M::mesh_shape(), shapes, 4);
  const std::string what = std::string(SA::text.view()) + " | " + std::string(SB::text.view());
  backend.run([&](auto& dev) {
    const auto xa = xshard::distribute<SA>(dev, a);
    const auto xb = xshard::distribute<SB>(dev, b);
    if (xshard::gather(xa) != a) f.add(what + ": gather(distribute(a)) != a on device " + std::to_string(dev.id()));
    dev.reset_counters();
    const auto y = xshard::einsum<"ij,jk->ik">(xa, xb);
    std::int64_t sent = 0;
    for (std::int64_t v : dev.counters().bytes) sent += v;
    if (dev.counters().total_calls() != static_cast<std::int64_t>(plan.collective_count()) || sent != bytes)
      f.add(what + ": device " + std::to_string(dev.id()) + " ran " + std::to_string(dev.counters().total_calls()) +
            " collectives / " + std::to_string(sent) + " bytes, the plan says " +
            std::to_string(plan.collective_count()) + " / " + std::to_string(bytes));
    if (xshard::gather(y) != want) f.add(what + ": ij,jk->ik differs on device " + std::to_string(dev.id()));
    // And back to B's layout by the rule table.
    const auto z = xshard::redistribute<SB>(y);
    if (xshard::gather(z) != want)
      f.add(what + ": redistribute changed the values on device " + std::to_string(dev.id()));
  });
}

template <class Backend, class SA, class... SB>
void sharded_row(Backend& backend, const xt::xtensor<float, 2>& a, const xt::xtensor<float, 2>& b,
                 const xt::xtensor<float, 2>& want, failure_list& f, spec_list<SB...>) {
  (sharded_einsum_case<Backend, SA, SB>(backend, a, b, want, f), ...);
}

template <class Backend, class... SA>
void sharded_all(Backend& backend, const xt::xtensor<float, 2>& a, const xt::xtensor<float, 2>& b,
                 const xt::xtensor<float, 2>& want, failure_list& f, spec_list<SA...> all) {
  (sharded_row<Backend, SA>(backend, a, b, want, f, all), ...);
}

/// Every pair of sharded_specs for A (7 x 5) and B (5 x 6): uneven on a 2x2 mesh.
template <class Backend>
std::vector<std::string> run_sharded_cases(Backend& backend) {
  static_assert(Backend::mesh_type::size() == 4, "the sharded cases run on a 4-device mesh \"x=2, y=2\"");
  const auto a = integer_tensor<float, 2>({7, 5}, 21);
  const auto b = integer_tensor<float, 2>({5, 6}, 22);
  const xt::xtensor<float, 2> want = xshard::einsum<"ij,jk->ik">(a, b);
  failure_list f;
  sharded_all(backend, a, b, want, f, sharded_specs{});
  return std::move(f.list);
}

}  // namespace xshard_test
