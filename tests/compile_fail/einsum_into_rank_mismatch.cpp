// einsum_into's output must have the equation's rank: "ij,jk->ik" gives
// rank 2, the output is an xt::xtensor<float, 3>.
// expect: einsum_into: the output tensor.s rank does not match the equation
#include <xshard/einsum/einsum.hpp>
#include <xtensor/xtensor.hpp>

void use([[maybe_unused]] xt::xtensor<float, 3>& out3, [[maybe_unused]] xt::xtensor<float, 2>& out2,
         const xt::xtensor<float, 2>& a, const xt::xtensor<float, 2>& b) {
#ifdef XSHARD_NEGATIVE
  xshard::einsum_into<"ij,jk->ik">(out3, a, b);
#else
  xshard::einsum_into<"ij,jk->ik">(out2, a, b);
#endif
}
