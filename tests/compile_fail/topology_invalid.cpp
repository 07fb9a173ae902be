// errc::topology has no compile-time face in the library: the topology
// reader (mesh/topology.hpp) is constexpr but reports a sentence, which only
// the run-time entry points throw. Honestly, then: this test runs that
// reader on a document in a constant expression and wraps its sentence in
// the errc::topology diagnostic a compile-time check would raise, so the
// name and field of invalid_topology are checked with a real sentence
// (duplicate device id 1).
// expect: invalid_topology<xshard::because<'i', *'n', *'v', *'a', *'l', *'i', *'d', *' ', *'t', *'o', *'p', *'o'
#include <string_view>
#include <xshard/core/diagnostics.hpp>
#include <xshard/mesh/topology.hpp>

constexpr xshard::diagnostic topology_diag(std::string_view json) {
  xshard::diagnostic d;
  const auto r = xshard::try_parse_topology(json);
  if (!r.ok()) {
    d.code = xshard::errc::topology;
    d.detail.assign(r.message.view());
  }
  return d;
}

#ifdef XSHARD_NEGATIVE
static_assert(xshard::raise<topology_diag(R"([{"id": 1, "coords": [0, 0, 0]}, {"id": 1, "coords": [1, 0, 0]}])")>());
#else
static_assert(xshard::raise<topology_diag(R"([{"id": 0, "coords": [0, 0, 0]}, {"id": 1, "coords": [1, 0, 0]}])")>());
#endif
