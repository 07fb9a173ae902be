// Exhaustive property test of the sharding engine against an independent
// reference.
//
// Sweep: every mesh of 1 to 3 axes (named a, b, c) with sizes 1..4, with
// default device ids and with one shuffled id order; every valid partition
// spec of rank 0..3 over it (each entry None, one axis, or a tuple of 2+ axes
// in any order, no axis twice), spelled with names, with indices and mixed.
// For each (mesh, spec):
//   (a) get_op_sharding and to_xla equal the reference below;
//   (b) in the XLA form every mesh device appears exactly once, and the
//       shards enumerate every (tile, replica) pair exactly once; under
//       {replicated} each device's replica id is its own id (torch_xla);
//   (c) shards of a random row-major tensor of a random uneven shape (dims
//       0..6) extracted with extract_shard (padded and unpadded) and put back
//       with insert_shard rebuild the tensor, and every element is held by
//       exactly #replicas shards; the slices equal the reference's;
//   (d) parse_hlo(hlo_text(x, v1)) == x and parse_hlo(hlo_text(x, v2)) == x.
//
// The reference is deliberately written another way than the engine: it never
// transposes an array. It walks the devices, turns each device's mesh
// coordinates into its tile coordinates (tuple entries are mixed-radix
// numbers of their axes' coordinates, unused axes follow in ascending order)
// and scatters the device id into place; groups and replicas come from the
// same coordinates.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>
#include <xshard/xshard.hpp>

namespace {

using xshard::sharding_type;
using xshard::xla_sharding;

// ---------------------------------------------------------------------------
// Reference.

using ivec = std::vector<std::int64_t>;

std::int64_t product(const ivec& v) {
  std::int64_t p = 1;
  for (std::int64_t x : v) p *= x;
  return p;
}
/// Row-major flat index of `coord` in `extent`.
std::int64_t ravel(const ivec& coord, const ivec& extent) {
  std::int64_t flat = 0;
  for (std::size_t i = 0; i < coord.size(); ++i) flat = flat * extent[i] + coord[i];
  return flat;
}
/// Coordinates of flat index `flat` in `extent`.
ivec unravel(std::int64_t flat, const ivec& extent) {
  ivec c(extent.size());
  for (std::size_t i = extent.size(); i-- > 0;) {
    c[i] = flat % extent[i];
    flat /= extent[i];
  }
  return c;
}

struct ref_mesh {
  ivec sizes;
  std::vector<int> ids;  // row-major over sizes
};
using ref_spec = std::vector<std::vector<int>>;  // per entry: mesh axes, major first; empty = None

struct ref_device {
  int id = 0;
  ivec tile;                 // per spec entry: tile coordinate (0 for None)
  std::int64_t member = 0;   // position in torch_xla's replication group
  std::int64_t replica = 0;  // XLA replica id
};

struct ref_result {
  sharding_type type = sharding_type::replicated;
  ivec tile_shape;
  std::vector<int> tile_values;
  ivec group_shape;
  std::vector<int> group_values;
  std::vector<std::vector<int>> reps;
  xla_sharding xla;
  std::vector<ref_device> devices;  // in mesh order
  ivec tiles_per_dim;               // XLA tiles per tensor dim
  std::int64_t replicas = 1;        // shards holding each element
};

ref_result reference(const ref_mesh& m, const ref_spec& spec) {
  ref_result r;
  const std::int64_t n = product(m.sizes);
  const std::size_t rank = spec.size();
  std::vector<bool> used(m.sizes.size(), false);
  for (const auto& e : spec)
    for (int a : e) used[static_cast<std::size_t>(a)] = true;
  std::vector<int> unused;
  for (std::size_t a = 0; a < m.sizes.size(); ++a)
    if (!used[a]) unused.push_back(static_cast<int>(a));

  ivec entry_extent(rank, 1);  // tiles per spec entry (1 for None)
  std::size_t nones = 0;
  for (std::size_t k = 0; k < rank; ++k) {
    for (int a : spec[k]) entry_extent[k] *= m.sizes[static_cast<std::size_t>(a)];
    nones += spec[k].empty() ? 1 : 0;
  }
  ivec unused_extent;
  for (int u : unused) unused_extent.push_back(m.sizes[static_cast<std::size_t>(u)]);
  const std::int64_t group_size = product(unused_extent);

  if (rank == 0) {
    // torch_xla: a scalar is REPLICATED with empty lists.
    r.type = sharding_type::replicated;
  } else {
    for (std::size_t k = 0; k < rank; ++k)
      if (!spec[k].empty()) r.tile_shape.push_back(entry_extent[k]);
    for (std::int64_t s : unused_extent) r.tile_shape.push_back(s);
    const std::size_t tiled_entries = rank - nones;
    const std::size_t tile_rank = tiled_entries + unused.size();
    if (tile_rank > rank)
      r.type = sharding_type::partial;
    else if (n == 1)
      r.type = sharding_type::maximal;
    else if (nones == rank)
      r.type = sharding_type::replicated;
    else if (nones > 0)
      r.type = sharding_type::partial;
    else
      r.type = sharding_type::tiled;
  }

  // Walk the devices by mesh coordinates.
  r.tile_values.assign(static_cast<std::size_t>(rank ? n : 0), -1);
  ivec tiled_extent;  // extents of the non-None entries
  for (std::size_t k = 0; k < rank; ++k)
    if (!spec[k].empty()) tiled_extent.push_back(entry_extent[k]);
  const std::int64_t groups = product(tiled_extent);
  if (r.type == sharding_type::partial)
    r.reps.assign(static_cast<std::size_t>(groups), std::vector<int>(static_cast<std::size_t>(group_size), -1));
  for (std::int64_t p = 0; p < n; ++p) {
    const ivec c = unravel(p, m.sizes);
    ref_device d;
    d.id = m.ids[static_cast<std::size_t>(p)];
    ivec tiled_coord, unused_coord;
    for (std::size_t k = 0; k < rank; ++k) {
      std::int64_t t = 0;
      for (int a : spec[k]) t = t * m.sizes[static_cast<std::size_t>(a)] + c[static_cast<std::size_t>(a)];
      d.tile.push_back(t);
      if (!spec[k].empty()) tiled_coord.push_back(t);
    }
    for (int u : unused) unused_coord.push_back(c[static_cast<std::size_t>(u)]);
    d.member = ravel(unused_coord, unused_extent);
    if (rank) {
      ivec full = tiled_coord;
      full.insert(full.end(), unused_coord.begin(), unused_coord.end());
      r.tile_values[static_cast<std::size_t>(ravel(full, r.tile_shape))] = d.id;
    }
    if (r.type == sharding_type::partial)
      r.reps[static_cast<std::size_t>(ravel(tiled_coord, tiled_extent))][static_cast<std::size_t>(d.member)] = d.id;
    r.devices.push_back(d);
  }
  if (r.type == sharding_type::partial) {
    r.group_shape = entry_extent;
    r.group_values.resize(static_cast<std::size_t>(groups));
    std::iota(r.group_values.begin(), r.group_values.end(), 0);
  }

  // XLA form.
  const bool xla_replicated = r.type == sharding_type::replicated || r.type == sharding_type::maximal ||
                              (r.type == sharding_type::partial && group_size == n);
  if (xla_replicated) {
    r.tiles_per_dim.assign(rank, 1);
    r.replicas = n;
    // torch_xla: under {replicated} a device's replica id is its own id.
    for (ref_device& d : r.devices) d.replica = d.id;
    return r;
  }
  const bool with_replicas = r.type == sharding_type::partial && group_size > 1;
  r.tiles_per_dim = entry_extent;
  r.replicas = with_replicas ? group_size : 1;
  r.xla.type = xla_sharding::kind::tiled;
  for (std::int64_t e : entry_extent) r.xla.tile_dims.push_back(e);
  if (with_replicas) {
    r.xla.tile_dims.push_back(group_size);
    r.xla.last_tile_dim_replicate = true;
  }
  // XLA replica id: rank of the device's id among the ids sharing its tile.
  std::vector<std::vector<int>> by_tile(static_cast<std::size_t>(product(entry_extent)));
  for (const ref_device& d : r.devices) by_tile[static_cast<std::size_t>(ravel(d.tile, entry_extent))].push_back(d.id);
  for (auto& ids : by_tile) std::sort(ids.begin(), ids.end());
  for (ref_device& d : r.devices) {
    const auto& ids = by_tile[static_cast<std::size_t>(ravel(d.tile, entry_extent))];
    d.replica = std::lower_bound(ids.begin(), ids.end(), d.id) - ids.begin();
  }
  r.xla.devices.assign(static_cast<std::size_t>(n), -1);
  for (const ref_device& d : r.devices)
    r.xla.devices[static_cast<std::size_t>(ravel(d.tile, entry_extent) * r.replicas + d.replica)] = d.id;
  return r;
}

// ---------------------------------------------------------------------------
// Enumeration.

const char* const axis_names[] = {"a", "b", "c"};

void enumerate_specs(std::size_t naxes, std::size_t rank, ref_spec& cur, unsigned used, std::vector<ref_spec>& out) {
  if (cur.size() == rank) {
    out.push_back(cur);
    return;
  }
  // None, or any ordered sequence of distinct unused axes.
  std::vector<int> entry;
  auto extend = [&](auto&& self, unsigned mask) -> void {
    cur.push_back(entry);
    enumerate_specs(naxes, rank, cur, mask, out);
    cur.pop_back();
    for (std::size_t a = 0; a < naxes; ++a) {
      if (mask & (1u << a)) continue;
      entry.push_back(static_cast<int>(a));
      self(self, mask | (1u << a));
      entry.pop_back();
    }
  };
  extend(extend, used);
}

/// style 0: names; 1: indices; 2: mixed names and indices, singletons as (x).
std::string spec_string(const ref_spec& s, int style) {
  std::string t;
  for (std::size_t k = 0; k < s.size(); ++k) {
    if (k) t += style == 2 ? "," : ", ";
    auto axis = [&](int a) {
      const bool index = style == 1 || (style == 2 && (a + static_cast<int>(k)) % 2 == 0);
      return index ? std::to_string(a) : std::string(axis_names[a]);
    };
    if (s[k].empty()) {
      t += "None";
    } else if (s[k].size() == 1 && style != 2) {
      t += axis(s[k][0]);
    } else {
      t += style == 2 ? "( " : "(";
      for (std::size_t j = 0; j < s[k].size(); ++j) t += (j ? ", " : "") + axis(s[k][j]);
      t += ")";
    }
  }
  return t;
}

std::string xla_text(const xla_sharding& x) { return xshard::hlo_text(x).str(); }

/// XLA's V2 text of a tiled sharding on a mesh with default ids 0..n-1. Its
/// device list walks the mesh axes in the order: spec axes as written, then
/// the unused ones ascending (with default ids the sorted replication groups
/// keep that order). That is iota(n) reshaped to the mesh and transposed;
/// the canonical form drops size-1 axes and merges runs of axes that are
/// consecutive both in that order and in the mesh.
std::string default_ids_v2(const ref_mesh& m, const ref_spec& s, const xla_sharding& x) {
  std::vector<int> order;
  for (const auto& e : s) order.insert(order.end(), e.begin(), e.end());
  for (std::size_t a = 0; a < m.sizes.size(); ++a)
    if (std::find(order.begin(), order.end(), static_cast<int>(a)) == order.end()) order.push_back(static_cast<int>(a));
  std::vector<int> pos(m.sizes.size(), -1);  // index among the axes of size > 1
  int next = 0;
  for (std::size_t a = 0; a < m.sizes.size(); ++a)
    if (m.sizes[a] > 1) pos[a] = next++;
  std::vector<std::vector<int>> runs;  // output order, outermost first
  for (int a : order) {
    if (pos[static_cast<std::size_t>(a)] < 0) continue;
    if (!runs.empty() && pos[static_cast<std::size_t>(runs.back().back())] + 1 == pos[static_cast<std::size_t>(a)])
      runs.back().push_back(a);
    else
      runs.push_back({a});
  }
  std::vector<std::size_t> by_mesh(runs.size());  // runs sorted by mesh position
  std::iota(by_mesh.begin(), by_mesh.end(), 0);
  std::sort(by_mesh.begin(), by_mesh.end(), [&](std::size_t i, std::size_t j) {
    return pos[static_cast<std::size_t>(runs[i][0])] < pos[static_cast<std::size_t>(runs[j][0])];
  });
  std::string t = "{devices=[";
  for (std::size_t i = 0; i < x.tile_dims.size(); ++i) t += (i ? "," : "") + std::to_string(x.tile_dims[i]);
  t += "]<=[";
  if (runs.size() <= 1) {
    t += std::to_string(product(m.sizes)) + "]";
  } else {
    for (std::size_t i = 0; i < by_mesh.size(); ++i) {
      std::int64_t n = 1;
      for (int a : runs[by_mesh[i]]) n *= m.sizes[static_cast<std::size_t>(a)];
      t += (i ? "," : "") + std::to_string(n);
    }
    t += "]T(";
    for (std::size_t j = 0; j < runs.size(); ++j)
      t += (j ? "," : "") + std::to_string(std::find(by_mesh.begin(), by_mesh.end(), j) - by_mesh.begin());
    t += ")";
  }
  return t + (x.last_tile_dim_replicate ? " last_tile_dim_replicate}" : "}");
}

// ---------------------------------------------------------------------------
// The sweep.

// Like EXPECT_TRUE, but the message (built only on failure) goes through
// sweep::fail, which names the mesh and spec and stops after 20 failures.
#define EXPECT_PROPERTY(cond, msg) \
  do {                             \
    if (!(cond)) fail(msg);        \
  } while (0)

struct tally {
  std::int64_t meshes = 0, specs = 0, spellings = 0, shards = 0, elements = 0, v2_iota = 0;
};

class sweep {
 public:
  explicit sweep(std::uint32_t seed) : rng_(seed) {}

  void run(std::size_t naxes, bool shuffled, tally& t) {
    ivec sizes(naxes, 1);
    while (true) {
      run_mesh(sizes, shuffled, t);
      std::size_t i = naxes;
      while (i-- > 0) {  // next size tuple, odometer over 1..4
        if (++sizes[i] <= 4) break;
        sizes[i] = 1;
      }
      if (i == static_cast<std::size_t>(-1)) break;
      if (::testing::Test::HasFatalFailure() || failures_ > 20) return;
    }
  }

 private:
  void run_mesh(const ivec& sizes, bool shuffled, tally& t) {
    ref_mesh rm{sizes, {}};
    rm.ids.resize(static_cast<std::size_t>(product(sizes)));
    std::iota(rm.ids.begin(), rm.ids.end(), 0);
    std::string text;
    std::vector<std::string> names;
    for (std::size_t a = 0; a < sizes.size(); ++a) {
      text += (a ? ", " : "") + std::string(axis_names[a]) + "=" + std::to_string(sizes[a]);
      names.emplace_back(axis_names[a]);
    }
    std::optional<xshard::runtime_mesh> m;
    if (shuffled) {
      std::shuffle(rm.ids.begin(), rm.ids.end(), rng_);
      m.emplace(rm.ids, sizes, names);  // torch_xla argument order
    } else {
      m.emplace(text);
    }
    ++t.meshes;
    for (std::size_t rank = 0; rank <= 3; ++rank) {
      std::vector<ref_spec> specs;
      ref_spec cur;
      enumerate_specs(sizes.size(), rank, cur, 0u, specs);
      for (const ref_spec& s : specs) {
        mesh_text_ = text;
        ids_ = &rm.ids;
        spec_ = &s;
        check_one(*m, rm, s, t);
        ++t.specs;
      }
    }
  }

  static std::string ids_text(const std::vector<int>& ids) {
    std::string s;
    for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
    return s;
  }

  void fail(const std::string& what) {
    ++failures_;
    if (failures_ <= 20)
      ADD_FAILURE() << "mesh \"" << mesh_text_ << "\" ids " << ids_text(*ids_) << " spec \"" << spec_string(*spec_, 0)
                    << "\": " << what;
  }

  void check_one(const xshard::runtime_mesh& m, const ref_mesh& rm, const ref_spec& s, tally& t) {
    const ref_result want = reference(rm, s);
    const xshard::op_sharding got = xshard::get_op_sharding(m, spec_string(s, 0));
    ++t.spellings;

    // (a) torch_xla's fields and XLA's form.
    EXPECT_PROPERTY(got.type == want.type, std::string("type ") + std::string(xshard::to_string(got.type)) + " want " +
                                               std::string(xshard::to_string(want.type)));
    EXPECT_PROPERTY(ivec(got.tile_assignment.shape.begin(), got.tile_assignment.shape.end()) == want.tile_shape &&
                        got.tile_assignment.values == want.tile_values,
                    "tile assignment");
    EXPECT_PROPERTY(ivec(got.group_assignment.shape.begin(), got.group_assignment.shape.end()) == want.group_shape &&
                        got.group_assignment.values == want.group_values,
                    "group assignment");
    EXPECT_PROPERTY(got.replication_groups == want.reps, "replication groups");
    const xla_sharding x = xshard::to_xla(got);
    EXPECT_PROPERTY(x == want.xla, "XLA form " + xla_text(x) + " want " + xla_text(want.xla));
    for (int style : {1, 2}) {
      const std::string other = spec_string(s, style);
      EXPECT_PROPERTY(xshard::get_op_sharding(m, other) == got, "spelling \"" + other + "\" differs");
      ++t.spellings;
    }

    // (b) each mesh device once in the XLA form.
    if (x.is_tiled()) {
      std::vector<int> sorted = x.devices, ids = rm.ids;
      std::sort(sorted.begin(), sorted.end());
      std::sort(ids.begin(), ids.end());
      std::int64_t cells = 1;
      for (std::int64_t d : x.tile_dims) cells *= d;
      EXPECT_PROPERTY(sorted == ids && cells == static_cast<std::int64_t>(ids.size()),
                      "XLA devices are not the mesh's");
    }

    // V2 text: with default ids every tiled form is an iota; check its canonical spelling.
    if (x.is_tiled() && std::is_sorted(rm.ids.begin(), rm.ids.end())) {
      const std::string v2 = xshard::hlo_text(x, xshard::hlo_format::v2).str();
      EXPECT_PROPERTY(v2 == default_ids_v2(rm, s, want.xla), "V2 " + v2 + " want " + default_ids_v2(rm, s, want.xla));
      ++t.v2_iota;
    }

    // (d) text round trips.
    for (xshard::hlo_format fmt : {xshard::hlo_format::v1, xshard::hlo_format::v2}) {
      const std::string txt = xshard::hlo_text(x, fmt).str();
      const auto back = xshard::parse_hlo(txt);
      EXPECT_PROPERTY(back.ok() && back.value == x, "round trip of " + txt);
    }

    // (c) shards of a random tensor.
    check_shards(m, rm, s, want, x, t);
  }

  void check_shards(const xshard::runtime_mesh& m, const ref_mesh& rm, const ref_spec& s, const ref_result& want,
                    const xla_sharding& x, tally& t) {
    std::uniform_int_distribution<std::int64_t> extent(0, 6);
    ivec shape(s.size());
    for (std::int64_t& e : shape) e = extent(rng_);
    const std::int64_t n = product(shape);
    const xshard::shard_layout l = xshard::shard_slices(m, spec_string(s, 0), shape);
    EXPECT_PROPERTY(l.shards.size() == rm.ids.size(), "one shard per device");
    if (l.shards.size() != rm.ids.size()) return;

    // Shard shape: ceil(n / tiles).
    ivec shard_shape(s.size());
    for (std::size_t k = 0; k < s.size(); ++k)
      shard_shape[k] = (shape[k] + want.tiles_per_dim[k] - 1) / want.tiles_per_dim[k];
    EXPECT_PROPERTY(ivec(l.shard_shape.begin(), l.shard_shape.end()) == shard_shape, "shard shape");

    // (b) the shards walk (tile, replica) in order, each device once.
    std::vector<int> seen;
    for (std::size_t i = 0; i < l.shards.size(); ++i) {
      const xshard::shard& sh = l.shards[i];
      seen.push_back(sh.device);
      if (x.is_tiled()) {
        EXPECT_PROPERTY(sh.replica == static_cast<std::int64_t>(i) % want.replicas, "replica order");
        EXPECT_PROPERTY(sh.device == x.devices[i], "shard order differs from the XLA devices");
      } else {
        EXPECT_PROPERTY(sh.device == rm.ids[i], "a {replicated} layout lists the mesh devices in mesh order");
        EXPECT_PROPERTY(sh.replica == sh.device, "a {replicated} shard's replica id is its device id");
      }
    }
    std::sort(seen.begin(), seen.end());
    std::vector<int> ids = rm.ids;
    std::sort(ids.begin(), ids.end());
    EXPECT_PROPERTY(seen == ids, "shards do not hold every device exactly once");

    // Slices and replica per device equal the reference.
    for (const ref_device& d : want.devices) {
      const xshard::shard* sh = l.find(d.id);
      if (!sh) {
        fail("no shard for device " + std::to_string(d.id));
        continue;
      }
      EXPECT_PROPERTY(sh->replica == d.replica, "replica of device " + std::to_string(d.id));
      const bool replicated = !x.is_tiled();
      for (std::size_t k = 0; k < s.size(); ++k) {
        const std::int64_t j = replicated ? 0 : d.tile[k];
        const std::int64_t w = shard_shape[k];
        const xshard::shard_slice ws{std::min(j * w, shape[k]), std::min((j + 1) * w, shape[k])};
        EXPECT_PROPERTY(sh->slices[k] == ws, "slice of device " + std::to_string(d.id) + " dim " + std::to_string(k));
      }
    }

    // (c) extract / insert, padded and not; coverage.
    std::vector<std::int64_t> global(static_cast<std::size_t>(n));
    std::iota(global.begin(), global.end(), 1);  // no zeros: padding is visible
    std::vector<std::int64_t> plain(global.size(), 0), padded_back(global.size(), 0);
    std::vector<std::int64_t> cover(global.size(), 0);
    const std::int64_t padded_size = product(shard_shape);
    for (const xshard::shard& sh : l.shards) {
      ++t.shards;
      const std::vector<std::int64_t> a = xshard::extract_shard<std::int64_t>(global, l, sh);
      const std::vector<std::int64_t> b = xshard::extract_shard<std::int64_t>(global, l, sh, true);
      EXPECT_PROPERTY(static_cast<std::int64_t>(a.size()) == sh.size(), "unpadded shard size");
      EXPECT_PROPERTY(static_cast<std::int64_t>(b.size()) == padded_size, "padded shard size");
      if (static_cast<std::int64_t>(a.size()) != sh.size() || static_cast<std::int64_t>(b.size()) != padded_size)
        continue;
      // Own walk over the padded box: inside the slices it holds the
      // tensor's element, outside zero; the unpadded data is the inside.
      std::size_t next_plain = 0;
      ivec lc(shard_shape.size(), 0), gc(shard_shape.size());
      for (std::int64_t q = 0; q < padded_size; ++q) {
        if (q > 0)  // next local coordinate, row-major
          for (std::size_t k = lc.size(); k-- > 0;) {
            if (++lc[k] < shard_shape[k]) break;
            lc[k] = 0;
          }
        bool inside = true;
        for (std::size_t k = 0; k < lc.size(); ++k) {
          gc[k] = sh.slices[k].start + lc[k];
          inside = inside && gc[k] < sh.slices[k].end;
        }
        const std::int64_t v = b[static_cast<std::size_t>(q)];
        if (inside) {
          const auto g = static_cast<std::size_t>(ravel(gc, shape));
          EXPECT_PROPERTY(v == global[g], "padded shard value");
          EXPECT_PROPERTY(next_plain < a.size() && a[next_plain] == global[g], "unpadded shard value");
          ++next_plain;
          ++cover[g];
        } else {
          EXPECT_PROPERTY(v == 0, "padding is not zero");
        }
      }
      xshard::insert_shard<std::int64_t>(plain, l, sh, a);
      xshard::insert_shard<std::int64_t>(padded_back, l, sh, b, true);
    }
    t.elements += n;
    EXPECT_PROPERTY(plain == global, "unpadded shards do not rebuild the tensor");
    EXPECT_PROPERTY(padded_back == global, "padded shards do not rebuild the tensor");
    EXPECT_PROPERTY(std::all_of(cover.begin(), cover.end(), [&](std::int64_t c) { return c == want.replicas; }),
                    "an element is not held by exactly " + std::to_string(want.replicas) + " shards");
  }

  std::mt19937 rng_;
  std::string mesh_text_;  // what is being checked, for failure messages
  const std::vector<int>* ids_ = nullptr;
  const ref_spec* spec_ = nullptr;
  int failures_ = 0;
};

void report(const char* what, const tally& t) {
  std::printf(
      "[ coverage ] %s: %lld meshes x specs = %lld (mesh, spec) pairs, %lld spellings, %lld shards, "
      "%lld tensor elements, %lld V2 iota texts\n",
      what, static_cast<long long>(t.meshes), static_cast<long long>(t.specs), static_cast<long long>(t.spellings),
      static_cast<long long>(t.shards), static_cast<long long>(t.elements), static_cast<long long>(t.v2_iota));
}

// Spec counts per mesh (derivable by hand): with k axes and rank r, each axis
// is unused or placed somewhere among r ordered lists.
TEST(ShardingProperty, SpecEnumerationCounts) {
  auto count = [](std::size_t axes, std::size_t rank) {
    std::vector<ref_spec> out;
    ref_spec cur;
    enumerate_specs(axes, rank, cur, 0u, out);
    return out.size();
  };
  EXPECT_EQ(count(1, 0), 1u);
  EXPECT_EQ(count(1, 1), 2u);    // None, a
  EXPECT_EQ(count(2, 1), 5u);    // None, a, b, (a, b), (b, a)
  EXPECT_EQ(count(2, 2), 11u);   // 1 + 2*2 + 2*3
  EXPECT_EQ(count(3, 3), 106u);  // 1 + 3*3 + 3*3*4 + 3*4*5
  EXPECT_EQ(count(3, 0) + count(3, 1) + count(3, 2) + count(3, 3), 172u);
  EXPECT_EQ(spec_string({{2, 0}, {}, {1}}, 0), "(c, a), None, b");
  EXPECT_EQ(spec_string({{2, 0}, {}, {1}}, 1), "(2, 0), None, 1");
  EXPECT_EQ(spec_string({{2, 0}, {}, {1}}, 2), "( 2, 0),None,( b)");
}

// The reference against a few hand-derived values, so that the sweep
// compares the engine with something known to be right.
TEST(ShardingProperty, ReferenceMatchesHandDerivations) {
  // "a=2, b=3, c=2", spec "(c, b), None": tile [6,2] 0,6,2,8,4,10,1,7,3,9,5,11.
  ref_mesh m{{2, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}};
  const ref_result r = reference(m, {{2, 1}, {}});
  EXPECT_EQ(r.type, sharding_type::partial);
  EXPECT_EQ(r.tile_shape, (ivec{6, 2}));
  EXPECT_EQ(r.tile_values, (std::vector<int>{0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11}));
  EXPECT_EQ(r.group_shape, (ivec{6, 1}));
  EXPECT_EQ(xla_text(r.xla), "{devices=[6,1,2]0,6,2,8,4,10,1,7,3,9,5,11 last_tile_dim_replicate}");
  // "x=4, y=2" ids 7..0, "x, None": XLA sorts each group.
  const ref_result r2 = reference({{4, 2}, {7, 6, 5, 4, 3, 2, 1, 0}}, {{0}, {}});
  EXPECT_EQ(xla_text(r2.xla), "{devices=[4,1,2]6,7,4,5,2,3,0,1 last_tile_dim_replicate}");
  EXPECT_EQ(r2.reps, (std::vector<std::vector<int>>{{7, 6}, {5, 4}, {3, 2}, {1, 0}}));
  // "None" on 4x2: PARTIAL, {replicated}.
  const ref_result r3 = reference({{4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}}, {{}});
  EXPECT_EQ(r3.type, sharding_type::partial);
  EXPECT_EQ(xla_text(r3.xla), "{replicated}");
  // "a=4, b=1", "a": a last dim of 1 is a plain tile.
  EXPECT_EQ(xla_text(reference({{4, 1}, {0, 1, 2, 3}}, {{0}}).xla), "{devices=[4]0,1,2,3}");
}

TEST(ShardingProperty, OneAndTwoAxes) {
  tally t;
  sweep sw(12345);
  for (std::size_t axes : {1u, 2u})
    for (bool shuffled : {false, true}) sw.run(axes, shuffled, t);
  report("1-2 axes, default and shuffled ids", t);
  EXPECT_EQ(t.meshes, 2 * (4 + 16));
  EXPECT_EQ(t.specs, 2 * (4 * 10 + 16 * 36));
}

TEST(ShardingProperty, ThreeAxesDefaultIds) {
  tally t;
  sweep sw(777);
  sw.run(3, false, t);
  report("3 axes, default ids", t);
  EXPECT_EQ(t.meshes, 64);
  EXPECT_EQ(t.specs, 64 * 172);
}

TEST(ShardingProperty, ThreeAxesShuffledIds) {
  tally t;
  sweep sw(4242);
  sw.run(3, true, t);
  report("3 axes, shuffled ids", t);
  EXPECT_EQ(t.meshes, 64);
  EXPECT_EQ(t.specs, 64 * 172);
}

}  // namespace
