// A tensor shape with a negative extent. The typed faces take shapes as
// values (shard_slices<M, S>(std::array) checks only their rank at compile
// time), so this calls the constexpr shape check make_shape in a constant
// expression: extent -1 of dim 1.
// expect: negative_extent<1, *-1>
#include <array>
#include <cstdint>
#include <xshard/sharding/shards.hpp>

#ifdef XSHARD_NEGATIVE
constexpr std::array<std::int64_t, 2> shape{8, -1};
#else
constexpr std::array<std::int64_t, 2> shape{8, 1};
#endif
static_assert(xshard::raise<xshard::make_shape(shape).diag>());
