// A character that is not a letter, ',', '->', '...' or whitespace is a
// compile error naming its 1-based column and the character: the '1' at
// column 5 of "ij,j1->ik".
// expect: einsum_syntax_error<5, *'1'>
#include <xshard/einsum/einsum.hpp>
#include <xtensor/xtensor.hpp>

void use(const xt::xtensor<float, 2>& a, const xt::xtensor<float, 2>& b) {
#ifdef XSHARD_NEGATIVE
  (void)xshard::einsum<"ij,j1->ik">(a, b);
#else
  (void)xshard::einsum<"ij,jk->ik">(a, b);
#endif
}
