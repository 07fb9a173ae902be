// The subscripts of an operand must match its static rank: "ij" names 2
// dims of operand 0, an xt::xtensor<float, 3>.
// expect: einsum_rank_mismatch<0, *2, *3>
#include <xshard/einsum/einsum.hpp>
#include <xtensor/xtensor.hpp>

void use(const xt::xtensor<float, 3>& x, const xt::xtensor<float, 2>& w) {
#ifdef XSHARD_NEGATIVE
  (void)xshard::einsum<"ij,jk">(x, w);
#else
  (void)xshard::einsum<"...ij,jk">(x, w);
#endif
}
