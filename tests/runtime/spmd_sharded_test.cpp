// Sharded tensors on a thread mesh: distribute / gather / redistribute are
// exact for every spec (uneven shapes included), against the sharding
// engine's shard slices; sharded einsum equals the single-device einsum, and
// the collectives each device ran equal the compile-time plan.
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
#include <xtensor/xreducer.hpp>
#include <xtensor/xtensor.hpp>

#include "../spmd/sharded_cases.hpp"
#include "../support/expect_error.hpp"

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

template <class M, class S, class T, std::size_t R>
void check_distribute_gather(xshard::thread_mesh<M>& mesh, const xt::xtensor<T, R>& x, failures& f) {
  std::array<std::int64_t, R> shape{};
  for (std::size_t d = 0; d < R; ++d) shape[d] = static_cast<std::int64_t>(x.shape()[d]);
  const xshard::shard_layout engine = xshard::shard_slices<M, S>(shape);
  mesh.run([&](auto& dev) {
    const auto xs = xshard::distribute<S>(dev, x);
    // The block is the engine's shard slice of this device (the reference).
    const xshard::shard* ref = engine.find(dev.id());
    const auto sl = xs.slices();
    for (std::size_t d = 0; d < R; ++d)
      if (ref == nullptr || !(sl[d] == ref->slices[d]))
        f.add(std::string(S::text.view()) + ": device " + std::to_string(dev.id()) + " dim " + std::to_string(d) +
              " slice differs from the sharding engine's");
    const xt::xtensor<T, R> back = xshard::gather(xs);
    if (back != x)
      f.add(std::string(S::text.view()) + ": gather(distribute(x)) != x on device " + std::to_string(dev.id()));
  });
}

template <class M, class T, std::size_t R, class... S>
void all_distribute_gather(specs<S...>, const std::array<std::size_t, R>& shape) {
  xshard::thread_mesh<M> mesh;
  const auto x = random_tensor<T, R>(shape, 7);
  failures f;
  (check_distribute_gather<M, S>(mesh, x, f), ...);
  for (const auto& s : f.list) ADD_FAILURE() << M::text.view() << " " << s;
}

TEST(SpmdSharded, DistributeGatherIsExactForEverySpec2x2) {
  using M = xshard::mesh<"x=2, y=2">;
  for (auto shape : {std::array<std::size_t, 2>{4, 6}, std::array<std::size_t, 2>{5, 3},
                     std::array<std::size_t, 2>{1, 7}, std::array<std::size_t, 2>{0, 3}})
    all_distribute_gather<M, float>(specs_2d_xy{}, shape);
}

TEST(SpmdSharded, DistributeGatherIsExactForEverySpec1x4) {
  using M = xshard::mesh<"x=1, y=4">;
  for (auto shape :
       {std::array<std::size_t, 2>{8, 4}, std::array<std::size_t, 2>{5, 3}, std::array<std::size_t, 2>{2, 9}})
    all_distribute_gather<M, double>(specs_2d_xy{}, shape);
}

TEST(SpmdSharded, DistributeGatherIsExactOn2x2x2) {
  using M = xshard::mesh<"x=2, y=2, z=2">;
  for (auto shape : {std::array<std::size_t, 3>{8, 4, 4}, std::array<std::size_t, 3>{5, 3, 7}})
    all_distribute_gather<M, float>(specs_3d_xyz{}, shape);
}

TEST(SpmdSharded, ExplicitDeviceIdsFollowTheMesh) {
  using M = xshard::mesh<"x=2, y=2", 3, 1, 2, 0>;
  all_distribute_gather<M, float>(specs_2d_xy{}, std::array<std::size_t, 2>{5, 6});
}

TEST(SpmdSharded, ShardsAndPictureOfAShardedTensor) {
  using M = xshard::mesh<"x=2, y=2">;
  xshard::thread_mesh<M> mesh;
  const auto x = random_tensor<float, 2>({4, 6}, 3);
  std::mutex mu;
  std::vector<std::string> pictures;
  failures f;
  mesh.run([&](auto& dev) {
    const auto xs = xshard::distribute<spec<"x, y">>(dev, x);
    const xshard::shard_layout layout = xshard::shards(xs);
    const xshard::shard* mine = layout.find(dev.id());
    if (mine == nullptr || !(mine->slices[0] == xs.slices()[0]) || !(mine->slices[1] == xs.slices()[1]))
      f.add("shards(x) disagrees with x.slices() on device " + std::to_string(dev.id()));
    std::lock_guard lock(mu);
    pictures.push_back(xshard::visualize(xs));
  });
  for (const auto& s : f.list) ADD_FAILURE() << s;
  ASSERT_EQ(pictures.size(), 4u);
  for (const auto& p : pictures) EXPECT_EQ(p, pictures[0]);
  // The engine's picture of the same sharding: device d holds block (d / 2, d % 2).
  EXPECT_EQ(pictures[0], (xshard::visualize<M, spec<"x, y">>(std::array<std::int64_t, 2>{4, 6})));
  EXPECT_NE(pictures[0].find("3"), std::string::npos);
}

TEST(SpmdSharded, ManualRegionCallsCollectivesAndHandsBackASharded) {
  // Row sums of x [6, 8] sharded (x, y): each device sums its block's rows,
  // which is a partial sum over y; the region all-reduces it itself and
  // hands back a vector sharded on x.
  using M = xshard::mesh<"x=2, y=2">;
  xshard::thread_mesh<M> mesh;
  const auto x = random_tensor<float, 2>({6, 8}, 9);
  const xt::xtensor<float, 1> want = xt::sum(x, {1});
  failures f;
  mesh.run([&](auto& dev) {
    const auto xs = xshard::distribute<spec<"x, y">>(dev, x);
    const auto sums = xshard::manual<spec<"x">>(
        std::array<std::int64_t, 1>{6},
        [&](const xt::xtensor<float, 2>& block) {
          xt::xtensor<float, 1> s = xt::sum(block, {1});
          dev.all_reduce(std::span<float>(s.data(), s.size()), xshard::reduce_op::sum, dev.axes("y"));
          return s;
        },
        xs);
    if (xshard::gather(sums) != want) f.add("manual row sums differ on device " + std::to_string(dev.id()));
    // A partial result handed back as such is reduced by gather.
    const auto partial = xshard::manual<spec<"x">, 2>(
        std::array<std::int64_t, 1>{6},
        [](const xt::xtensor<float, 2>& block) { return xt::xtensor<float, 1>(xt::sum(block, {1})); }, xs);
    if (xshard::gather(partial) != want) f.add("partial manual result not reduced by gather");
  });
  for (const auto& s : f.list) ADD_FAILURE() << s;
}

// --- redistribute: every pair of rank-2 specs on 2x2, uneven shape. ---

template <class M, class From, class To, class T>
void check_redistribute(xshard::thread_mesh<M>& mesh, const xt::xtensor<T, 2>& x, failures& f) {
  using X = xshard::sharded<T, 2, M, From>;
  constexpr xshard::redist_plan plan = xshard::redistribute_plan<X, To>();
  std::array<std::int64_t, 2> shape{static_cast<std::int64_t>(x.shape()[0]), static_cast<std::int64_t>(x.shape()[1])};
  mesh.run([&](auto& dev) {
    const auto xs = xshard::distribute<From>(dev, x);
    dev.reset_counters();
    const auto ys = xshard::redistribute<To>(xs);
    const std::string what = std::string(From::text.view()) + " -> " + std::string(To::text.view());
    // The result is exactly the block `To` assigns to this device.
    const auto want = xshard::distribute<To>(dev, x);
    if (ys.local() != want.local()) f.add(what + ": wrong block on device " + std::to_string(dev.id()));
    // The device ran exactly the plan's collectives and bytes.
    xshard::collective_counters expect;
    for (std::size_t i = 0; i < plan.steps.size(); ++i) {
      const xshard::redist_step& s = plan.steps[i];
      if (xshard::is_collective(s.kind))
        expect.add(xshard::collective_of(s.kind), xshard::group_size(M::mesh_shape(), s.axes),
                   xshard::step_input_elements(s, plan.before(i).spec, M::mesh_shape(), shape) *
                       static_cast<std::int64_t>(sizeof(T)));
    }
    if (!(dev.counters() == expect)) f.add(what + ": collectives differ from the plan");
  });
}

template <class M, class T, class From, class... To>
void redistribute_from(xshard::thread_mesh<M>& mesh, const xt::xtensor<T, 2>& x, failures& f, specs<To...>) {
  (check_redistribute<M, From, To>(mesh, x, f), ...);
}

template <class M, class T, class... From>
void redistribute_all(specs<From...> all, const std::array<std::size_t, 2>& shape) {
  xshard::thread_mesh<M> mesh;
  const auto x = random_tensor<T, 2>(shape, 11);
  failures f;
  (redistribute_from<M, T, From>(mesh, x, f, all), ...);
  for (const auto& s : f.list) ADD_FAILURE() << M::text.view() << " " << s;
}

TEST(SpmdSharded, RedistributeEveryPairOfSpecs) {
  redistribute_all<xshard::mesh<"x=2, y=2">, float>(specs_2d_xy{}, {5, 7});
  redistribute_all<xshard::mesh<"x=2, y=2">, float>(specs_2d_xy{}, {4, 8});
}

}  // namespace

namespace {

// constrain / redistribute of an rvalue already laid out so moves its block
// (graph::constrain at a layer's end hands it over); an lvalue, or a plan
// with steps, gives a new block. Every case still gathers to the input.
TEST(SpmdSharded, ConstrainOfAnRvalueOfTheSameLayoutMovesItsBlock) {
  xshard::thread_mesh<xshard::mesh<"x=2, y=2">> mesh;
  xt::xtensor<float, 2> x = xt::zeros<float>({6, 4});
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = static_cast<float>(i);
  std::mutex mu;
  int moved = 0, copied = 0, gathered = 0;
  mesh.run([&](auto& dev) {
    auto a = xshard::distribute<spec<"x, None">>(dev, x);
    const float* const block = a.local().data();
    auto b = xshard::constrain<spec<"x, None">>(std::move(a));  // the same layout: moved
    const auto c = xshard::constrain<spec<"x, None">>(b);       // an lvalue: copied
    const bool b_moved = b.local().data() == block, c_copied = c.local().data() != block;
    const auto d = xshard::redistribute<spec<"None, y">>(std::move(b));  // a plan with steps
    const bool full = xshard::gather(c) == x && xshard::gather(d) == x;
    std::lock_guard lock(mu);
    moved += b_moved;
    copied += c_copied;
    gathered += full;
  });
  EXPECT_EQ(moved, 4);
  EXPECT_EQ(copied, 4);
  EXPECT_EQ(gathered, 4);
}

TEST(SpmdSharded, RankMismatchAtRunTimeNamesTheSpec) {
  xshard::thread_mesh<xshard::mesh<"x=2, y=2">> mesh;
  const xt::xarray<float> x = xt::zeros<float>({4, 4, 4});
  EXPECT_XSHARD_ERROR(mesh.run([&](auto& dev) { (void)xshard::distribute<spec<"x, y">>(dev, x); }), "x, y");
}

}  // namespace
