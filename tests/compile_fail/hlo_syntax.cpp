// HLO sharding text has no typed face; its parser is constexpr, so a
// malformed text read in a constant expression is a compile error carrying
// the column and character: the 'x' at column 17.
// expect: hlo_syntax_error<17, *'x'>
#include <string_view>
#include <xshard/core/diagnostics.hpp>
#include <xshard/sharding/hlo.hpp>

// Through a function, so the parsed value (it owns std::vectors) is destroyed
// inside the constant evaluation: Clang 14 refuses such a temporary in a
// template argument.
constexpr xshard::diagnostic hlo_diag(std::string_view text) { return xshard::parse_hlo(text).diag; }

#ifdef XSHARD_NEGATIVE
static_assert(xshard::raise<hlo_diag("{devices=[2]0,1}x")>());
#else
static_assert(xshard::raise<hlo_diag("{devices=[2]0,1}")>());
#endif
