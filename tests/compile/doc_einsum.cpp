// The examples in the top comments of include/xshard/einsum/*.hpp, compiled
// (never run): each header's `// Example (compiled in ...)` block is copied
// here line for line, and scripts/check_doc_examples.sh (CTest
// docs.examples) fails when a line of it is missing. Anything else in this
// file is the context an example takes for granted (its tensors), and
// run-time statements sit in functions that are never called.
#include <xshard/einsum/einsum.hpp>
#include <xshard/einsum/grad.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xfixed.hpp>  // xt::xtensor_fixed, in fixed.hpp's example
#include <xtensor/xtensor.hpp>

// clang-format off
namespace {

// --- xshard/einsum/einsum.hpp ---
namespace einsum_hpp {
[[maybe_unused]] void example(const xt::xtensor<float, 3>& x, const xt::xtensor<float, 2>& w,
                              xt::xtensor<float, 3>& out, const xt::xtensor<float, 3>& a,
                              const xt::xtensor<float, 3>& b, const xt::xtensor<float, 1>& bias) {
  xt::xtensor<float, 3> y = xshard::einsum<"...n,mn->...m">(x, w);  // checked at compile time
  xt::xarray<float> y2 = xshard::einsum("...n,mn->...m", x, w);      // same parser, at run time
  xshard::einsum_into<"bij,bjk->bik">(out, a, b);                   // no allocation
  xt::xtensor<float, 3> h = xshard::einsum_bias<"...n,mn->...m">(bias, x, w);  // + bias in the GEMM
}
}  // namespace einsum_hpp

// --- xshard/einsum/fixed.hpp ---
namespace fixed_hpp {
[[maybe_unused]] void example() {
  xt::xtensor_fixed<float, xt::xshape<8, 8>> a, b, c;
  xshard::einsum_into<"ij,jk->ik">(c, a, b);   // this path: no allocation
}
}  // namespace fixed_hpp

// --- xshard/einsum/grad.hpp ---
namespace grad_hpp {
static_assert(xshard::einsum_grad<"...n,mn->...m", 0>() == "...m,mn->...n");  // dx of linear
static_assert(xshard::einsum_grad<"...n,mn->...m", 1>() == "...m,...n->mn");  // dW of linear
static_assert(xshard::broadcast_grad<"...m", "m">() == "...m->m");            // db of a bias add
}  // namespace grad_hpp

}  // namespace
// clang-format on
