// Shardy text that refers to a mesh no sdy.mesh line declares, read by the
// constexpr parser in a constant expression (Shardy text has no typed face):
// the error carries the column of '@' and spells the reason.
// expect: sdy_invalid_at_column<15, *xshard::because<'t', *'h', *'e', *' ', *'s', *'h', *'a', *'r', *'d'
#include <string_view>
#include <xshard/core/diagnostics.hpp>
#include <xshard/sharding/sdy.hpp>

// Through a function, so the parsed value (it owns std::vectors) is destroyed
// inside the constant evaluation: Clang 14 refuses such a temporary in a
// template argument.
constexpr xshard::diagnostic sdy_diag(std::string_view text) { return xshard::parse_sdy(text).diag; }

#ifdef XSHARD_NEGATIVE
static_assert(xshard::raise<sdy_diag(R"(#sdy.sharding<@foo, [{}]>)")>());
#else
static_assert(xshard::raise<sdy_diag(R"(sdy.mesh @foo = <["a"=2]> #sdy.sharding<@foo, [{}]>)")>());
#endif
