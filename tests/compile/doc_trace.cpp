// The usage example at the top of trace/trace.hpp, compiled: its lines
// appear here verbatim (scripts/check_doc_examples.sh checks it), inside the
// context it needs.
#include <cstdint>
#include <xshard/trace/trace.hpp>

namespace {

[[maybe_unused]] void example(int n, std::int64_t rows) {
  xshard::tracer::instance().start();
  {
    xshard::trace_device_scope d(3);       // this thread works for device 3
    xshard::trace_me t("layer3/forward");  // one complete event ("ph":"X")
    for (int i = 0; i < n; ++i) {
      xshard::trace_me it("scan/iter", {{"i", i}});  // args at construction ...
      it.arg("rows", rows);                          // ... or later, while open
    }
  }
  xshard::tracer::instance().write_chrome_json("trace.json");  // chrome://tracing, ui.perfetto.dev
}

}  // namespace
