// Sharded einsum on a thread mesh: for every pair of operand specs in the
// lists below and uneven shapes, distribute -> einsum -> gather equals the
// single-device einsum, and the collectives (calls and bytes) each device
// ran equal the compile-time plan.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <tuple>
#include <vector>
#include <xshard/sharding/shards.hpp>
#include <xshard/spmd/einsum.hpp>
#include <xshard/spmd/sharded.hpp>
#include <xshard/spmd/thread_mesh.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xio.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>

#include "../spmd/sharded_cases.hpp"

namespace {

using xshard::spec;

template <class... S>
using specs = xshard_test::spec_list<S...>;
using xshard_test::specs_2d_xy;
using xshard_test::specs_3d_xyz;

template <class T, std::size_t R>
xt::xtensor<T, R> random_tensor(const std::array<std::size_t, R>& shape, unsigned seed) {
  return xshard_test::integer_tensor<T, R>(shape, seed);
}

/// Failures recorded by the devices (gtest assertions are not thread-safe).
using failures = xshard_test::failure_list;

// --- sharded einsum vs the single-device einsum. ---

template <xshard::fixed_string Eq, class M, class SA, class SB, class T, std::size_t RA, std::size_t RB>
void check_einsum(xshard::thread_mesh<M>& mesh, const xt::xtensor<T, RA>& a, const xt::xtensor<T, RB>& b, failures& f) {
  const auto want = xshard::einsum<Eq>(a, b);
  using XA = xshard::sharded<T, RA, M, SA>;
  using XB = xshard::sharded<T, RB, M, SB>;
  constexpr xshard::sharded_einsum_plan plan = xshard::einsum_plan_of<Eq, XA, XB>();
  constexpr xshard::einsum_binding bind = xshard::detail::sharded_binding<Eq, RA, RB>();
  std::array<std::int64_t, RA> sa{};
  std::array<std::int64_t, RB> sb{};
  for (std::size_t d = 0; d < RA; ++d) sa[d] = static_cast<std::int64_t>(a.shape()[d]);
  for (std::size_t d = 0; d < RB; ++d) sb[d] = static_cast<std::int64_t>(b.shape()[d]);
  const std::span<const std::int64_t> shapes[] = {sa, sb};
  const std::int64_t bytes =
      xshard::plan_bytes_sent(plan, bind, M::mesh_shape(), shapes, static_cast<std::int64_t>(sizeof(T)));
  const std::string what =
      std::string(Eq.view()) + " with " + std::string(SA::text.view()) + " | " + std::string(SB::text.view());
  mesh.run([&](auto& dev) {
    const auto xa = xshard::distribute<SA>(dev, a);
    const auto xb = xshard::distribute<SB>(dev, b);
    dev.reset_counters();
    const auto y = xshard::einsum<Eq>(xa, xb);
    const auto counted = dev.counters();
    if (counted.total_calls() != static_cast<std::int64_t>(plan.collective_count()))
      f.add(what + ": " + std::to_string(counted.total_calls()) + " collectives run, plan says " +
            std::to_string(plan.collective_count()));
    std::int64_t sent = 0;
    for (std::int64_t v : counted.bytes) sent += v;
    if (sent != bytes) f.add(what + ": sent " + std::to_string(sent) + " bytes, plan says " + std::to_string(bytes));
    const auto got = xshard::gather(y);
    if (got != want) f.add(what + ": gathered result differs from the single-device einsum");
  });
}

template <xshard::fixed_string Eq, class M, class T, std::size_t RA, std::size_t RB, class SA, class... SB>
void einsum_row(xshard::thread_mesh<M>& mesh, const xt::xtensor<T, RA>& a, const xt::xtensor<T, RB>& b, failures& f,
                specs<SB...>) {
  (check_einsum<Eq, M, SA, SB>(mesh, a, b, f), ...);
}

template <xshard::fixed_string Eq, class M, class T, std::size_t RA, std::size_t RB, class... SA, class SBs>
void einsum_all(specs<SA...>, SBs sb, const std::array<std::size_t, RA>& ashape,
                const std::array<std::size_t, RB>& bshape) {
  xshard::thread_mesh<M> mesh;
  const auto a = random_tensor<T, RA>(ashape, 3);
  const auto b = random_tensor<T, RB>(bshape, 4);
  failures f;
  (einsum_row<Eq, M, T, RA, RB, SA>(mesh, a, b, f, sb), ...);
  for (const auto& s : f.list) ADD_FAILURE() << M::text.view() << " " << s;
}

using M22 = xshard::mesh<"x=2, y=2">;

TEST(SpmdShardedEinsum, MatmulEverySpecPair) {
  einsum_all<"ij,jk->ik", M22, float>(specs_2d_xy{}, specs_2d_xy{}, std::array<std::size_t, 2>{6, 5},
                                      std::array<std::size_t, 2>{5, 7});
}

TEST(SpmdShardedEinsum, TransposedAndReducedForms) {
  using some = specs<spec<"None, None">, spec<"x, y">, spec<"y, None">, spec<"None, (x, y)">, spec<"(y, x), None">>;
  einsum_all<"ij,kj->ik", M22, float>(some{}, some{}, std::array<std::size_t, 2>{5, 3},
                                      std::array<std::size_t, 2>{4, 3});
  einsum_all<"ij,ij->i", M22, double>(some{}, some{}, std::array<std::size_t, 2>{7, 5},
                                      std::array<std::size_t, 2>{7, 5});
  einsum_all<"ij,jk->k", M22, float>(some{}, some{}, std::array<std::size_t, 2>{3, 6},
                                     std::array<std::size_t, 2>{6, 5});
  einsum_all<"ij,kl->ijkl", M22, float>(some{}, some{}, std::array<std::size_t, 2>{2, 3},
                                        std::array<std::size_t, 2>{3, 2});
}

TEST(SpmdShardedEinsum, BatchedOn2x2x2) {
  using M = xshard::mesh<"x=2, y=2, z=2">;
  using sa = specs<spec<"x, None, None">, spec<"x, y, None">, spec<"None, None, z">, spec<"(x, y), None, z">>;
  using sb = specs<spec<"x, None, None">, spec<"None, z, y">, spec<"y, None, None">, spec<"None, None, None">>;
  einsum_all<"bij,bjk->bik", M, float>(sa{}, sb{}, std::array<std::size_t, 3>{4, 5, 6},
                                       std::array<std::size_t, 3>{4, 6, 3});
}

TEST(SpmdShardedEinsum, OneByFourMesh) {
  using M = xshard::mesh<"x=1, y=4">;
  using some = specs<spec<"None, None">, spec<"y, None">, spec<"None, y">, spec<"(x, y), None">>;
  einsum_all<"ij,jk->ik", M, float>(some{}, some{}, std::array<std::size_t, 2>{9, 6}, std::array<std::size_t, 2>{6, 5});
}

}  // namespace

namespace {

// Three operands: the local einsum contracts two sharded labels at once, a
// partial sum over both axes.
template <class M, class SA, class SB, class SC>
void check_three(xshard::thread_mesh<M>& mesh, const xt::xtensor<float, 2>& a, const xt::xtensor<float, 2>& b,
                 const xt::xtensor<float, 2>& c, failures& f) {
  using XA = xshard::sharded<float, 2, M, SA>;
  using XB = xshard::sharded<float, 2, M, SB>;
  using XC = xshard::sharded<float, 2, M, SC>;
  constexpr xshard::sharded_einsum_plan plan = xshard::einsum_plan_of<"ij,jk,kl->il", XA, XB, XC>();
  const auto want = xshard::einsum<"ij,jk,kl->il">(a, b, c);
  const std::string what =
      std::string(SA::text.view()) + " | " + std::string(SB::text.view()) + " | " + std::string(SC::text.view());
  mesh.run([&](auto& dev) {
    const auto xa = xshard::distribute<SA>(dev, a);
    const auto xb = xshard::distribute<SB>(dev, b);
    const auto xc = xshard::distribute<SC>(dev, c);
    dev.reset_counters();
    const auto y = xshard::einsum<"ij,jk,kl->il">(xa, xb, xc);
    if (dev.counters().total_calls() != static_cast<std::int64_t>(plan.collective_count()))
      f.add(what + ": collectives differ from the plan");
    if (xshard::gather(y) != want) f.add(what + ": ij,jk,kl->il differs on device " + std::to_string(dev.id()));
  });
}

TEST(SpmdShardedEinsum, ThreeOperands) {
  using M = xshard::mesh<"x=2, y=2">;
  // j on x and k on y: one all-reduce over both.
  constexpr auto both = xshard::einsum_plan<"ij,jk,kl->il", M, spec<"None, x">, spec<"x, y">, spec<"y, None">>();
  static_assert(both.collective_count() == 1 && both.collectives()[0].axes == 3 && both.local_output.partial == 3);
  xshard::thread_mesh<M> mesh;
  const auto a = random_tensor<float, 2>({5, 6}, 1);
  const auto b = random_tensor<float, 2>({6, 7}, 2);
  const auto c = random_tensor<float, 2>({7, 3}, 3);
  failures f;
  check_three<M, spec<"None, x">, spec<"x, y">, spec<"y, None">>(mesh, a, b, c, f);
  check_three<M, spec<"x, None">, spec<"None, y">, spec<"None, None">>(mesh, a, b, c, f);
  check_three<M, spec<"y, x">, spec<"None, None">, spec<"x, y">>(mesh, a, b, c, f);
  check_three<M, spec<"None, None">, spec<"(x, y), None">, spec<"None, (y, x)">>(mesh, a, b, c, f);
  for (const auto& s : f.list) ADD_FAILURE() << s;
}

}  // namespace
