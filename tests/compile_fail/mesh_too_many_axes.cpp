// A mesh of more than max_mesh_axes (8) axes is a compile error carrying the
// count and the limit.
// expect: too_many_mesh_axes<9, *8>
#include <xshard/mesh/mesh.hpp>

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto n = xshard::mesh<"a=1, b=1, c=1, d=1, e=1, f=1, g=1, h=1, i=1">::size();
#else
[[maybe_unused]] constexpr auto n = xshard::mesh<"a=1, b=1, c=1, d=1, e=1, f=1, g=1, h=1">::size();
#endif
