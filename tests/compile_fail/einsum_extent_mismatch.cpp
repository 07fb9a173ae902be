// Static extents of one letter must agree (or be 1): 'j' is 3 in a
// 2 x 3 xtensor_fixed and 4 in a 4 x 5 one.
// expect: einsum_extent_mismatch<'j', *3, *4>
#include <xshard/einsum/einsum.hpp>
#include <xtensor/xfixed.hpp>

using A = xt::xtensor_fixed<float, xt::xshape<2, 3>>;
#ifdef XSHARD_NEGATIVE
using B = xt::xtensor_fixed<float, xt::xshape<4, 5>>;
#else
using B = xt::xtensor_fixed<float, xt::xshape<3, 5>>;
#endif

void use(const A& a, const B& b) { (void)xshard::einsum<"ij,jk->ik">(a, b); }
