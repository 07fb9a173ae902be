// A Shardy construct xshard does not model (sub-axes "b":(2)2), read by the
// constexpr parser in a constant expression (Shardy text has no typed
// face): the error carries the column and character and spells the construct.
// expect: sdy_unsupported_construct<49, *':', *xshard::because<'s', *'u', *'b', *'-', *'a', *'x', *'e', *'s'
#include <xshard/core/diagnostics.hpp>
#include <xshard/sharding/sdy.hpp>

#ifdef XSHARD_NEGATIVE
static_assert(xshard::raise<xshard::parse_sdy(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{"a"}, {"b":(2)2}]>)").diag>());
#else
static_assert(xshard::raise<xshard::parse_sdy(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{"a"}, {"b"}]>)").diag>());
#endif
