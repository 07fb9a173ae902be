// fuzz_spec: partition-spec text ("data, None", "(x, y), 0") and what is
// computed from it on a mesh: the OpSharding, the HLO text, shard slices.
//
// Input: a mesh line, '\n', the spec text, optionally '\0' and shape bytes.
// The mesh line is parsed as mesh text; when it is rejected or has more than
// 64 devices, "data=4, model=2" is used. Shape bytes: a flag byte (bit 0:
// device ids reversed, bit 1: one dim more than the spec, bit 2: one extent
// huge or negative, from a table), then one byte per dim (extent = byte % 6).
//
// Properties:
//  - parse_spec and parse_spec_or_throw agree; a rejection is xshard::error
//    only and a syntax error's column lies in the text;
//  - spec_text prints an accepted spec back: parse(print(s)) == s, and the
//    printed text is a fixed point;
//  - get_op_sharding(mesh, text) works exactly when resolve_spec accepts,
//    else throws xshard::error; hlo_sharding_text and shard_slices likewise;
//  - the OpSharding agrees with an oracle written here: every tile index,
//    decoded into mesh coordinates (tuple axes major to minor, unused axes
//    last), names the device the mesh has there; the type follows
//    torch_xla's order of checks; PARTIAL replication groups partition the
//    devices and the group assignment is iota;
//  - the HLO text (V1 and V2) is hlo_sharding_text's and parses back to
//    to_xla(op);
//  - shard_slices of a rank-matching shape with extents >= 0 works: one
//    shard per device, slices along each dim partition [0, n) in tile order,
//    every element is held by exactly size/tiles devices with replica ids
//    0..size/tiles-1 per tile (under {replicated}: each device's own id, as
//    torch_xla gives them), and extract_shard/insert_shard round-trip (the
//    element walk only for at most 4096 elements; huge extents get the
//    per-dim checks).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <xshard/mesh/mesh.hpp>
#include <xshard/sharding/hlo.hpp>
#include <xshard/sharding/op_sharding.hpp>
#include <xshard/sharding/shards.hpp>
#include <xshard/sharding/spec.hpp>

#include "fuzz_common.hpp"

namespace {

using xshard::sharding_type;

xshard::runtime_mesh make_mesh(std::string_view line, bool reversed) {
  const auto axes = xshard::parse_mesh_axes(line);
  const std::string_view text = axes.ok() && xshard::mesh_size(axes.value) <= 64 ? line : "data=4, model=2";
  xshard::runtime_mesh m(text);
  if (!reversed) return m;
  std::vector<int> ids = m.device_ids();
  std::reverse(ids.begin(), ids.end());
  return xshard::runtime_mesh(text, ids);
}

/// The oracle: the device at every tile position, from the definition.
void check_tile_assignment(const xshard::runtime_mesh& m, const xshard::resolved_spec& r, const xshard::int_array& t) {
  const auto& axes = m.shape();
  std::vector<bool> used(axes.size(), false);
  std::vector<std::vector<int>> tile_axes;  // mesh axes of each tile dim, major to minor
  for (const auto& dim : r.dims) {
    if (dim.empty()) continue;
    tile_axes.emplace_back(dim.begin(), dim.end());
    for (int a : dim) used[static_cast<std::size_t>(a)] = true;
  }
  for (std::size_t a = 0; a < axes.size(); ++a)
    if (!used[a]) tile_axes.push_back({static_cast<int>(a)});
  fuzz::check(t.rank() == tile_axes.size(), "tile rank = tiled spec dims + unused mesh axes");
  std::int64_t count = 1;
  for (std::size_t d = 0; d < tile_axes.size(); ++d) {
    std::int64_t n = 1;
    for (int a : tile_axes[d]) n *= axes[static_cast<std::size_t>(a)].size;
    fuzz::check(t.shape[d] == n, "a tile dim is the product of its mesh axes");
    count *= n;
  }
  fuzz::check(static_cast<std::int64_t>(t.values.size()) == count, "tile values = product of tile dims");
  for (std::int64_t flat = 0; flat < count; ++flat) {
    std::vector<std::int64_t> coord(axes.size(), 0);
    std::int64_t rest = flat;
    for (std::size_t d = tile_axes.size(); d-- > 0;) {
      std::int64_t idx = rest % t.shape[d];
      rest /= t.shape[d];
      for (std::size_t k = tile_axes[d].size(); k-- > 0;) {
        const auto a = static_cast<std::size_t>(tile_axes[d][k]);
        coord[a] = idx % axes[a].size;
        idx /= axes[a].size;
      }
    }
    std::int64_t pos = 0;
    for (std::size_t a = 0; a < axes.size(); ++a) pos = pos * axes[a].size + coord[a];
    fuzz::check(t.values[static_cast<std::size_t>(flat)] == m.device_ids()[static_cast<std::size_t>(pos)],
                "tile assignment = the transposed logical mesh");
  }
}

void check_op(const xshard::runtime_mesh& m, const xshard::resolved_spec& r, const xshard::op_sharding& op) {
  if (r.rank() == 0) {
    fuzz::check(op.type == sharding_type::replicated && op.tile_assignment.values.empty() &&
                    op.group_assignment.values.empty() && op.replication_groups.empty(),
                "a scalar is REPLICATED with empty lists");
    return;
  }
  check_tile_assignment(m, r, op.tile_assignment);
  std::size_t nones = 0;
  for (const auto& dim : r.dims) nones += dim.empty() ? 1 : 0;
  sharding_type want = sharding_type::tiled;
  if (op.tile_assignment.rank() > r.rank())
    want = sharding_type::partial;
  else if (m.size() == 1)
    want = sharding_type::maximal;
  else if (nones == r.rank())
    want = sharding_type::replicated;
  else if (nones > 0)
    want = sharding_type::partial;
  fuzz::check(op.type == want, "the sharding type follows torch_xla's order of checks");
  if (op.type != sharding_type::partial) {
    fuzz::check(op.group_assignment.values.empty() && op.replication_groups.empty(), "only PARTIAL has groups");
    return;
  }
  std::vector<int> all;
  for (const auto& g : op.replication_groups) {
    fuzz::check(!g.empty() && g.size() == op.replication_groups[0].size(), "replication groups are equal-sized");
    all.insert(all.end(), g.begin(), g.end());
  }
  std::vector<int> devices = m.device_ids();
  std::sort(all.begin(), all.end());
  std::sort(devices.begin(), devices.end());
  fuzz::check(all == devices, "replication groups partition the mesh's devices");
  fuzz::check(op.group_assignment.rank() == r.rank(), "group assignment has one dim per spec entry");
  for (std::size_t i = 0; i < op.group_assignment.values.size(); ++i)
    fuzz::check(op.group_assignment.values[i] == static_cast<int>(i), "group assignment is iota");
  fuzz::check(op.group_assignment.values.size() == op.replication_groups.size(), "one group id per group");
}

std::vector<std::int64_t> choose_shape(std::string_view bytes, std::size_t rank) {
  const unsigned flags = bytes.empty() ? 0u : static_cast<unsigned char>(bytes[0]);
  std::vector<std::int64_t> shape;
  const std::size_t n = rank + ((flags & 2u) ? 1 : 0);
  for (std::size_t d = 0; d < n; ++d)
    shape.push_back(d + 1 < bytes.size() ? static_cast<unsigned char>(bytes[d + 1]) % 6 : 2);
  if ((flags & 4u) && !shape.empty()) {
    constexpr std::int64_t huge[] = {std::int64_t{1} << 40,
                                     std::int64_t{1} << 62,
                                     std::numeric_limits<std::int64_t>::max(),
                                     std::numeric_limits<std::int64_t>::max() - 1,
                                     std::numeric_limits<std::int64_t>::max() - (std::int64_t{1} << 24),
                                     std::int64_t{1} << 24,
                                     (std::int64_t{1} << 24) + 1,
                                     -1,
                                     std::numeric_limits<std::int64_t>::min()};
    shape[(flags >> 3) % shape.size()] = huge[(flags >> 4) % std::size(huge)];
  }
  return shape;
}

void check_layout(const xshard::runtime_mesh& m, const std::vector<std::int64_t>& shape,
                  const xshard::shard_layout& L) {
  const std::size_t rank = shape.size();
  fuzz::check(L.shape.size() == rank && std::equal(shape.begin(), shape.end(), L.shape.begin()),
              "the layout keeps the shape");
  fuzz::check(L.tile_dims.size() == rank && L.shard_shape.size() == rank, "one tile dim per tensor dim");
  fuzz::check(static_cast<std::int64_t>(L.shards.size()) == m.size(), "one shard per device");
  std::int64_t tiles = 1;
  for (std::size_t d = 0; d < rank; ++d) {
    fuzz::check(L.tile_dims[d] >= 1, "tile dims >= 1");
    fuzz::check(L.shard_shape[d] == L.shape[d] / L.tile_dims[d] + (L.shape[d] % L.tile_dims[d] != 0),
                "shard shape is ceil(n / tiles)");
    tiles *= L.tile_dims[d];
  }
  fuzz::check(m.size() % tiles == 0, "tiles divide the device count");
  const std::int64_t replicas = m.size() / tiles;
  std::vector<int> devices;
  std::map<std::int64_t, std::vector<std::int64_t>> replica_ids;         // tile -> replica ids
  std::vector<std::map<std::int64_t, xshard::shard_slice>> along(rank);  // dim -> tile index -> slice
  for (const xshard::shard& s : L.shards) {
    devices.push_back(s.device);
    fuzz::check(s.tile >= 0 && s.tile < tiles, "a shard's tile index is in range");
    replica_ids[s.tile].push_back(s.replica);
    // torch_xla: under {replicated} (one tile) a device's replica id is its id.
    if (tiles == 1) fuzz::check(s.replica == s.device, "a {replicated} shard's replica id is its device id");
    fuzz::check(s.slices.size() == rank, "one slice per dim");
    std::int64_t rest = s.tile;
    for (std::size_t d = rank; d-- > 0;) {
      const std::int64_t j = rest % L.tile_dims[d];
      rest /= L.tile_dims[d];
      const xshard::shard_slice sl = s.slices[d];
      fuzz::check(0 <= sl.start && sl.start <= sl.end && sl.end <= L.shape[d], "a slice lies in its dim");
      fuzz::check(sl.size() <= L.shard_shape[d], "a slice fits the shard shape");
      auto [it, fresh] = along[d].emplace(j, sl);
      fuzz::check(fresh || it->second == sl, "a tile has one slice per dim");
    }
  }
  std::vector<int> mesh_devices = m.device_ids();
  std::sort(devices.begin(), devices.end());
  std::sort(mesh_devices.begin(), mesh_devices.end());
  fuzz::check(devices == mesh_devices, "every device holds exactly one shard");
  fuzz::check(static_cast<std::int64_t>(replica_ids.size()) == tiles, "every tile is held");
  for (auto& [tile, ids] : replica_ids) {
    std::sort(ids.begin(), ids.end());
    for (std::size_t i = 0; i < ids.size(); ++i)
      fuzz::check(ids[i] == static_cast<std::int64_t>(i) && ids.size() == static_cast<std::size_t>(replicas),
                  "each tile's replica ids are 0..size/tiles-1");
  }
  for (std::size_t d = 0; d < rank; ++d) {
    std::int64_t at = 0;
    for (const auto& [j, sl] : along[d]) {
      fuzz::check(sl.start == at, "the slices of a dim follow each other in tile order");
      at = sl.end;
    }
    fuzz::check(at == L.shape[d], "the slices of a dim cover it");
  }

  // The element walk: every element held by exactly `replicas` devices.
  std::int64_t elements = 1;
  for (std::int64_t n : shape) {
    if (n > 4096) return;
    elements *= n;
    if (elements > 4096) return;
  }
  std::vector<std::int64_t> global(static_cast<std::size_t>(elements));
  std::iota(global.begin(), global.end(), std::int64_t{1});
  std::vector<std::int64_t> count(global.size(), 0), rebuilt(global.size(), 0);
  for (const xshard::shard& s : L.shards) {
    for (const bool padded : {false, true}) {
      const std::vector<std::int64_t> part = xshard::extract_shard<std::int64_t>(global, L, s, padded);
      std::int64_t want = 1;
      for (std::size_t d = 0; d < rank; ++d) want *= padded ? L.shard_shape[d] : s.slices[d].size();
      fuzz::check(static_cast<std::int64_t>(part.size()) == want, "extract_shard's size");
      std::vector<std::int64_t> into(global.size(), 0);
      xshard::insert_shard<std::int64_t>(into, L, s, part, padded);
      for (std::size_t i = 0; i < into.size(); ++i)
        if (into[i] != 0) {
          fuzz::check(into[i] == global[i], "insert_shard puts extract_shard's data back in place");
          if (!padded) ++count[i];
          rebuilt[i] = into[i];
        }
    }
  }
  for (std::size_t i = 0; i < count.size(); ++i)
    fuzz::check(count[i] == replicas, "every element is held by size/tiles devices");
  fuzz::check(rebuilt == global, "the shards rebuild the tensor");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto mesh_line_and_rest = fuzz::split_once(fuzz::as_text(data, size), '\n');
  const std::string_view mesh_line = mesh_line_and_rest.first, rest = mesh_line_and_rest.second;
  const auto text_and_shape_bytes = fuzz::split_once(rest, '\0');
  const std::string_view text = text_and_shape_bytes.first, shape_bytes = text_and_shape_bytes.second;

  const xshard::checked<xshard::partition_spec> parsed = xshard::parse_spec(text);
  xshard::partition_spec thrown;
  fuzz::check(fuzz::accepts([&] { thrown = xshard::parse_spec_or_throw(text); }) == parsed.ok(),
              "parse_spec_or_throw throws exactly when parse_spec fails");

  const xshard::runtime_mesh m = make_mesh(mesh_line, !shape_bytes.empty() && (shape_bytes[0] & 1));
  const std::vector<std::int64_t> shape = choose_shape(shape_bytes, parsed.ok() ? parsed.value.rank() : 1);

  if (!parsed.ok()) {
    const xshard::diagnostic& d = parsed.diag;
    if (d.code == xshard::errc::spec_syntax || d.code == xshard::errc::nested_tuple ||
        d.code == xshard::errc::empty_tuple)
      fuzz::check(d.column >= 1 && static_cast<std::size_t>(d.column) <= text.size() + 1,
                  "a syntax error's column lies in the text");
    fuzz::check(!fuzz::accepts([&] { xshard::get_op_sharding(m, text); }), "get_op_sharding rejects a bad spec");
    fuzz::check(!fuzz::accepts([&] { xshard::hlo_sharding_text(m, text); }), "hlo_sharding_text rejects it");
    fuzz::check(!fuzz::accepts([&] { xshard::shard_slices(m, text, shape); }), "shard_slices rejects it");
    return 0;
  }

  const xshard::partition_spec& s = parsed.value;
  fuzz::check(thrown == s, "parse_spec_or_throw returns parse_spec's value");
  for (const xshard::spec_entry& e : s.entries)
    fuzz::check(e.axes.size() <= xshard::max_mesh_axes, "an entry has at most max_mesh_axes axes");
  const std::string printed = xshard::spec_text(s).str();
  const auto again = xshard::parse_spec(printed);
  fuzz::check(again.ok() && again.value == s, "parse(print(spec)) == spec", printed);
  fuzz::check(xshard::spec_text(again.value).str() == printed, "printing a spec is a fixed point", printed);

  const xshard::checked<xshard::resolved_spec> r = xshard::resolve_spec(s, m.shape());
  xshard::op_sharding op;
  const bool op_ok = fuzz::accepts([&] { op = xshard::get_op_sharding(m, text); });
  fuzz::check(op_ok == r.ok(), "get_op_sharding works exactly when the spec resolves on the mesh");
  std::string hlo;
  fuzz::check(fuzz::accepts([&] { hlo = xshard::hlo_sharding_text(m, text); }) == op_ok,
              "hlo_sharding_text works exactly when get_op_sharding does");
  const bool want_slices = op_ok && shape.size() == s.rank() &&
                           std::all_of(shape.begin(), shape.end(), [](std::int64_t n) { return n >= 0; });
  xshard::shard_layout layout;
  const bool got_slices = fuzz::accepts([&] { layout = xshard::shard_slices(m, text, shape); });
  fuzz::check(got_slices == want_slices, "shard_slices works exactly for a valid spec and a matching shape");
  if (!op_ok) return 0;

  check_op(m, r.value, op);
  fuzz::check(op == xshard::get_op_sharding(m, s), "the text and value overloads agree");
  const xshard::xla_sharding x = xshard::to_xla(op);
  fuzz::check(hlo == xshard::hlo_text(x).str(), "hlo_sharding_text is hlo_text(to_xla(op))");
  for (const auto fmt : {xshard::hlo_format::v1, xshard::hlo_format::v2}) {
    const std::string t = xshard::hlo_text(x, fmt).str();
    const auto back = xshard::parse_hlo(t);
    fuzz::check(back.ok() && back.value == x, "the HLO text parses back to to_xla(op)", t);
  }
  if (got_slices) check_layout(m, shape, layout);
  return 0;
}
