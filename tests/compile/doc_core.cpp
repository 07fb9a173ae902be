// The examples in the top comments of include/xshard/core/*.hpp, compiled
// (never run): each header's `// Example (compiled in ...)` block is copied
// here line for line, and scripts/check_doc_examples.sh (CTest
// docs.examples) fails when a line of it is missing. Run-time statements sit
// in functions that are never called.
#include <atomic>
#include <cstddef>
#include <utility>
#include <xshard/core/fiber.hpp>
#include <xshard/core/fixed_string.hpp>
#include <xshard/core/memory.hpp>
#include <xshard/core/workspace.hpp>

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

// --- xshard/core/fiber.hpp ---
namespace fiber_hpp {
[[maybe_unused]] void example() {
  xshard::detail::progress_signal progress;
  std::atomic<int> turn{0};
  xshard::detail::fiber_host host(2);
  host.run(2, [](void* c, std::size_t i) {
    auto& t = *static_cast<std::atomic<int>*>(c);
    xshard::detail::fiber_host::current()->wait_until([&] { return t.load() == int(i); });
    ++t;                                   // fiber 1 waits for fiber 0
  }, &turn, progress);
}
}  // namespace fiber_hpp

// --- xshard/core/workspace.hpp ---
namespace workspace_hpp {
[[maybe_unused]] void example() {
  xshard::workspace ws;
  const xshard::workspace::scope use(ws);      // this thread's, until the scope ends
  auto t = ws.tensor<float, 2>({64, 128});     // from the cache (or new); contents unspecified
  ws.recycle(std::move(t));                    // back to the cache
  const auto s = ws.stats();                   // s.reuses, s.allocations, s.allocated_bytes, ...
  (void)s;
}
}  // namespace workspace_hpp

}  // namespace
// clang-format on
