// Compile-time table for Shardy text (sharding/sdy.hpp): the typed face
// (sdy_mesh<M>, sdy_sharding<M, S>, sdy_sharding_inline<M, S>) and the
// constexpr parser (parse_sdy, parse_sdy_mesh) in constant expressions.
//
// Expected texts follow Shardy's printer (openxla/shardy, sdy dialect):
// axes as "name"=size, `device_ids=[...]` only for a non-iota order, dims
// closed, unused axes implicitly replicated.
#include <cstddef>
#include <string_view>
#include <vector>
#include <xshard/xshard.hpp>

namespace {

using xshard::mesh;
using xshard::spec;

// --- Printing, typed face -------------------------------------------------

using M = mesh<"data=4, model=2">;
static_assert(xshard::sdy_mesh<M>() == R"(sdy.mesh @mesh = <["data"=4, "model"=2]>)");
static_assert(xshard::sdy_mesh<M, "mesh_dm">() == R"(sdy.mesh @mesh_dm = <["data"=4, "model"=2]>)");
static_assert(xshard::sdy_sharding<M, spec<"data, None">>() == R"(#sdy.sharding<@mesh, [{"data"}, {}]>)");
static_assert(xshard::sdy_sharding<M, spec<"None, model">, "m">() == R"(#sdy.sharding<@m, [{}, {"model"}]>)");
// A tuple: one dim over both axes, major to minor, in spec order.
static_assert(xshard::sdy_sharding<M, spec<"(model, data), None">>() ==
              R"(#sdy.sharding<@mesh, [{"model", "data"}, {}]>)");
// Axes by index are written by name; unused axes are implicitly replicated.
static_assert(xshard::sdy_sharding<M, spec<"1, None, None">>() == R"(#sdy.sharding<@mesh, [{"model"}, {}, {}]>)");
static_assert(xshard::sdy_sharding<M, spec<"None">>() == R"(#sdy.sharding<@mesh, [{}]>)");
static_assert(xshard::sdy_sharding<M, spec<"">>() == R"(#sdy.sharding<@mesh, []>)");  // a scalar

// Custom device order: device_ids appear on the mesh, never on the sharding.
using M2 = mesh<"x=4, y=2", 7, 6, 5, 4, 3, 2, 1, 0>;
static_assert(xshard::sdy_mesh<M2>() == R"(sdy.mesh @mesh = <["x"=4, "y"=2], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]>)");
static_assert(xshard::sdy_sharding<M2, spec<"x, None">>() == R"(#sdy.sharding<@mesh, [{"x"}, {}]>)");
static_assert(xshard::sdy_sharding_inline<M2, spec<"y">>() ==
              R"(#sdy.sharding<mesh<["x"=4, "y"=2], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]>, [{"y"}]>)");
// Explicit ids 0..n-1 are the default order: no device_ids.
static_assert(xshard::sdy_mesh<mesh<"a=2, b=2", 0, 1, 2, 3>>() == R"(sdy.mesh @mesh = <["a"=2, "b"=2]>)");

// Size-1 axes are kept (Shardy: "a"=1 is an axis, not a maximal mesh).
using M3 = mesh<"a=2, b=1">;
static_assert(xshard::sdy_mesh<M3>() == R"(sdy.mesh @mesh = <["a"=2, "b"=1]>)");
static_assert(xshard::sdy_sharding<M3, spec<"(a, b), None">>() == R"(#sdy.sharding<@mesh, [{"a", "b"}, {}]>)");
static_assert(xshard::sdy_sharding_inline<mesh<"x=1">, spec<"x">>() == R"(#sdy.sharding<mesh<["x"=1]>, [{"x"}]>)");

// Unnamed axes are "0", "1", ...
using M4 = mesh<"4, 2">;
static_assert(xshard::sdy_mesh<M4>() == R"(sdy.mesh @mesh = <["0"=4, "1"=2]>)");
static_assert(xshard::sdy_sharding<M4, spec<"None, (1, 0)">>() == R"(#sdy.sharding<@mesh, [{}, {"1", "0"}]>)");

// --- Parsing in constant expressions --------------------------------------

constexpr bool same_spec(std::string_view sdy, std::string_view spec_text) {
  const auto v = xshard::parse_sdy(sdy);
  return v.ok() && v.value.spec == xshard::parse_spec(spec_text).value;
}
constexpr bool same_mesh(std::string_view sdy, const xshard::mesh_ref& want) {
  const auto v = xshard::parse_sdy_mesh(sdy);
  if (!v.ok() || !(v.value.axes == want.axes) || v.value.device_ids.size() != want.device_ids.size()) return false;
  for (std::size_t i = 0; i < want.device_ids.size(); ++i)
    if (v.value.device_ids[i] != want.device_ids[i]) return false;
  return true;
}
constexpr xshard::errc code_of(std::string_view sdy) { return xshard::parse_sdy(sdy).diag.code; }

// From the Shardy documentation (sharding representation): mesh_xyz.
static_assert(same_spec(R"(sdy.mesh @mesh_xyz = <["x"=2, "y"=4, "z"=2]>
                           #sdy.sharding<@mesh_xyz, [{"x"}, {"z", "y"}]>)",
                        "x, (z, y)"));
static_assert(same_spec(R"(sdy.mesh @mesh_xyz = <["x"=2, "y"=4, "z"=2]> #sdy.sharding<@mesh_xyz, [{"x"}, {"z", ?}]>)",
                        "x, z"));  // open dim: its listed axes
static_assert(same_spec(
    R"(sdy.mesh @mesh_xyz = <["x"=2, "y"=4, "z"=2]> #sdy.sharding<@mesh_xyz, [{"x"}, {?}], replicated={"y"}>)",
    "x, None"));  // replicated axes are dropped
// Inline mesh, and the attribute-dictionary spelling.
static_assert(same_spec(R"(#sdy.sharding<mesh<["x"=2, "y"=2]>, [{"x"}, {}]>)", "x, None"));
static_assert(same_spec(R"(sdy.sharding = #sdy.sharding<#sdy.mesh<["x"=2]>, [{}, {"x"}]>)", "None, x"));
static_assert(same_spec(R"(#sdy.sharding<mesh<["0"=2, "1"=2]>, [{"1", "0"}]>)", "(1, 0)"));  // unnamed axes

// Meshes.
static_assert(same_mesh(R"(sdy.mesh @mesh = <["data"=4, "model"=2]>)", M::ref()));
static_assert(same_mesh(R"(#sdy.mesh<["x"=4, "y"=2], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]>)", M2::ref()));
static_assert(same_mesh(R"(<["a"=2, "b"=1]>)", M3::ref()));
static_assert(same_mesh(R"(mesh<["a"=2, "b"=1], device_ids=[0, 1]>)", M3::ref()));

// parse(print(x)) == x, for the typed texts above.
constexpr bool round_trip_typed() {
  constexpr auto mesh_line = xshard::sdy_mesh<M2>();
  constexpr auto attr = xshard::sdy_sharding<M2, spec<"(y, x), None">>();
  std::vector<char> text(mesh_line.view().begin(), mesh_line.view().end());
  text.push_back('\n');
  for (char c : attr.view()) text.push_back(c);
  const auto v = xshard::parse_sdy(std::string_view(text.data(), text.size()));
  return v.ok() && v.value.spec == spec<"(y, x), None">::value && v.value.mesh.axes == M2::axes &&
         v.value.mesh.device_ids[0] == 7 && v.value.mesh.name == "mesh";
}
static_assert(round_trip_typed());

// Refusals, with the construct's column.
static_assert(code_of(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{"a"}, {"b":(2)2}]>)") == xshard::errc::sdy_unsupported);
static_assert(xshard::parse_sdy(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{"a"}, {"b":(2)2}]>)").diag.column ==
              49);  // the ":"
static_assert(code_of(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{"a"}p1, {"b"}]>)") == xshard::errc::sdy_unsupported);
static_assert(code_of(R"(#sdy.sharding<mesh<["a"=2]>, [{}], unreduced={"a"}>)") == xshard::errc::sdy_unsupported);
static_assert(code_of(R"(#sdy.sharding<mesh<[], device_ids=[3]>, []>)") == xshard::errc::sdy_unsupported);
static_assert(code_of(R"(#sdy.sharding<@foo, [{}]>)") == xshard::errc::sdy_invalid);
static_assert(code_of(R"(#sdy.sharding<mesh<["a"=2]>, [{}], replicated{"a"}>)") == xshard::errc::sdy_syntax);
static_assert(code_of(R"(#sdy.sharding<mesh<["a"=2]>, [{"c"}]>)") == xshard::errc::unknown_axis_name);
static_assert(code_of(R"(#sdy.sharding<mesh<["a"=2]>, [{"a"}], replicated={"a"}>)") == xshard::errc::axis_used_twice);
static_assert(code_of(R"(#sdy.sharding<mesh<["a"=2], device_ids=[2, 1]>, []>)") ==
              xshard::errc::device_id_out_of_range);

}  // namespace
