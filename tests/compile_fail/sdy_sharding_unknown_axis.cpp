// The Shardy text of a spec that names an axis the mesh does not have is a
// compile error that names the axis and lists the mesh's axes.
// expect: unknown_axis_name<xshard::axis<'d', *'a', *'t'>, *xshard::mesh_axes_are<'d'.*'m', *'o', *'d', *'e', *'l'>
#include <xshard/xshard.hpp>

using M = xshard::mesh<"data=4, model=2">;

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto s = xshard::sdy_sharding<M, xshard::spec<"dat, None">>();
#else
[[maybe_unused]] constexpr auto s = xshard::sdy_sharding<M, xshard::spec<"data, None">>();
#endif
