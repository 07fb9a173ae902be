// The 2-D sharded (data x model) linear layers of torch_xla's einsum-linear
// discussion: a column-parallel layer then a row-parallel one, forward and
// backward. The batch stays sharded on `data` throughout, and each einsum
// runs exactly the collectives expected: none for the column-parallel
// forward and the row-parallel input gradient, one all-reduce over `model`
// for the row-parallel forward and the column-parallel input gradient, one
// all-reduce over `data` for each weight gradient. A flatten-to-2D linear
// must gather the batch first and loses the batch sharding.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>
#include <xshard/spmd/einsum.hpp>
#include <xshard/spmd/sharded.hpp>
#include <xshard/spmd/thread_mesh.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>

namespace {

using M = xshard::mesh<"data=2, model=2">;
using xshard::collective_kind;
using xshard::spec;
constexpr xshard::axis_set data = 1, model = 2;

using Batch = spec<"data, None, None">;    // x, y, gy: [b, s, features]
using Hidden = spec<"data, None, model">;  // h = x W1^T, sharded on its features
using ColParallel = spec<"model, None">;   // W1 [m, n]: output features on model
using RowParallel = spec<"None, model">;   // W2 [k, m]: input features on model

using X = xshard::sharded<float, 3, M, Batch>;
using H = xshard::sharded<float, 3, M, Hidden>;
using W1 = xshard::sharded<float, 2, M, ColParallel>;
using W2 = xshard::sharded<float, 2, M, RowParallel>;

constexpr auto one = [](const xshard::sharded_einsum_plan& p, collective_kind k, xshard::axis_set axes) {
  return p.collective_count() == 1 && p.collectives()[0].kind == k && p.collectives()[0].axes == axes;
};

// Forward.
constexpr auto fwd1 = xshard::einsum_plan_of<"...n,mn->...m", X, W1>();
static_assert(fwd1.collective_count() == 0);
static_assert(fwd1.result == H::resolved);
constexpr auto fwd2 = xshard::einsum_plan_of<"...m,km->...k", H, W2>();
static_assert(one(fwd2, collective_kind::all_reduce, model));
static_assert(fwd2.result == X::resolved);
// Backward of layer 2 (gy on the batch layout).
constexpr auto dh = xshard::einsum_plan_of<"...k,km->...m", X, W2>();
static_assert(dh.collective_count() == 0 && dh.result == H::resolved);
constexpr auto dw2 = xshard::einsum_plan_of<"...k,...m->km", X, H>();
static_assert(one(dw2, collective_kind::all_reduce, data) && dw2.result == W2::resolved);
// Backward of layer 1.
constexpr auto dx = xshard::einsum_plan_of<"...m,mn->...n", H, W1>();
static_assert(one(dx, collective_kind::all_reduce, model) && dx.result == X::resolved);
constexpr auto dw1 = xshard::einsum_plan_of<"...m,...n->mn", H, X>();
static_assert(one(dw1, collective_kind::all_reduce, data) && dw1.result == W1::resolved);

// Flatten-to-2D: x [b, s, n] -> [b*s, n] needs b replicated first (a
// reshape cannot keep a dim sharded once it is merged with its neighbour):
// one all-gather over data, and the 2-D linear's output is then replicated
// over data (its rows are no longer sharded).
constexpr auto flatten = xshard::redistribute_plan<X, spec<"None, None, None">>();
static_assert(flatten.collective_count() == 1 && flatten.steps[0].kind == xshard::step_kind::all_gather &&
              flatten.steps[0].axes == data);
using X2 = xshard::sharded<float, 2, M, spec<"None, None">>;
constexpr auto flat_fwd = xshard::einsum_plan_of<"tn,mn->tm", X2, W1>();
static_assert(flat_fwd.result == xshard::detail::typed_resolved<M, spec<"None, model">>());

struct failures {
  std::mutex mu;
  std::vector<std::string> list;
  void add(std::string s) {
    std::lock_guard lock(mu);
    list.push_back(std::move(s));
  }
};

template <class Y>
void expect_calls(const Y&, const xshard::collective_counters& c, std::int64_t all_reduce, const char* what,
                  failures& f) {
  if (c.total_calls() != all_reduce || c.calls_of(collective_kind::all_reduce) != all_reduce)
    f.add(std::string(what) + ": " + std::to_string(c.total_calls()) + " collectives, expected " +
          std::to_string(all_reduce) + " all-reduce");
}

TEST(SpmdLinear, TwoDShardedForwardAndBackwardKeepTheBatchSharding) {
  xt::random::seed(5);
  const xt::xtensor<float, 3> x = xt::random::randint<int>({4, 3, 6}, -4, 4);
  const xt::xtensor<float, 2> w1 = xt::random::randint<int>({8, 6}, -4, 4);
  const xt::xtensor<float, 2> w2 = xt::random::randint<int>({6, 8}, -4, 4);
  const xt::xtensor<float, 3> gy = xt::random::randint<int>({4, 3, 6}, -4, 4);
  // Single-device references.
  const auto h_ref = xshard::einsum<"...n,mn->...m">(x, w1);
  const auto y_ref = xshard::einsum<"...m,km->...k">(h_ref, w2);
  const auto dh_ref = xshard::einsum<"...k,km->...m">(gy, w2);
  const auto dw2_ref = xshard::einsum<"...k,...m->km">(gy, h_ref);
  const auto dx_ref = xshard::einsum<"...m,mn->...n">(dh_ref, w1);
  const auto dw1_ref = xshard::einsum<"...m,...n->mn">(dh_ref, x);

  xshard::thread_mesh<M> mesh;
  failures f;
  mesh.run([&](auto& dev) {
    const auto xs = xshard::distribute<Batch>(dev, x);
    const auto w1s = xshard::distribute<ColParallel>(dev, w1);
    const auto w2s = xshard::distribute<RowParallel>(dev, w2);
    const auto gys = xshard::distribute<Batch>(dev, gy);
    auto step = [&](auto run, std::int64_t all_reduce, const char* what) {
      dev.reset_counters();
      auto r = run();
      expect_calls(r, dev.counters(), all_reduce, what, f);
      return r;
    };
    const auto h = step([&] { return xshard::einsum<"...n,mn->...m">(xs, w1s); }, 0, "forward 1");
    const auto y = step([&] { return xshard::einsum<"...m,km->...k">(h, w2s); }, 1, "forward 2");
    const auto dhs = step([&] { return xshard::einsum<"...k,km->...m">(gys, w2s); }, 0, "dh");
    const auto dw2s = step([&] { return xshard::einsum<"...k,...m->km">(gys, h); }, 1, "dW2");
    const auto dxs = step([&] { return xshard::einsum<"...m,mn->...n">(dhs, w1s); }, 1, "dx");
    const auto dw1s = step([&] { return xshard::einsum<"...m,...n->mn">(dhs, xs); }, 1, "dW1");
    // The batch stays sharded on data (the types say so; check a block too).
    static_assert(std::is_same_v<typename decltype(y)::spec_type, spec<"data, None, None">>);
    static_assert(std::is_same_v<typename decltype(dxs)::spec_type, spec<"data, None, None">>);
    static_assert(std::is_same_v<typename decltype(dw1s)::spec_type, spec<"model, None">>);
    static_assert(std::is_same_v<typename decltype(dw2s)::spec_type, spec<"None, model">>);
    if (y.local().shape()[0] != 2) f.add("forward 2: the batch block is not half the batch");
    auto same = [&](const auto& s, const auto& ref, const char* what) {
      if (xshard::gather(s) != ref) f.add(std::string(what) + " differs from the single-device result");
    };
    same(h, h_ref, "h");
    same(y, y_ref, "y");
    same(dhs, dh_ref, "dh");
    same(dw2s, dw2_ref, "dW2");
    same(dxs, dx_ref, "dx");
    same(dw1s, dw1_ref, "dW1");
  });
  for (const auto& s : f.list) ADD_FAILURE() << s;
}

}  // namespace

namespace {

// Gradients of sharded einsums are sharded einsums of the derived equations,
// laid out like their operands.
constexpr auto vjp_w1 = xshard::einsum_vjp_plan<"...n,mn->...m", 1, H, X, W1>();
static_assert(vjp_w1.collective_count() == 1 && vjp_w1.collectives()[0].kind == collective_kind::all_reduce &&
              vjp_w1.collectives()[0].axes == data);
static_assert(vjp_w1.result == W1::resolved);
constexpr auto vjp_x = xshard::einsum_vjp_plan<"...n,mn->...m", 0, H, X, W1>();
static_assert(vjp_x.collective_count() == 1 && vjp_x.collectives()[0].axes == model && vjp_x.result == X::resolved);

TEST(SpmdLinear, EinsumVjpMatchesTheSingleDeviceGradients) {
  xt::random::seed(6);
  const xt::xtensor<float, 3> x = xt::random::randint<int>({4, 3, 6}, -4, 4);
  const xt::xtensor<float, 2> w = xt::random::randint<int>({8, 6}, -4, 4);
  const xt::xtensor<float, 3> gh = xt::random::randint<int>({4, 3, 8}, -4, 4);
  const auto dx_ref = xshard::einsum_vjp<"...n,mn->...m", 0>(gh, x, w);
  const auto dw_ref = xshard::einsum_vjp<"...n,mn->...m", 1>(gh, x, w);
  xshard::thread_mesh<M> mesh;
  failures f;
  mesh.run([&](auto& dev) {
    const auto xs = xshard::distribute<Batch>(dev, x);
    const auto ws = xshard::distribute<ColParallel>(dev, w);
    const auto ghs = xshard::distribute<Hidden>(dev, gh);
    dev.reset_counters();
    const auto dw = xshard::einsum_vjp<"...n,mn->...m", 1>(ghs, xs, ws);
    if (dev.counters().calls_of(collective_kind::all_reduce) != 1 || dev.counters().total_calls() != 1)
      f.add("dW: expected exactly one all-reduce");
    static_assert(std::is_same_v<typename decltype(dw)::spec_type, ColParallel>);
    const auto dx = xshard::einsum_vjp<"...n,mn->...m", 0>(ghs, xs, ws);
    static_assert(std::is_same_v<typename decltype(dx)::spec_type, Batch>);
    if (xshard::gather(dw) != dw_ref) f.add("dW differs");
    if (xshard::gather(dx) != dx_ref) f.add("dx differs");
  });
  for (const auto& s : f.list) ADD_FAILURE() << s;
}

}  // namespace
