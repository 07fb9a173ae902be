// An axis index must name one of the mesh's axes: index 2 on a 2-axis mesh.
// expect: axis_index_out_of_range<2, *2>
#include <xshard/sharding/sharding.hpp>

using M = xshard::mesh<"data=4, model=2">;

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto& op = xshard::op_sharding_v<M, xshard::spec<"0, 2">>;
#else
[[maybe_unused]] constexpr auto& op = xshard::op_sharding_v<M, xshard::spec<"0, 1">>;
#endif
