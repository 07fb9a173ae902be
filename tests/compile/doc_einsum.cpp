// The usage examples at the top of the einsum/ and ops/ headers, compiled:
// each header's example lines appear here verbatim
// (scripts/check_doc_examples.sh checks it), inside the context they need.
#include <iostream>
#include <xshard/einsum/einsum.hpp>
#include <xshard/ops/composite.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xfixed.hpp>
#include <xtensor/xtensor.hpp>

namespace doc_einsum {  // einsum/einsum.hpp
[[maybe_unused]] void example(const xt::xtensor<float, 3>& x, const xt::xtensor<float, 2>& w,
                              xt::xtensor<float, 3>& out, const xt::xtensor<float, 3>& a,
                              const xt::xtensor<float, 3>& b) {
  xt::xtensor<float, 3> y = xshard::einsum<"...n,mn->...m">(x, w);  // checked at compile time
  xt::xarray<float> y2 = xshard::einsum("...n,mn->...m", x, w);     // same parser, at run time
  xshard::einsum_into<"bij,bjk->bik">(out, a, b);                   // no allocation
}
}  // namespace doc_einsum

namespace doc_fixed {  // einsum/fixed.hpp
[[maybe_unused]] void example() {
  xt::xtensor_fixed<float, xt::xshape<8, 8>> a, b, c;
  xshard::einsum_into<"ij,jk->ik">(c, a, b);  // this path: no allocation
}
}  // namespace doc_fixed

namespace doc_composite {  // ops/composite.hpp
[[maybe_unused]] void example(const xt::xtensor<float, 2>& x) {
  auto y = xshard::gelu(x, "tanh");  // policy's choice
  auto y2 = xshard::gelu(x, xshard::gelu_approximate::tanh,
                         xshard::composite_mode::decompose);  // forced
  xshard::scoped_composite_mode d("softmax", xshard::composite_mode::decompose);
  std::cout << xshard::composites();  // the registry
}
}  // namespace doc_composite
