// The examples in the top comments of include/xshard/core/*.hpp, compiled
// (never run): each header's `// Example (compiled in ...)` block is copied
// here line for line, and scripts/check_doc_examples.sh (CTest
// docs.examples) fails when a line of it is missing. Run-time statements sit
// in functions that are never called.
#include <xshard/core/fixed_string.hpp>
#include <xshard/core/memory.hpp>

// clang-format off
namespace {

// --- xshard/core/fixed_string.hpp ---
namespace fixed_string_hpp {
template <xshard::fixed_string Text> struct mesh;     // mesh<"data=4, model=2">
static_assert(xshard::fixed_string("ab") == "ab");
}  // namespace fixed_string_hpp

// --- xshard/core/memory.hpp ---
namespace memory_hpp {
[[maybe_unused]] void example() {
  xshard::retain_freed_memory();   // false where the allocator is not glibc's
}
}  // namespace memory_hpp

}  // namespace
// clang-format on
