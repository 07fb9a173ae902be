// xshard/sharding/shards.hpp - which part of a tensor each device holds.
//
// For a tensor shape and a sharding: the shard shape ceil(n / tiles) per dim,
// and per device its replica id and the [start, end) of every dim, walked in
// tile-assignment row-major order, exactly as torch_xla computes them:
//
//   mesh "x=4", spec "x", shape [10]: shard shape [3];
//   devices 0..3 hold [0,3) [3,6) [6,9) [9,10)    (the last shard is short)
//   mesh "x=8", shape [5]: devices 5..7 hold the empty [5,5)
//
// Padded shards (all of the shard shape, zero beyond the tensor) are what
// collectives that need equal sizes use; extract_shard gives either form.
// Replica ids follow torch_xla (ShardingUtil::GetShardReplicaAndIndicesForDevices):
//   - a tile sharding with a replicated last dim: the device's index along
//     that dim (its rank inside its sorted replication group);
//   - a sharding whose XLA form is {replicated} (REPLICATED, MAXIMAL, and
//     PARTIAL whose group covers every device, e.g. spec "None, None"): the
//     device's own id (its global ordinal), NOT its position in the mesh.
//     The shards are still listed in mesh order:
//       mesh "x=4" with devices 3,0,2,1, spec "None": device 3 replica 3,
//       device 0 replica 0, device 2 replica 2, device 1 replica 1;
//   - a plain tile sharding: 0; {maximal device=d} (from HLO text): 0.
// So "replica 0 writes" picks device 0 under {replicated}, whatever the order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "../core/diagnostics.hpp"
#include "../core/error.hpp"
#include "../mesh/mesh.hpp"
#include "hlo.hpp"
#include "sharding.hpp"

namespace xshard {

struct shard_slice {
  std::int64_t start = 0;
  std::int64_t end = 0;
  constexpr std::int64_t size() const { return end - start; }
  friend constexpr bool operator==(const shard_slice&, const shard_slice&) = default;
};

using tensor_shape = static_vector<std::int64_t, max_spec_rank>;

namespace detail {
/// ceil(n / d) for n >= 0, d >= 1, without overflow for any extent n.
constexpr std::int64_t ceil_div(std::int64_t n, std::int64_t d) { return n / d + (n % d != 0 ? 1 : 0); }
/// min(a * s, n) for a, s, n >= 0, without overflow.
constexpr std::int64_t min_product(std::int64_t a, std::int64_t s, std::int64_t n) {
  return s != 0 && a > n / s ? n : std::min(a * s, n);
}
}  // namespace detail

/// Tile j of `tiles` along a dim of extent n: [min(j s, n), min((j + 1) s, n))
/// with s = ceil(n / tiles) (torch_xla's rule: the last tiles may be short
/// or empty).
constexpr shard_slice tile_slice(std::int64_t n, std::int64_t tiles, std::int64_t j) {
  const std::int64_t s = tiles > 0 ? detail::ceil_div(n, tiles) : n;
  return {detail::min_product(j, s, n), detail::min_product(j + 1, s, n)};
}

struct shard {
  int device = 0;
  std::int64_t replica = 0;
  std::int64_t tile = 0;  ///< row-major index of its tile over shard_layout::tile_dims
  static_vector<shard_slice, max_spec_rank> slices{};
  /// Elements this device really holds (0 for an empty shard).
  constexpr std::int64_t size() const {
    std::int64_t n = 1;
    for (const shard_slice& s : slices) n *= s.size();
    return n;
  }
  friend constexpr bool operator==(const shard&, const shard&) = default;
};

struct shard_layout {
  tensor_shape shape{};         ///< the global shape
  tensor_shape shard_shape{};   ///< ceil(n / tiles): the padded shard shape
  tensor_shape tile_dims{};     ///< tiles per dim (all 1 when replicated)
  std::vector<shard> shards{};  ///< one per device, in tile-assignment order
  /// The shard held by `device`, or nullptr.
  constexpr const shard* find(int device) const& {
    for (const shard& s : shards)
      if (s.device == device) return &s;
    return nullptr;
  }
  /// Refused on a temporary layout: the pointer would dangle at the end of
  /// the statement (name the layout first).
  const shard* find(int device) const&& = delete;
  friend constexpr bool operator==(const shard_layout&, const shard_layout&) = default;
};

/// Checks a shape: rank within limits and no negative extents.
constexpr checked<tensor_shape> make_shape(std::span<const std::int64_t> shape) {
  checked<tensor_shape> out;
  if (shape.size() > max_spec_rank) {
    out.diag.code = errc::spec_too_long;
    out.diag.a = static_cast<std::int64_t>(shape.size());
    out.diag.b = static_cast<std::int64_t>(max_spec_rank);
    return out;
  }
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      out.diag.code = errc::bad_extent;
      out.diag.a = static_cast<std::int64_t>(d);
      out.diag.b = shape[d];
      return out;
    }
    out.value.push_back(shape[d]);
  }
  return out;
}

/// The shards of a tensor of `shape` under sharding `s`; `mesh_devices`
/// are the devices that hold a replicated tensor (listed in that order, each
/// with its own id as replica id; see the header comment).
constexpr checked<shard_layout> shard_slices(const xla_sharding& s, std::span<const int> mesh_devices,
                                             std::span<const std::int64_t> shape) {
  checked<shard_layout> out;
  const checked<tensor_shape> sh = make_shape(shape);
  if (!sh.ok()) {
    out.diag = sh.diag;
    return out;
  }
  shard_layout& L = out.value;
  L.shape = sh.value;
  auto full = [&](int device, std::int64_t replica) {
    shard r{device, replica, 0, {}};
    for (std::int64_t n : L.shape) r.slices.push_back({0, n});
    return r;
  };
  if (s.type != xla_sharding::kind::tiled) {
    L.shard_shape = L.shape;
    for (std::size_t d = 0; d < L.shape.size(); ++d) L.tile_dims.push_back(1);
    if (s.type == xla_sharding::kind::maximal) {
      L.shards.push_back(full(s.device, 0));
    } else {
      L.shards.reserve(mesh_devices.size());
      for (const int device : mesh_devices) L.shards.push_back(full(device, device));  // replica = ordinal
    }
    return out;
  }
  const std::size_t rank = s.data_rank();
  if (rank != L.shape.size()) {
    out.diag.code = errc::spec_rank_mismatch;
    out.diag.a = static_cast<std::int64_t>(rank);
    out.diag.b = static_cast<std::int64_t>(L.shape.size());
    return out;
  }
  for (std::size_t d = 0; d < rank; ++d) {
    L.shard_shape.push_back(detail::ceil_div(L.shape[d], s.tile_dims[d]));
    L.tile_dims.push_back(s.tile_dims[d]);
  }
  L.shards.reserve(s.devices.size());
  std::int64_t idx[max_array_rank]{};
  const std::size_t dims = s.tile_dims.size();
  for (std::size_t i = 0; i < s.devices.size(); ++i) {
    shard r{s.devices[i], s.last_tile_dim_replicate ? idx[dims - 1] : 0, 0, {}};
    for (std::size_t d = 0; d < rank; ++d) {
      r.tile = r.tile * s.tile_dims[d] + idx[d];
      r.slices.push_back(tile_slice(L.shape[d], s.tile_dims[d], idx[d]));
    }
    L.shards.push_back(r);
    for (std::size_t d = dims; d-- > 0;) {  // next tile, row-major
      if (++idx[d] < s.tile_dims[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

/// Run-time face: throws xshard::error naming what is wrong.
inline shard_layout shard_slices(const runtime_mesh& m, std::string_view spec_text,
                                 std::span<const std::int64_t> shape) {
  const partition_spec spec = parse_spec_or_throw(spec_text);
  const checked<tensor_shape> sh = make_shape(shape);
  throw_if_error(sh.diag);
  if (spec.rank() != shape.size()) {
    diagnostic d;
    d.code = errc::spec_rank_mismatch;
    d.a = static_cast<std::int64_t>(spec.rank());
    d.b = static_cast<std::int64_t>(shape.size());
    throw error(describe(d, spec_text));
  }
  return shard_slices(to_xla(get_op_sharding(m, spec)), m.device_ids(), shape).get(spec_text);
}

/// Typed face: the rank of the shape is checked at compile time.
template <Mesh M, Spec S, std::size_t N>
constexpr shard_layout shard_slices(const std::array<std::int64_t, N>& shape) {
  constexpr diagnostic rank_diag = [] {
    diagnostic d;
    if (S::rank() != N) {
      d.code = errc::spec_rank_mismatch;
      d.a = static_cast<std::int64_t>(S::rank());
      d.b = static_cast<std::int64_t>(N);
    }
    return d;
  }();
  static_assert(raise<rank_diag>());
  return shard_slices(xla_sharding_of<M, S>(), M::device_ids, shape).value;
}

namespace detail {
/// Calls f(global_offset, local_offset) for every element of the box
/// `slices` of a row-major tensor of `shape`, copied into a row-major box
/// of `box` extents (box >= slice sizes).
template <class F>
void for_each_in_box(std::span<const std::int64_t> shape, const shard& s, std::span<const std::int64_t> box, F&& f) {
  const std::size_t r = shape.size();
  if (s.size() == 0) return;
  if (r == 0) {
    f(std::int64_t{0}, std::int64_t{0});
    return;
  }
  std::vector<std::int64_t> gstride(r, 1), lstride(r, 1), idx(r, 0);
  for (std::size_t d = r - 1; d > 0; --d) {
    gstride[d - 1] = gstride[d] * shape[d];
    lstride[d - 1] = lstride[d] * box[d];
  }
  while (true) {
    std::int64_t g = 0, l = 0;
    for (std::size_t d = 0; d < r; ++d) {
      g += (s.slices[d].start + idx[d]) * gstride[d];
      l += idx[d] * lstride[d];
    }
    f(g, l);
    std::size_t d = r;
    while (d-- > 0) {
      if (++idx[d] < s.slices[d].size()) break;
      idx[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1)) return;
  }
}
}  // namespace detail

/// The data of shard `s` of a row-major tensor, row-major. With `padded`,
/// the result has the layout's shard shape and is zero beyond the tensor.
template <class T>
std::vector<T> extract_shard(std::span<const T> global, const shard_layout& layout, const shard& s,
                             bool padded = false) {
  std::vector<std::int64_t> box;
  std::int64_t n = 1;
  for (std::size_t d = 0; d < layout.shape.size(); ++d) {
    box.push_back(padded ? layout.shard_shape[d] : s.slices[d].size());
    n *= box.back();
  }
  std::vector<T> out(static_cast<std::size_t>(n), T{});
  detail::for_each_in_box(
      std::span<const std::int64_t>(layout.shape.begin(), layout.shape.end()), s, box,
      [&](std::int64_t g, std::int64_t l) { out[static_cast<std::size_t>(l)] = global[static_cast<std::size_t>(g)]; });
  return out;
}

/// Writes shard data (unpadded or padded, as extract_shard made it) back
/// into its place in a row-major global tensor.
template <class T>
void insert_shard(std::span<T> global, const shard_layout& layout, const shard& s, std::span<const T> data,
                  bool padded = false) {
  std::vector<std::int64_t> box;
  for (std::size_t d = 0; d < layout.shape.size(); ++d)
    box.push_back(padded ? layout.shard_shape[d] : s.slices[d].size());
  detail::for_each_in_box(
      std::span<const std::int64_t>(layout.shape.begin(), layout.shape.end()), s, box,
      [&](std::int64_t g, std::int64_t l) { global[static_cast<std::size_t>(g)] = data[static_cast<std::size_t>(l)]; });
}

}  // namespace xshard
