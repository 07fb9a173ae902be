// xshard/mesh/hybrid.hpp - the device order of a hybrid (ICI x DCN) mesh,
// as torch_xla's HybridMesh builds it.
//
// Devices inside a slice talk over ICI (a 3-D torus, each device at integer
// coordinates); slices talk over the slower DCN. A hybrid mesh has shape
// ici_mesh_shape * dcn_mesh_shape (elementwise): every slice holds one
// ici-shaped block, and the blocks are laid out in a dcn-shaped grid.
//
//   two slices of a v4-8 (ids 0-3 in slice 0, 4-7 in slice 1, id = 4s + x + 2y
//   at coords (x, y, 0)), ici (1, 4, 1), dcn (2, 1, 1):
//     mesh_shape (2, 4, 1), device_ids 0 2 1 3 4 6 5 7
//
// The procedure, step by step (torch_xla: HybridMesh.__init__,
// _create_hybrid_device_mesh, _create_device_mesh, _get_physical_tpu_mesh,
// _create_device_mesh_for_nd_torus):
//  1. An empty dcn shape means all ones. Devices are ordered by id.
//  2. Multislice when the devices carry slice_index and prod(dcn) > 1. A
//     slice_index with prod(dcn) == 1, or prod(dcn) > 1 without one, is an error.
//  3. Multislice: devices are grouped by slice_index (groups by ascending
//     slice_index, devices by id); there must be prod(dcn) groups. Group g is
//     laid out alone with the ici shape and becomes the block at the position
//     of g in a row-major dcn-shaped grid.
//  4. One slice: the physical mesh has extent (max coords) + 1 per component,
//     where max is the lexicographic maximum of the coordinate triples (what
//     Python's max() over tuples gives). Each device sits at its coords.
//  5. Logical axes are mapped to physical axes from the last logical axis
//     (most network-intensive) to the first: try 3, then 2, then 1 physical
//     axes, combinations in lexicographic index order, over the physical sizes
//     still free (taken axes count as 0); the first whose product is the
//     logical size wins. No match for a logical size > 1 is an error; a
//     logical size 1 may stay unmapped.
//  6. The physical mesh is transposed so the mapped axes come in logical order
//     and read out row-major: that is the device order.
//
// Where torch_xla would fail obscurely or silently build garbage (coords
// outside the extent of step 4, two devices on one coordinate, a physical
// mesh with holes: numpy.empty leaves them uninitialised), this throws a
// clear xshard::error instead.
//
// Every algorithm is constexpr over std::vector, so a layout can be computed
// in a constant expression; the run-time entry points throw xshard::error.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "../core/text.hpp"
#include "mesh.hpp"
#include "topology.hpp"

namespace xshard {

/// A hybrid mesh: its shape and its device ids in row-major order of it.
struct hybrid_layout {
  std::vector<std::int64_t> mesh_shape;
  std::vector<int> device_ids;

  friend constexpr bool operator==(const hybrid_layout&, const hybrid_layout&) = default;
};

namespace detail {

/// Products are clamped here: far above any device count, far below overflow.
inline constexpr std::int64_t product_clamp = std::int64_t{1} << 62;

/// @pre a, b >= 0
constexpr std::int64_t clamped_mul(std::int64_t a, std::int64_t b) {
  if (a == 0 || b == 0) return 0;
  if (a > product_clamp / b) return product_clamp;
  return std::min(a * b, product_clamp);
}

/// @pre every entry >= 0
constexpr std::int64_t clamped_product(std::span<const std::int64_t> xs) {
  std::int64_t p = 1;
  for (std::int64_t x : xs) p = clamped_mul(p, x);
  return p;
}

/// "(1, 4, 1)"; a single axis prints as "(4,)", like a Python tuple.
constexpr void put_shape(text_builder& t, std::span<const std::int64_t> s) {
  t << '(';
  t.join(s, ", ");
  if (s.size() == 1) t << ',';
  t << ')';
}

/// "[4, 4, 0]"
constexpr void put_list(text_builder& t, std::span<const std::int64_t> s) {
  t << '[';
  t.join(s, ", ");
  t << ']';
}

/// "4x4x4"
constexpr void put_dims(text_builder& t, std::span<const std::int64_t> s) { t.join(s, "x"); }

constexpr void put_product(text_builder& t, std::int64_t p) {
  if (p >= product_clamp)
    t << "more than " << product_clamp;
  else
    t << p;
}

/// Names where an error happened: the whole mesh or one slice of it.
struct slice_context {
  bool multislice = false;
  int slice_index = 0;
};

constexpr void put_context(text_builder& t, const slice_context& where) {
  t << "hybrid mesh";
  if (where.multislice) t << " (slice with slice_index " << where.slice_index << ')';
  t << ": ";
}

constexpr bool check_sizes(std::span<const std::int64_t> s, std::string_view what, text_builder& err) {
  for (std::size_t i = 0; i < s.size(); ++i)
    if (s[i] < 1) {
      err << "hybrid mesh: " << what << ' ';
      put_shape(err, s);
      err << " has size " << s[i] << " at index " << i << "; sizes must be >= 1";
      return false;
    }
  return true;
}

/// Step 5: maps each logical axis to physical axes. `assignment[i]` lists the
/// physical axes of logical axis i (empty for an unmapped size-1 axis).
/// @pre every size >= 1
constexpr bool assign_torus(std::span<const std::int64_t> physical, std::span<const std::int64_t> logical,
                            const slice_context& where, std::vector<std::vector<int>>& assignment, text_builder& err) {
  const std::size_t n = physical.size();
  std::vector<std::int64_t> free(physical.begin(), physical.end());
  assignment.assign(logical.size(), {});
  for (std::size_t li = logical.size(); li-- > 0;) {
    const std::int64_t size = logical[li];
    bool found = false;
    for (std::size_t r = std::min<std::size_t>(3, n); r >= 1 && !found; --r) {
      // Combinations of r indices out of n in lexicographic order, as
      // itertools.combinations(range(n), r) yields them.
      std::vector<std::size_t> c(r, 0);  // (n, value): Clang 14 cannot evaluate (n)
      for (std::size_t k = 0; k < r; ++k) c[k] = k;
      while (true) {
        std::int64_t p = 1;
        for (std::size_t k : c) p = clamped_mul(p, free[k]);
        if (p == size) {
          for (std::size_t k : c) {
            assignment[li].push_back(static_cast<int>(k));
            free[k] = 0;
          }
          found = true;
          break;
        }
        std::size_t k = r;  // rightmost index that can still move
        while (k > 0 && c[k - 1] == n - r + (k - 1)) --k;
        if (k == 0) break;
        ++c[k - 1];
        for (std::size_t m = k; m < r; ++m) c[m] = c[m - 1] + 1;
      }
    }
    if (!found && size > 1) {
      put_context(err, where);
      err << "cannot map logical axis " << li << " of size " << size
          << " onto the physical mesh; the physical axis sizes still free are ";
      put_list(err, free);
      err << " (0 = taken by a later logical axis). Each logical axis size must be the product of some subset "
             "of the physical axis sizes, e.g. logical (4, 16) fits physical 4x4x4 since 4 = 4 and 16 = 4x4";
      return false;
    }
  }
  return true;
}

/// Step 4 for the devices of one slice (in id order): the extent of the
/// physical mesh and the device ids in its row-major order.
constexpr bool physical_mesh(std::span<const device_attributes> devices, const slice_context& where,
                             std::vector<std::int64_t>& dims, std::vector<int>& ids, text_builder& err) {
  std::array<int, 3> top = devices[0].coords;
  for (const device_attributes& d : devices) top = std::max(top, d.coords);  // lexicographic, like max() on tuples
  dims.assign(3, 0);
  for (std::size_t k = 0; k < 3; ++k) dims[k] = std::int64_t{top[k]} + 1;
  auto put_dims_origin = [&] {
    err << "the physical mesh ";
    put_dims(err, dims);
    err << " (one more than the lexicographically largest coords ";
    put_coords(err, top);
    err << ')';
  };
  for (const device_attributes& d : devices)
    for (std::size_t k = 0; k < 3; ++k)
      if (d.coords[k] >= dims[k]) {
        put_context(err, where);
        err << "device " << d.id << " has coords ";
        put_coords(err, d.coords);
        err << ", outside ";
        put_dims_origin();
        return false;
      }
  std::vector<std::pair<std::array<int, 3>, int>> placed;
  placed.reserve(devices.size());
  for (const device_attributes& d : devices) placed.emplace_back(d.coords, d.id);
  std::sort(placed.begin(), placed.end());
  for (std::size_t i = 1; i < placed.size(); ++i)
    if (placed[i].first == placed[i - 1].first) {
      put_context(err, where);
      err << "devices " << placed[i - 1].second << " and " << placed[i].second << " both have coords ";
      put_coords(err, placed[i].first);
      return false;
    }
  // Walk the cells in row-major order beside the sorted devices: the first
  // cell no device matches is a hole.
  std::array<int, 3> cell{};
  bool cells_left = true;
  for (std::size_t i = 0; i <= placed.size(); ++i) {
    if (i < placed.size() && cells_left && placed[i].first == cell) {
      for (std::size_t k = 3; k-- > 0;) {  // next cell
        if (++cell[k] < dims[k]) break;
        cell[k] = 0;
        if (k == 0) cells_left = false;
      }
      continue;
    }
    if (i == placed.size() && !cells_left) break;
    put_context(err, where);
    err << "the devices do not fill ";
    put_dims_origin();
    err << ": no device has coords ";
    put_coords(err, cell);
    err << " (" << devices.size() << " devices for ";
    put_product(err, clamped_product(dims));
    err << " positions)";
    return false;
  }
  ids.clear();
  ids.reserve(placed.size());
  for (const auto& [coords, id] : placed) ids.push_back(id);
  return true;
}

/// Steps 4-6 for one slice: its device ids in row-major order of `shape`.
constexpr bool slice_device_mesh(std::span<const device_attributes> devices, std::span<const std::int64_t> shape,
                                 const slice_context& where, std::vector<int>& out, text_builder& err) {
  const std::int64_t want = clamped_product(shape);
  if (want != static_cast<std::int64_t>(devices.size())) {
    put_context(err, where);
    if (where.multislice) {
      err << "the slice has " << devices.size() << " devices, but the product of ici_mesh_shape ";
      put_shape(err, shape);
      err << " is ";
    } else {
      err << "the number of devices " << devices.size() << " must equal the product of the mesh shape ";
      put_shape(err, shape);
      err << ", which is ";
    }
    put_product(err, want);
    return false;
  }
  std::vector<std::int64_t> dims;
  std::vector<int> physical;
  if (!physical_mesh(devices, where, dims, physical, err)) return false;
  std::vector<std::vector<int>> assignment;
  if (!assign_torus(dims, shape, where, assignment, err)) return false;
  std::vector<std::size_t> perm;
  for (const auto& axes : assignment)
    for (int a : axes) perm.push_back(static_cast<std::size_t>(a));
  const std::size_t n = dims.size();
  std::vector<char> used(n, 0);
  for (std::size_t p : perm) used[p] = 1;  // assign_torus never repeats an axis
  if (perm.size() != n) {
    // numpy's transpose refuses an incomplete axis list. It needs a physical
    // axis of size 1 that no logical axis took; the greedy search makes that
    // hard to reach, but it is checked, not assumed.
    put_context(err, where);
    err << "the logical mesh ";
    put_shape(err, shape);
    err << " leaves physical axis";
    for (std::size_t k = 0; k < n; ++k)
      if (!used[k]) err << ' ' << k;
    err << " of the physical mesh ";
    put_dims(err, dims);
    err << " unassigned";
    return false;
  }
  // Transpose by `perm`, then read row-major (the reshape keeps that order).
  std::vector<std::int64_t> stride(n, 1);
  for (std::size_t k = n - 1; k-- > 0;) stride[k] = stride[k + 1] * dims[k + 1];
  std::vector<std::int64_t> index(n, 0);  // position in the transposed mesh
  out.clear();
  out.reserve(physical.size());
  for (std::size_t i = 0; i < physical.size(); ++i) {
    std::int64_t src = 0;
    for (std::size_t k = 0; k < n; ++k) src += index[k] * stride[perm[k]];
    out.push_back(physical[static_cast<std::size_t>(src)]);
    for (std::size_t k = n; k-- > 0;) {
      if (++index[k] < dims[perm[k]]) break;
      index[k] = 0;
    }
  }
  return true;
}

/// The multislice case: one group per slice_index (ascending, devices in id
/// order), each laid out as one slice; group g is the block at row-major
/// position g of a dcn-shaped grid.
constexpr bool multislice_device_mesh(const std::vector<device_attributes>& sorted, std::span<const std::int64_t> ici,
                                      const std::vector<std::int64_t>& dcn, std::int64_t slices_wanted,
                                      hybrid_layout& out, text_builder& err) {
  std::vector<int> keys;
  keys.reserve(sorted.size());
  for (const device_attributes& d : sorted) keys.push_back(*d.slice_index);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  if (static_cast<std::int64_t>(keys.size()) != slices_wanted) {
    err << "hybrid mesh: the number of slices " << keys.size() << " must equal the product of dcn_mesh_shape ";
    put_shape(err, dcn);
    err << ", which is ";
    put_product(err, slices_wanted);
    return false;
  }
  std::vector<std::vector<int>> blocks(keys.size());
  for (std::size_t g = 0; g < keys.size(); ++g) {
    std::vector<device_attributes> group;
    for (const device_attributes& d : sorted)
      if (*d.slice_index == keys[g]) group.push_back(d);
    if (!slice_device_mesh(group, ici, slice_context{true, keys[g]}, blocks[g], err)) return false;
  }
  // The element at mesh index I comes from group (I / ici) at (I % ici).
  const std::size_t rank = ici.size();
  const std::int64_t total = clamped_product(out.mesh_shape);  // = the device count, checked before
  std::vector<std::int64_t> index(rank, 0);
  out.device_ids.reserve(static_cast<std::size_t>(total));
  for (std::int64_t i = 0; i < total; ++i) {
    std::int64_t group = 0;
    std::int64_t inner = 0;
    for (std::size_t k = 0; k < rank; ++k) {
      group = group * dcn[k] + index[k] / ici[k];
      inner = inner * ici[k] + index[k] % ici[k];
    }
    out.device_ids.push_back(blocks[static_cast<std::size_t>(group)][static_cast<std::size_t>(inner)]);
    for (std::size_t k = rank; k-- > 0;) {
      if (++index[k] < out.mesh_shape[k]) break;
      index[k] = 0;
    }
  }
  return true;
}

/// The two mesh shapes' own checks; `dcn` is dcn_given, or all 1s when empty.
constexpr bool check_hybrid_shapes(std::span<const std::int64_t> ici, std::span<const std::int64_t> dcn_given,
                                   std::vector<std::int64_t>& dcn, text_builder& err) {
  if (ici.empty()) {
    err << "hybrid mesh: ici_mesh_shape must have at least one axis";
    return false;
  }
  if (!dcn_given.empty() && dcn_given.size() != ici.size()) {
    err << "hybrid mesh: ici_mesh_shape ";
    put_shape(err, ici);
    err << " and dcn_mesh_shape ";
    put_shape(err, dcn_given);
    err << " must have the same length (" << ici.size() << " vs " << dcn_given.size() << ')';
    return false;
  }
  dcn.assign(dcn_given.begin(), dcn_given.end());
  if (dcn.empty()) dcn.assign(ici.size(), 1);
  return check_sizes(ici, "ici_mesh_shape", err) && check_sizes(dcn, "dcn_mesh_shape", err);
}

/// The whole procedure; see the top of this header.
constexpr bool build_hybrid_layout(std::span<const device_attributes> devices, std::span<const std::int64_t> ici,
                                   std::span<const std::int64_t> dcn_given, hybrid_layout& out, text_builder& err) {
  std::vector<std::int64_t> dcn;
  if (!check_hybrid_shapes(ici, dcn_given, dcn, err)) return false;
  std::vector<std::int64_t> mesh_shape(ici.size(), 0);
  for (std::size_t k = 0; k < ici.size(); ++k) mesh_shape[k] = clamped_mul(ici[k], dcn[k]);
  if (devices.empty()) {
    err << "hybrid mesh: no devices";
    return false;
  }
  for (std::size_t i = 0; i < devices.size(); ++i)
    if (!check_device(devices[i], i, err)) return false;
  if (!check_device_set(devices, err)) return false;

  std::vector<device_attributes> sorted(devices.begin(), devices.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const device_attributes& a, const device_attributes& b) { return a.id < b.id; });
  const bool has_slices = sorted[0].slice_index.has_value();
  const std::int64_t slices_wanted = clamped_product(dcn);
  if (has_slices && slices_wanted == 1) {
    err << "hybrid mesh: the devices have a slice_index (a multislice topology); provide a dcn_mesh_shape "
           "whose product is the number of slices to build a multislice mesh";
    return false;
  }
  if (!has_slices && slices_wanted > 1) {
    err << "hybrid mesh: dcn_mesh_shape ";
    put_shape(err, dcn);
    err << " is invalid for a single-slice mesh (the devices have no slice_index); its product must be 1";
    return false;
  }
  out.mesh_shape = mesh_shape;
  out.device_ids.clear();
  if (!has_slices) return slice_device_mesh(sorted, ici, slice_context{}, out.device_ids, err);
  return multislice_device_mesh(sorted, ici, dcn, slices_wanted, out, err);
}

}  // namespace detail

/// The layout or the reason there is none, without throwing.
constexpr detail::topology_result<hybrid_layout> try_hybrid_device_layout(
    std::span<const device_attributes> devices, std::span<const std::int64_t> ici_mesh_shape,
    std::span<const std::int64_t> dcn_mesh_shape = {}) {
  detail::topology_result<hybrid_layout> r;
  r.failed = !detail::build_hybrid_layout(devices, ici_mesh_shape, dcn_mesh_shape, r.value, r.message);
  if (r.failed) r.value = {};
  return r;
}

/// torch_xla's HybridMesh device order: mesh_shape = ici * dcn (elementwise;
/// an empty dcn means all ones) and the device ids in row-major order of it.
/// @throws xshard::error for every bad input (see the top of this header).
constexpr hybrid_layout hybrid_device_layout(std::span<const device_attributes> devices,
                                             std::span<const std::int64_t> ici_mesh_shape,
                                             std::span<const std::int64_t> dcn_mesh_shape = {}) {
  auto r = try_hybrid_device_layout(devices, ici_mesh_shape, dcn_mesh_shape);
  if (r.failed) detail::raise_topology_error(r.message);
  return std::move(r.value);
}

/// Step 5 alone: which physical axes each logical axis of `mesh_shape` is
/// mapped to on a torus of extent `physical_dims` (any number of axes).
///   torus_assignment({4, 4, 4}, {4, 16}) == {{2}, {0, 1}}
/// @throws xshard::error if a size is < 1 or a logical axis cannot be mapped.
constexpr std::vector<std::vector<int>> torus_assignment(std::span<const std::int64_t> physical_dims,
                                                         std::span<const std::int64_t> mesh_shape) {
  text_builder err;
  std::vector<std::vector<int>> assignment;
  if (!detail::check_sizes(physical_dims, "physical mesh", err) ||
      !detail::check_sizes(mesh_shape, "mesh shape", err) ||
      !detail::assign_torus(physical_dims, mesh_shape, detail::slice_context{}, assignment, err))
    detail::raise_topology_error(err);
  return assignment;
}

/// torch_xla's HybridMesh(ici_mesh_shape, dcn_mesh_shape, axis_names) as a
/// runtime_mesh over the given devices (e.g. read_topology_file's result).
///   hybrid_mesh(devices, {1, 4, 1}, {2, 1, 1}, {"data", "fsdp", "tensor"})  // data=2, fsdp=4, tensor=1
inline runtime_mesh hybrid_mesh(std::span<const device_attributes> devices,
                                std::span<const std::int64_t> ici_mesh_shape,
                                std::span<const std::int64_t> dcn_mesh_shape = {},
                                const std::vector<std::string>& axis_names = {}) {
  hybrid_layout layout = hybrid_device_layout(devices, ici_mesh_shape, dcn_mesh_shape);
  return runtime_mesh(std::move(layout.device_ids), layout.mesh_shape, axis_names);
}

}  // namespace xshard
