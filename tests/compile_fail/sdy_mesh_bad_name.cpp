// A Shardy mesh name must be an MLIR identifier (it is written as @name).
// expect: Shardy mesh name is an MLIR identifier
#include <xshard/xshard.hpp>

using M = xshard::mesh<"data=4, model=2">;

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto s = xshard::sdy_sharding<M, xshard::spec<"data, None">, "my mesh">();
#else
[[maybe_unused]] constexpr auto s = xshard::sdy_sharding<M, xshard::spec<"data, None">, "my_mesh">();
#endif
