// A sharded tensor whose spec names an axis its mesh does not have is a
// compile error that names the axis and lists the mesh's axes.
// expect: unknown_axis_name<xshard::axis<'f', *'o', *'o'>, *xshard::mesh_axes_are<'d'.*'m', *'o', *'d', *'e', *'l'>
#include <xshard/spmd/sharded.hpp>

using M = xshard::mesh<"data=2, model=2">;

#ifdef XSHARD_NEGATIVE
using X = xshard::sharded<float, 2, M, xshard::spec<"foo, None">>;
#else
using X = xshard::sharded<float, 2, M, xshard::spec<"data, None">>;
#endif
[[maybe_unused]] constexpr auto layout = X::layout;
