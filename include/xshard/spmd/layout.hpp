// xshard/spmd/layout.hpp - where a sharded tensor's pieces live, and the
// plan that moves them from one sharding to another. All constexpr: the
// typed API evaluates it at compile time, the run-time API calls the same
// functions.
//
// A layout is a resolved spec (the mesh axes sharding each dim, major to
// minor) plus a set of *partial* axes: along a partial axis every device
// holds a partial sum of the same block (what a contraction over a sharded
// dim leaves behind). Device `pos` holds, along dim d sharded over axes
// (a0, a1, ...), tile j = mixed-radix index of its coordinates on a0, a1, ...
// of prod(sizes) tiles, i.e. tile_slice(n, tiles, j) (torch_xla's rule,
// sharding/shards.hpp).
//
// Redistribution (plan_redistribute): the rule table of the SPMD issue, per
// dim, in three phases so that uneven shapes stay exact:
//   1. a dim whose axes differ from the target's: all-gather them (shard ->
//      replicate), or, when the dim is sharded on one axis x that another dim
//      wants alone, an all-to-all moving x between the two dims;
//   2. partial axes: reduce-scatter onto the dim that wants exactly that axis
//      (partial -> shard), else one all-reduce over the rest (partial ->
//      replicate);
//   3. replicated dims the target shards: a local slice, no traffic
//      (replicate -> shard).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "../core/error.hpp"
#include "../core/static_vector.hpp"
#include "../sharding/shards.hpp"
#include "../sharding/spec.hpp"
#include "collectives.hpp"

namespace xshard {

using mesh_shape_t = static_vector<std::int64_t, max_mesh_axes>;
using dim_axes = axis_list;

/// A sharded tensor's layout: the axes of each dim and the partial axes.
struct sharded_layout {
  resolved_spec spec{};
  axis_set partial = 0;
  constexpr std::size_t rank() const { return spec.rank(); }
  friend constexpr bool operator==(const sharded_layout&, const sharded_layout&) = default;
};

/// The axes a layout uses to shard its dims.
constexpr axis_set sharding_axes(const resolved_spec& s) {
  axis_set r = 0;
  for (const dim_axes& d : s.dims)
    for (int a : d) r |= axis_bit(static_cast<std::size_t>(a));
  return r;
}

constexpr axis_set axes_of(const dim_axes& d) {
  axis_set r = 0;
  for (int a : d) r |= axis_bit(static_cast<std::size_t>(a));
  return r;
}

/// Tiles along a dim sharded over `axes`.
constexpr std::int64_t dim_tiles(std::span<const std::int64_t> mesh, const dim_axes& axes) {
  std::int64_t t = 1;
  for (int a : axes) t *= mesh[static_cast<std::size_t>(a)];
  return t;
}

/// The tile index along a dim sharded over `axes` of the device at `pos`.
constexpr std::int64_t dim_tile_index(std::span<const std::int64_t> mesh, const dim_axes& axes, std::int64_t pos) {
  const auto c = mesh_coords(mesh, pos);
  std::int64_t j = 0;
  for (int a : axes) j = j * mesh[static_cast<std::size_t>(a)] + c[static_cast<std::size_t>(a)];
  return j;
}

/// The block of a tensor of `shape` that the device at `pos` holds.
constexpr static_vector<shard_slice, max_spec_rank> local_slices(std::span<const std::int64_t> mesh,
                                                                 const resolved_spec& s,
                                                                 std::span<const std::int64_t> shape,
                                                                 std::int64_t pos) {
  static_vector<shard_slice, max_spec_rank> r;
  for (std::size_t d = 0; d < s.rank(); ++d)
    r.push_back(tile_slice(shape[d], dim_tiles(mesh, s.dims[d]), dim_tile_index(mesh, s.dims[d], pos)));
  return r;
}

/// Whether every dim of `shape` divides evenly into its tiles: every
/// device's block then has the padded shard shape (a collective over the
/// layout reduces each block where it lies).
constexpr bool evenly_split(std::span<const std::int64_t> mesh, const resolved_spec& s,
                            std::span<const std::int64_t> shape) {
  for (std::size_t d = 0; d < s.rank(); ++d)
    if (shape[d] % dim_tiles(mesh, s.dims[d]) != 0) return false;
  return true;
}

/// The padded shard extent of each dim: ceil(n / tiles).
constexpr tensor_shape padded_shard_shape(std::span<const std::int64_t> mesh, const resolved_spec& s,
                                          std::span<const std::int64_t> shape) {
  tensor_shape r;
  for (std::size_t d = 0; d < s.rank(); ++d) {
    const std::int64_t t = dim_tiles(mesh, s.dims[d]);
    r.push_back((shape[d] + t - 1) / t);
  }
  return r;
}

// ---------------------------------------------------------------------------
// Redistribution plans.

enum class step_kind : std::uint8_t { all_gather, all_to_all, reduce_scatter, all_reduce, slice };

constexpr bool is_collective(step_kind k) { return k != step_kind::slice; }
constexpr collective_kind collective_of(step_kind k) {
  switch (k) {
    case step_kind::all_gather:
      return collective_kind::all_gather;
    case step_kind::all_to_all:
      return collective_kind::all_to_all;
    case step_kind::reduce_scatter:
      return collective_kind::reduce_scatter;
    default:
      return collective_kind::all_reduce;
  }
}

/// One step: `axes` are the mesh axes it runs over; `dim` the tensor dim it
/// gathers (all-gather, all-to-all), scatters onto (reduce-scatter) or -1;
/// `dim2` the dim an all-to-all scatters onto. A step does not carry the
/// layout it starts from (that would make a plan ten times larger and its
/// compile-time evaluation as much slower): redist_plan::before replays it.
struct redist_step {
  step_kind kind = step_kind::slice;
  axis_set axes = 0;
  int dim = -1;
  int dim2 = -1;
  friend constexpr bool operator==(const redist_step&, const redist_step&) = default;
};

inline constexpr std::size_t max_redist_steps = 2 * max_spec_rank + 2;

/// The layout after step s, from `cur` before it; `target` is the spec the
/// plan ends on (a slice step lands on it). The one rule plan_redistribute
/// applies and redist_plan::before replays.
constexpr void apply_step(sharded_layout& cur, const redist_step& s, const resolved_spec& target) {
  auto lowest_axis = [](axis_set axes) {
    int a = 0;
    while (!(axes & axis_bit(static_cast<std::size_t>(a)))) ++a;
    return a;
  };
  switch (s.kind) {
    case step_kind::all_gather:
      cur.spec.dims[static_cast<std::size_t>(s.dim)].clear();
      break;
    case step_kind::all_to_all:
      cur.spec.dims[static_cast<std::size_t>(s.dim)].clear();
      cur.spec.dims[static_cast<std::size_t>(s.dim2)].push_back(lowest_axis(s.axes));
      break;
    case step_kind::reduce_scatter:
      cur.partial &= ~s.axes;
      cur.spec.dims[static_cast<std::size_t>(s.dim)].push_back(lowest_axis(s.axes));
      break;
    case step_kind::all_reduce:
      cur.partial &= ~s.axes;
      break;
    case step_kind::slice:
      cur.spec = target;
      break;
  }
}

struct redist_plan {
  static_vector<redist_step, max_redist_steps> steps{};
  sharded_layout from{};    ///< the layout step 0 acts on (axes of size 1 dropped)
  sharded_layout result{};  ///< the layout after the last step
  constexpr std::size_t collective_count() const {
    std::size_t n = 0;
    for (const redist_step& s : steps) n += is_collective(s.kind) ? 1 : 0;
    return n;
  }
  /// The layout step i acts on (from, then steps 0..i-1 applied); before(
  /// steps.size()) is result.
  constexpr sharded_layout before(std::size_t i) const {
    sharded_layout cur = from;
    for (std::size_t j = 0; j < i; ++j) apply_step(cur, steps[j], result.spec);
    return cur;
  }
};

/// The plan from `from` to the (non-partial) spec `to` on a mesh of `mesh`.
/// Axes of size 1 move nothing: they are dropped from both sides first.
/// @pre both specs resolved on the same mesh and of the same rank.
constexpr redist_plan plan_redistribute(const sharded_layout& from, const resolved_spec& to,
                                        std::span<const std::int64_t> mesh) {
  redist_plan p;
  auto drop_unit = [&](const dim_axes& d) {
    dim_axes r;
    for (int a : d)
      if (mesh[static_cast<std::size_t>(a)] > 1) r.push_back(a);
    return r;
  };
  sharded_layout cur;
  resolved_spec want;
  for (std::size_t d = 0; d < from.rank(); ++d) {
    cur.spec.dims.push_back(drop_unit(from.spec.dims[d]));
    want.dims.push_back(drop_unit(to.dims[d]));
  }
  for (std::size_t a = 0; a < mesh.size(); ++a)
    if ((from.partial & axis_bit(a)) && mesh[a] > 1) cur.partial |= axis_bit(a);
  p.from = cur;
  auto step = [&](const redist_step& s) {
    p.steps.push_back(s);
    apply_step(cur, s, want);
  };
  const std::size_t rank = cur.rank();
  // 1. Dims sharded otherwise than wanted: all-to-all or all-gather.
  for (std::size_t d = 0; d < rank; ++d) {
    if (cur.spec.dims[d].empty() || cur.spec.dims[d] == want.dims[d]) continue;
    if (cur.spec.dims[d].size() == 1) {
      const int x = cur.spec.dims[d][0];
      for (std::size_t d2 = 0; d2 < rank; ++d2) {
        if (d2 == d || !cur.spec.dims[d2].empty() || want.dims[d2].size() != 1 || want.dims[d2][0] != x) continue;
        step({step_kind::all_to_all, axis_bit(static_cast<std::size_t>(x)), static_cast<int>(d), static_cast<int>(d2)});
        break;
      }
      if (cur.spec.dims[d].empty()) continue;
    }
    step({step_kind::all_gather, axes_of(cur.spec.dims[d]), static_cast<int>(d), -1});
  }
  // 2. Partial sums: reduce-scatter where a replicated dim wants exactly
  // that axis, one all-reduce for the rest.
  axis_set reduce = 0;
  for (std::size_t a = 0; a < mesh.size(); ++a) {
    if (!(cur.partial & axis_bit(a))) continue;
    bool scattered = false;
    for (std::size_t d = 0; d < rank && !scattered; ++d) {
      if (!cur.spec.dims[d].empty() || want.dims[d].size() != 1 || want.dims[d][0] != static_cast<int>(a)) continue;
      step({step_kind::reduce_scatter, axis_bit(a), static_cast<int>(d), -1});
      scattered = true;
    }
    if (!scattered) reduce |= axis_bit(a);
  }
  if (reduce) step({step_kind::all_reduce, reduce, -1, -1});
  // 3. Replicated dims the target shards: a local slice.
  bool slice = false;
  for (std::size_t d = 0; d < rank; ++d)
    if (cur.spec.dims[d].empty() && !want.dims[d].empty()) slice = true;
  if (slice) step({step_kind::slice, sharding_axes(want) & ~sharding_axes(cur.spec), -1, -1});
  p.result = cur;
  return p;
}

/// Elements of one device's input to a step on a tensor of global `shape`
/// (padded where the collective needs equal pieces): what the executor
/// sends and what a plan's byte count is made of.
///   all-gather over dim d:      the padded local shard
///   all-to-all d -> d2 over x:  G chunks, each the padded shard with dim d2
///                               cut into G tiles (padded)
///   reduce-scatter onto d:      G chunks of the local block with d padded to
///                               G tiles
///   all-reduce:                 the local block (equal across the group)
constexpr std::int64_t step_input_elements(const redist_step& s, const resolved_spec& before,
                                           std::span<const std::int64_t> mesh, std::span<const std::int64_t> shape) {
  const resolved_spec& sp = before;
  const std::int64_t G = group_size(mesh, s.axes);
  std::int64_t n = 1;
  switch (s.kind) {
    case step_kind::all_gather: {
      for (std::size_t d = 0; d < sp.rank(); ++d) {
        const std::int64_t t = dim_tiles(mesh, sp.dims[d]);
        n *= (shape[d] + t - 1) / t;
      }
      return n;
    }
    case step_kind::all_to_all: {
      for (std::size_t d = 0; d < sp.rank(); ++d) {
        const std::int64_t t = static_cast<int>(d) == s.dim2 ? G : dim_tiles(mesh, sp.dims[d]);
        n *= (shape[d] + t - 1) / t;
      }
      return G * n;
    }
    case step_kind::reduce_scatter: {
      for (std::size_t d = 0; d < sp.rank(); ++d) {
        const std::int64_t t = static_cast<int>(d) == s.dim ? G : dim_tiles(mesh, sp.dims[d]);
        n *= (shape[d] + t - 1) / t;
      }
      return G * n;
    }
    case step_kind::all_reduce: {
      for (std::size_t d = 0; d < sp.rank(); ++d) {
        const std::int64_t t = dim_tiles(mesh, sp.dims[d]);
        n *= (shape[d] + t - 1) / t;
      }
      return n;
    }
    case step_kind::slice:
      return 0;
  }
  return 0;
}

/// Bytes one device sends for a step from layout `before`
/// (collective_bytes_sent of its input).
constexpr std::int64_t step_bytes_sent(const redist_step& s, const resolved_spec& before,
                                       std::span<const std::int64_t> mesh, std::span<const std::int64_t> shape,
                                       std::int64_t elem_size) {
  if (!is_collective(s.kind)) return 0;
  return collective_bytes_sent(collective_of(s.kind), group_size(mesh, s.axes),
                               step_input_elements(s, before, mesh, shape) * elem_size);
}

/// Bytes one device sends for a whole redistribution plan.
constexpr std::int64_t plan_bytes_sent(const redist_plan& p, std::span<const std::int64_t> mesh,
                                       std::span<const std::int64_t> shape, std::int64_t elem_size) {
  std::int64_t total = 0;
  sharded_layout cur = p.from;
  for (const redist_step& s : p.steps) {
    total += step_bytes_sent(s, cur.spec, mesh, shape, elem_size);
    apply_step(cur, s, p.result.spec);
  }
  return total;
}

}  // namespace xshard
