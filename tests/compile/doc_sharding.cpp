// The examples in the top comments of include/xshard/sharding/*.hpp, compiled
// (never run): each header's `// Example (compiled in ...)` block is copied
// here line for line, and scripts/check_doc_examples.sh (CTest
// docs.examples) fails when a line of it is missing. Anything else in this
// file is the context an example takes for granted (its tensors, its mesh),
// and run-time statements sit in functions that are never called.
#include <xshard/sharding/sdy.hpp>
#include <xshard/sharding/shardable.hpp>
#include <xshard/sharding/sharding.hpp>
#include <xtensor/xfixed.hpp>   // xt::xtensor_fixed, in shardable.hpp's example
#include <xtensor/xtensor.hpp>  // xt::xtensor

// clang-format off
namespace {

// --- xshard/sharding/sdy.hpp ---
namespace sdy_hpp {
using M = xshard::mesh<"data=4, model=2">;
static_assert(xshard::sdy_mesh<M>() == R"(sdy.mesh @mesh = <["data"=4, "model"=2]>)");
static_assert(xshard::sdy_sharding<M, xshard::spec<"data, None">>() == R"(#sdy.sharding<@mesh, [{"data"}, {}]>)");
static_assert(xshard::sdy_sharding<M, xshard::spec<"(data, model)">>() ==
              R"(#sdy.sharding<@mesh, [{"data", "model"}]>)");
using M2 = xshard::mesh<"x=4", 3, 0, 2, 1>;
static_assert(xshard::sdy_sharding_inline<M2, xshard::spec<"x">>() ==
              R"(#sdy.sharding<mesh<["x"=4], device_ids=[3, 0, 2, 1]>, [{"x"}]>)");

[[maybe_unused]] void example() {
  auto p = xshard::parse_sdy_or_throw(R"(sdy.mesh @mesh = <["x"=4, "y"=2]>
                                         #sdy.sharding<@mesh, [{"y", ?}, {}], replicated={"x"}>)");
  // p.mesh == runtime_mesh("x=4, y=2"), p.spec_text() == "y, None"
  (void)p;
}
}  // namespace sdy_hpp

// --- xshard/sharding/sharding.hpp ---
namespace sharding_hpp {
using M = xshard::mesh<"data=4, model=2">;
using S = xshard::spec<"data, None">;
static_assert(xshard::hlo_sharding<M, S>() ==
              "{devices=[4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
static_assert(xshard::hlo_sharding_v2<M, S>() == "{devices=[4,1,2]<=[8] last_tile_dim_replicate}");
constexpr auto& op = xshard::op_sharding_v<M, S>;
static_assert(op.type == xshard::sharding_type::partial && op.replication_groups[3][1] == 7);
}  // namespace sharding_hpp

// --- xshard/sharding/shardable.hpp ---
namespace shardable_hpp {
using M = xshard::mesh<"data=4, model=2">;
using S = xshard::spec<"data, None">;
using T = xt::xtensor<float, 2>;

static_assert(xshard::shardable<M, xshard::spec<"data, None">, xt::xtensor<float, 2>>);
static_assert(!xshard::shardable<M, xshard::spec<"data">, xt::xtensor<float, 2>>);
static_assert(xshard::evenly_shardable<M, S, xt::xtensor_fixed<float, xt::xshape<8, 6>>>);
static_assert(xshard::check_shardable<M, S, T>());  // else a compile error naming both ranks, or the dim
}  // namespace shardable_hpp

}  // namespace
// clang-format on
