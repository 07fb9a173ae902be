// Ellipsis dims broadcast right-aligned and must agree or be 1: the
// ellipsis dim is 2 in a 2 x 3 xtensor_fixed and 4 in a 4 x 3 one.
// expect: einsum_extent_mismatch<'[.]', *2, *4>
#include <xshard/einsum/einsum.hpp>
#include <xtensor/xfixed.hpp>

using A = xt::xtensor_fixed<float, xt::xshape<2, 3>>;
#ifdef XSHARD_NEGATIVE
using B = xt::xtensor_fixed<float, xt::xshape<4, 3>>;
#else
using B = xt::xtensor_fixed<float, xt::xshape<1, 3>>;  // size 1 broadcasts
#endif

void use(const A& a, const B& b) { (void)xshard::einsum<"...i,...i->...">(a, b); }
