// Device ids lie in [0, size): id 5 on a mesh of 2 devices.
// expect: device_id_out_of_range<5, *2>
#include <xshard/mesh/mesh.hpp>

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto n = xshard::mesh<"x=2", 0, 5>::size();
#else
[[maybe_unused]] constexpr auto n = xshard::mesh<"x=2", 1, 0>::size();
#endif
