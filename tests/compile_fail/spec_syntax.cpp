// Malformed spec text is a compile error carrying the column and character:
// in "model K" the 'K' at column 7 cannot follow an entry.
// expect: spec_syntax_error<7, *'K'>
#include <xshard/sharding/sharding.hpp>

#ifdef XSHARD_NEGATIVE
[[maybe_unused]] constexpr std::size_t r = xshard::spec<"model K">::rank();
#else
[[maybe_unused]] constexpr std::size_t r = xshard::spec<"model, K">::rank();
#endif
