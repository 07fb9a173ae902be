// A mesh axis may appear at most once in a partition spec; the error names it
// (here through an index and a name that both mean `model`).
// expect: axis_used_twice<xshard::axis<'m', *'o', *'d', *'e', *'l'> *>
#include <xshard/sharding/sharding.hpp>

using M = xshard::mesh<"data=4, model=2">;

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto s = xshard::hlo_sharding<M, xshard::spec<"(1, data), model">>();
#else
[[maybe_unused]] constexpr auto s = xshard::hlo_sharding<M, xshard::spec<"(1, data), None">>();
#endif
