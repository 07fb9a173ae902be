// The usage examples at the top of the core/, mesh/ and sharding/ headers,
// compiled: each header's example lines appear here verbatim
// (scripts/check_doc_examples.sh checks it), inside the context they need.
#include <xshard/core/fixed_string.hpp>
#include <xshard/core/memory.hpp>
#include <xshard/mesh/mesh.hpp>
#include <xshard/sharding/sdy.hpp>
#include <xshard/sharding/shardable.hpp>
#include <xshard/sharding/sharding.hpp>
#include <xtensor/xfixed.hpp>
#include <xtensor/xtensor.hpp>

namespace doc_fixed_string {  // core/fixed_string.hpp
template <xshard::fixed_string Text>
struct mesh;  // mesh<"data=4, model=2">
static_assert(xshard::fixed_string("ab") == "ab");
}  // namespace doc_fixed_string

namespace doc_memory {  // core/memory.hpp
[[maybe_unused]] inline void example() {
  xshard::retain_freed_memory();  // false where the allocator is not glibc's
}
}  // namespace doc_memory

namespace doc_mesh {                        // mesh/mesh.hpp
using M = xshard::mesh<"data=4, model=2">;  // devices 0..7, row-major
using M2 = xshard::mesh<"x=4, y=2", 7, 6, 5, 4, 3, 2, 1, 0>;
static_assert(M::size() == 8 && M::axis_index("model") == 1);
static_assert(M2::logical_mesh()(0, 1) == 6);
[[maybe_unused]] inline void example() {
  xshard::runtime_mesh rm("data=4, model=2");                 // same rules, run time
  xshard::runtime_mesh tm({0, 1, 2, 3}, {2, 2}, {"x", "y"});  // torch_xla order
}
}  // namespace doc_mesh

namespace doc_sharding {  // sharding/sharding.hpp
using M = xshard::mesh<"data=4, model=2">;
using S = xshard::spec<"data, None">;
static_assert(xshard::hlo_sharding<M, S>() == "{devices=[4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
static_assert(xshard::hlo_sharding_v2<M, S>() == "{devices=[4,1,2]<=[8] last_tile_dim_replicate}");
constexpr auto& op = xshard::op_sharding_v<M, S>;
static_assert(op.type == xshard::sharding_type::partial && op.replication_groups[3][1] == 7);
}  // namespace doc_sharding

namespace doc_shardable {  // sharding/shardable.hpp
using M = xshard::mesh<"data=4, model=2">;
using S = xshard::spec<"data, model">;
using T = xt::xtensor<float, 2>;
static_assert(xshard::shardable<M, xshard::spec<"data, None">, xt::xtensor<float, 2>>);
static_assert(!xshard::shardable<M, xshard::spec<"data">, xt::xtensor<float, 2>>);
static_assert(xshard::evenly_shardable<M, S, xt::xtensor_fixed<float, xt::xshape<8, 6>>>);
static_assert(xshard::check_shardable<M, S, T>());  // compile error naming both ranks, or the dim
}  // namespace doc_shardable

namespace doc_sdy {  // sharding/sdy.hpp
using M = xshard::mesh<"data=4, model=2">;
static_assert(xshard::sdy_mesh<M>() == R"(sdy.mesh @mesh = <["data"=4, "model"=2]>)");
static_assert(xshard::sdy_sharding<M, xshard::spec<"data, None">>() == R"(#sdy.sharding<@mesh, [{"data"}, {}]>)");
static_assert(xshard::sdy_sharding<M, xshard::spec<"(data, model)">>() ==
              R"(#sdy.sharding<@mesh, [{"data", "model"}]>)");
using M2 = xshard::mesh<"x=4", 3, 0, 2, 1>;
static_assert(xshard::sdy_sharding_inline<M2, xshard::spec<"x">>() ==
              R"(#sdy.sharding<mesh<["x"=4], device_ids=[3, 0, 2, 1]>, [{"x"}]>)");
[[maybe_unused]] inline void example() {
  auto p = xshard::parse_sdy_or_throw(R"(sdy.mesh @mesh = <["x"=4, "y"=2]>
                                         #sdy.sharding<@mesh, [{"y", ?}, {}], replicated={"x"}>)");
  // p.mesh == runtime_mesh("x=4, y=2"), p.spec_text() == "y, None"
  (void)p;
}
}  // namespace doc_sdy
