// An ellipsis in the output needs one in an input: "ij,jk->...ik" has it
// at column 8 only.
// expect: einsum_output_ellipsis_not_in_inputs<8>
#include <xshard/einsum/einsum.hpp>
#include <xtensor/xtensor.hpp>

void use(const xt::xtensor<float, 2>& a, const xt::xtensor<float, 2>& b) {
#ifdef XSHARD_NEGATIVE
  (void)xshard::einsum<"ij,jk->...ik">(a, b);
#else
  (void)xshard::einsum<"ij,jk->ik">(a, b);
#endif
}
