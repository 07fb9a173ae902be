// The constexpr inspection validates too: einsum_equation_v of "ab->c" names
// the output letter 'c' at column 5 that no input has.
// expect: einsum_output_letter_not_in_inputs<5, *'c'>
#include <xshard/einsum/einsum.hpp>

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr auto eq = xshard::einsum_equation_v<"ab->c">;
#else
[[maybe_unused]] constexpr auto eq = xshard::einsum_equation_v<"ab->b">;
#endif
