// A letter repeated in one operand (a diagonal) needs equal extents: 'i' is
// 3 and 4 in operand 0, a 3 x 4 xtensor_fixed.
// expect: einsum_diagonal_extent_mismatch<0, *'i', *3, *4>
#include <xshard/einsum/einsum.hpp>
#include <xtensor/xfixed.hpp>

#ifdef XSHARD_NEGATIVE
using A = xt::xtensor_fixed<float, xt::xshape<3, 4>>;
#else
using A = xt::xtensor_fixed<float, xt::xshape<3, 3>>;
#endif

void use(const A& a) { (void)xshard::einsum<"ii->i">(a); }
