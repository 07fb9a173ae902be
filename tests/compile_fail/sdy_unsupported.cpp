// A Shardy construct xshard does not model (sub-axes "b":(2)2), read by the
// constexpr parser in a constant expression (Shardy text has no typed
// face): the error carries the column and character and spells the construct.
// expect: sdy_unsupported_construct<49, *':', *xshard::because<'s', *'u', *'b', *'-', *'a', *'x', *'e', *'s'
#include <string_view>
#include <xshard/core/diagnostics.hpp>
#include <xshard/sharding/sdy.hpp>

// Through a function, so the parsed value (it owns std::vectors) is destroyed
// inside the constant evaluation: Clang 14 refuses such a temporary in a
// template argument.
constexpr xshard::diagnostic sdy_diag(std::string_view text) { return xshard::parse_sdy(text).diag; }

#ifdef XSHARD_NEGATIVE
static_assert(xshard::raise<sdy_diag(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{"a"}, {"b":(2)2}]>)")>());
#else
static_assert(xshard::raise<sdy_diag(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{"a"}, {"b"}]>)")>());
#endif
