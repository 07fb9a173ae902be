// An empty tuple in a partition spec is a compile error carrying the column
// of its '(' (column 7 of "data, ()").
// expect: empty_tuple_in_spec<7>
#include <xshard/sharding/sharding.hpp>

using M = xshard::mesh<"data=4, model=2">;

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto t = xshard::sharding_type_v<M, xshard::spec<"data, ()">>;
#else
[[maybe_unused]] constexpr auto t = xshard::sharding_type_v<M, xshard::spec<"data, (model)">>;
#endif
