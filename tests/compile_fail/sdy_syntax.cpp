// Shardy text is read at run time (parse_sdy_or_throw); its parser is
// constexpr, so here it reads a text in a constant expression: the '{' at
// column 46 (replicated without '=') is named.
// expect: sdy_syntax_error<46, *'[{]'>
#include <xshard/core/diagnostics.hpp>
#include <xshard/sharding/sdy.hpp>

#ifdef XSHARD_NEGATIVE
static_assert(xshard::raise<xshard::parse_sdy(R"(#sdy.sharding<mesh<["a"=2]>, [{}], replicated{"a"}>)").diag>());
#else
static_assert(xshard::raise<xshard::parse_sdy(R"(#sdy.sharding<mesh<["a"=2]>, [{}], replicated={"a"}>)").diag>());
#endif
