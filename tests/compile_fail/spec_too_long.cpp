// A partition spec of more than max_spec_rank (16) entries is a compile error
// carrying the count and the limit.
// expect: spec_too_long<17, *16>
#include <xshard/sharding/spec.hpp>

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto r = xshard::spec<"0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0">::rank();
#else
[[maybe_unused]] constexpr auto r = xshard::spec<"0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0">::rank();
#endif
