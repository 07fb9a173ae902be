// Tests of xshard/mesh/hybrid.hpp: torch_xla's HybridMesh device order.
//
// Where the expected orders come from: the small cases were worked out by hand
// (the derivation is in the comment of each case); the larger ones were
// computed by a throw-away Python script, independent of this library, that
// re-does torch_xla's numpy steps naively (max() over coordinate tuples,
// itertools.combinations for the axis search, an explicit index map for
// transpose, row-major reshape, and np.block's block placement). They are
// pasted here as literals.
#include "xshard/mesh/hybrid.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "../support/expect_error.hpp"
#include "xshard/sharding/hlo.hpp"

namespace xshard {
// Readable failure output for device lists.
void PrintTo(const device_attributes& d, std::ostream* os) {
  *os << "{id " << d.id << ", coords (" << d.coords[0] << ", " << d.coords[1] << ", " << d.coords[2] << ")";
  if (d.slice_index) *os << ", slice " << *d.slice_index;
  *os << "}";
}
}  // namespace xshard

namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using xshard::device_attributes;
using shape = std::vector<std::int64_t>;
using devices = std::vector<device_attributes>;

/// Devices of a dx*dy*dz torus, enumerated x-major (x, then y, then z), with
/// the id given by `id(x, y, z)` and an optional slice index.
template <class IdFn>
devices torus(int dx, int dy, int dz, IdFn id, std::optional<int> slice = std::nullopt) {
  devices out;
  for (int x = 0; x < dx; ++x)
    for (int y = 0; y < dy; ++y)
      for (int z = 0; z < dz; ++z) out.push_back({id(x, y, z), {x, y, z}, slice});
  return out;
}

/// One v4-8 slice as in torch_xla's docstring: 4 devices at (x, y, 0),
/// id = base + x + 2y (x fastest, as TPU runtimes number them).
devices v4_8(int base, std::optional<int> slice) {
  return torus(
      2, 2, 1, [base](int x, int y, int) { return base + x + 2 * y; }, slice);
}

devices concat(devices a, const devices& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// Builds the layout or fails the test with the error text.
xshard::hybrid_layout layout(const devices& d, const shape& ici, const shape& dcn = {}) {
  try {
    return xshard::hybrid_device_layout(d, ici, dcn);
  } catch (const xshard::error& e) {
    ADD_FAILURE() << "unexpected error: " << e.what();
    return {};
  }
}

std::string layout_error(const devices& d, const shape& ici, const shape& dcn = {}) {
  return xshard_test::error_of([&] { (void)xshard::hybrid_device_layout(d, ici, dcn); });
}

// ---------------------------------------------------------------------------
// Device orders.

struct layout_case {
  const char* name;
  devices devs;
  shape ici;
  shape dcn;
  shape mesh_shape;
  std::vector<int> ids;
};

void PrintTo(const layout_case& c, std::ostream* os) { *os << c.name; }

class HybridLayout : public ::testing::TestWithParam<layout_case> {};

TEST_P(HybridLayout, DeviceOrder) {
  const layout_case& c = GetParam();
  const xshard::hybrid_layout got = layout(c.devs, c.ici, c.dcn);
  EXPECT_THAT(got.mesh_shape, ElementsAreArray(c.mesh_shape));
  EXPECT_THAT(got.device_ids, ElementsAreArray(c.ids));
}

TEST_P(HybridLayout, InputOrderDoesNotMatter) {
  // torch_xla sorts the devices by ordinal before anything else.
  const layout_case& c = GetParam();
  devices reversed(c.devs.rbegin(), c.devs.rend());
  devices rotated = c.devs;
  std::rotate(rotated.begin(), rotated.begin() + static_cast<std::ptrdiff_t>(rotated.size() / 3), rotated.end());
  EXPECT_THAT(layout(reversed, c.ici, c.dcn).device_ids, ElementsAreArray(c.ids));
  EXPECT_THAT(layout(rotated, c.ici, c.dcn).device_ids, ElementsAreArray(c.ids));
}

// 4x4x4 torus, id = 16x + 4y + z.
devices torus_444() {
  return torus(4, 4, 4, [](int x, int y, int z) { return 16 * x + 4 * y + z; });
}

// Four slices with slice_index 7, 3, 10, 5 (not in order), each a 2x1x2
// torus; the n-th listed slice has ids 10n + 2z + x.
devices four_slices() {
  devices out;
  const int keys[] = {7, 3, 10, 5};
  for (int n = 0; n < 4; ++n)
    out = concat(out, torus(
                          2, 1, 2, [n](int x, int, int z) { return 10 * n + 2 * z + x; }, keys[n]));
  return out;
}

// Ids assigned to coords out of row-major order: (0,0)->3, (1,0)->0, (0,1)->2, (1,1)->1.
devices scrambled() { return {{0, {1, 0, 0}, {}}, {1, {1, 1, 0}, {}}, {2, {0, 1, 0}, {}}, {3, {0, 0, 0}, {}}}; }

INSTANTIATE_TEST_SUITE_P(
    Torch, HybridLayout,
    ::testing::Values(
        // torch_xla's docstring: 2 slices of v4-8, ici (1,4,1), dcn (2,1,1).
        // Per slice: physical P[x][y] = [[b, b+2], [b+1, b+3]]; the size-1 last
        // axis takes physical z, the 4 takes (x, y), the first axis nothing:
        // transpose (0, 1, 2), so the slice reads b, b+2, b+1, b+3. Slice 0 is
        // the top block, slice 1 the bottom one.
        layout_case{"docstring_v4_8_x2",
                    concat(v4_8(0, 0), v4_8(4, 1)),
                    {1, 4, 1},
                    {2, 1, 1},
                    {2, 4, 1},
                    {0, 2, 1, 3, 4, 6, 5, 7}},
        // One v4-8, ici (2,2): the last 2 takes physical (x, z), the first 2
        // takes y: transpose (1, 0, 2) turns P[x][y] into T[y][x] = 0 1 2 3.
        layout_case{"v4_8_ici_2x2", v4_8(0, std::nullopt), {2, 2}, {}, {2, 2}, {0, 1, 2, 3}},
        // ici (1,4): the 4 takes all three physical axes (2*2*1), identity
        // transpose, so P is read row-major: 0 2 1 3.
        layout_case{"v4_8_ici_1x4", v4_8(0, std::nullopt), {1, 4}, {}, {1, 4}, {0, 2, 1, 3}},
        // A dcn of all ones is the single-slice mesh.
        layout_case{"v4_8_dcn_ones", v4_8(0, std::nullopt), {1, 4}, {1, 1}, {1, 4}, {0, 2, 1, 3}},
        layout_case{"v4_8_ici_4", v4_8(0, std::nullopt), {4}, {}, {4}, {0, 2, 1, 3}},
        // 4x4x4, logical (4,16): the 16 takes physical (x, y), the 4 takes z;
        // mesh[z][4x + y] = 16x + 4y + z.
        layout_case{
            "torus_4x4x4_4x16", torus_444(), {4, 16}, {}, {4, 16}, {0,  4,  8,  12, 16, 20, 24, 28, 32, 36, 40, 44, 48,
                                                                    52, 56, 60, 1,  5,  9,  13, 17, 21, 25, 29, 33, 37,
                                                                    41, 45, 49, 53, 57, 61, 2,  6,  10, 14, 18, 22, 26,
                                                                    30, 34, 38, 42, 46, 50, 54, 58, 62, 3,  7,  11, 15,
                                                                    19, 23, 27, 31, 35, 39, 43, 47, 51, 55, 59, 63}},
        // 4x4x4, logical (16,4): the 4 takes x, the 16 takes (y, z);
        // mesh[4y + z][x] = 16x + 4y + z.
        layout_case{
            "torus_4x4x4_16x4", torus_444(), {16, 4}, {}, {16, 4}, {0,  16, 32, 48, 1,  17, 33, 49, 2,  18, 34, 50, 3,
                                                                    19, 35, 51, 4,  20, 36, 52, 5,  21, 37, 53, 6,  22,
                                                                    38, 54, 7,  23, 39, 55, 8,  24, 40, 56, 9,  25, 41,
                                                                    57, 10, 26, 42, 58, 11, 27, 43, 59, 12, 28, 44, 60,
                                                                    13, 29, 45, 61, 14, 30, 46, 62, 15, 31, 47, 63}},
        // 2x2x2 with id = 4x + 2y + z, logical (2,2,2): axes are taken from
        // the last: 2 -> x, 2 -> y, 2 -> z; transpose (2, 1, 0):
        // mesh[z][y][x] = 4x + 2y + z.
        layout_case{"torus_2x2x2_2x2x2",
                    torus(2, 2, 2, [](int x, int y, int z) { return 4 * x + 2 * y + z; }),
                    {2, 2, 2},
                    {},
                    {2, 2, 2},
                    {0, 4, 2, 6, 1, 5, 3, 7}},
        // 2x4x1 (id = 4x + y): (2,4) maps 4 -> (y, z), 2 -> x: identity order;
        // (4,2) maps 2 -> (x, z), 4 -> y: mesh[y][x].
        layout_case{"torus_2x4x1_2x4",
                    torus(2, 4, 1, [](int x, int y, int) { return 4 * x + y; }),
                    {2, 4},
                    {},
                    {2, 4},
                    {0, 1, 2, 3, 4, 5, 6, 7}},
        layout_case{"torus_2x4x1_4x2",
                    torus(2, 4, 1, [](int x, int y, int) { return 4 * x + y; }),
                    {4, 2},
                    {},
                    {4, 2},
                    {0, 4, 1, 5, 2, 6, 3, 7}},
        // 2x2x4 (id = 8x + 4y + z), (4,4): the last 4 takes (x, y), the first z.
        layout_case{"torus_2x2x4_4x4",
                    torus(2, 2, 4, [](int x, int y, int z) { return 8 * x + 4 * y + z; }),
                    {4, 4},
                    {},
                    {4, 4},
                    {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15}},
        // Two v4-8 slices, dcn splitting the last axis: per slice (2,2,1) maps
        // 1 -> z, 2 -> x, 2 -> y, slice order T[y][x] = b, b+1, b+2, b+3;
        // mesh[i][j][k] = slice k at (i, j).
        layout_case{"two_slices_dcn_last_axis",
                    concat(v4_8(0, 0), v4_8(4, 1)),
                    {2, 2, 1},
                    {1, 1, 2},
                    {2, 2, 2},
                    {0, 4, 1, 5, 2, 6, 3, 7}},
        // Four slices (slice_index 7, 3, 10, 5 holding ids 0-3, 10-13, 20-23,
        // 30-33): groups go by ascending slice_index (3, 5, 7, 10), not by id,
        // and fill arange(4).reshape(dcn).
        layout_case{"four_slices_dcn_2x1x2",
                    four_slices(),
                    {1, 2, 2},
                    {2, 1, 2},
                    {2, 2, 4},
                    {10, 11, 30, 31, 12, 13, 32, 33, 0, 1, 20, 21, 2, 3, 22, 23}},
        layout_case{"four_slices_dcn_4x1",
                    four_slices(),
                    {2, 2},
                    {4, 1},
                    {8, 2},
                    {10, 11, 12, 13, 30, 31, 32, 33, 0, 1, 2, 3, 20, 21, 22, 23}},
        layout_case{"four_slices_dcn_1x4",
                    four_slices(),
                    {4, 1},
                    {1, 4},
                    {4, 4},
                    {10, 30, 0, 20, 12, 32, 2, 22, 11, 31, 1, 21, 13, 33, 3, 23}},
        // Coords not in row-major order of the ids. (2,2): T[y][x] = 3 0 2 1;
        // (1,4): P row-major = 3 2 0 1.
        layout_case{"scrambled_coords_2x2", scrambled(), {2, 2}, {}, {2, 2}, {3, 0, 2, 1}},
        layout_case{"scrambled_coords_1x4", scrambled(), {1, 4}, {}, {1, 4}, {3, 2, 0, 1}},
        // The numbers placed are the ids themselves, not their ranks.
        layout_case{"sparse_ids",
                    {{70, {1, 1, 0}, {}}, {40, {0, 1, 0}, {}}, {10, {0, 0, 0}, {}}, {20, {1, 0, 0}, {}}},
                    {1, 4},
                    {},
                    {1, 4},
                    {10, 40, 20, 70}},
        // A single device.
        layout_case{"one_device", {{5, {0, 0, 0}, {}}}, {1, 1}, {}, {1, 1}, {5}}),
    [](const ::testing::TestParamInfo<layout_case>& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------
// The axis assignment alone.

struct assignment_case {
  shape physical;
  shape logical;
  std::vector<std::vector<int>> expected;
};

TEST(TorusAssignment, MatchesTorchXla) {
  const std::vector<assignment_case> cases = {
      // (4,16) on 4x4x4: the 16 gets two physical axes, the 4 the one left.
      {{4, 4, 4}, {4, 16}, {{2}, {0, 1}}},
      {{4, 4, 4}, {16, 4}, {{1, 2}, {0}}},
      // Three axes are tried before two and one.
      {{4, 4, 4}, {64}, {{0, 1, 2}}},
      {{4, 4, 4}, {4, 4, 4}, {{2}, {1}, {0}}},
      // Size-1 logical axes take size-1 physical axes when any are free, else nothing.
      {{2, 2, 1}, {1, 4, 1}, {{}, {0, 1}, {2}}},
      {{1, 1, 4}, {4, 1, 1}, {{2}, {}, {0, 1}}},
      {{2, 2, 2}, {1, 8}, {{}, {0, 1, 2}}},
      {{2, 2, 2}, {8, 1}, {{0, 1, 2}, {}}},
      // Lexicographic combination order: (0, 2) comes before the single axis 1.
      {{2, 2, 1}, {2, 2}, {{1}, {0, 2}}},
      {{2, 2, 2}, {2, 2, 2}, {{2}, {1}, {0}}},
      {{2, 2, 4}, {4, 4}, {{2}, {0, 1}}},
      {{2, 3, 4}, {6, 4}, {{0, 1}, {2}}},
      // Any number of physical axes.
      {{2, 2, 2, 2}, {4, 4}, {{2, 3}, {0, 1}}},
      {{8}, {8}, {{0}}},
  };
  for (const assignment_case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.physical) + " <- " + ::testing::PrintToString(c.logical));
    try {
      EXPECT_EQ(xshard::torus_assignment(c.physical, c.logical), c.expected);
    } catch (const xshard::error& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

TEST(TorusAssignment, NoSubsetIsAnError) {
  // (8,8) on 4x4x4: no subset of {4, 4, 4} multiplies to 8.
  const std::string m = xshard_test::error_of([] { (void)xshard::torus_assignment(shape{4, 4, 4}, shape{8, 8}); });
  EXPECT_THAT(m, HasSubstr("logical axis 1 of size 8"));
  EXPECT_THAT(m, HasSubstr("[4, 4, 4]"));
  EXPECT_THAT(m, HasSubstr("product of some subset"));
  EXPECT_THAT(m, HasSubstr("logical (4, 16) fits physical 4x4x4"));
}

TEST(TorusAssignment, GreedySearchCanFailWhereAnIdentityMapExists) {
  // (2,2,4) on 2x2x4: the last logical 4 takes physical (0, 1) (2*2, two axes
  // are tried before one), leaving [0, 0, 4] for the 2s. torch_xla refuses
  // this mesh although mapping axis i to axis i would work; so do we.
  const std::string m = xshard_test::error_of([] { (void)xshard::torus_assignment(shape{2, 2, 4}, shape{2, 2, 4}); });
  EXPECT_THAT(m, HasSubstr("logical axis 1 of size 2"));
  EXPECT_THAT(m, HasSubstr("[0, 0, 4]"));
}

TEST(TorusAssignment, RejectsNonPositiveSizes) {
  EXPECT_THAT(xshard_test::error_of([] {
                (void)xshard::torus_assignment(shape{4, 0, 4}, shape{4});
              }),
              HasSubstr("physical mesh (4, 0, 4) has size 0 at index 1"));
  EXPECT_THAT(xshard_test::error_of([] {
                (void)xshard::torus_assignment(shape{4, 4, 4}, shape{-4, 4});
              }),
              HasSubstr("mesh shape (-4, 4) has size -4 at index 0"));
}

// ---------------------------------------------------------------------------
// Errors.

TEST(HybridErrors, TorchXlaChecks) {
  const devices multi = concat(v4_8(0, 0), v4_8(4, 1));
  const devices single = v4_8(0, std::nullopt);
  // slice_index present but prod(dcn) == 1, with dcn omitted or all ones.
  EXPECT_THAT(layout_error(multi, {2, 4, 1}), HasSubstr("provide a dcn_mesh_shape"));
  EXPECT_THAT(layout_error(multi, {2, 4, 1}, {1, 1, 1}), HasSubstr("provide a dcn_mesh_shape"));
  // Even one slice with a slice_index needs a dcn shape (torch_xla's rule).
  EXPECT_THAT(layout_error(v4_8(0, 0), {1, 4, 1}), HasSubstr("slice_index"));
  // no slice_index but prod(dcn) > 1.
  const std::string invalid_dcn = layout_error(single, {1, 2}, {2, 1});
  EXPECT_THAT(invalid_dcn, HasSubstr("dcn_mesh_shape (2, 1) is invalid for a single-slice mesh"));
  // number of slices != prod(dcn).
  EXPECT_THAT(layout_error(multi, {1, 2, 1}, {4, 1, 1}),
              HasSubstr("number of slices 2 must equal the product of dcn_mesh_shape (4, 1, 1), which is 4"));
  // device count != prod(mesh shape): both numbers and the shape.
  EXPECT_THAT(layout_error(single, {2, 4}),
              HasSubstr("number of devices 4 must equal the product of the mesh shape (2, 4), which is 8"));
  EXPECT_THAT(layout_error(single, {3}),
              HasSubstr("number of devices 4 must equal the product of the mesh shape (3,)"));
  // ... and per slice in a multislice mesh.
  const devices uneven = concat(v4_8(0, 0), torus(
                                                2, 1, 1, [](int x, int, int) { return 10 + x; }, 1));
  const std::string m = layout_error(uneven, {1, 4, 1}, {2, 1, 1});
  EXPECT_THAT(m, HasSubstr("slice_index 1"));
  EXPECT_THAT(m, HasSubstr("the slice has 2 devices, but the product of ici_mesh_shape (1, 4, 1) is 4"));
}

TEST(HybridErrors, NoTorusMapping) {
  const std::string m = layout_error(torus_444(), {8, 8});
  EXPECT_THAT(m, HasSubstr("logical axis 1 of size 8"));
  EXPECT_THAT(m, HasSubstr("[4, 4, 4]"));
  // In a multislice mesh the slice is named. Slices that are 4x1x1 lines
  // cannot hold (2,2): no subset of {4, 1, 1} multiplies to 2.
  const devices lines = concat(torus(
                                   4, 1, 1, [](int x, int, int) { return x; }, 0),
                               torus(
                                   4, 1, 1, [](int x, int, int) { return 4 + x; }, 1));
  const std::string in_slice = layout_error(lines, {2, 2}, {2, 1});
  EXPECT_THAT(in_slice, HasSubstr("slice_index 0"));
  EXPECT_THAT(in_slice, HasSubstr("logical axis 1 of size 2"));
  EXPECT_THAT(in_slice, HasSubstr("[4, 1, 1]"));
}

TEST(HybridErrors, ShapeArguments) {
  const devices single = v4_8(0, std::nullopt);
  EXPECT_THAT(layout_error(single, {1, 4, 1}, {1, 1}),
              HasSubstr("ici_mesh_shape (1, 4, 1) and dcn_mesh_shape (1, 1) must have the same length (3 vs 2)"));
  EXPECT_THAT(layout_error(single, {}), HasSubstr("ici_mesh_shape must have at least one axis"));
  EXPECT_THAT(layout_error(single, {4, 0}), HasSubstr("ici_mesh_shape (4, 0) has size 0 at index 1"));
  EXPECT_THAT(layout_error(single, {-1, -4}), HasSubstr("ici_mesh_shape (-1, -4) has size -1 at index 0"));
  EXPECT_THAT(layout_error(single, {4, 1}, {1, 0}), HasSubstr("dcn_mesh_shape (1, 0) has size 0 at index 1"));
  // Products far beyond int64 do not wrap around.
  const std::int64_t big = std::int64_t{1} << 40;
  EXPECT_THAT(layout_error(single, {big, big, big}), HasSubstr("which is more than"));
  EXPECT_THAT(layout_error(concat(v4_8(0, 0), v4_8(4, 1)), {1, 4, 1}, {big, big, 1}), HasSubstr("number of slices 2"));
}

TEST(HybridErrors, DeviceList) {
  EXPECT_THAT(layout_error({}, {1}), HasSubstr("no devices"));
  devices dup = v4_8(0, std::nullopt);
  dup[3].id = 1;
  EXPECT_THAT(layout_error(dup, {4}), HasSubstr("duplicate device id 1"));
  devices negative = v4_8(0, std::nullopt);
  negative[2].coords[1] = -1;
  EXPECT_THAT(layout_error(negative, {4}), HasSubstr("device at index 2 (id 1): \"coords\""));
  devices mixed = v4_8(0, 0);
  mixed[2].slice_index.reset();
  EXPECT_THAT(layout_error(mixed, {1, 4}, {1, 1}), HasSubstr("device at index 2 (id 1) does not"));
}

TEST(HybridErrors, CoordsOutsideTheLexicographicMax) {
  // max() over tuples is lexicographic: the largest of (0,3,0) and (1,0,0) is
  // (1,0,0), so the physical mesh is 2x1x1 and (0,3,0) falls outside it
  // (numpy would raise IndexError; a per-component max would give 2x4x1).
  const devices d = {{0, {0, 3, 0}, {}}, {1, {1, 0, 0}, {}}};
  const std::string m = layout_error(d, {2});
  EXPECT_THAT(m, HasSubstr("device 0 has coords (0, 3, 0), outside the physical mesh 2x1x1"));
  EXPECT_THAT(m, HasSubstr("lexicographically largest coords (1, 0, 0)"));
}

TEST(HybridErrors, TwoDevicesOnOneCoordinate) {
  // v4_8 lists ids 0 2 1 3; move id 2 from (0,1,0) onto id 0's place. The
  // extent stays 2x2x1 (the largest coords are still (1,1,0)).
  devices d = v4_8(0, std::nullopt);
  d[1].coords = {0, 0, 0};
  EXPECT_THAT(layout_error(d, {4}), HasSubstr("devices 0 and 2 both have coords (0, 0, 0)"));
  // Checked before holes: numpy would silently keep the later device.
  const devices two_slices =
      concat(v4_8(0, 0), {{4, {0, 0, 0}, 1}, {5, {0, 0, 0}, 1}, {6, {0, 1, 0}, 1}, {7, {1, 1, 0}, 1}});
  const std::string m = layout_error(two_slices, {1, 4, 1}, {2, 1, 1});
  EXPECT_THAT(m, HasSubstr("slice_index 1"));
  EXPECT_THAT(m, HasSubstr("devices 4 and 5 both have coords (0, 0, 0)"));
}

TEST(HybridErrors, PhysicalMeshWithHoles) {
  // (0,0,0) and (1,1,0): extent 2x2x1, (0,1,0) and (1,0,0) empty. numpy.empty
  // would leave garbage there.
  const devices d = {{0, {0, 0, 0}, {}}, {1, {1, 1, 0}, {}}};
  const std::string m = layout_error(d, {2});
  EXPECT_THAT(m, HasSubstr("do not fill the physical mesh 2x2x1"));
  EXPECT_THAT(m, HasSubstr("no device has coords (0, 1, 0)"));
  EXPECT_THAT(m, HasSubstr("(2 devices for 4 positions)"));
  // The hole can be the last cell, and it can be in one slice only.
  const devices tail = {{0, {0, 0, 0}, {}}, {1, {0, 0, 1}, {}}, {2, {0, 0, 3}, {}}};
  EXPECT_THAT(layout_error(tail, {3}), HasSubstr("no device has coords (0, 0, 2)"));
  const devices two = concat(v4_8(0, 0), {{4, {0, 0, 0}, 1}, {5, {0, 0, 1}, 1}, {6, {0, 0, 2}, 1}, {7, {0, 0, 4}, 1}});
  const std::string m2 = layout_error(two, {1, 4, 1}, {2, 1, 1});
  EXPECT_THAT(m2, HasSubstr("slice_index 1"));
  EXPECT_THAT(m2, HasSubstr("no device has coords (0, 0, 3)"));
  // Huge coordinates: the extent is reported, nothing is allocated for it.
  const devices far = {{0, {0, 0, 0}, {}}, {1, {2147483647, 2147483647, 2147483647}, {}}};
  EXPECT_THAT(layout_error(far, {2}), HasSubstr("positions)"));
}

TEST(HybridErrors, TryVariantDoesNotThrow) {
  const auto r = xshard::try_hybrid_device_layout(v4_8(0, std::nullopt), shape{3});
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.message.view()), HasSubstr("number of devices 4"));
  EXPECT_TRUE(r.value.device_ids.empty());
  const auto ok = xshard::try_hybrid_device_layout(v4_8(0, std::nullopt), shape{4});
  EXPECT_TRUE(ok.ok());
  EXPECT_THAT(ok.value.device_ids, ElementsAreArray({0, 2, 1, 3}));
}

// ---------------------------------------------------------------------------
// From a topology file to a layout, and at compile time.

TEST(HybridFromTopology, DocstringExampleFromJson) {
  const auto devs = xshard::parse_topology(R"([
    {"id": 7, "coords": [1, 1, 0], "slice_index": 1}, {"id": 6, "coords": [0, 1, 0], "slice_index": 1},
    {"id": 5, "coords": [1, 0, 0], "slice_index": 1}, {"id": 4, "coords": [0, 0, 0], "slice_index": 1},
    {"id": 3, "coords": [1, 1, 0], "slice_index": 0}, {"id": 2, "coords": [0, 1, 0], "slice_index": 0},
    {"id": 1, "coords": [1, 0, 0], "slice_index": 0}, {"id": 0, "coords": [0, 0, 0], "slice_index": 0}
  ])");
  const auto l = layout(devs, {1, 4, 1}, {2, 1, 1});
  EXPECT_THAT(l.mesh_shape, ElementsAreArray({2, 4, 1}));
  EXPECT_THAT(l.device_ids, ElementsAreArray({0, 2, 1, 3, 4, 6, 5, 7}));
}

constexpr int constexpr_docstring_checksum() {
  std::vector<device_attributes> d;
  for (int s = 0; s < 2; ++s)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 2; ++x) d.push_back({4 * s + x + 2 * y, {x, y, 0}, s});
  const std::vector<std::int64_t> ici = {1, 4, 1};
  const std::vector<std::int64_t> dcn = {2, 1, 1};
  const xshard::hybrid_layout l = xshard::hybrid_device_layout(d, ici, dcn);
  int v = 0;
  for (int id : l.device_ids) v = v * 10 + id;  // 0 2 1 3 4 6 5 7 as digits
  return v;
}
static_assert(constexpr_docstring_checksum() == 2134657);

constexpr bool constexpr_assignment() {
  const std::vector<std::int64_t> physical = {4, 4, 4};
  const std::vector<std::int64_t> logical = {4, 16};
  const auto a = xshard::torus_assignment(physical, logical);
  return a.size() == 2 && a[0] == std::vector<int>{2} && a[1] == std::vector<int>{0, 1};
}
static_assert(constexpr_assignment());

constexpr bool constexpr_error_is_reported() {
  const std::vector<device_attributes> d = {{0, {0, 0, 0}, {}}, {1, {1, 1, 0}, {}}};
  const std::vector<std::int64_t> ici = {2};
  const auto r = xshard::try_hybrid_device_layout(d, ici);
  return !r.ok() && r.message.size() > 0;
}
static_assert(constexpr_error_is_reported());

}  // namespace

// The runtime_mesh wrapper: torch_xla's docstring example, 2 slices of a v4-8.
TEST(HybridMeshWrapper, DocstringExampleAsRuntimeMesh) {
  std::vector<xshard::device_attributes> devices;
  for (int s = 0; s < 2; ++s)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 2; ++x) devices.push_back({4 * s + x + 2 * y, {x, y, 0}, s});
  const std::vector<std::int64_t> ici{1, 4, 1}, dcn{2, 1, 1};
  const xshard::runtime_mesh m = xshard::hybrid_mesh(devices, ici, dcn, {"data", "fsdp", "tensor"});
  EXPECT_EQ(m.text(), "data=2, fsdp=4, tensor=1");
  EXPECT_EQ(m.device_ids(), (std::vector<int>{0, 2, 1, 3, 4, 6, 5, 7}));
  EXPECT_EQ(xshard::hlo_sharding_text(m, "fsdp, None"), "{devices=[4,1,2]0,4,2,6,1,5,3,7 last_tile_dim_replicate}");
}
