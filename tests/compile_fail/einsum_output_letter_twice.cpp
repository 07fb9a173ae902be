// An output letter may appear once: 'i' (first at column 8) is twice in
// the output of "ij,jk->ii".
// expect: einsum_output_letter_twice<8, *'i'>
#include <xshard/einsum/einsum.hpp>
#include <xtensor/xtensor.hpp>

void use(const xt::xtensor<float, 2>& a, const xt::xtensor<float, 2>& b) {
#ifdef XSHARD_NEGATIVE
  (void)xshard::einsum<"ij,jk->ii">(a, b);
#else
  (void)xshard::einsum<"ij,jk->ik">(a, b);
#endif
}
