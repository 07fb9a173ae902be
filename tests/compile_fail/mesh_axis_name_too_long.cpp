// An axis name longer than max_axis_name (32) is a compile error that spells
// the name (its first 32 characters).
// expect: axis_name_too_long<xshard::axis<'a', *'a', *'a'
#include <xshard/mesh/mesh.hpp>

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto n = xshard::mesh<"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa=2">::size();  // 33
#else
[[maybe_unused]] constexpr auto n = xshard::mesh<"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa=2">::size();  // 32
#endif
