// Mesh axis names are unique; the error names the repeated one.
// expect: duplicate_axis_name<xshard::axis<'d', *'a', *'t', *'a'> *>
#include <xshard/mesh/mesh.hpp>

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto n = xshard::mesh<"data=4, data=2">::size();
#else
[[maybe_unused]] constexpr auto n = xshard::mesh<"data=4, model=2">::size();
#endif
