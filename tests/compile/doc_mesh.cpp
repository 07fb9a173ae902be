// The examples in the top comments of include/xshard/mesh/*.hpp, compiled
// (never run): each header's `// Example (compiled in ...)` block is copied
// here line for line, and scripts/check_doc_examples.sh (CTest
// docs.examples) fails when a line of it is missing. Run-time statements sit
// in functions that are never called.
#include <xshard/mesh/mesh.hpp>

// clang-format off
namespace {

// --- xshard/mesh/mesh.hpp ---
namespace mesh_hpp {
using M = xshard::mesh<"data=4, model=2">;           // devices 0..7, row-major
using M2 = xshard::mesh<"x=4, y=2", 7, 6, 5, 4, 3, 2, 1, 0>;
static_assert(M::size() == 8 && M::axis_index("model") == 1);
static_assert(M2::logical_mesh()(0, 1) == 6);

[[maybe_unused]] void example() {
  xshard::runtime_mesh rm("data=4, model=2");          // same rules, run time
  xshard::runtime_mesh tm({0, 1, 2, 3}, {2, 2}, {"x", "y"});  // torch_xla order
}
}  // namespace mesh_hpp

}  // namespace
// clang-format on
