// Device ids in a mesh are unique; the error names the repeated id.
// expect: duplicate_device_id<1>
#include <xshard/mesh/mesh.hpp>

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto n = xshard::mesh<"x=2, y=2", 0, 1, 1, 3>::size();
#else
[[maybe_unused]] constexpr auto n = xshard::mesh<"x=2, y=2", 0, 1, 2, 3>::size();
#endif
