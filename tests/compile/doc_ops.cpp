// The examples in the top comments of include/xshard/ops/*.hpp, compiled
// (never run): each header's `// Example (compiled in ...)` block is copied
// here line for line, and scripts/check_doc_examples.sh (CTest
// docs.examples) fails when a line of it is missing. Anything else in this
// file is the context an example takes for granted (its tensor), and
// run-time statements sit in functions that are never called.
#include <iostream>
#include <xshard/ops/composite.hpp>
#include <xtensor/xtensor.hpp>

// clang-format off
namespace {

// --- xshard/ops/composite.hpp ---
namespace composite_hpp {
[[maybe_unused]] void example(const xt::xtensor<float, 2>& x) {
  auto y  = xshard::gelu(x, "tanh");                    // policy's choice
  auto y2 = xshard::gelu(x, xshard::gelu_approximate::tanh,
                         xshard::composite_mode::decompose);  // forced
  xshard::scoped_composite_mode d("softmax", xshard::composite_mode::decompose);
  std::cout << xshard::composites();                    // the registry
}
}  // namespace composite_hpp

}  // namespace
// clang-format on
