// The examples in the top comments of include/xshard/trace/*.hpp, compiled
// (never run): each header's `// Example (compiled in ...)` block is copied
// here line for line, and scripts/check_doc_examples.sh (CTest
// docs.examples) fails when a line of it is missing. Anything else in this
// file is the context an example takes for granted (its loop bound and
// values), and run-time statements sit in functions that are never called.
#include <cstddef>
#include <xshard/trace/trace.hpp>

// clang-format off
namespace {

// --- xshard/trace/trace.hpp ---
namespace trace_hpp {
[[maybe_unused]] void example(int n, std::size_t rows) {
  xshard::tracer::instance().start();
  {
    xshard::trace_device_scope d(3);              // this thread works for device 3
    xshard::trace_me t("layer3/forward");         // one complete event ("ph":"X")
    for (int i = 0; i < n; ++i) {
      xshard::trace_me it("scan/iter", {{"i", i}});  // args at construction ...
      it.arg("rows", rows);                          // ... or later, while open
    }
  }
  xshard::tracer::instance().write_chrome_json("trace.json");  // chrome://tracing, ui.perfetto.dev
}
}  // namespace trace_hpp

}  // namespace
// clang-format on
