// HLO sharding text has no typed face; its parser is constexpr, so a
// malformed text read in a constant expression is a compile error carrying
// the column and character: the 'x' at column 17.
// expect: hlo_syntax_error<17, *'x'>
#include <xshard/core/diagnostics.hpp>
#include <xshard/sharding/hlo.hpp>

#ifdef XSHARD_NEGATIVE
static_assert(xshard::raise<xshard::parse_hlo("{devices=[2]0,1}x").diag>());
#else
static_assert(xshard::raise<xshard::parse_hlo("{devices=[2]0,1}").diag>());
#endif
