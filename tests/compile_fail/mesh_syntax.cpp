// Malformed mesh text is a compile error carrying the column and character:
// the ';' at column 7 of "data=4; model=2".
// expect: mesh_syntax_error<7, *';'>
#include <xshard/mesh/mesh.hpp>

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto n = xshard::mesh<"data=4; model=2">::size();
#else
[[maybe_unused]] constexpr auto n = xshard::mesh<"data=4, model=2">::size();
#endif
