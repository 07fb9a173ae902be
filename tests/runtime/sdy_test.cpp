// Shardy text (sharding/sdy.hpp) at run time: a table of texts from the
// Shardy documentation and its parse/print tests (openxla/shardy: the
// sharding representation doc, mesh_parse_print.mlir,
// tensor_sharding_parse_print.mlir, tensor_sharding_parsing_failure.mlir,
// mesh_verification.mlir), read into (mesh, spec) and printed back; the
// printer on every kind of (mesh, spec); agreement with the HLO text and
// the shard slices of the same sharding; the typed face equal to the
// run-time one; refusals that name the column and character.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>
#include <xshard/xshard.hpp>

#include "../support/expect_error.hpp"

namespace {

using xshard::runtime_mesh;

struct read_row {
  const char* text;
  const char* mesh;          // xshard mesh text
  std::vector<int> ids;      // empty: 0..n-1
  const char* spec;          // xshard spec text
  const char* printed;       // sdy_sharding_text of the result (mesh name as read, or "mesh")
  const char* printed_mesh;  // sdy_mesh_text of the result
};

// Every row: parse, compare with the xshard (mesh, spec), print, re-parse.
const std::vector<read_row>& read_table() {
  static const std::vector<read_row> rows = {
      // The sharding representation doc: mesh_xyz, dim 1 over "z" then "y".
      {R"(sdy.mesh @mesh_xyz = <["x"=2, "y"=4, "z"=2]>
          #sdy.sharding<@mesh_xyz, [{"x"}, {"z", "y"}]>)",
       "x=2, y=4, z=2",
       {},
       "x, (z, y)",
       R"(#sdy.sharding<@mesh_xyz, [{"x"}, {"z", "y"}]>)",
       R"(sdy.mesh @mesh_xyz = <["x"=2, "y"=4, "z"=2]>)"},
      // Open dim {"z", ?}: read as its listed axes; printed closed.
      {R"(sdy.mesh @mesh_xyz = <["x"=2, "y"=4, "z"=2]> #sdy.sharding<@mesh_xyz, [{"x"}, {"z", ?}]>)",
       "x=2, y=4, z=2",
       {},
       "x, z",
       R"(#sdy.sharding<@mesh_xyz, [{"x"}, {"z"}]>)",
       R"(sdy.mesh @mesh_xyz = <["x"=2, "y"=4, "z"=2]>)"},
      // Explicitly replicated "y", open {?}.
      {R"(sdy.mesh @mesh_xyz = <["x"=2, "y"=4, "z"=2]>
          #sdy.sharding<@mesh_xyz, [{"x"}, {?}], replicated={"y"}>)",
       "x=2, y=4, z=2",
       {},
       "x, None",
       R"(#sdy.sharding<@mesh_xyz, [{"x"}, {}]>)",
       R"(sdy.mesh @mesh_xyz = <["x"=2, "y"=4, "z"=2]>)"},
      // mesh_dm of the doc's basic structure.
      {R"(sdy.mesh @mesh_dm = <["d"=2, "m"=2]> #sdy.sharding<@mesh_dm, [{"d"}, {"m"}]>)",
       "d=2, m=2",
       {},
       "d, m",
       R"(#sdy.sharding<@mesh_dm, [{"d"}, {"m"}]>)",
       R"(sdy.mesh @mesh_dm = <["d"=2, "m"=2]>)"},
      // tensor_sharding_parse_print.mlir, mesh @foo.
      {R"(sdy.mesh @foo = <["a"=2, "c"=2, "b"=4, "d"=2]> #sdy.sharding<@foo, [{"a"}, {}]>)",
       "a=2, c=2, b=4, d=2",
       {},
       "a, None",
       R"(#sdy.sharding<@foo, [{"a"}, {}]>)",
       R"(sdy.mesh @foo = <["a"=2, "c"=2, "b"=4, "d"=2]>)"},
      {R"(sdy.mesh @foo = <["a"=2, "c"=2, "b"=4, "d"=2]> #sdy.sharding<@foo, [{}, {}], replicated={"a", "b"}>)",
       "a=2, c=2, b=4, d=2",
       {},
       "None, None",
       R"(#sdy.sharding<@foo, [{}, {}]>)",
       R"(sdy.mesh @foo = <["a"=2, "c"=2, "b"=4, "d"=2]>)"},
      {R"(sdy.mesh @foo = <["a"=2, "c"=2, "b"=4, "d"=2]> #sdy.sharding<@foo, [], replicated={"b"}>)",
       "a=2, c=2, b=4, d=2",
       {},
       "",
       R"(#sdy.sharding<@foo, []>)",
       R"(sdy.mesh @foo = <["a"=2, "c"=2, "b"=4, "d"=2]>)"},
      {R"(sdy.mesh @foo = <["a"=2, "c"=2, "b"=4, "d"=2]> #sdy.sharding<@foo, [{"a", ?}, {?}]>)",
       "a=2, c=2, b=4, d=2",
       {},
       "a, None",
       R"(#sdy.sharding<@foo, [{"a"}, {}]>)",
       R"(sdy.mesh @foo = <["a"=2, "c"=2, "b"=4, "d"=2]>)"},
      {R"(sdy.mesh @foo = <["a"=2, "c"=2, "b"=4, "d"=2]> #sdy.sharding<@foo, [{"a", "b", ?}, {}]>)",
       "a=2, c=2, b=4, d=2",
       {},
       "(a, b), None",
       R"(#sdy.sharding<@foo, [{"a", "b"}, {}]>)",
       R"(sdy.mesh @foo = <["a"=2, "c"=2, "b"=4, "d"=2]>)"},
      // Inlined meshes (the test's sharding_per_value entries as attributes).
      {R"(#sdy.sharding<mesh<["x"=2, "y"=2]>, [{"x"}, {}]>)",
       "x=2, y=2",
       {},
       "x, None",
       R"(#sdy.sharding<@mesh, [{"x"}, {}]>)",
       R"(sdy.mesh @mesh = <["x"=2, "y"=2]>)"},
      {R"(#sdy.sharding<mesh<["x"=2], device_ids=[1, 0]>, [{"x"}, {}]>)",
       "x=2",
       {1, 0},
       "x, None",
       R"(#sdy.sharding<@mesh, [{"x"}, {}]>)",
       R"(sdy.mesh @mesh = <["x"=2], device_ids=[1, 0]>)"},
      {R"(#sdy.sharding<mesh<["x"=2], device_ids=[0, 1]>, [{"x"}, {}]>)",
       "x=2",
       {},
       "x, None",
       R"(#sdy.sharding<@mesh, [{"x"}, {}]>)",
       R"(sdy.mesh @mesh = <["x"=2]>)"},
      // mesh_parse_print.mlir: size-1 axes, explicit orders, explicit iota.
      {R"(sdy.mesh @two_axes = <["a"=2, "b"=1]> #sdy.sharding<@two_axes, [{"a", "b"}]>)",
       "a=2, b=1",
       {},
       "(a, b)",
       R"(#sdy.sharding<@two_axes, [{"a", "b"}]>)",
       R"(sdy.mesh @two_axes = <["a"=2, "b"=1]>)"},
      {R"(sdy.mesh @two_axes_explicit_device_ids = <["a"=2, "b"=1], device_ids=[1, 0]>
          #sdy.sharding<@two_axes_explicit_device_ids, [{"b"}, {"a"}]>)",
       "a=2, b=1",
       {1, 0},
       "b, a",
       R"(#sdy.sharding<@two_axes_explicit_device_ids, [{"b"}, {"a"}]>)",
       R"(sdy.mesh @two_axes_explicit_device_ids = <["a"=2, "b"=1], device_ids=[1, 0]>)"},
      {R"(sdy.mesh @single_axis_of_size_1 = <["a"=1]> #sdy.sharding<@single_axis_of_size_1, [{"a"}]>)",
       "a=1",
       {},
       "a",
       R"(#sdy.sharding<@single_axis_of_size_1, [{"a"}]>)",
       R"(sdy.mesh @single_axis_of_size_1 = <["a"=1]>)"},
      {R"(sdy.mesh @iota_explicit_device_ids = <["a"=2, "b"=2], device_ids=[0, 1, 2, 3]>
          #sdy.sharding<@iota_explicit_device_ids, [{}, {"b"}]>)",
       "a=2, b=2",
       {},
       "None, b",
       R"(#sdy.sharding<@iota_explicit_device_ids, [{}, {"b"}]>)",
       R"(sdy.mesh @iota_explicit_device_ids = <["a"=2, "b"=2]>)"},
      // The Mesh attribute doc: <["a"=3, "b"=2], device_ids=[0, 2, 4, 1, 3, 5]>.
      {R"(sdy.mesh @m = <["a"=3, "b"=2], device_ids=[0, 2, 4, 1, 3, 5]> #sdy.sharding<@m, [{"b"}, {"a"}]>)",
       "a=3, b=2",
       {0, 2, 4, 1, 3, 5},
       "b, a",
       R"(#sdy.sharding<@m, [{"b"}, {"a"}]>)",
       R"(sdy.mesh @m = <["a"=3, "b"=2], device_ids=[0, 2, 4, 1, 3, 5]>)"},
      // What JAX writes: the mesh line, then the argument's attribute entry;
      // several mesh lines, the sharding picks one.
      {R"(sdy.mesh @mesh = <["data"=4, "model"=2]>
          sdy.mesh @other = <["x"=8]>
          sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>)",
       "data=4, model=2",
       {},
       "data, None",
       R"(#sdy.sharding<@mesh, [{"data"}, {}]>)",
       R"(sdy.mesh @mesh = <["data"=4, "model"=2]>)"},
      // Whitespace anywhere between tokens; empty replicated/unreduced lists.
      {R"(  #sdy.sharding < mesh < [ "x" = 4 , "y"=2 ] , device_ids = [ 7,6,5,4,3,2,1,0 ] > ,
          [ { "y" , "x" } , { } ] , unreduced = { } , replicated = { } >  )",
       "x=4, y=2",
       {7, 6, 5, 4, 3, 2, 1, 0},
       "(y, x), None",
       R"(#sdy.sharding<@mesh, [{"y", "x"}, {}]>)",
       R"(sdy.mesh @mesh = <["x"=4, "y"=2], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]>)"},
      // xshard's unnamed axes are "0", "1", ...
      {R"(#sdy.sharding<mesh<["0"=4, "1"=2]>, [{"1"}, {"0"}]>)",
       "4, 2",
       {},
       "1, 0",
       R"(#sdy.sharding<@mesh, [{"1"}, {"0"}]>)",
       R"(sdy.mesh @mesh = <["0"=4, "1"=2]>)"},
  };
  return rows;
}

TEST(Sdy, ReadsTheDocumentationTable) {
  for (const read_row& r : read_table()) {
    SCOPED_TRACE(r.text);
    const xshard::sdy_parsed p = xshard::parse_sdy_or_throw(r.text);
    EXPECT_EQ(p.mesh, runtime_mesh(r.mesh, r.ids));
    EXPECT_EQ(p.spec, xshard::parse_spec_or_throw(r.spec));
    EXPECT_EQ(p.spec_text(), xshard::spec_text(xshard::parse_spec_or_throw(r.spec)).str());
    const std::string name = p.mesh_name.empty() ? "mesh" : p.mesh_name;
    EXPECT_EQ(xshard::sdy_sharding_text(p.mesh, p.spec, name), r.printed);
    EXPECT_EQ(xshard::sdy_mesh_text(p.mesh, name), r.printed_mesh);
    // parse(print(x)) == x, and the HLO text of both is the same.
    const xshard::sdy_parsed q = xshard::parse_sdy_or_throw(std::string(r.printed_mesh) + "\n" + r.printed);
    EXPECT_EQ(q.mesh, p.mesh);
    EXPECT_EQ(q.spec, p.spec);
    EXPECT_EQ(xshard::hlo_sharding_text(q.mesh, q.spec_text()), xshard::hlo_sharding_text(p.mesh, r.spec));
  }
}

// The printer on every kind of (mesh, spec), and agreement with the HLO text
// of the same sharding: the text read back gives the same XLA sharding and
// the same shard slices (replica ids included) as the (mesh, spec) printed.
TEST(Sdy, PrintsEveryKindOfSharding) {
  struct row {
    const char* mesh;
    std::vector<int> ids;
    const char* spec;
    const char* mesh_line;
    const char* sharding;
    const char* hlo;
  };
  const std::vector<row> rows = {
      {"data=4, model=2",
       {},
       "data, None",
       R"(sdy.mesh @mesh = <["data"=4, "model"=2]>)",
       R"(#sdy.sharding<@mesh, [{"data"}, {}]>)",
       "{devices=[4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}"},
      {"data=4, model=2",
       {},
       "data, model",
       R"(sdy.mesh @mesh = <["data"=4, "model"=2]>)",
       R"(#sdy.sharding<@mesh, [{"data"}, {"model"}]>)",
       "{devices=[4,2]0,1,2,3,4,5,6,7}"},
      {"data=4, model=2",
       {},
       "(model, data)",
       R"(sdy.mesh @mesh = <["data"=4, "model"=2]>)",
       R"(#sdy.sharding<@mesh, [{"model", "data"}]>)",
       "{devices=[8]0,2,4,6,1,3,5,7}"},
      {"data=4, model=2",
       {},
       "None, None",
       R"(sdy.mesh @mesh = <["data"=4, "model"=2]>)",
       R"(#sdy.sharding<@mesh, [{}, {}]>)",
       "{replicated}"},
      {"x=4, y=2",
       {7, 6, 5, 4, 3, 2, 1, 0},
       "x, None",
       R"(sdy.mesh @mesh = <["x"=4, "y"=2], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]>)",
       R"(#sdy.sharding<@mesh, [{"x"}, {}]>)",
       "{devices=[4,1,2]6,7,4,5,2,3,0,1 last_tile_dim_replicate}"},
      {"x=4",
       {3, 0, 2, 1},
       "None, None, None",
       R"(sdy.mesh @mesh = <["x"=4], device_ids=[3, 0, 2, 1]>)",
       R"(#sdy.sharding<@mesh, [{}, {}, {}]>)",
       "{replicated}"},
      {"x=1", {}, "x", R"(sdy.mesh @mesh = <["x"=1]>)", R"(#sdy.sharding<@mesh, [{"x"}]>)", "{replicated}"},
      {"a=2, b=1, c=2",
       {},
       "(c, b), 0",
       R"(sdy.mesh @mesh = <["a"=2, "b"=1, "c"=2]>)",
       R"(#sdy.sharding<@mesh, [{"c", "b"}, {"a"}]>)",
       "{devices=[2,2]0,2,1,3}"},
      {"2, 3",
       {5, 4, 3, 2, 1, 0},
       "1, None",
       R"(sdy.mesh @mesh = <["0"=2, "1"=3], device_ids=[5, 4, 3, 2, 1, 0]>)",
       R"(#sdy.sharding<@mesh, [{"1"}, {}]>)",
       "{devices=[3,1,2]2,5,1,4,0,3 last_tile_dim_replicate}"},
      {"x=2", {}, "", R"(sdy.mesh @mesh = <["x"=2]>)", R"(#sdy.sharding<@mesh, []>)", "{replicated}"},
  };
  for (const row& r : rows) {
    SCOPED_TRACE(std::string(r.mesh) + " / " + r.spec);
    const runtime_mesh m(r.mesh, r.ids);
    EXPECT_EQ(xshard::sdy_mesh_text(m), r.mesh_line);
    EXPECT_EQ(xshard::sdy_sharding_text(m, r.spec), r.sharding);
    EXPECT_EQ(xshard::hlo_sharding_text(m, r.spec), r.hlo);
    const xshard::sdy_parsed p = xshard::parse_sdy_or_throw(std::string(r.mesh_line) + "\n" + r.sharding);
    EXPECT_EQ(p.mesh, m);
    EXPECT_EQ(p.mesh_name, "mesh");
    EXPECT_EQ(xshard::hlo_sharding_text(p.mesh, p.spec_text()), r.hlo);
    // The inline form reads back to the same.
    const xshard::sdy_parsed i = xshard::parse_sdy_or_throw(xshard::sdy_sharding_inline_text(m, r.spec));
    EXPECT_EQ(i.mesh, m);
    EXPECT_EQ(i.spec, p.spec);
    EXPECT_EQ(i.mesh_name, "");
    // Same shards, replica ids included.
    std::vector<std::int64_t> shape(p.spec.rank(), 5);
    const auto a = xshard::shard_slices(m, r.spec, shape);
    const auto b = xshard::shard_slices(p.mesh, p.spec_text(), shape);
    EXPECT_EQ(a, b);
  }
}

TEST(Sdy, TypedFaceEqualsRunTimeFace) {
  using M = xshard::mesh<"x=4, y=2", 7, 6, 5, 4, 3, 2, 1, 0>;
  using S = xshard::spec<"(y, x), None">;
  const runtime_mesh m = M::runtime();
  EXPECT_EQ(xshard::sdy_mesh<M>().view(), xshard::sdy_mesh_text(m));
  EXPECT_EQ((xshard::sdy_mesh<M, "m2">().view()), xshard::sdy_mesh_text(m, "m2"));
  EXPECT_EQ((xshard::sdy_sharding<M, S>().view()), xshard::sdy_sharding_text(m, S::text.view()));
  EXPECT_EQ((xshard::sdy_sharding<M, S, "m2">().view()), xshard::sdy_sharding_text(m, S::text.view(), "m2"));
  EXPECT_EQ((xshard::sdy_sharding_inline<M, S>().view()), xshard::sdy_sharding_inline_text(m, S::text.view()));
  // The same sharding through the typed parse of its own text.
  static_assert([] {
    const auto v = xshard::parse_sdy(R"(#sdy.sharding<mesh<["x"=4, "y"=2], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]>,
                                        [{"y", "x"}, {}]>)");
    return v.ok() && v.value.spec == S::value && v.value.mesh.axes == M::axes;
  }());
}

void expect_error(std::string_view text, std::initializer_list<std::string_view> parts) {
  SCOPED_TRACE(std::string(text));
  EXPECT_XSHARD_ERROR((void)xshard::parse_sdy_or_throw(text), parts);
}

// tensor_sharding_parsing_failure.mlir, mesh_verification.mlir,
// tensor_sharding_verification.mlir and xshard's own refusals.
TEST(Sdy, RefusesWithColumnAndCharacter) {
  // Unsupported constructs: named with their column and character.
  expect_error(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{"a"}, {"b":(2)2}]>)",
               {"unsupported Shardy construct, sub-axes", "':' at column 49"});
  expect_error(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{}, {}], replicated={"b":(1)2}>)",
               {"sub-axes", "':' at column 62"});
  expect_error(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{"a"}, {"b"}p1]>)",
               {"dimension priorities", "'p' at column 50"});
  expect_error(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{"a"}p01, {"b"}]>)", {"priorities", "'p' at column 43"});
  expect_error(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{}, {}], unreduced={"a", "b"}>)",
               {"unreduced axes", "'\"' at column 58"});
  expect_error(R"(#sdy.sharding<mesh<[], device_ids=[3]>, []>)", {"maximal-sharding meshes", "'<' at column 19"});
  expect_error(R"(#sdy.sharding<mesh<["a\"b"=2]>, []>)", {"escapes", "'\\' at column 23"});
  // Syntax (tensor_sharding_parsing_failure.mlir).
  expect_error(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{}, {}], replicated{"a", "b"}>)",
               {"malformed Shardy text", "'{' at column 57"});
  expect_error(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{}, {}], unreduced=["a", "b"]>)", {"'[' at column 57"});
  expect_error(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{}, {}], unreduced={"a", "b"[]}>)",
               {"unreduced axes", "column 58"});  // refused before the syntax error
  expect_error(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{}, {}], replicated={"a", b}>)", {"'b' at column 64"});
  expect_error(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{}, {}],>)", {"'>' at column 46"});
  expect_error(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{}, {}], unknown={"a"}>)", {"'u' at column 47"});
  expect_error(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{}, {}], replicated={"a"}, >)", {"'>' at column 65"});
  expect_error(R"(#sdy.sharding<mesh<["a"=2, "b"=4]>, [{}, {}], replicated={"a"}, replicated={"b"}>)",
               {"'r' at column 65"});
  expect_error(R"(#sdy.sharding<mesh<["a"=2]>, [{"a"}])", {"end of text at column 37"});
  expect_error(R"(#sdy.sharding<mesh<["a"=2]>, [{"a"}]> trailing)", {"'t' at column 39"});
  // Meshes (mesh_verification.mlir).
  expect_error(R"(sdy.mesh @mesh = <["a"=2, "b"=0]> #sdy.sharding<@mesh, []>)", {"mesh axis 'b' has size 0"});
  expect_error(R"(sdy.mesh @mesh = <["a"=2, "b"=2, "a"=4]> #sdy.sharding<@mesh, []>)", {"duplicate axis name 'a'"});
  expect_error(R"(sdy.mesh @mesh = <[], device_ids=[-1]> #sdy.sharding<@mesh, []>)", {"'-' at column 35"});
  expect_error(R"(sdy.mesh @mesh = <["a"=2, "b"=2], device_ids=[0, 2, 1, 3, 4, 5]> #sdy.sharding<@mesh, []>)",
               {"device count 6 does not equal the product of the axis sizes 4"});
  expect_error(R"(sdy.mesh @mesh = <["a"=2], device_ids=[1, 1]> #sdy.sharding<@mesh, []>)", {"duplicate device id 1"});
  expect_error(R"(sdy.mesh @mesh = <["a"=2], device_ids=[2, 1]> #sdy.sharding<@mesh, []>)",
               {"device id 2 is out of range"});
  expect_error(R"(sdy.mesh @mesh = <[]> #sdy.sharding<@mesh, []>)", {"a mesh needs at least one axis"});
  expect_error(R"(#sdy.sharding<mesh<["0"=2, "b"=2]>, []>)", {"cannot be mixed", "column 29"});
  expect_error(R"(#sdy.sharding<mesh<["1"=2]>, []>)", {"invalid axis name '1'"});
  expect_error(R"(#sdy.sharding<mesh<["None"=2]>, []>)", {"invalid axis name 'None'"});
  expect_error(R"(#sdy.sharding<mesh<["a-b"=2]>, []>)", {"invalid axis name 'a-b'"});
  // Shardings (tensor_sharding_verification.mlir).
  expect_error(R"(sdy.mesh @mesh = <["a"=2, "b"=2]> #sdy.sharding<@mesh, [{"c"}, {}]>)",
               {"unknown axis name 'c'", "the mesh's axes are a, b"});
  expect_error(R"(sdy.mesh @mesh = <["a"=2, "b"=2]> #sdy.sharding<@mesh, [{"a"}, {"a"}]>)",
               {"mesh axis 'a' appears more than once"});
  expect_error(R"(sdy.mesh @mesh = <["a"=2, "b"=2]> #sdy.sharding<@mesh, [{"a"}], replicated={"b", "b"}>)",
               {"mesh axis 'b' appears more than once"});
  expect_error(R"(sdy.mesh @mesh = <["a"=2]> #sdy.sharding<@other_mesh, [{"a"}]>)",
               {"column 42", "refers to mesh @other_mesh"});
  expect_error(R"(sdy.mesh @m = <["a"=2]> sdy.mesh @m = <["b"=2]> #sdy.sharding<@m, []>)",
               {"column 25", "declares the same mesh name"});
  // A mesh name the printer would not write.
  EXPECT_THROW((void)xshard::sdy_mesh_text(runtime_mesh("x=2"), "1mesh"), xshard::error);
  EXPECT_THROW((void)xshard::sdy_sharding_text(runtime_mesh("x=2"), "x", "a b"), xshard::error);
  EXPECT_THROW((void)xshard::sdy_sharding_text(runtime_mesh("x=2"), "y"), xshard::error);
}

TEST(Sdy, ReadsAMeshAlone) {
  const runtime_mesh want("x=4, y=2", {7, 6, 5, 4, 3, 2, 1, 0});
  for (const char* t : {R"(sdy.mesh @m = <["x"=4, "y"=2], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]>)",
                        R"(#sdy.mesh<["x"=4, "y"=2], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]>)",
                        R"(mesh<["x"=4, "y"=2], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]>)",
                        R"( <["x"=4, "y"=2], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]> )"})
    EXPECT_EQ(xshard::parse_sdy_mesh_or_throw(t), want) << t;
  EXPECT_THROW((void)xshard::parse_sdy_mesh_or_throw(R"(#sdy.mesh<["x"=4]> x)"), xshard::error);
}

}  // namespace
