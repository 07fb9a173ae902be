// Compile-time tables for the sharding engine: every value here is checked by
// static_assert, through the typed face (op_sharding_v, sharding_type_v,
// hlo_sharding, hlo_sharding_v2, shard_slices<M, S>) and, for the same cases,
// through the constexpr engine called directly (compute_op_sharding).
//
// Expected values are derived by hand from the torch_xla rules in DESIGN.md
// ("Semantics to match"); each case carries its derivation. Notation: a mesh
// "a=2, b=3, c=2" with default ids has id(a, b, c) = 6a + 2b + c; "tile" is
// torch_xla's tile assignment (shape, then row-major values), "groups" the
// group assignment, "reps" the replication groups.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <type_traits>
#include <xshard/xshard.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xfixed.hpp>
#include <xtensor/xtensor.hpp>

namespace {

using xshard::fixed_string;
using xshard::int_array;
using xshard::mesh;
using xshard::op_sharding;
using xshard::shard_slice;
using xshard::sharding_type;
using xshard::spec;

constexpr sharding_type replicated = sharding_type::replicated;
constexpr sharding_type maximal = sharding_type::maximal;
constexpr sharding_type tiled = sharding_type::tiled;
constexpr sharding_type partial = sharding_type::partial;

constexpr int_array arr(std::initializer_list<std::int64_t> shape, std::initializer_list<int> values) {
  int_array a;
  for (std::int64_t s : shape) a.shape.push_back(s);
  a.values.assign(values.begin(), values.end());
  return a;
}

constexpr op_sharding op(sharding_type type, int_array tile, int_array groups = {},
                         std::initializer_list<std::initializer_list<int>> reps = {}) {
  op_sharding o;
  o.type = type;
  o.tile_assignment = tile;
  o.group_assignment = groups;
  for (const auto& g : reps) o.replication_groups.emplace_back(g.begin(), g.end());
  return o;
}

/// One table row: the typed op sharding and type, the constexpr engine on
/// the parsed spec, and the V1 / V2 XLA text all match the expectation.
template <class M, fixed_string Text>
constexpr bool row(const op_sharding& expected, std::string_view v1, std::string_view v2) {
  using S = spec<Text>;
  const auto direct = xshard::compute_op_sharding(M::ref(), xshard::parse_spec(Text.view()).value);
  return direct.ok() && direct.value == expected && xshard::op_sharding_v<M, S> == expected &&
         xshard::sharding_type_v<M, S> == expected.type && xshard::hlo_sharding<M, S>() == v1 &&
         xshard::hlo_sharding_v2<M, S>() == v2 &&
         xshard::hlo_text(xshard::xla_sharding_of<M, S>(), xshard::hlo_format::v1).view() == v1;
}

// ---------------------------------------------------------------------------
// DESIGN.md's contract spellings (and ../shared/contract/sharding.cpp).

using M = mesh<"data=4, model=2">;
using M2 = mesh<"x=4, y=2", 7, 6, 5, 4, 3, 2, 1, 0>;
using S = spec<"data, None">;

static_assert(xshard::hlo_sharding<M, S>() == "{devices=[4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
static_assert(xshard::hlo_sharding<M, spec<"data, model">>() == "{devices=[4,2]0,1,2,3,4,5,6,7}");
static_assert(xshard::hlo_sharding<M, spec<"None, model">>() ==
              "{devices=[1,2,4]0,2,4,6,1,3,5,7 last_tile_dim_replicate}");
static_assert(xshard::hlo_sharding<M, spec<"(data, model), None">>() == "{devices=[8,1]0,1,2,3,4,5,6,7}");
static_assert(xshard::hlo_sharding<M, spec<"None, None">>() == "{replicated}");
static_assert(xshard::hlo_sharding<M, spec<"0, None">>() == "{devices=[4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}");
static_assert(xshard::hlo_sharding<M2, spec<"x, None">>() ==
              "{devices=[4,1,2]6,7,4,5,2,3,0,1 last_tile_dim_replicate}");
// The header's own documented examples.
static_assert(xshard::hlo_sharding_v2<M, S>() == "{devices=[4,1,2]<=[8] last_tile_dim_replicate}");
static_assert(xshard::op_sharding_v<M, S>.type == partial && xshard::op_sharding_v<M, S>.replication_groups[3][1] == 7);

// ---------------------------------------------------------------------------
// Mesh facts.

static_assert(M::size() == 8 && M::rank() == 2);
static_assert(M::axis_index("data") == 0 && M::axis_index("model") == 1 && !M::axis_index("foo").has_value());
static_assert(M::mesh_shape() == xshard::static_vector<std::int64_t, xshard::max_mesh_axes>{4, 2});
static_assert(M::shape()[0].name == "data" && M::shape()[0].size == 4);
static_assert(M::shape()[1].name == "model" && M::shape()[1].size == 2);
static_assert(M::device_ids == std::array<int, 8>{0, 1, 2, 3, 4, 5, 6, 7});
static_assert(M::text == "data=4, model=2");
static_assert(M2::size() == 8 && M2::device_ids[0] == 7 && M2::device_ids[7] == 0);
// The seed's Mesh docstring: 8 devices 0..7, shape (4, 2), axes ('x', 'y')
// -> logical mesh [[0,1],[2,3],[4,5],[6,7]], shape() = {x: 4, y: 2}.
using MXY = mesh<"x=4, y=2">;
static_assert(MXY::logical_mesh() == arr({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}));
static_assert(MXY::logical_mesh()(3, 0) == 6 && MXY::logical_mesh()(1, 1) == 3);
static_assert(MXY::shape()[0].name == "x" && MXY::shape()[0].size == 4 && MXY::shape()[1].name == "y");
// Custom ids fill the logical mesh in C order: [[7,6],[5,4],[3,2],[1,0]].
static_assert(M2::logical_mesh() == arr({4, 2}, {7, 6, 5, 4, 3, 2, 1, 0}));
static_assert(M2::logical_mesh()(0, 1) == 6 && M2::logical_mesh()(3, 0) == 1);
using M3c = mesh<"a=2, b=2, c=2", 3, 1, 7, 5, 2, 0, 6, 4>;
static_assert(M3c::logical_mesh()(1, 0, 1) == 0 && M3c::logical_mesh()(0, 1, 0) == 7 && M3c::size() == 8);
static_assert(M3c::axis_index("c") == 2);
// mesh_1d and unnamed axes.
static_assert(std::is_same_v<xshard::mesh_1d<"data", 8>, mesh<"data=8">>);
static_assert(std::is_same_v<xshard::mesh_1d<"", 4>, mesh<"4">>);
static_assert(mesh<"4, 2">::size() == 8 && !mesh<"4, 2">::axis_index("0").has_value());
static_assert(mesh<" x = 3 ,y=1 ">::mesh_shape() == xshard::static_vector<std::int64_t, xshard::max_mesh_axes>{3, 1});
static_assert(xshard::is_mesh_v<M> && !xshard::is_mesh_v<S> && xshard::is_spec_v<S>);

// ---------------------------------------------------------------------------
// Specs: rank, entry kinds, equality by meaning (whitespace ignored).

static_assert(S::rank() == 2 && spec<"">::rank() == 0 && spec<"  ">::rank() == 0);
static_assert(S::value.entries[1].is_none() && !S::value.entries[0].is_none());
static_assert(spec<"(data, model), None">::value.entries[0].is_tuple());
static_assert(spec<"0, None">::value.entries[0].axes[0].by_index());
static_assert(spec<"data,None">{} == spec<"  data ,   None  ">{});
static_assert(spec<"(data,model),None">{} == spec<"( data , model ) , None">{});
static_assert(spec<"(data)">{} == spec<"data">{});  // a one-element tuple is the axis itself
static_assert(spec<"data, None">{} != spec<"None, data">{});
static_assert(spec<"(data, model)">{} != spec<"(model, data)">{});
static_assert(spec<"0">{} != spec<"data">{});  // an index is not a name until resolved against a mesh
static_assert(xshard::spec_text(xshard::parse_spec(" ( data,model ) ,None,1").value).view() ==
              "(data, model), None, 1");
static_assert(xshard::resolve_spec(spec<"model, (1, data)">::value, M::axes).ok() == false);  // model twice
static_assert(!xshard::parse_spec("data  K").ok() && xshard::parse_spec("data  K").diag.column == 7 &&
              xshard::parse_spec("data  K").diag.ch == 'K');

// ---------------------------------------------------------------------------
// The seed's mark_sharding example: Mesh(range(8), (4, 2), ('x', 'y')).
// (0, None), "4-way data parallel": tiled = [0], unused = [1]; tile = logical
// mesh [[0,1],..,[6,7]] (2 dims == 2 entries); 8 devices; one None -> PARTIAL.
// Split along dim 0: reps [0,1] [2,3] [4,5] [6,7]; groups shape [4, 1].
static_assert(row<MXY, "0, None">(op(partial, arr({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), arr({4, 1}, {0, 1, 2, 3}),
                                     {{0, 1}, {2, 3}, {4, 5}, {6, 7}}),
                                  "{devices=[4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}",
                                  "{devices=[4,1,2]<=[8] last_tile_dim_replicate}"));
// (None, 1), "2-way model parallel": tiled = [1], unused = [0]; tile =
// transpose(1, 0) = [[0,2,4,6],[1,3,5,7]]; PARTIAL; reps are the two rows;
// groups [1, 2]. XLA: dims [1,2] + [4], rows in order; V2 iota [4,2]T(1,0).
static_assert(row<MXY, "None, 1">(op(partial, arr({2, 4}, {0, 2, 4, 6, 1, 3, 5, 7}), arr({1, 2}, {0, 1}),
                                     {{0, 2, 4, 6}, {1, 3, 5, 7}}),
                                  "{devices=[1,2,4]0,2,4,6,1,3,5,7 last_tile_dim_replicate}",
                                  "{devices=[1,2,4]<=[4,2]T(1,0) last_tile_dim_replicate}"));

// ---------------------------------------------------------------------------
// 2-axis mesh "data=4, model=2", ids 0..7.

// Both axes, in mesh order: tile = logical mesh, no None, no unused -> TILED.
static_assert(row<M, "data, model">(op(tiled, arr({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7})), "{devices=[4,2]0,1,2,3,4,5,6,7}",
                                    "{devices=[4,2]<=[8]}"));
// Swapped: tile = transpose(1, 0) = [[0,2,4,6],[1,3,5,7]] -> TILED, V2 iota [4,2] transposed.
static_assert(row<M, "model, data">(op(tiled, arr({2, 4}, {0, 2, 4, 6, 1, 3, 5, 7})), "{devices=[2,4]0,2,4,6,1,3,5,7}",
                                    "{devices=[2,4]<=[4,2]T(1,0)}"));
// Integer axes mean the same as the names.
static_assert(row<M, "1, 0">(op(tiled, arr({2, 4}, {0, 2, 4, 6, 1, 3, 5, 7})), "{devices=[2,4]0,2,4,6,1,3,5,7}",
                             "{devices=[2,4]<=[4,2]T(1,0)}"));
// Tuple (data, model) on one dim: perm [0, 1], merged to [8] -> TILED 0..7.
static_assert(row<M, "(data, model)">(op(tiled, arr({8}, {0, 1, 2, 3, 4, 5, 6, 7})), "{devices=[8]0,1,2,3,4,5,6,7}",
                                      "{devices=[8]<=[8]}"));
// Tuple (model, data): perm [1, 0] -> [[0,2,4,6],[1,3,5,7]] merged to [8].
static_assert(row<M, "(model, data)">(op(tiled, arr({8}, {0, 2, 4, 6, 1, 3, 5, 7})), "{devices=[8]0,2,4,6,1,3,5,7}",
                                      "{devices=[8]<=[4,2]T(1,0)}"));
// (data, model), None: tile [8] (1 dim < 2 entries), one None -> PARTIAL;
// split dim 0 into 8 singleton groups; groups [8, 1]. XLA dims [8,1] + [1]:
// a last dim of 1 is dropped -> plain tile [8,1].
static_assert(row<M, "(data, model), None">(op(partial, arr({8}, {0, 1, 2, 3, 4, 5, 6, 7}),
                                               arr({8, 1}, {0, 1, 2, 3, 4, 5, 6, 7}),
                                               {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}),
                                            "{devices=[8,1]0,1,2,3,4,5,6,7}", "{devices=[8,1]<=[8]}"));
// None, (model, data): tile [8] = 0,2,4,6,1,3,5,7; PARTIAL; singletons in that
// order; groups [1, 8]; XLA [1,8,1] -> plain [1,8].
static_assert(row<M, "None, (model, data)">(op(partial, arr({8}, {0, 2, 4, 6, 1, 3, 5, 7}),
                                               arr({1, 8}, {0, 1, 2, 3, 4, 5, 6, 7}),
                                               {{0}, {2}, {4}, {6}, {1}, {3}, {5}, {7}}),
                                            "{devices=[1,8]0,2,4,6,1,3,5,7}", "{devices=[1,8]<=[4,2]T(1,0)}"));
// None, data: perm [0, 1] (model unused) -> tile = logical mesh; 2 dims == 2
// entries; one None -> PARTIAL; split dim 0 -> rows; groups [1, 4].
static_assert(row<M, "None, data">(op(partial, arr({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), arr({1, 4}, {0, 1, 2, 3}),
                                      {{0, 1}, {2, 3}, {4, 5}, {6, 7}}),
                                   "{devices=[1,4,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}",
                                   "{devices=[1,4,2]<=[8] last_tile_dim_replicate}"));
// Rank 1 "data": tile [4,2] has more dims than the 1 entry -> PARTIAL (model
// unused); groups [4]; XLA dims [4] + [2].
static_assert(row<M, "data">(op(partial, arr({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), arr({4}, {0, 1, 2, 3}),
                                {{0, 1}, {2, 3}, {4, 5}, {6, 7}}),
                             "{devices=[4,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}",
                             "{devices=[4,2]<=[8] last_tile_dim_replicate}"));
// Rank 1 "model": tile transpose(1,0) [2,4]; PARTIAL; groups [2].
static_assert(row<M, "model">(op(partial, arr({2, 4}, {0, 2, 4, 6, 1, 3, 5, 7}), arr({2}, {0, 1}),
                                 {{0, 2, 4, 6}, {1, 3, 5, 7}}),
                              "{devices=[2,4]0,2,4,6,1,3,5,7 last_tile_dim_replicate}",
                              "{devices=[2,4]<=[4,2]T(1,0) last_tile_dim_replicate}"));
// "None" alone: tile = logical mesh, 2 dims > 1 entry -> PARTIAL (not
// REPLICATED); no tiled dim, so one group of all 8; groups [1]. XLA dims
// [1, 8]: the last dim covers every device -> {replicated}.
static_assert(row<M, "None">(op(partial, arr({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), arr({1}, {0}),
                                {{0, 1, 2, 3, 4, 5, 6, 7}}),
                             "{replicated}", "{replicated}"));
// None, None: 2 dims == 2 entries, 8 devices, all None -> REPLICATED; the
// tile assignment is still the logical mesh, groups and reps are empty.
static_assert(row<M, "None, None">(op(replicated, arr({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7})), "{replicated}",
                                   "{replicated}"));
// Rank 0: torch_xla's scalar case, REPLICATED with every list empty.
static_assert(row<M, "">(op(replicated, int_array{}), "{replicated}", "{replicated}"));
static_assert(xshard::op_sharding_v<M, spec<"">>.tile_assignment.rank() == 0);

// ---------------------------------------------------------------------------
// Custom device order "x=4, y=2", ids 7..0: logical [[7,6],[5,4],[3,2],[1,0]].

// x, None: tile = logical mesh; PARTIAL; reps are the rows as they are;
// XLA sorts inside each group: 6,7 4,5 2,3 0,1 (not an iota: V2 = V1).
static_assert(row<M2, "x, None">(op(partial, arr({4, 2}, {7, 6, 5, 4, 3, 2, 1, 0}), arr({4, 1}, {0, 1, 2, 3}),
                                    {{7, 6}, {5, 4}, {3, 2}, {1, 0}}),
                                 "{devices=[4,1,2]6,7,4,5,2,3,0,1 last_tile_dim_replicate}",
                                 "{devices=[4,1,2]6,7,4,5,2,3,0,1 last_tile_dim_replicate}"));
// y, x: transpose(1, 0): row y=0 is 7,5,3,1, row y=1 is 6,4,2,0 -> TILED.
static_assert(row<M2, "y, x">(op(tiled, arr({2, 4}, {7, 5, 3, 1, 6, 4, 2, 0})), "{devices=[2,4]7,5,3,1,6,4,2,0}",
                              "{devices=[2,4]7,5,3,1,6,4,2,0}"));
// None, y: same transposed tile; PARTIAL; reps [7,5,3,1] [6,4,2,0]; XLA
// sorts them: 1,3,5,7 0,2,4,6.
static_assert(row<M2, "None, y">(op(partial, arr({2, 4}, {7, 5, 3, 1, 6, 4, 2, 0}), arr({1, 2}, {0, 1}),
                                    {{7, 5, 3, 1}, {6, 4, 2, 0}}),
                                 "{devices=[1,2,4]1,3,5,7,0,2,4,6 last_tile_dim_replicate}",
                                 "{devices=[1,2,4]1,3,5,7,0,2,4,6 last_tile_dim_replicate}"));
// (x, y): merged [8] in the logical order 7..0 -> TILED.
static_assert(row<M2, "(x, y)">(op(tiled, arr({8}, {7, 6, 5, 4, 3, 2, 1, 0})), "{devices=[8]7,6,5,4,3,2,1,0}",
                                "{devices=[8]7,6,5,4,3,2,1,0}"));

// ---------------------------------------------------------------------------
// 1-axis meshes.

using M8 = mesh<"x=8">;
// x: tile [8] 0..7, 8 devices, no None -> TILED.
static_assert(row<M8, "x">(op(tiled, arr({8}, {0, 1, 2, 3, 4, 5, 6, 7})), "{devices=[8]0,1,2,3,4,5,6,7}",
                           "{devices=[8]<=[8]}"));
// None: 1 dim == 1 entry, all None -> REPLICATED.
static_assert(row<M8, "None">(op(replicated, arr({8}, {0, 1, 2, 3, 4, 5, 6, 7})), "{replicated}", "{replicated}"));
// None, 0: x tiles dim 1; 1 dim < 2 entries; one None -> PARTIAL with
// singleton groups; groups [1, 8]; XLA [1,8,1] -> plain [1,8].
static_assert(row<M8, "None, 0">(op(partial, arr({8}, {0, 1, 2, 3, 4, 5, 6, 7}), arr({1, 8}, {0, 1, 2, 3, 4, 5, 6, 7}),
                                    {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}),
                                 "{devices=[1,8]0,1,2,3,4,5,6,7}", "{devices=[1,8]<=[8]}"));
// Custom order 2,0,3,1: tile [4] in that order -> TILED, no iota form.
static_assert(row<mesh<"x=4", 2, 0, 3, 1>, "x">(op(tiled, arr({4}, {2, 0, 3, 1})), "{devices=[4]2,0,3,1}",
                                                "{devices=[4]2,0,3,1}"));

// ---------------------------------------------------------------------------
// One device and size-1 axes.

// "x=1": one device -> MAXIMAL for "x" and for "None" (the one-device rule
// comes before the all-None rule); torch_xla hands XLA {replicated}.
static_assert(row<mesh<"x=1">, "x">(op(maximal, arr({1}, {0})), "{replicated}", "{replicated}"));
static_assert(row<mesh<"x=1">, "None">(op(maximal, arr({1}, {0})), "{replicated}", "{replicated}"));
static_assert(row<mesh<"x=1">, "">(op(replicated, int_array{}), "{replicated}", "{replicated}"));
// "x=1, y=1", spec "x": tile [1,1] has 2 dims > 1 entry -> PARTIAL; one group
// [0]; XLA [1,1]: the last dim (1) covers all (1) devices -> {replicated}.
static_assert(row<mesh<"x=1, y=1">, "x">(op(partial, arr({1, 1}, {0}), arr({1}, {0}), {{0}}), "{replicated}",
                                         "{replicated}"));
// "x=1, y=1", spec "x, y": 2 dims == 2 entries, one device -> MAXIMAL.
static_assert(row<mesh<"x=1, y=1">, "x, y">(op(maximal, arr({1, 1}, {0})), "{replicated}", "{replicated}"));
// "a=4, b=1", spec "a": tile [4,1] (b unused) -> PARTIAL, singleton groups;
// XLA [4] + [1]: last dim 1 -> plain tile [4].
static_assert(row<mesh<"a=4, b=1">, "a">(op(partial, arr({4, 1}, {0, 1, 2, 3}), arr({4}, {0, 1, 2, 3}),
                                            {{0}, {1}, {2}, {3}}),
                                         "{devices=[4]0,1,2,3}", "{devices=[4]<=[4]}"));
// "a=1, b=4", spec "None, b": perm [1, 0] -> tile [4,1] = 0..3; 2 dims == 2
// entries; one None -> PARTIAL; singleton groups; groups [1, 4]; XLA
// [1,4,1] -> plain [1,4].
static_assert(row<mesh<"a=1, b=4">, "None, b">(op(partial, arr({4, 1}, {0, 1, 2, 3}), arr({1, 4}, {0, 1, 2, 3}),
                                                  {{0}, {1}, {2}, {3}}),
                                               "{devices=[1,4]0,1,2,3}", "{devices=[1,4]<=[4]}"));

// ---------------------------------------------------------------------------
// 3-axis mesh "a=2, b=3, c=2": id = 6a + 2b + c. Unequal sizes catch a
// transpose that mixes up dims.

using M232 = mesh<"a=2, b=3, c=2">;
// c, a, b: perm [2, 0, 1], tile [2,2,3], value(c, a, b) = 6a + 2b + c:
// c=0: 0,2,4 6,8,10; c=1: 1,3,5 7,9,11 -> TILED. V2: (a, b) stay adjacent
// and in order, so iota [6,2] transposed.
static_assert(row<M232, "c, a, b">(op(tiled, arr({2, 2, 3}, {0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11})),
                                   "{devices=[2,2,3]0,2,4,6,8,10,1,3,5,7,9,11}", "{devices=[2,2,3]<=[6,2]T(1,0)}"));
static_assert(row<M232, "2, 0, 1">(op(tiled, arr({2, 2, 3}, {0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11})),
                                   "{devices=[2,2,3]0,2,4,6,8,10,1,3,5,7,9,11}", "{devices=[2,2,3]<=[6,2]T(1,0)}"));
// b, None: perm [1, 0, 2] (a, c unused), tile [3,2,2], value(b, a, c):
// b=0: 0,1,6,7; b=1: 2,3,8,9; b=2: 4,5,10,11. 3 dims > 2 -> PARTIAL; split
// dim 0 -> those three groups; groups [3, 1]. V2: iota [2,3,2] T(1,0,2).
static_assert(row<M232, "b, None">(op(partial, arr({3, 2, 2}, {0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11}),
                                      arr({3, 1}, {0, 1, 2}), {{0, 1, 6, 7}, {2, 3, 8, 9}, {4, 5, 10, 11}}),
                                   "{devices=[3,1,4]0,1,6,7,2,3,8,9,4,5,10,11 last_tile_dim_replicate}",
                                   "{devices=[3,1,4]<=[2,3,2]T(1,0,2) last_tile_dim_replicate}"));
// b (rank 1): the same tile; PARTIAL; groups [3]; XLA [3] + [4].
static_assert(row<M232, "b">(op(partial, arr({3, 2, 2}, {0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11}), arr({3}, {0, 1, 2}),
                                {{0, 1, 6, 7}, {2, 3, 8, 9}, {4, 5, 10, 11}}),
                             "{devices=[3,4]0,1,6,7,2,3,8,9,4,5,10,11 last_tile_dim_replicate}",
                             "{devices=[3,4]<=[2,3,2]T(1,0,2) last_tile_dim_replicate}"));
// (c, b), None: perm [2, 1, 0] -> [2,3,2] merged to [6,2]; value(c, b, a):
// 0,6 2,8 4,10 1,7 3,9 5,11. 2 dims == 2 entries; one None -> PARTIAL;
// split dim 0 -> six pairs; groups [6, 1]. V2: full reverse T(2,1,0).
static_assert(row<M232, "(c, b), None">(op(partial, arr({6, 2}, {0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11}),
                                           arr({6, 1}, {0, 1, 2, 3, 4, 5}),
                                           {{0, 6}, {2, 8}, {4, 10}, {1, 7}, {3, 9}, {5, 11}}),
                                        "{devices=[6,1,2]0,6,2,8,4,10,1,7,3,9,5,11 last_tile_dim_replicate}",
                                        "{devices=[6,1,2]<=[2,3,2]T(2,1,0) last_tile_dim_replicate}"));
// (a, c), b: perm [0, 2, 1] -> [2,2,3] merged to [4,3]; value(a, c, b):
// a0c0: 0,2,4; a0c1: 1,3,5; a1c0: 6,8,10; a1c1: 7,9,11 -> TILED.
static_assert(row<M232, "(a, c), b">(op(tiled, arr({4, 3}, {0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11})),
                                     "{devices=[4,3]0,2,4,1,3,5,6,8,10,7,9,11}", "{devices=[4,3]<=[2,3,2]T(0,2,1)}"));
// None, a: perm [0, 1, 2] -> tile [2,3,2] = 0..11; 3 dims > 2 -> PARTIAL;
// split dim 0 -> 0..5 and 6..11; groups [1, 2].
static_assert(row<M232, "None, a">(op(partial, arr({2, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}),
                                      arr({1, 2}, {0, 1}), {{0, 1, 2, 3, 4, 5}, {6, 7, 8, 9, 10, 11}}),
                                   "{devices=[1,2,6]0,1,2,3,4,5,6,7,8,9,10,11 last_tile_dim_replicate}",
                                   "{devices=[1,2,6]<=[12] last_tile_dim_replicate}"));
// None, None, None: 3 dims == 3 entries, all None -> REPLICATED.
static_assert(row<M232, "None, None, None">(op(replicated, arr({2, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})),
                                            "{replicated}", "{replicated}"));
// None, None: 3 dims > 2 -> PARTIAL, one group of all 12 -> {replicated}.
static_assert(row<M232, "None, None">(op(partial, arr({2, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}),
                                         arr({1, 1}, {0}), {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}),
                                      "{replicated}", "{replicated}"));

// 3-axis mesh with custom ids 3,1,7,5,2,0,6,4 (flat position 4a + 2b + c).
// b, None: perm [1, 0, 2], value(b, a, c): b=0: 3,1,2,0; b=1: 7,5,6,4;
// PARTIAL; XLA sorts each group -> 0..7, which is an iota again.
static_assert(row<M3c, "b, None">(op(partial, arr({2, 2, 2}, {3, 1, 2, 0, 7, 5, 6, 4}), arr({2, 1}, {0, 1}),
                                     {{3, 1, 2, 0}, {7, 5, 6, 4}}),
                                  "{devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}",
                                  "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"));
// (c, a), b: perm [2, 0, 1] merged to [4,2]; value(c, a, b) = id at 4a+2b+c:
// (0,0): 3,7; (0,1): 2,6; (1,0): 1,5; (1,1): 0,4 -> TILED.
static_assert(row<M3c, "(c, a), b">(op(tiled, arr({4, 2}, {3, 7, 2, 6, 1, 5, 0, 4})), "{devices=[4,2]3,7,2,6,1,5,0,4}",
                                    "{devices=[4,2]3,7,2,6,1,5,0,4}"));

// ---------------------------------------------------------------------------
// XLA forms as values.

static_assert(xshard::xla_sharding_of<M, spec<"None">>().type == xshard::xla_sharding::kind::replicated);
static_assert(xshard::xla_sharding_of<M, S>().replicas() == 2 && xshard::xla_sharding_of<M, S>().data_rank() == 2);
static_assert(xshard::xla_sharding_of<M, spec<"data, model">>().replicas() == 1);
static_assert(xshard::parse_hlo("{devices=[2,4]<=[4,2]T(1,0)}").value ==
              xshard::xla_sharding_of<M, spec<"model, data">>());
static_assert(xshard::parse_hlo("{devices=[4,1,2]7,6,5,4,3,2,1,0 last_tile_dim_replicate}").value ==
              xshard::xla_sharding_of<M2, spec<"x, None">>());

// ---------------------------------------------------------------------------
// Shard slices (typed): ceil(n / tiles) per dim, [min(j*s, n), min((j+1)*s, n)).

constexpr bool ten_over_four() {
  // [10] over 4: shard 3; [0,3) [3,6) [6,9) [9,10).
  const auto l = xshard::shard_slices<xshard::mesh_1d<"x", 4>, spec<"x">>(std::array<std::int64_t, 1>{10});
  const shard_slice want[] = {{0, 3}, {3, 6}, {6, 9}, {9, 10}};
  bool ok = l.shards.size() == 4 && l.shard_shape[0] == 3 && l.shape[0] == 10;
  for (int d = 0; ok && d < 4; ++d) ok = l.shards[d].device == d && l.shards[d].slices[0] == want[d];
  return ok && l.shards[3].size() == 1;
}
static_assert(ten_over_four());

constexpr bool five_over_eight() {
  // [5] over 8: shard 1; devices 0..4 hold one element, 5..7 hold [5,5).
  const auto l = xshard::shard_slices<xshard::mesh_1d<"x", 8>, spec<"x">>(std::array<std::int64_t, 1>{5});
  bool ok = l.shards.size() == 8 && l.shard_shape[0] == 1;
  for (int d = 0; ok && d < 5; ++d) ok = l.shards[d].slices[0] == shard_slice{d, d + 1} && l.shards[d].size() == 1;
  for (int d = 5; ok && d < 8; ++d) ok = l.shards[d].slices[0] == shard_slice{5, 5} && l.shards[d].size() == 0;
  return ok;
}
static_assert(five_over_eight());

constexpr bool partial_six_by_three() {
  // "data, None" on 4x2 over [6, 3]: tile [4,1,2]; shard [2, 3]; device d is
  // tile d/2 (rows [2j, 2j+2) clipped to 6), replica d%2; devices 6, 7 empty.
  const auto l = xshard::shard_slices<M, S>(std::array<std::int64_t, 2>{6, 3});
  bool ok = l.shards.size() == 8 && l.shard_shape[0] == 2 && l.shard_shape[1] == 3;
  for (int d = 0; ok && d < 8; ++d) {
    const std::int64_t j = d / 2;
    const std::int64_t lo = j * 2 < 6 ? j * 2 : 6, hi = j * 2 + 2 < 6 ? j * 2 + 2 : 6;
    ok = l.shards[d].device == d && l.shards[d].replica == d % 2 && l.shards[d].slices[0] == shard_slice{lo, hi} &&
         l.shards[d].slices[1] == shard_slice{0, 3};
  }
  return ok && l.find(7)->size() == 0 && l.find(9) == nullptr;
}
static_assert(partial_six_by_three());

constexpr bool replicated_everywhere() {
  // {replicated}: one tile held by every mesh device, in mesh order; the
  // replica id is the device's own id (torch_xla), not its position.
  const auto l = xshard::shard_slices<M2, spec<"None, None">>(std::array<std::int64_t, 2>{2, 3});
  bool ok = l.shards.size() == 8;
  for (int i = 0; ok && i < 8; ++i)
    ok = l.shards[i].device == 7 - i && l.shards[i].replica == 7 - i && l.shards[i].slices[0] == shard_slice{0, 2} &&
         l.shards[i].slices[1] == shard_slice{0, 3};
  return ok;
}
static_assert(replicated_everywhere());

constexpr bool replica_is_the_device_id() {
  // torch_xla: under {replicated} the replica id is the device's ordinal.
  // x=4 with devices 3,0,2,1, spec "None, None, None": device 3 replica 3,
  // device 0 replica 0 (not their positions 0 and 1).
  using M4 = xshard::mesh<"x=4", 3, 0, 2, 1>;
  const auto l = xshard::shard_slices<M4, spec<"None, None, None">>(std::array<std::int64_t, 3>{13, 11, 12});
  const auto one = xshard::shard_slices<xshard::mesh<"x=1">, spec<"x">>(std::array<std::int64_t, 1>{5});  // MAXIMAL
  const auto tiled = xshard::shard_slices<M4, spec<"x, None, None">>(std::array<std::int64_t, 3>{13, 11, 12});
  return l.shards.size() == 4 && l.shards[0].device == 3 && l.shards[0].replica == 3 && l.shards[1].device == 0 &&
         l.shards[1].replica == 0 && l.find(2)->replica == 2 && l.find(1)->replica == 1 && one.shards[0].replica == 0 &&
         tiled.find(3)->replica == 0 && tiled.find(1)->replica == 0;
}
static_assert(replica_is_the_device_id());

constexpr bool sorted_partial_replicas() {
  // "x, None" on the 7..0 mesh: XLA devices 6,7 4,5 2,3 0,1; device 6 is
  // tile 0 replica 0, device 1 is tile 3 replica 1. Shape [8, 1]: shard [2, 1].
  const auto l = xshard::shard_slices<M2, spec<"x, None">>(std::array<std::int64_t, 2>{8, 1});
  return l.shards[0].device == 6 && l.shards[0].replica == 0 && l.find(1)->replica == 1 &&
         l.find(1)->slices[0] == shard_slice{6, 8} && l.find(6)->slices[0] == shard_slice{0, 2};
}
static_assert(sorted_partial_replicas());

// ---------------------------------------------------------------------------
// shardable / evenly_shardable with xtensor types.

using T2 = xt::xtensor<float, 2>;
using F86 = xt::xtensor_fixed<float, xt::xshape<8, 6>>;
static_assert(xshard::shardable<M, S, T2>);
static_assert(!xshard::shardable<M, spec<"data">, T2>);        // rank 1 != 2
static_assert(!xshard::shardable<M, spec<"foo, None">, T2>);   // quiet on an unknown axis
static_assert(!xshard::shardable<M, spec<"data, data">, T2>);  // quiet on an axis used twice
static_assert(xshard::shardable<M, S, int>);  // no static rank: only the spec is checked against the mesh
static_assert(xshard::shardable<M, spec<"data, None, None">, xt::xtensor<double, 3>>);
static_assert(xshard::shardable<M, spec<"">, xt::xtensor<float, 0>>);
static_assert(xshard::shardable<M, spec<"data, model">, F86>);
static_assert(xshard::evenly_shardable<M, spec<"data, model">, F86>);  // 8 % 4, 6 % 2
static_assert(xshard::evenly_shardable<M, S, F86>);                    // tiles [4, 1]
static_assert(!xshard::evenly_shardable<M, spec<"data, model">, xt::xtensor_fixed<float, xt::xshape<6, 6>>>);
static_assert(!xshard::evenly_shardable<M, spec<"model, data">, F86>);  // 6 % 4
static_assert(xshard::evenly_shardable<M, spec<"None, model">, xt::xtensor_fixed<float, xt::xshape<3, 4>>>);
static_assert(!xshard::evenly_shardable<M, spec<"None, model">, xt::xtensor_fixed<float, xt::xshape<3, 5>>>);
static_assert(xshard::evenly_shardable<M, spec<"None, None">, xt::xtensor_fixed<float, xt::xshape<3, 5>>>);
static_assert(xshard::evenly_shardable<M, spec<"(data, model)">, xt::xtensor_fixed<float, xt::xshape<16>>>);
static_assert(!xshard::evenly_shardable<M, spec<"(data, model)">, xt::xtensor_fixed<float, xt::xshape<12>>>);
static_assert(!xshard::evenly_shardable<M, S, T2>);  // extents not static
// xt::xarray's rank is dynamic (its `rank` member is SIZE_MAX): any spec rank is accepted.
static_assert(xshard::tensor_rank_v<xt::xarray<float>> == -1 && xshard::tensor_rank_v<T2> == 2);
static_assert(xshard::shardable<M, spec<"data">, xt::xarray<float>>);
static_assert(xshard::shardable<M, spec<"data, None, model">, xt::xarray<float>>);
static_assert(!xshard::evenly_shardable<M, spec<"data">, xt::xarray<float>>);
static_assert(xshard::check_shardable<M, S, T2>() && xshard::check_evenly_shardable<M, S, F86>());

}  // namespace
