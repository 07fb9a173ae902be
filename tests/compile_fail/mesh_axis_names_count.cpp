// make_mesh_axes with a names list whose length is not the number of sizes
// (only the list form can say this; the typed mesh takes text), checked in a
// constant expression: 3 names for 2 axes.
// expect: axis_names_count_mismatch<3, *2>
#include <array>
#include <cstdint>
#include <string_view>
#include <xshard/core/diagnostics.hpp>
#include <xshard/mesh/axes.hpp>

constexpr std::array<std::int64_t, 2> sizes{4, 2};
#ifdef XSHARD_NEGATIVE
constexpr std::array<std::string_view, 3> names{"data", "model", "pipe"};
#else
constexpr std::array<std::string_view, 2> names{"data", "model"};
#endif
static_assert(xshard::raise<xshard::make_mesh_axes(sizes, names).diag>());
