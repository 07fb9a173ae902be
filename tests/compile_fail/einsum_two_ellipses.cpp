// At most one ellipsis per term: the second one in "...i...,i" starts at
// column 5.
// expect: einsum_second_ellipsis_in_term<5>
#include <xshard/einsum/einsum.hpp>
#include <xtensor/xtensor.hpp>

void use(const xt::xtensor<float, 3>& x, const xt::xtensor<float, 1>& v) {
#ifdef XSHARD_NEGATIVE
  (void)xshard::einsum<"...i...,i">(x, v);
#else
  (void)xshard::einsum<"...i,i">(x, v);
#endif
}
