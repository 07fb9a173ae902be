// fuzz_sdy: Shardy text (sharding/sdy.hpp): `sdy.mesh @m = <["x"=4, "y"=2]>`
// lines and a `#sdy.sharding<@m, [{"x"}, {}]>`, through parse_sdy,
// parse_sdy_mesh and the printers.
//
// Input, two forms:
//  - text: the Shardy text itself (any input not starting with '\x01');
//  - '\x01' then bytes that build a (mesh, spec): byte 0 = axis count - 1
//    (mod 4) and flags (bit 2: unnamed axes, bit 3: custom device order,
//    bit 4: the spec refers to axes by index, bit 5: inline mesh, bits 6-7:
//    the mesh name); then per axis its size (byte % 4 + 1); the device order
//    (a Fisher-Yates shuffle driven by the bytes); the spec rank (byte % 5);
//    then per axis, in a shuffled order, the dim it shards (byte % (rank + 1);
//    rank means unused). Missing bytes read as 0.
//
// Properties:
//  - parse_sdy and parse_sdy_or_throw agree (the same sentence on a
//    rejection); a rejection is xshard::error only; a syntax or unsupported
//    construct error's column lies in the text (or just past it) and names
//    the character there; parse_sdy_mesh and parse_sdy_mesh_or_throw agree;
//  - an accepted value is a valid xshard (mesh, spec): runtime_mesh accepts
//    its axes and device ids, resolve_spec accepts the spec, get_op_sharding
//    works;
//  - parse(print(x)) == x: the printed mesh line and sharding (with the name
//    read, and inline) parse back to the same axes, device ids, spec and
//    name, and printing is a fixed point; the mesh line alone reads back
//    through parse_sdy_mesh;
//  - agreement with the HLO text of the same sharding: hlo_sharding_text of
//    (mesh, spec) parses (parse_hlo) to the XLA sharding an oracle written
//    here builds straight from Shardy's meaning (each device's tile index
//    along a dim is the mixed-radix number of its coordinates on the dim's
//    axes, major to minor; the unused axes, in mesh order, number the
//    replicas; then XLA's normal form), for V1 and V2; shard_slices of that
//    (mesh, spec) give each device of a {replicated} layout its own id as
//    replica id;
//  - structured inputs: the text printed from the built (mesh, spec) parses
//    back to exactly it (axes by index come back by name).
// Speed guard in this driver: a text whose numbers after '=' multiply to
// 65537..2^24 is skipped (valid, linear, but slow under the sanitizers), and
// the engine checks run for meshes of at most 4096 devices.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>
#include <xshard/sharding/hlo.hpp>
#include <xshard/sharding/sdy.hpp>
#include <xshard/sharding/shards.hpp>

#include "fuzz_common.hpp"

namespace {

using xshard::mesh_axes;
using xshard::xla_sharding;

/// The product of the numbers written right after '=' (saturating).
std::int64_t sizes_product(std::string_view t) {
  std::int64_t p = 1;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i] != '=') continue;
    std::size_t j = i + 1;
    while (j < t.size() && (t[j] == ' ' || t[j] == '\n' || t[j] == '\t' || t[j] == '\r')) ++j;
    std::int64_t v = 0;
    bool any = false;
    while (j < t.size() && t[j] >= '0' && t[j] <= '9') {
      v = std::min<std::int64_t>(v * 10 + (t[j] - '0'), std::int64_t{1} << 40);
      ++j;
      any = true;
    }
    constexpr std::int64_t cap = std::int64_t{1} << 40;
    if (any) p = std::max<std::int64_t>(v, 1) > cap / p ? cap : p * std::max<std::int64_t>(v, 1);
  }
  return p;
}

/// Shardy's meaning, written here without the engine: the XLA sharding of
/// (mesh, resolved spec) in XLA's normal form.
xla_sharding oracle(const mesh_axes& axes, const std::vector<int>& ids, const xshard::resolved_spec& spec) {
  const std::size_t na = axes.size();
  const std::int64_t n = static_cast<std::int64_t>(ids.size());
  std::vector<bool> used(na, false);
  std::vector<std::int64_t> tiles;
  for (const auto& dim : spec.dims) {
    std::int64_t t = 1;
    for (int a : dim) {
      used[static_cast<std::size_t>(a)] = true;
      t *= axes[static_cast<std::size_t>(a)].size;
    }
    tiles.push_back(t);
  }
  std::int64_t replicas = 1;
  for (std::size_t a = 0; a < na; ++a)
    if (!used[a]) replicas *= axes[a].size;
  xla_sharding x;
  if (n == 1 || replicas == n) return x;  // {replicated}
  x.type = xla_sharding::kind::tiled;
  for (std::int64_t t : tiles) x.tile_dims.push_back(t);
  if (replicas > 1) {
    x.tile_dims.push_back(replicas);
    x.last_tile_dim_replicate = true;
  }
  x.devices.assign(static_cast<std::size_t>(n), -1);
  std::vector<std::int64_t> coord(na, 0);
  for (std::int64_t p = 0; p < n; ++p) {
    std::int64_t rest = p;  // mesh coordinates of position p, row-major
    for (std::size_t a = na; a-- > 0;) {
      coord[a] = rest % axes[a].size;
      rest /= axes[a].size;
    }
    std::int64_t flat = 0;
    for (std::size_t d = 0; d < spec.dims.size(); ++d) {
      std::int64_t t = 0;
      for (int a : spec.dims[d]) t = t * axes[static_cast<std::size_t>(a)].size + coord[static_cast<std::size_t>(a)];
      flat = flat * tiles[d] + t;
    }
    std::int64_t r = 0;
    for (std::size_t a = 0; a < na; ++a)
      if (!used[a]) r = r * axes[a].size + coord[a];
    flat = flat * replicas + r;
    x.devices[static_cast<std::size_t>(flat)] = ids[static_cast<std::size_t>(p)];
  }
  if (x.last_tile_dim_replicate)
    for (std::size_t g = 0; g < x.devices.size(); g += static_cast<std::size_t>(replicas))
      std::sort(x.devices.begin() + static_cast<std::ptrdiff_t>(g),
                x.devices.begin() + static_cast<std::ptrdiff_t>(g + static_cast<std::size_t>(replicas)));
  return x;
}

/// Everything an accepted value must satisfy.
void check_value(const xshard::sdy_sharding_value& v, std::string_view text) {
  const mesh_axes& axes = v.mesh.axes;
  fuzz::check(!axes.empty(), "a mesh has axes");
  const bool unnamed = axes[0].name.empty();
  for (const xshard::mesh_axis& a : axes) fuzz::check(a.name.empty() == unnamed, "axes are all named or all unnamed");
  fuzz::check(xshard::check_device_ids(axes, v.mesh.device_ids).ok(), "device ids are a permutation", text);
  const auto resolved = xshard::resolve_spec(v.spec, axes);
  fuzz::check(resolved.ok(), "the spec resolves on the mesh", text);
  for (const xshard::spec_entry& e : v.spec.entries)
    for (const xshard::axis_ref& a : e.axes)
      fuzz::check(a.by_index() == unnamed, "axes by name on a named mesh, by index on an unnamed one");

  // parse(print(x)) == x, printing is a fixed point; inline form too.
  const std::string_view name = v.mesh.name.empty() ? std::string_view("mesh") : v.mesh.name;
  const std::string mesh_line = xshard::sdy_mesh_decl(v.mesh.ref(), name).str();
  const std::string attr = xshard::sdy_sharding_attr(v.mesh.ref(), resolved.value, name).str();
  const std::string printed = mesh_line + "\n" + attr;
  const auto again = xshard::parse_sdy(printed);
  fuzz::check(again.ok(), "printed text parses", printed);
  fuzz::check(again.value.mesh.axes == axes && again.value.mesh.device_ids == v.mesh.device_ids &&
                  again.value.spec == v.spec && again.value.mesh.name == name,
              "parse(print(x)) == x", printed);
  const std::string printed2 = xshard::sdy_mesh_decl(again.value.mesh.ref(), again.value.mesh.name).str() + "\n" +
                               xshard::sdy_sharding_attr(again.value.mesh.ref(), resolved.value, name).str();
  fuzz::check(printed2 == printed, "printing is a fixed point", printed);
  const std::string inline_attr = xshard::sdy_sharding_attr(v.mesh.ref(), resolved.value, "").str();
  const auto inl = xshard::parse_sdy(inline_attr);
  fuzz::check(inl.ok() && inl.value.mesh.axes == axes && inl.value.mesh.device_ids == v.mesh.device_ids &&
                  inl.value.spec == v.spec && inl.value.mesh.name.empty(),
              "the inline form parses back", inline_attr);
  const auto mesh_alone = xshard::parse_sdy_mesh(mesh_line);
  fuzz::check(mesh_alone.ok() && mesh_alone.value.axes == axes && mesh_alone.value.device_ids == v.mesh.device_ids,
              "the mesh line reads back alone", mesh_line);

  // The engine on it, against the oracle.
  if (static_cast<std::int64_t>(v.mesh.device_ids.size()) > 4096) return;
  const xshard::runtime_mesh m(xshard::mesh_text(axes).str(), v.mesh.device_ids);
  const std::string spec_text = xshard::spec_text(v.spec).str();
  fuzz::check(fuzz::accepts([&] { (void)xshard::get_op_sharding(m, v.spec); }), "get_op_sharding works", text);
  fuzz::check(xshard::sdy_sharding_text(m, spec_text, name) == attr, "run-time printer agrees");
  fuzz::check(xshard::sdy_mesh_text(m, name) == mesh_line, "run-time mesh printer agrees");
  const xla_sharding want = oracle(axes, v.mesh.device_ids, resolved.value);
  for (xshard::hlo_format f : {xshard::hlo_format::v1, xshard::hlo_format::v2}) {
    const std::string hlo = xshard::hlo_sharding_text(m, spec_text, f);
    const auto x = xshard::parse_hlo(hlo);
    fuzz::check(x.ok() && x.value == want, "the HLO text agrees with Shardy's meaning", hlo + " for " + printed);
  }
  if (v.spec.rank() <= 3) {
    std::vector<std::int64_t> shape(v.spec.rank(), 3);
    const xshard::shard_layout l = xshard::shard_slices(m, spec_text, shape);
    if (!want.is_tiled())
      for (const xshard::shard& s : l.shards)
        fuzz::check(s.replica == s.device, "under {replicated} a replica id is the device id");
  }
}

void check_text(std::string_view text) {
  if (const std::int64_t p = sizes_product(text); p > 65536 && p <= xshard::max_mesh_devices) return;
  const auto parsed = xshard::parse_sdy(text);
  std::string thrown;
  const bool accepted = fuzz::accepts([&] {
    try {
      (void)xshard::parse_sdy_or_throw(text);
    } catch (const xshard::error& e) {
      thrown = e.what();
      throw;
    }
  });
  fuzz::check(accepted == parsed.ok(), "parse_sdy and parse_sdy_or_throw agree", text);
  if (!parsed.ok()) {
    std::string want = xshard::describe(parsed.diag, text);
    want.resize(std::min(want.size(), want.find('\0')));  // what() is a C string: it ends at a NUL of the text
    fuzz::check(thrown == want, "the same sentence", thrown);
    const xshard::errc c = parsed.diag.code;
    if (c == xshard::errc::sdy_syntax || c == xshard::errc::sdy_unsupported || c == xshard::errc::sdy_invalid) {
      const auto col = static_cast<std::size_t>(parsed.diag.column);
      fuzz::check(col >= 1 && col <= text.size() + 1, "the column lies in the text", thrown);
      fuzz::check(parsed.diag.ch == (col <= text.size() ? text[col - 1] : '\0'), "the character is the column's",
                  thrown);
    }
  } else {
    check_value(parsed.value, text);
  }
  const auto mesh = xshard::parse_sdy_mesh(text);
  const bool mesh_accepted = fuzz::accepts([&] { (void)xshard::parse_sdy_mesh_or_throw(text); });
  fuzz::check(mesh_accepted == mesh.ok(), "parse_sdy_mesh and parse_sdy_mesh_or_throw agree", text);
  if (mesh.ok()) {
    fuzz::check(xshard::check_device_ids(mesh.value.axes, mesh.value.device_ids).ok(), "mesh ids are a permutation");
    const auto back = xshard::parse_sdy_mesh(xshard::sdy_mesh_body(mesh.value.ref()).view());
    fuzz::check(back.ok() && back.value.axes == mesh.value.axes && back.value.device_ids == mesh.value.device_ids,
                "a mesh prints and reads back", text);
  }
}

/// '\x01' + bytes: build a (mesh, spec), print it, read it back.
void check_built(const std::uint8_t* data, std::size_t size) {
  std::size_t at = 0;
  auto next = [&]() -> unsigned { return at < size ? data[at++] : 0u; };
  const unsigned flags = next();
  const std::size_t na = flags % 4 + 1;
  const bool unnamed = (flags & 4) != 0, custom = (flags & 8) != 0, by_index = (flags & 16) != 0,
             inline_mesh = (flags & 32) != 0;
  static constexpr std::string_view names[] = {"data", "model", "x", "y", "fsdp", "_a1", "tensor", "Seq"};
  static constexpr std::string_view mesh_names[] = {"mesh", "m", "mesh_0", "a.b$c"};
  const std::string_view mesh_name = mesh_names[(flags >> 6) & 3];
  std::vector<std::int64_t> sizes;
  std::vector<std::string> axis_names;
  const unsigned first = next();
  for (std::size_t a = 0; a < na; ++a) {
    sizes.push_back(next() % 4 + 1);
    if (!unnamed) axis_names.emplace_back(names[(first + a) % 8]);
  }
  const std::int64_t n = std::accumulate(sizes.begin(), sizes.end(), std::int64_t{1}, std::multiplies<>());
  std::vector<int> ids(static_cast<std::size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  if (custom)
    for (std::size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[next() % i]);
  const xshard::runtime_mesh m(ids, sizes, axis_names);
  const std::size_t rank = next() % 5;
  std::vector<std::size_t> order(na);
  std::iota(order.begin(), order.end(), std::size_t{0});
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[next() % i]);
  xshard::partition_spec spec;
  for (std::size_t d = 0; d < rank; ++d) spec.entries.push_back({});
  for (std::size_t a : order) {
    const std::size_t d = next() % (rank + 1);
    if (d == rank) continue;
    xshard::axis_ref ref;
    if (unnamed || by_index)
      ref.index = static_cast<std::int64_t>(a);
    else
      ref.name.assign(axis_names[a]);
    spec.entries[d].axes.push_back(ref);
  }
  const std::string text =
      inline_mesh ? xshard::sdy_sharding_inline_text(m, xshard::spec_text(spec).str())
                  : xshard::sdy_mesh_text(m, mesh_name) + "\n" + xshard::sdy_sharding_text(m, spec, mesh_name);
  const xshard::sdy_parsed p = xshard::parse_sdy_or_throw(text);
  fuzz::check(p.mesh == m, "the mesh reads back", text);
  fuzz::check(xshard::resolve_spec(p.spec, m.shape()).value == xshard::resolve_spec(spec, m.shape()).value,
              "the spec reads back", text);
  fuzz::check(p.mesh_name == (inline_mesh ? std::string_view() : mesh_name), "the mesh name reads back", text);
  if (!by_index || unnamed) fuzz::check(p.spec == spec, "the spec reads back as written", text);
  check_text(text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 0 && data[0] == 0x01) {
    check_built(data + 1, size - 1);
    return 0;
  }
  check_text(fuzz::as_text(data, size));
  return 0;
}
