// A well-formed HLO sharding that breaks XLA's rules, read by the constexpr
// parser in a constant expression (HLO text has no typed face): the error
// spells the reason, "a device appears twice".
// expect: invalid_hlo_sharding<xshard::because<'a', *' ', *'d', *'e', *'v', *'i', *'c', *'e', *' ', *'a', *'p'
#include <string_view>
#include <xshard/core/diagnostics.hpp>
#include <xshard/sharding/hlo.hpp>

// Through a function, so the parsed value (it owns std::vectors) is destroyed
// inside the constant evaluation: Clang 14 refuses such a temporary in a
// template argument.
constexpr xshard::diagnostic hlo_diag(std::string_view text) { return xshard::parse_hlo(text).diag; }

#ifdef XSHARD_NEGATIVE
static_assert(xshard::raise<hlo_diag("{devices=[2]0,0}")>());
#else
static_assert(xshard::raise<hlo_diag("{devices=[2]0,1}")>());
#endif
