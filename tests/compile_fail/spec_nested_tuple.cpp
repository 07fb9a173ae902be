// Tuples in a partition spec cannot nest; the error carries the column of the
// inner '(' (column 8 of "(data, (model))").
// expect: nested_tuple_in_spec<8>
#include <xshard/sharding/sharding.hpp>

using M = xshard::mesh<"data=4, model=2">;

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto t = xshard::sharding_type_v<M, xshard::spec<"(data, (model))">>;
#else
[[maybe_unused]] constexpr auto t = xshard::sharding_type_v<M, xshard::spec<"(data, model)">>;
#endif
