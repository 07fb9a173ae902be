// The typed shard_slices<M, S> checks the rank of its std::array shape at
// compile time: a 2-entry spec with a rank-1 shape.
// expect: spec_rank_mismatch<2, *1>
#include <array>
#include <cstdint>
#include <xshard/sharding/shards.hpp>

using M = xshard::mesh<"data=4, model=2">;
using S = xshard::spec<"data, model">;

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] const auto layout = xshard::shard_slices<M, S>(std::array<std::int64_t, 1>{8});
#else
[[maybe_unused]] const auto layout = xshard::shard_slices<M, S>(std::array<std::int64_t, 2>{8, 6});
#endif
