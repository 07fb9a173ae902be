// check_evenly_shardable names the dim, its extent and the tile count: dim 1
// of extent 3 does not split into 2 tiles over `model`.
// expect: uneven_shard<1, *3, *2>
#include <xshard/sharding/shardable.hpp>
#include <xtensor/xfixed.hpp>

using M = xshard::mesh<"data=4, model=2">;

#ifdef XSHARD_NEGATIVE
static_assert(
    xshard::check_evenly_shardable<M, xshard::spec<"data, model">, xt::xtensor_fixed<float, xt::xshape<8, 3>>>());
#else
static_assert(
    xshard::check_evenly_shardable<M, xshard::spec<"data, model">, xt::xtensor_fixed<float, xt::xshape<8, 4>>>());
#endif
