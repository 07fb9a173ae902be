// A tour of the sharding engine: typed meshes and specs checked at compile
// time, the same answers at run time, shard slices of an uneven tensor, and
// the picture of where each block lives.
#include <array>
#include <cstdint>
#include <iostream>
#include <xshard/xshard.hpp>
#include <xtensor/xtensor.hpp>

using M = xshard::mesh<"data=4, model=2">;  // 8 devices, row-major
using Batch = xshard::spec<"data, None">;   // rows over `data`, replicated over `model`
using Weight = xshard::spec<"None, model">;

// torch_xla's OpSharding and XLA's text, computed by the compiler.
static_assert(xshard::sharding_type_v<M, Batch> == xshard::sharding_type::partial);
static_assert(xshard::hlo_sharding<M, Batch>() == "{devices=[4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
static_assert(xshard::hlo_sharding_v2<M, Weight>() == "{devices=[1,2,4]<=[4,2]T(1,0) last_tile_dim_replicate}");
static_assert(xshard::op_sharding_v<M, Weight>.replication_groups[1][3] == 7);
// Tensor types are checked against specs; the static extents even divide.
static_assert(xshard::shardable<M, Batch, xt::xtensor<float, 2>>);
static_assert(!xshard::shardable<M, Batch, xt::xtensor<float, 3>>);
// A misspelt axis would not compile; it would print
//   unknown_axis_name<xshard::axis<'d','a','t'>, xshard::mesh_axes_are<'d','a','t','a',...>>
// constexpr auto oops = xshard::hlo_sharding<M, xshard::spec<"dat, None">>();

int main() {
  std::cout << "mesh " << M::text.view() << ": " << M::size() << " devices\n";
  std::cout << "Batch  " << xshard::hlo_sharding<M, Batch>().view() << '\n';
  std::cout << "Weight " << xshard::hlo_sharding<M, Weight>().view() << "\n\n";

  // The same engine at run time, e.g. with a mesh read from a config file.
  const xshard::runtime_mesh rm("data=4, model=2", {7, 6, 5, 4, 3, 2, 1, 0});
  std::cout << "custom device order: " << xshard::hlo_sharding_text(rm, "data, None") << "\n\n";

  // An uneven tensor: 10 rows over 4 shards of ceil(10/4) = 3 rows.
  const std::array<std::int64_t, 2> shape{10, 6};
  std::cout << xshard::visualize<M, xshard::spec<"data, model">>(shape) << '\n';
  for (const xshard::shard& s : xshard::shard_slices<M, xshard::spec<"data, model">>(shape).shards) {
    std::cout << "device " << s.device << " rows [" << s.slices[0].start << ", " << s.slices[0].end << ") cols ["
              << s.slices[1].start << ", " << s.slices[1].end << ")\n";
  }

  // Bad input at run time: the same words as the compile-time error.
  try {
    (void)xshard::get_op_sharding(rm, "data, dat");
  } catch (const xshard::error& e) {
    std::cout << "\nrejected: " << e.what() << '\n';
  }
}
