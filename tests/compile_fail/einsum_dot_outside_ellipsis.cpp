// A '.' that does not start "..." is a compile error naming its column:
// column 2 of "i.j,jk->ik".
// expect: einsum_dot_outside_ellipsis<2>
#include <xshard/einsum/einsum.hpp>
#include <xtensor/xtensor.hpp>

void use(const xt::xtensor<float, 2>& a, const xt::xtensor<float, 2>& b) {
#ifdef XSHARD_NEGATIVE
  (void)xshard::einsum<"i.j,jk->ik">(a, b);
#else
  (void)xshard::einsum<"ij,jk->ik">(a, b);
#endif
}
