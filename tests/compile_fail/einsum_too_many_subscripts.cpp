// A term of more than max_einsum_rank (24) subscripts is a compile error
// carrying the count and the limit.
// expect: einsum_too_many_terms<25, *24>
#include <xshard/einsum/einsum.hpp>

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto eq = xshard::einsum_equation_v<"abcdefghijklmnopqrstuvwxy->a">;
#else
[[maybe_unused]] constexpr auto eq = xshard::einsum_equation_v<"abcdefghijklmnopqrstuvwx->a">;
#endif
