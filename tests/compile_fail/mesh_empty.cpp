// Mesh text with no axis is a compile error of its own (the count it carries
// is the axes found: none).
// expect: mesh_has_no_axes<0>
#include <xshard/mesh/mesh.hpp>

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto n = xshard::mesh<"  ">::size();
#else
[[maybe_unused]] constexpr auto n = xshard::mesh<"data=4">::size();
#endif
