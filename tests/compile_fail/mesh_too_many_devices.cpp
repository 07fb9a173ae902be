// A mesh of more than 2^24 devices names the count and the limit (it was
// reported as a device-count mismatch).
// expect: mesh_has_too_many_devices<33554432, 16777216>
#include <xshard/mesh/mesh.hpp>

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto n = xshard::mesh<"a=4096, b=8192">::size();
#else
[[maybe_unused]] constexpr auto n = xshard::mesh<"a=64, b=64">::size();
#endif
