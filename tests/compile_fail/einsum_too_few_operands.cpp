// A missing operand: two terms, one operand.
// expect: einsum_operand_count_mismatch<2, *1>
#include <xshard/einsum/einsum.hpp>
#include <xtensor/xtensor.hpp>

void use(const xt::xtensor<float, 2>& a, [[maybe_unused]] const xt::xtensor<float, 2>& b) {
#ifdef XSHARD_NEGATIVE
  (void)xshard::einsum<"ij,jk->ik">(a);
#else
  (void)xshard::einsum<"ij,jk->ik">(a, b);
#endif
}
