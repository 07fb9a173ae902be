// Property tests that nothing is lost:
//
//  1. Slicing (run-time face, exhaustive): on every mesh of 1 to 3 axes with
//     every axis size in 1..4 (84 meshes, device ids reversed), for every
//     spec of a rank-1..3 tensor (each dim None, one axis, or a tuple of
//     axes in any order, each axis at most once) and uneven shapes (extents
//     that the tiles do not divide, extents below the tile count, and a
//     zero extent), every device's block (local_slices, cut out by
//     detail::cut_block and put back by detail::copy_box) covers each
//     element exactly (mesh size / tiles) times with the original value,
//     and the sharding engine's shard_slices(runtime_mesh, spec text, shape)
//     gives every device the same block, with distinct replica ids.
//  2. distribute -> gather (the executor, run-time specs): on thread meshes,
//     every spec (and every partial-sum set of the unused axes) of rank-1..3
//     tensors is cut per device and gathered by detail::run_plan of the
//     gather plan; every device gets the whole tensor back (partial sums
//     reduced exactly once).
//  3. Sharded einsums write every output element exactly once: this program
//     replaces the global operator new (tests/support/alloc_counter.hpp) so
//     that every new buffer starts as all-ones bytes, a NaN as float or
//     double; operands are positive integers, so a missing or doubled
//     contribution changes a value. Each
//     device's output block and the gathered result must hold no NaN and
//     equal the single-device einsum (partial sums over contracted sharded
//     labels, reduce-scatter outputs, uneven and empty blocks).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>
#include <xshard/mesh/mesh.hpp>
#include <xshard/sharding/shards.hpp>
#include <xshard/spmd/einsum.hpp>
#include <xshard/spmd/layout.hpp>
#include <xshard/spmd/sharded.hpp>
#include <xshard/spmd/thread_mesh.hpp>
#include <xtensor/xtensor.hpp>

#include "../support/alloc_counter.hpp"  // the global operator new, filling new blocks

namespace {

// Every new buffer of this program starts as 0xFF bytes (a NaN as float and
// as double), so an element that nobody writes shows up as NaN.
const bool new_blocks_are_nan = (xshard_test::alloc_stats::fill_new_blocks(0xFF), true);

using xshard::dim_axes;
using xshard::resolved_spec;
using xshard::shard_slice;
using shape_vec = std::vector<std::int64_t>;
using slices_t = xshard::static_vector<shard_slice, xshard::max_spec_rank>;

constexpr const char* axis_names[] = {"a", "b", "c"};

/// Failures from device threads (gtest assertions are not thread-safe);
/// only the first few are kept.
struct failure_log {
  std::mutex mu;
  std::vector<std::string> list;
  std::size_t count = 0;
  void add(std::string s) {
    std::lock_guard lock(mu);
    if (++count <= 20) list.push_back(std::move(s));
  }
  void report() {
    for (const std::string& s : list) ADD_FAILURE() << s;
    if (count > list.size()) ADD_FAILURE() << (count - list.size()) << " more failures";
  }
};

// --- Specs, meshes and shapes. ---

void place_axes(std::size_t axis, std::size_t axes, resolved_spec& s, std::vector<resolved_spec>& out) {
  if (axis == axes) {
    out.push_back(s);
    return;
  }
  place_axes(axis + 1, axes, s, out);  // unused
  for (std::size_t d = 0; d < s.rank(); ++d) {
    const dim_axes saved = s.dims[d];
    for (std::size_t at = 0; at <= saved.size(); ++at) {
      dim_axes with;
      for (std::size_t j = 0; j < saved.size(); ++j) {
        if (j == at) with.push_back(static_cast<int>(axis));
        with.push_back(saved[j]);
      }
      if (at == saved.size()) with.push_back(static_cast<int>(axis));
      s.dims[d] = with;
      place_axes(axis + 1, axes, s, out);
    }
    s.dims[d] = saved;
  }
}

/// Every spec of a rank-`rank` tensor on a mesh of `axes` axes: each axis
/// unused or at any place in any dim's tuple.
std::vector<resolved_spec> every_spec(std::size_t axes, std::size_t rank) {
  resolved_spec s;
  for (std::size_t d = 0; d < rank; ++d) s.dims.push_back({});
  std::vector<resolved_spec> out;
  place_axes(0, axes, s, out);
  return out;
}

std::string spec_text(const resolved_spec& s) {
  std::string t;
  for (std::size_t d = 0; d < s.rank(); ++d) {
    if (d) t += ", ";
    const dim_axes& a = s.dims[d];
    if (a.empty()) t += "None";
    if (a.size() > 1) t += "(";
    for (std::size_t j = 0; j < a.size(); ++j) t += std::string(j ? ", " : "") + axis_names[a[j]];
    if (a.size() > 1) t += ")";
  }
  return t;
}

std::string mesh_text(std::span<const std::int64_t> m) {
  std::string t;
  for (std::size_t a = 0; a < m.size(); ++a)
    t += std::string(a ? ", " : "") + axis_names[a] + "=" + std::to_string(m[a]);
  return t;
}

std::string shape_text(std::span<const std::int64_t> s) {
  std::string t = "[";
  for (std::size_t d = 0; d < s.size(); ++d) t += (d ? ", " : "") + std::to_string(s[d]);
  return t + "]";
}

/// Uneven shapes for a spec, per dim of t tiles: extents t + 1 (never a
/// multiple of t; with t = 3, 4 or more the last tile is empty: 4 over 3 is
/// 2, 2, 0), (t + 1) / 2 (below the tile count, so some devices hold
/// nothing), and t + 1 with a zero extent in dim 0. Unsharded dims: 2, 1, 2.
std::vector<shape_vec> uneven_shapes(std::span<const std::int64_t> mesh, const resolved_spec& s) {
  shape_vec a, b, z;
  for (std::size_t d = 0; d < s.rank(); ++d) {
    const std::int64_t t = xshard::dim_tiles(mesh, s.dims[d]);
    a.push_back(t + 1);
    b.push_back(t > 1 ? (t + 1) / 2 : 1);
    z.push_back(d == 0 ? 0 : t + 1);
  }
  return {a, b, z};
}

std::int64_t elements(std::span<const std::int64_t> shape) {
  std::int64_t n = 1;
  for (std::int64_t e : shape) n *= e;
  return n;
}

/// Calls f(flat index in a row-major tensor of `shape`) for every element of
/// the box `slices`, row-major.
template <class F>
void for_each_in(std::span<const std::int64_t> shape, const slices_t& slices, F&& f) {
  const std::size_t r = shape.size();
  for (const shard_slice& s : slices)
    if (s.size() <= 0) return;
  std::vector<std::int64_t> idx(r, 0);
  while (true) {
    std::int64_t g = 0;
    for (std::size_t d = 0; d < r; ++d) g = g * shape[d] + slices[d].start + idx[d];
    f(g);
    std::size_t d = r;
    while (d-- > 0) {
      if (++idx[d] < slices[d].size()) break;
      idx[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1)) return;
  }
}

xshard::detail::box to_box(std::span<const std::int64_t> v) {
  xshard::detail::box b;
  for (std::int64_t e : v) b.push_back(e);
  return b;
}

// --- 1. Slicing, exhaustively. ---

template <std::size_t R>
void check_slicing(std::span<const std::int64_t> mesh, const std::vector<int>& ids, const xshard::runtime_mesh& rm,
                   const resolved_spec& spec, const shape_vec& shape, failure_log& f) {
  const std::string what =
      "mesh \"" + mesh_text(mesh) + "\", spec \"" + spec_text(spec) + "\", shape " + shape_text(shape) + ": ";
  const std::int64_t n = elements(shape), devices = static_cast<std::int64_t>(ids.size());
  std::vector<float> global(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) global[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
  std::vector<float> rebuilt(static_cast<std::size_t>(n), std::nanf(""));
  std::vector<std::int64_t> covered(static_cast<std::size_t>(n), 0);
  std::int64_t tiles = 1;
  for (const dim_axes& d : spec.dims) tiles *= xshard::dim_tiles(mesh, d);
  const std::int64_t replicas = devices / tiles;

  const xshard::shard_layout engine = xshard::shard_slices(rm, spec_text(spec), shape);
  std::vector<const xshard::shard*> by_id(static_cast<std::size_t>(devices), nullptr);
  for (const xshard::shard& s : engine.shards)
    if (s.device >= 0 && s.device < devices) by_id[static_cast<std::size_t>(s.device)] = &s;
  std::vector<std::vector<std::int64_t>> replica_ids(static_cast<std::size_t>(tiles));
  xshard::detail::box zero;
  for (std::size_t d = 0; d < R; ++d) zero.push_back(0);

  for (std::int64_t pos = 0; pos < devices; ++pos) {
    const slices_t sl = xshard::local_slices(mesh, spec, shape, pos);
    // The engine's shard of this device: the same block.
    const xshard::shard* s = by_id[static_cast<std::size_t>(ids[static_cast<std::size_t>(pos)])];
    if (!s) {
      f.add(what + "shard_slices has no shard for device " + std::to_string(ids[static_cast<std::size_t>(pos)]));
    } else if (!(s->slices == sl)) {
      f.add(what + "shard_slices and local_slices disagree on device " +
            std::to_string(ids[static_cast<std::size_t>(pos)]));
    } else {
      std::int64_t tile = 0;
      for (std::size_t d = 0; d < R; ++d)
        tile = tile * xshard::dim_tiles(mesh, spec.dims[d]) + xshard::dim_tile_index(mesh, spec.dims[d], pos);
      replica_ids[static_cast<std::size_t>(tile)].push_back(s->replica);
    }
    // Cut the block, check it, put it back, count.
    const xt::xtensor<float, R> block = xshard::detail::cut_block<float, R>(global.data(), shape, sl);
    shape_vec ext;
    for (std::size_t d = 0; d < R; ++d) {
      ext.push_back(sl[d].size());
      if (static_cast<std::int64_t>(block.shape()[d]) != sl[d].size())
        f.add(what + "block extent differs from its slice on position " + std::to_string(pos));
    }
    std::int64_t l = 0;
    for_each_in(shape, sl, [&](std::int64_t g) {
      if (block.data()[l++] != global[static_cast<std::size_t>(g)])
        f.add(what + "block element " + std::to_string(l - 1) + " of position " + std::to_string(pos) +
              " is not the original");
      ++covered[static_cast<std::size_t>(g)];
    });
    if (l != static_cast<std::int64_t>(block.size()))
      f.add(what + "block of position " + std::to_string(pos) + " has extra elements");
    xshard::detail::box off;
    for (std::size_t d = 0; d < R; ++d) off.push_back(sl[d].start);
    xshard::detail::copy_box(block.data(), std::span<const std::int64_t>(ext), zero, rebuilt.data(),
                             std::span<const std::int64_t>(shape), off, to_box(ext));
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    if (covered[k] != replicas) {
      f.add(what + "element " + std::to_string(i) + " is held by " + std::to_string(covered[k]) + " devices, not " +
            std::to_string(replicas));
      break;
    }
    if (!(rebuilt[k] == global[k])) {
      f.add(what + "reassembled element " + std::to_string(i) + " differs");
      break;
    }
  }
  if (engine.shards.size() != static_cast<std::size_t>(devices))
    f.add(what + "shard_slices lists " + std::to_string(engine.shards.size()) + " shards");
  for (std::vector<std::int64_t>& r : replica_ids) {
    std::sort(r.begin(), r.end());
    if (static_cast<std::int64_t>(r.size()) != replicas || std::adjacent_find(r.begin(), r.end()) != r.end() ||
        (!r.empty() && (r.front() < 0 || r.back() >= devices))) {
      f.add(what + "a tile's replica ids are not distinct");
      break;
    }
  }
}

template <std::size_t R>
void slicing_on_mesh(const shape_vec& mesh, failure_log& f) {
  const std::int64_t devices = elements(mesh);
  std::vector<int> ids;
  for (std::int64_t i = devices; i-- > 0;) ids.push_back(static_cast<int>(i));  // reversed ids
  std::vector<std::string> names(axis_names, axis_names + mesh.size());
  const xshard::runtime_mesh rm(ids, mesh, names);
  for (const resolved_spec& spec : every_spec(mesh.size(), R))
    for (const shape_vec& shape : uneven_shapes(mesh, spec)) check_slicing<R>(mesh, ids, rm, spec, shape, f);
}

TEST(Lossless, EverySpecCountIsRight) {
  // Rank 3 on 3 axes: k axes used, placed in 3 ordered tuples: sum over k of
  // C(3, k) (k + 2)! / 2! = 1 + 9 + 36 + 60.
  EXPECT_EQ(every_spec(3, 3).size(), 106u);
  EXPECT_EQ(every_spec(3, 1).size(), 16u);  // 1 + 3 + 6 + 6
  EXPECT_EQ(every_spec(2, 2).size(), 11u);  // 1 + 2 * 2 + (2 * 2 + 2)
  EXPECT_EQ(every_spec(1, 3).size(), 4u);
}

/// Every mesh of `axes` axes (sizes 1..4) whose first axis has size
/// `first`, every spec of rank 1..3, every uneven shape.
void slicing_on_meshes(std::size_t axes, std::int64_t first) {
  failure_log f;
  shape_vec mesh(axes, 1);
  mesh[0] = first;
  std::int64_t meshes = 0;
  while (true) {
    slicing_on_mesh<1>(mesh, f);
    slicing_on_mesh<2>(mesh, f);
    slicing_on_mesh<3>(mesh, f);
    ++meshes;
    std::size_t a = axes;
    while (a-- > 1) {
      if (++mesh[a] <= 4) break;
      mesh[a] = 1;
    }
    if (a == 0) break;
  }
  EXPECT_EQ(meshes, std::int64_t{1} << (2 * (axes - 1)));
  f.report();
}

// Split by the first axis's size so that ctest can run the parts in parallel.
class LosslessSlices : public ::testing::TestWithParam<std::int64_t> {};
TEST_P(LosslessSlices, OneAxis) { slicing_on_meshes(1, GetParam()); }
TEST_P(LosslessSlices, TwoAxes) { slicing_on_meshes(2, GetParam()); }
TEST_P(LosslessSlices, ThreeAxes) { slicing_on_meshes(3, GetParam()); }
INSTANTIATE_TEST_SUITE_P(FirstAxisSize, LosslessSlices, ::testing::Values(1, 2, 3, 4));

// --- 2. distribute -> gather through the executor, run-time specs. ---

/// This device's block of `global` under (spec, partial): along the partial
/// axes the member of group rank r holds (r + 1) times the block, so the
/// gathered tensor is G (G + 1) / 2 times the original.
template <std::size_t R, class Device>
void gather_on_device(Device& dev, std::span<const std::int64_t> mesh, const resolved_spec& spec,
                      xshard::axis_set partial, const shape_vec& shape, const std::vector<float>& global,
                      const std::string& what, failure_log& f) {
  const std::int64_t pos = dev.position();
  xt::xtensor<float, R> block =
      xshard::detail::cut_block<float, R>(global.data(), shape, xshard::local_slices(mesh, spec, shape, pos));
  const std::int64_t g = xshard::group_size(mesh, partial);
  if (partial) block *= static_cast<float>(xshard::group_rank(mesh, partial, pos) + 1);
  resolved_spec replicated;
  for (std::size_t d = 0; d < R; ++d) replicated.dims.push_back({});
  const xshard::redist_plan plan = xshard::plan_redistribute({spec, partial}, replicated, mesh);
  if (!(plan.result == xshard::sharded_layout{replicated, 0}))
    f.add(what + ": the gather plan does not end replicated");
  std::array<std::int64_t, R> sh{};
  for (std::size_t d = 0; d < R; ++d) sh[d] = shape[d];
  const xt::xtensor<float, R> full =
      xshard::detail::run_plan<float, R>(xshard::make_device_ref<float>(dev), plan, mesh, sh, std::move(block));
  const float factor = static_cast<float>(g * (g + 1) / 2);
  bool ok = full.size() == global.size();
  for (std::size_t d = 0; d < R && ok; ++d) ok = static_cast<std::int64_t>(full.shape()[d]) == shape[d];
  for (std::size_t i = 0; i < global.size() && ok; ++i) ok = full.data()[i] == factor * global[i];
  if (!ok) f.add(what + ": device " + std::to_string(dev.id()) + " gathered something else");
}

template <class M, std::size_t R>
std::int64_t gather_every_spec(xshard::thread_mesh<M>& devices, failure_log& f) {
  constexpr auto mesh_sv = M::mesh_shape();
  const std::span<const std::int64_t> mesh(mesh_sv.begin(), mesh_sv.end());
  std::int64_t runs = 0;
  for (const resolved_spec& spec : every_spec(M::rank(), R)) {
    const xshard::axis_set unused = ((xshard::axis_set{1} << M::rank()) - 1) & ~xshard::sharding_axes(spec);
    const auto shapes = uneven_shapes(mesh, spec);
    for (xshard::axis_set partial = 0; partial <= unused; ++partial) {
      if (partial & ~unused) continue;
      for (std::size_t k = 0; k < 2; ++k) {  // shapes t + 1 and (t + 1) / 2
        const shape_vec& shape = shapes[k];
        std::vector<float> global(static_cast<std::size_t>(elements(shape)));
        for (std::size_t i = 0; i < global.size(); ++i) global[i] = static_cast<float>(i % 97 + 1);
        const std::string what = "mesh \"" + std::string(M::text.view()) + "\", spec \"" + spec_text(spec) +
                                 "\", partial " + std::to_string(partial) + ", shape " + shape_text(shape);
        devices.run([&](auto& dev) { gather_on_device<R>(dev, mesh, spec, partial, shape, global, what, f); });
        ++runs;
      }
    }
  }
  return runs;
}

template <class M>
void gather_all_ranks() {
  xshard::thread_mesh<M> devices;
  failure_log f;
  gather_every_spec<M, 1>(devices, f);
  gather_every_spec<M, 2>(devices, f);
  gather_every_spec<M, 3>(devices, f);
  f.report();
}

// Spec text uses the names a, b, c.
TEST(Lossless, GatherOfEverySpecOnFourDevices) { gather_all_ranks<xshard::mesh<"a=4">>(); }
TEST(Lossless, GatherOfEverySpecOnThreeByTwo) { gather_all_ranks<xshard::mesh<"a=3, b=2", 5, 3, 1, 4, 2, 0>>(); }
TEST(Lossless, GatherOfEverySpecOnThreeAxes) { gather_all_ranks<xshard::mesh<"a=2, b=1, c=3">>(); }

// --- 3. Sharded einsums write every output element exactly once. ---

TEST(Lossless, NewBuffersStartAsNaN) {
  // The harness itself: an uninitialised buffer reads as the sentinel.
  ASSERT_TRUE(new_blocks_are_nan);
  const xt::xtensor<float, 2> t(std::array<std::size_t, 2>{3, 5});
  for (float v : t) EXPECT_TRUE(std::isnan(v));
  const std::unique_ptr<double[]> d(new double[7]);
  for (int i = 0; i < 7; ++i) EXPECT_TRUE(std::isnan(d[i]));
}

template <class... S>
struct specs {};

template <std::size_t R>
xt::xtensor<float, R> positive_tensor(const std::array<std::size_t, R>& shape, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> d(1, 4);  // sums of products stay exact in float
  xt::xtensor<float, R> t(shape);
  for (auto& v : t) v = static_cast<float>(d(g));
  return t;
}

/// einsum<Eq> (Out = void) or einsum_to<Eq, Out> on operands distributed by
/// S... on mesh M: every device's output block and the gathered output hold
/// no sentinel and equal the single-device einsum.
template <xshard::fixed_string Eq, class Out, class M, class... S, class... E>
void written_once(specs<S...>, const E&... xs) {
  static_assert(sizeof...(S) == sizeof...(E));
  const auto want = xshard::einsum<Eq>(xs...);
  const std::string what = std::string(M::text.view()) + " " + std::string(Eq.view()) + " with" +
                           ((" \"" + std::string(S::text.view()) + "\"") + ...);
  xshard::thread_mesh<M> devices;
  failure_log f;
  devices.run([&](auto& dev) {
    const auto y = [&] {
      if constexpr (std::is_void_v<Out>)
        return xshard::einsum<Eq>(xshard::distribute<S>(dev, xs)...);
      else
        return xshard::einsum_to<Eq, Out>(xshard::distribute<S>(dev, xs)...);
    }();
    const std::string where = what + ", device " + std::to_string(dev.id());
    shape_vec out_shape;
    for (std::size_t d = 0; d < want.dimension(); ++d) out_shape.push_back(static_cast<std::int64_t>(want.shape()[d]));
    if (!std::equal(out_shape.begin(), out_shape.end(), y.global_shape().begin(), y.global_shape().end()))
      f.add(where + ": wrong global shape");
    // This device's block: every element written, with the right value.
    std::size_t l = 0, nan = 0, wrong = 0;
    for_each_in(out_shape, y.slices(), [&](std::int64_t g) {
      const float v = y.local().data()[l++];
      if (std::isnan(v))
        ++nan;
      else if (v != want.data()[static_cast<std::size_t>(g)])
        ++wrong;
    });
    if (l != y.local().size()) f.add(where + ": the local block has elements outside its slices");
    if (nan || wrong)
      f.add(where + ": local block has " + std::to_string(nan) + " unwritten and " + std::to_string(wrong) +
            " wrong elements");
    // The gathered result.
    const auto full = xshard::gather(y);
    nan = wrong = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (std::isnan(full.data()[i]))
        ++nan;
      else if (full.data()[i] != want.data()[i])
        ++wrong;
    }
    if (full.size() != want.size() || nan || wrong)
      f.add(where + ": gathered result has " + std::to_string(nan) + " unwritten and " + std::to_string(wrong) +
            " wrong elements");
  });
  f.report();
}

using xshard::spec;
template <std::size_t... N>
constexpr std::array<std::size_t, sizeof...(N)> dims() {
  return {N...};
}

TEST(Lossless, ShardedEinsumOnFourDevices) {
  using M = xshard::mesh<"x=4">;
  // j (3 < 4 tiles) contracted on x: a partial sum, one device's block empty.
  written_once<"ij,jk->ik", void, M>(specs<spec<"None, x">, spec<"x, None">>{}, positive_tensor(dims<5, 3>(), 1),
                                     positive_tensor(dims<3, 6>(), 2));
  // The partial sum reduce-scattered onto i (5 over 4: 2, 2, 1, 0).
  written_once<"ij,jk->ik", spec<"x, None">, M>(specs<spec<"None, x">, spec<"x, None">>{},
                                                positive_tensor(dims<5, 7>(), 3), positive_tensor(dims<7, 2>(), 4));
  written_once<"ij,jk->ik", spec<"None, x">, M>(specs<spec<"None, x">, spec<"x, None">>{},
                                                positive_tensor(dims<3, 2>(), 5), positive_tensor(dims<2, 3>(), 6));
  // i (3 < 4) sharded: an empty output block; B sliced locally.
  written_once<"ij,jk->ik", void, M>(specs<spec<"x, None">, spec<"None, None">>{}, positive_tensor(dims<3, 5>(), 7),
                                     positive_tensor(dims<5, 4>(), 8));
  written_once<"ij,jk->ik", void, M>(specs<spec<"None, x">, spec<"None, None">>{}, positive_tensor(dims<6, 9>(), 9),
                                     positive_tensor(dims<9, 5>(), 10));
  // One operand reduced over a sharded dim; an elementwise product reduced.
  written_once<"ij->i", void, M>(specs<spec<"None, x">>{}, positive_tensor(dims<5, 6>(), 11));
  written_once<"ij,ij->i", void, M>(specs<spec<"x, None">, spec<"None, x">>{}, positive_tensor(dims<6, 5>(), 12),
                                    positive_tensor(dims<6, 5>(), 13));
}

TEST(Lossless, ShardedEinsumOnTwoByTwo) {
  using M = xshard::mesh<"x=2, y=2", 2, 0, 3, 1>;
  // j on (x, y): partial over both axes.
  written_once<"ij,jk->ik", void, M>(specs<spec<"None, (x, y)">, spec<"(x, y), None">>{},
                                     positive_tensor(dims<3, 7>(), 21), positive_tensor(dims<7, 5>(), 22));
  written_once<"ij,jk->ik", void, M>(specs<spec<"x, y">, spec<"y, x">>{}, positive_tensor(dims<5, 3>(), 23),
                                     positive_tensor(dims<3, 5>(), 24));
  // Partial over x reduce-scattered onto k, i sliced onto y.
  written_once<"ij,jk->ik", spec<"y, x">, M>(specs<spec<"None, x">, spec<"x, y">>{}, positive_tensor(dims<5, 3>(), 25),
                                             positive_tensor(dims<3, 7>(), 26));
  // Partial over both reduced, then a tuple-sharded output sliced out.
  written_once<"ij,jk->ik", spec<"(x, y), None">, M>(specs<spec<"None, (y, x)">, spec<"(y, x), None">>{},
                                                     positive_tensor(dims<9, 6>(), 27),
                                                     positive_tensor(dims<6, 2>(), 28));
  // Three operands: j on x and k on y contracted at once.
  written_once<"ij,jk,kl->il", void, M>(specs<spec<"None, x">, spec<"x, y">, spec<"y, None">>{},
                                        positive_tensor(dims<5, 3>(), 29), positive_tensor(dims<3, 3>(), 30),
                                        positive_tensor(dims<3, 4>(), 31));
}

TEST(Lossless, ShardedEinsumOnUnevenAndThreeAxisMeshes) {
  using M32 = xshard::mesh<"x=3, y=2">;
  // j = 4 over 3 tiles (2, 2, 0): an empty contraction block.
  written_once<"ij,jk->ik", void, M32>(specs<spec<"y, x">, spec<"x, None">>{}, positive_tensor(dims<5, 4>(), 41),
                                       positive_tensor(dims<4, 7>(), 42));
  // j = 5 over 6 tiles, partial over both, reduce-scattered and sliced.
  written_once<"ij,jk->ik", spec<"x, y">, M32>(specs<spec<"None, (x, y)">, spec<"(x, y), None">>{},
                                               positive_tensor(dims<4, 5>(), 43), positive_tensor(dims<5, 5>(), 44));
  using M222 = xshard::mesh<"x=2, y=2, z=2">;
  written_once<"bij,bjk->bik", void, M222>(specs<spec<"x, None, y">, spec<"None, y, z">>{},
                                           positive_tensor(dims<3, 5, 3>(), 45), positive_tensor(dims<3, 3, 5>(), 46));
  written_once<"bij,bjk->bik", spec<"None, (x, z), None">, M222>(
      specs<spec<"None, None, (x, y)">, spec<"None, (x, y), z">>{}, positive_tensor(dims<2, 3, 5>(), 47),
      positive_tensor(dims<2, 5, 3>(), 48));
}

}  // namespace
