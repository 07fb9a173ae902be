// A well-formed HLO sharding that breaks XLA's rules, read by the constexpr
// parser in a constant expression (HLO text has no typed face): the error
// spells the reason, "a device appears twice".
// expect: invalid_hlo_sharding<xshard::because<'a', *' ', *'d', *'e', *'v', *'i', *'c', *'e', *' ', *'a', *'p'
#include <xshard/core/diagnostics.hpp>
#include <xshard/sharding/hlo.hpp>

#ifdef XSHARD_NEGATIVE
static_assert(xshard::raise<xshard::parse_hlo("{devices=[2]0,0}").diag>());
#else
static_assert(xshard::raise<xshard::parse_hlo("{devices=[2]0,1}").diag>());
#endif
