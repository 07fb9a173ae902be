// Shardy text that refers to a mesh no sdy.mesh line declares, read by the
// constexpr parser in a constant expression (Shardy text has no typed face):
// the error carries the column of '@' and spells the reason.
// expect: sdy_invalid_at_column<15, *xshard::because<'t', *'h', *'e', *' ', *'s', *'h', *'a', *'r', *'d'
#include <xshard/core/diagnostics.hpp>
#include <xshard/sharding/sdy.hpp>

#ifdef XSHARD_NEGATIVE
static_assert(xshard::raise<xshard::parse_sdy(R"(#sdy.sharding<@foo, [{}]>)").diag>());
#else
static_assert(xshard::raise<xshard::parse_sdy(R"(sdy.mesh @foo = <["a"=2]> #sdy.sharding<@foo, [{}]>)").diag>());
#endif
