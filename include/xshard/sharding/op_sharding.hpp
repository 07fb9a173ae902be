// xshard/sharding/op_sharding.hpp - torch_xla's OpSharding of (mesh, spec).
//
// The values torch_xla's Mesh.get_op_sharding computes, one constexpr
// function for the typed and the run-time faces:
//
//   mesh "data=4, model=2", spec "data, None"
//     type               PARTIAL
//     tile_assignment    [[0,1],[2,3],[4,5],[6,7]]     (shape 4x2)
//     group_assignment   [[0],[1],[2],[3]]             (shape 4x1)
//     replication_groups [[0,1],[2,3],[4,5],[6,7]]
//
// Rules (torch_xla's Mesh.get_op_sharding; the table tests in
// tests/runtime/sharding_test.cpp and tests/compile/ hold its results):
// - tile assignment: the logical mesh transposed so the spec's axes come
//   first in spec order and the unused axes last (ascending), then the axes of
//   each tuple merged into one dim;
// - type: more tile dims than spec entries -> PARTIAL; else one device ->
//   MAXIMAL; else all None -> REPLICATED; else any None -> PARTIAL; else TILED;
// - PARTIAL: the tile assignment is split along its tiled dims (row-major);
//   each piece, flattened, is a replication group; the group assignment is
//   iota(#groups) shaped with 1 for None dims and the tile size otherwise.
// - rank 0: REPLICATED with every list empty.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "../core/error.hpp"
#include "../mesh/axes.hpp"
#include "../mesh/mesh.hpp"
#include "spec.hpp"

namespace xshard {

/// torch_xla's ShardingType (values are OpSharding.Type's).
enum class sharding_type : int {
  replicated = 0,
  maximal = 1,
  tuple = 2,
  tiled = 3,
  manual = 4,
  partial = 5,
  unknown = 6
};

constexpr std::string_view to_string(sharding_type t) {
  switch (t) {
    case sharding_type::replicated:
      return "REPLICATED";
    case sharding_type::maximal:
      return "MAXIMAL";
    case sharding_type::tuple:
      return "TUPLE";
    case sharding_type::tiled:
      return "TILED";
    case sharding_type::manual:
      return "MANUAL";
    case sharding_type::partial:
      return "PARTIAL";
    case sharding_type::unknown:
      break;
  }
  return "UNKNOWN";
}

struct op_sharding {
  sharding_type type = sharding_type::replicated;
  int_array tile_assignment{};
  int_array group_assignment{};
  std::vector<std::vector<int>> replication_groups{};
  friend constexpr bool operator==(const op_sharding&, const op_sharding&) = default;
};

namespace detail {

/// Row-major transpose of `a` so that new dim j is old dim perm[j].
constexpr int_array transpose(const int_array& a, std::span<const int> perm) {
  const std::size_t r = a.rank();
  std::int64_t old_stride[max_array_rank]{};
  std::int64_t s = 1;
  for (std::size_t d = r; d-- > 0;) {
    old_stride[d] = s;
    s *= a.shape[d];
  }
  int_array out;
  std::int64_t stride[max_array_rank]{};
  for (std::size_t j = 0; j < r; ++j) {
    out.shape.push_back(a.shape[static_cast<std::size_t>(perm[j])]);
    stride[j] = old_stride[perm[j]];
  }
  out.values.assign(a.values.size(), 0);  // not resize(): Clang 14 rejects it in constexpr
  std::int64_t idx[max_array_rank]{};
  std::int64_t src = 0;
  for (std::size_t i = 0; i < out.values.size(); ++i) {
    out.values[i] = a.values[static_cast<std::size_t>(src)];
    for (std::size_t j = r; j-- > 0;) {  // odometer increment
      src += stride[j];
      if (++idx[j] < out.shape[j]) break;
      src -= stride[j] * out.shape[j];
      idx[j] = 0;
    }
  }
  return out;
}

}  // namespace detail

/// torch_xla's tile assignment for an already resolved spec.
constexpr int_array tile_assignment_of(const mesh_ref& m, const resolved_spec& s) {
  static_vector<int, max_mesh_axes> perm;
  bool used[max_mesh_axes]{};
  for (const auto& dim : s.dims)
    for (int a : dim) {
      perm.push_back(a);
      used[a] = true;
    }
  for (std::size_t a = 0; a < m.axes.size(); ++a)
    if (!used[a]) perm.push_back(static_cast<int>(a));
  int_array t = detail::transpose(logical_mesh_of(m), std::span<const int>(perm.begin(), perm.end()));
  // Merge the axes of each tuple: they are adjacent after the transpose.
  int_array merged;
  merged.values = std::move(t.values);
  std::size_t d = 0;
  for (const auto& dim : s.dims) {
    if (dim.empty()) continue;
    std::int64_t n = 1;
    for (std::size_t k = 0; k < dim.size(); ++k) n *= t.shape[d++];
    merged.shape.push_back(n);
  }
  for (; d < t.shape.size(); ++d) merged.shape.push_back(t.shape[d]);
  return merged;
}

/// torch_xla's sharding type rule.
constexpr sharding_type sharding_type_of(std::size_t tile_rank, const resolved_spec& s, std::int64_t devices) {
  if (tile_rank > s.rank()) return sharding_type::partial;
  if (devices == 1) return sharding_type::maximal;
  std::size_t nones = 0;
  for (const auto& dim : s.dims) nones += dim.empty() ? 1 : 0;
  if (nones == s.rank()) return sharding_type::replicated;
  if (nones > 0) return sharding_type::partial;
  return sharding_type::tiled;
}

/// The OpSharding of a resolved spec on a mesh.
constexpr op_sharding op_sharding_of(const mesh_ref& m, const resolved_spec& s) {
  op_sharding out;
  if (s.rank() == 0) return out;  // scalars can only be replicated
  out.tile_assignment = tile_assignment_of(m, s);
  out.type = sharding_type_of(out.tile_assignment.rank(), s, m.size());
  if (out.type != sharding_type::partial) return out;
  // Split along the tiled dims: with row-major data, fixing the leading
  // `tiled` indices selects a contiguous block, so group g is block g.
  std::size_t tiled = 0;
  for (const auto& dim : s.dims) tiled += dim.empty() ? 0 : 1;
  std::int64_t groups = 1;
  for (std::size_t d = 0; d < tiled; ++d) groups *= out.tile_assignment.shape[d];
  const std::size_t group_size = out.tile_assignment.values.size() / static_cast<std::size_t>(groups);
  for (std::int64_t g = 0; g < groups; ++g) {
    const auto first = out.tile_assignment.values.begin() + g * static_cast<std::int64_t>(group_size);
    out.replication_groups.emplace_back(first, first + static_cast<std::int64_t>(group_size));
  }
  std::size_t next_tiled = 0;
  for (const auto& dim : s.dims)
    out.group_assignment.shape.push_back(dim.empty() ? 1 : out.tile_assignment.shape[next_tiled++]);
  out.group_assignment.values.assign(static_cast<std::size_t>(groups), 0);
  for (std::int64_t g = 0; g < groups; ++g)
    out.group_assignment.values[static_cast<std::size_t>(g)] = static_cast<int>(g);
  return out;
}

/// Parse-free entry: resolve then compute; a diagnostic on a bad spec.
constexpr checked<op_sharding> compute_op_sharding(const mesh_ref& m, const partition_spec& spec) {
  checked<op_sharding> out;
  const checked<resolved_spec> r = resolve_spec(spec, m.axes);
  if (!r.ok()) {
    out.diag = r.diag;
    return out;
  }
  out.value = op_sharding_of(m, r.value);
  return out;
}

/// Run-time face: `get_op_sharding(mesh, "data, None")`, like torch_xla's
/// mesh.get_op_sharding; throws xshard::error naming the offender.
inline op_sharding get_op_sharding(const runtime_mesh& m, std::string_view spec_text) {
  return compute_op_sharding(m.ref(), parse_spec_or_throw(spec_text)).get(spec_text);
}
inline op_sharding get_op_sharding(const runtime_mesh& m, const partition_spec& spec) {
  return compute_op_sharding(m.ref(), spec).get();
}

}  // namespace xshard
