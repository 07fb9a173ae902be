// Axis names given as a list (make_mesh_axes, torch_xla's Mesh(ids, shape,
// names) order) must be identifiers. The typed mesh takes only text, where a
// bad name is a syntax error, so this checks the constexpr builder itself in
// a constant expression: '1x' is named.
// expect: invalid_axis_name<xshard::axis<'1', *'x'> *>
#include <array>
#include <cstdint>
#include <string_view>
#include <xshard/core/diagnostics.hpp>
#include <xshard/mesh/axes.hpp>

constexpr std::array<std::int64_t, 2> sizes{4, 2};
#ifdef XSHARD_NEGATIVE
constexpr std::array<std::string_view, 2> names{"data", "1x"};
#else
constexpr std::array<std::string_view, 2> names{"data", "x1"};
#endif
static_assert(xshard::raise<xshard::make_mesh_axes(sizes, names).diag>());
