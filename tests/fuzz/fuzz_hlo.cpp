// fuzz_hlo: XLA HloSharding text, V1 ("{devices=[2,2]0,1,2,3}") and V2
// ("{devices=[2,2]<=[2,2]T(1,0)}"), through parse_hlo and hlo_text.
//
// Input: the text.
//
// Properties:
//  - parse_hlo and parse_hlo_or_throw agree; a rejection is xshard::error
//    only and a syntax error's column lies in the text;
//  - an accepted sharding is in XLA's normal form: tile dims >= 1 whose
//    product is the device count, devices unique and in [0, max_mesh_devices],
//    a replicated last dim only with >= 2 dims and neither 1 nor every device,
//    the devices of each replication group ascending;
//  - for V1 and V2: parse(print(x)) == x and print(parse(print(x))) ==
//    print(x) (so print(parse(t)) is an idempotent normal form), and both
//    formats parse to the same sharding;
//  - V2 finds the iota form whenever the input wrote one and the normal form
//    kept its order (no replicated last dim), and always for 0..n-1;
//  - shard_slices of that sharding over a small shape of its data rank
//    gives one shard per device with slices inside the shape; a shape of
//    another rank is a diagnostic, not a crash.
// Speed guards in this driver (not in the library): a text whose tile dims
// multiply to 65537..2^24 devices is skipped (its iota costs seconds under the
// sanitizers; the code path is the one smaller tiles take), and printing and
// the device checks run for at most 65536 devices.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>
#include <xshard/sharding/hlo.hpp>
#include <xshard/sharding/shards.hpp>

#include "fuzz_common.hpp"

namespace {

using kind = xshard::xla_sharding::kind;

void check_normal_form(const xshard::xla_sharding& x) {
  if (x.type != kind::tiled) {
    fuzz::check(x.tile_dims.empty() && x.devices.empty() && !x.last_tile_dim_replicate,
                "an untiled sharding has no tile");
    if (x.type == kind::maximal)
      fuzz::check(x.device >= 0 && x.device <= xshard::max_mesh_devices, "a maximal device is in range");
    return;
  }
  fuzz::check(!x.tile_dims.empty(), "a tile has dims");
  std::int64_t product = 1;
  for (std::int64_t d : x.tile_dims) {
    fuzz::check(d >= 1, "tile dims >= 1");
    product *= d;
    fuzz::check(product <= xshard::max_mesh_devices, "at most max_mesh_devices devices");
  }
  fuzz::check(static_cast<std::int64_t>(x.devices.size()) == product, "tile dims multiply to the device count");
  if (product > 65536) return;  // the rest is linear but slow under the sanitizers; iota is unique by construction
  std::vector<int> sorted = x.devices;
  std::sort(sorted.begin(), sorted.end());
  fuzz::check(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), "devices are unique");
  fuzz::check(sorted.front() >= 0 && sorted.back() <= xshard::max_mesh_devices, "devices are in range");
  if (x.last_tile_dim_replicate) {
    const std::int64_t last = x.tile_dims.back();
    fuzz::check(x.tile_dims.size() >= 2 && last != 1 && last != product,
                "a replicated last dim is neither 1 nor every device");
    for (std::size_t g = 0; g < x.devices.size(); g += static_cast<std::size_t>(last))
      fuzz::check(std::is_sorted(x.devices.begin() + static_cast<std::ptrdiff_t>(g),
                                 x.devices.begin() + static_cast<std::ptrdiff_t>(g + static_cast<std::size_t>(last))),
                  "each replication group is ascending");
  }
}

void check_slices(const xshard::xla_sharding& x) {
  if (!x.is_tiled() || x.data_rank() > 4 || x.devices.size() > 4096) return;
  std::vector<std::int64_t> shape;
  for (std::size_t d = 0; d < x.data_rank(); ++d) shape.push_back(x.tile_dims[d] + static_cast<std::int64_t>(d % 2));
  const auto layout = xshard::shard_slices(x, x.devices, shape);
  fuzz::check(layout.ok(), "shard_slices takes a shape of the data rank");
  fuzz::check(layout.value.shards.size() == x.devices.size(), "one shard per device");
  for (const xshard::shard& s : layout.value.shards)
    for (std::size_t d = 0; d < shape.size(); ++d)
      fuzz::check(0 <= s.slices[d].start && s.slices[d].start <= s.slices[d].end && s.slices[d].end <= shape[d],
                  "a slice lies in its dim");
  shape.push_back(1);
  fuzz::check(!xshard::shard_slices(x, x.devices, shape).ok(), "a shape of another rank is refused");
}

/// The product of the tile dims the text appears to give ("devices=[a,b,...]"),
/// saturated; 0 if it cannot tell. The driver's speed guard, not a parser.
std::int64_t apparent_tile_product(std::string_view text) {
  const std::size_t at = text.find('[', text.find("devices"));
  if (text.find("devices") == std::string_view::npos || at == std::string_view::npos) return 0;
  std::int64_t product = 1, v = -1;
  for (std::size_t i = at + 1; i < text.size(); ++i) {
    const char c = text[i];
    if (c >= '0' && c <= '9') {
      v = std::min<std::int64_t>((v < 0 ? 0 : v) * 10 + (c - '0'), std::int64_t{1} << 40);
    } else if (c == ',' || c == ']') {
      if (v < 0) return 0;
      product = v != 0 && product > (std::int64_t{1} << 40) / v ? std::int64_t{1} << 40 : product * v;
      v = -1;
      if (c == ']') return product;
    } else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
      return 0;
    }
  }
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  // Speed guard: a valid tile of 2^16..2^24 devices costs seconds under the
  // sanitizers (linear, within max_mesh_devices); more than 2^24 is a cheap
  // rejection and still runs.
  const std::int64_t apparent = apparent_tile_product(text);
  if (apparent > 65536 && apparent <= xshard::max_mesh_devices) return 0;
  const xshard::checked<xshard::xla_sharding> parsed = xshard::parse_hlo(text);
  xshard::xla_sharding thrown;
  fuzz::check(fuzz::accepts([&] { thrown = xshard::parse_hlo_or_throw(text); }) == parsed.ok(),
              "parse_hlo_or_throw throws exactly when parse_hlo fails");
  if (!parsed.ok()) {
    const xshard::diagnostic& d = parsed.diag;
    fuzz::check(d.code == xshard::errc::hlo_syntax || d.code == xshard::errc::hlo_invalid, "an HLO error code");
    if (d.code == xshard::errc::hlo_syntax)
      fuzz::check(d.column >= 1 && static_cast<std::size_t>(d.column) <= text.size() + 1,
                  "a syntax error's column lies in the text");
    return 0;
  }
  const xshard::xla_sharding& x = parsed.value;
  fuzz::check(thrown == x, "parse_hlo_or_throw returns parse_hlo's value");
  check_normal_form(x);
  if (x.devices.size() > 65536) return 0;

  std::string printed[2];
  for (const auto fmt : {xshard::hlo_format::v1, xshard::hlo_format::v2}) {
    const std::string t = xshard::hlo_text(x, fmt).str();
    const auto back = xshard::parse_hlo(t);
    fuzz::check(back.ok(), "printed HLO text parses", t);
    fuzz::check(back.value == x, "parse(print(x)) == x", t);
    fuzz::check(xshard::hlo_text(back.value, fmt).str() == t, "print(parse(print(x))) == print(x)", t);
    printed[fmt == xshard::hlo_format::v2] = t;
  }
  if (x.is_tiled()) {
    bool iota = true;
    for (std::size_t i = 0; i < x.devices.size(); ++i) iota = iota && x.devices[i] == static_cast<int>(i);
    const bool wrote_iota = text.find("<=") != std::string_view::npos && !x.last_tile_dim_replicate;
    if (iota || wrote_iota)
      fuzz::check(printed[1].find("<=[") != std::string::npos, "V2 prints a transposed iota in iota form", printed[1]);
  } else {
    fuzz::check(printed[0] == printed[1], "V1 and V2 differ only for tiles");
  }
  check_slices(x);
  return 0;
}
