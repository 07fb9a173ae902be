// An axis of size 0 is a compile error naming the axis and its size.
// expect: bad_axis_size<xshard::axis<'d', *'a', *'t', *'a'>, *0>
#include <xshard/mesh/mesh.hpp>

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto n = xshard::mesh<"data=0, model=2">::size();
#else
[[maybe_unused]] constexpr auto n = xshard::mesh<"data=1, model=2">::size();
#endif
