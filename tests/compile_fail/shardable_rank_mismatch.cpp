// check_shardable names both ranks when the spec's length is not the tensor's
// rank: a 1-entry spec for a rank-2 xtensor.
// expect: spec_rank_mismatch<1, *2>
#include <xshard/sharding/shardable.hpp>
#include <xtensor/xtensor.hpp>

using M = xshard::mesh<"data=4, model=2">;

#ifdef XSHARD_NEGATIVE
static_assert(xshard::check_shardable<M, xshard::spec<"data">, xt::xtensor<float, 2>>());
#else
static_assert(xshard::check_shardable<M, xshard::spec<"data, None">, xt::xtensor<float, 2>>());
#endif
