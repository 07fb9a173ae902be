// Shardy text is read at run time (parse_sdy_or_throw); its parser is
// constexpr, so here it reads a text in a constant expression: the '{' at
// column 46 (replicated without '=') is named.
// expect: sdy_syntax_error<46, *'[{]'>
#include <string_view>
#include <xshard/core/diagnostics.hpp>
#include <xshard/sharding/sdy.hpp>

// Through a function, so the parsed value (it owns std::vectors) is destroyed
// inside the constant evaluation: Clang 14 refuses such a temporary in a
// template argument.
constexpr xshard::diagnostic sdy_diag(std::string_view text) { return xshard::parse_sdy(text).diag; }

#ifdef XSHARD_NEGATIVE
static_assert(xshard::raise<sdy_diag(R"(#sdy.sharding<mesh<["a"=2]>, [{}], replicated{"a"}>)")>());
#else
static_assert(xshard::raise<sdy_diag(R"(#sdy.sharding<mesh<["a"=2]>, [{}], replicated={"a"}>)")>());
#endif
