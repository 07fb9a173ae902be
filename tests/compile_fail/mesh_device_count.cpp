// A mesh needs exactly one id per device: 3 ids for a mesh of 2 x 2 = 4.
// expect: device_count_mismatch<3, *4>
#include <xshard/mesh/mesh.hpp>

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto n = xshard::mesh<"x=2, y=2", 3, 2, 1>::size();
#else
[[maybe_unused]] constexpr auto n = xshard::mesh<"x=2, y=2", 3, 2, 1, 0>::size();
#endif
