// Every output letter must appear in an input: 'x' at column 9 of
// "ij,jk->ix" does not.
// expect: einsum_output_letter_not_in_inputs<9, *'x'>
#include <xshard/einsum/einsum.hpp>
#include <xtensor/xtensor.hpp>

void use(const xt::xtensor<float, 2>& a, const xt::xtensor<float, 2>& b) {
#ifdef XSHARD_NEGATIVE
  (void)xshard::einsum<"ij,jk->ix">(a, b);
#else
  (void)xshard::einsum<"ij,jk->ik">(a, b);
#endif
}
