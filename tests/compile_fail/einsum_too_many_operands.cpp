// More operands than subscript terms: two terms, three operands.
// expect: einsum_operand_count_mismatch<2, *3>
#include <xshard/einsum/einsum.hpp>
#include <xtensor/xtensor.hpp>

void use(const xt::xtensor<float, 2>& a, const xt::xtensor<float, 2>& b) {
#ifdef XSHARD_NEGATIVE
  (void)xshard::einsum<"ij,jk->ik">(a, b, b);
#else
  (void)xshard::einsum<"ij,jk->ik">(a, b);
#endif
}
