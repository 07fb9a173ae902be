// fuzz_mesh: mesh text ("data=4, model=2") and run-time meshes.
//
// Input: mesh text, optionally followed by '\0' and bytes that choose device
// ids: a mode byte (0: none given, 1: a shuffled 0..n-1, perhaps with one id
// changed, 2: raw 16-bit ids) and then the bytes the mode reads.
//
// Properties:
//  - parse_mesh_axes accepts exactly what runtime_mesh(text) accepts; a
//    rejection is xshard::error only, and a syntax error's column lies in
//    the text (or one past its end);
//  - an accepted mesh keeps the rules: 1..8 axes, all named (valid, unique,
//    not "None") or all unnamed, sizes >= 1, product <= max_mesh_devices;
//  - mesh_text prints it back: parse(print(axes)) == axes, and printing is a
//    fixed point; make_mesh_axes(sizes, names) builds the same axes;
//  - runtime_mesh(text, ids) succeeds exactly when ids is empty or a
//    permutation of 0..size-1 (an oracle written here), and then keeps them.
// runtime_mesh is built only for meshes of at most 4096 devices (it stores
// one id per device; the parser itself is checked at every size).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>
#include <xshard/mesh/axes.hpp>
#include <xshard/mesh/mesh.hpp>

#include "fuzz_common.hpp"

namespace {

bool valid_name(std::string_view n) {
  if (n.empty() || n.size() > xshard::max_axis_name || n == "None") return false;
  auto start = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!start(n[0])) return false;
  return std::all_of(n.begin(), n.end(), [&](char c) { return start(c) || (c >= '0' && c <= '9'); });
}

void check_rules(const xshard::mesh_axes& axes) {
  fuzz::check(!axes.empty() && axes.size() <= xshard::max_mesh_axes, "an accepted mesh has 1..8 axes");
  const bool named = !axes[0].name.empty();
  std::int64_t product = 1;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const xshard::mesh_axis& a = axes[i];
    fuzz::check(a.name.empty() != named, "axes are all named or all unnamed");
    if (named) fuzz::check(valid_name(a.name.view()), "an accepted axis name is valid", a.name.view());
    for (std::size_t j = 0; j < i; ++j)
      if (named) fuzz::check(!(axes[j].name == a.name), "accepted axis names are unique", a.name.view());
    fuzz::check(a.size >= 1 && a.size <= xshard::max_mesh_devices, "an accepted axis size is in [1, max]");
    product *= a.size;
    fuzz::check(product <= xshard::max_mesh_devices, "an accepted mesh has at most max_mesh_devices devices");
  }
  fuzz::check(xshard::mesh_size(axes) == product, "mesh_size is the product of the sizes");
}

/// The device ids the tail of the input asks for (mode byte first).
std::vector<int> choose_ids(std::string_view tail, std::int64_t n) {
  std::vector<int> ids;
  if (tail.empty()) return ids;
  const auto mode = static_cast<unsigned char>(tail[0]) % 3;
  tail.remove_prefix(1);
  if (mode == 1 && n <= 4096) {
    ids.resize(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
    for (std::size_t i = 0; i + 1 < ids.size() && i < tail.size(); ++i) {
      const std::size_t j = i + static_cast<unsigned char>(tail[i]) % (ids.size() - i);
      std::swap(ids[i], ids[j]);
    }
    if (tail.size() >= 3 && (tail[0] & 0x40) && !ids.empty()) {  // spoil one id
      const std::size_t at = static_cast<unsigned char>(tail[1]) % ids.size();
      ids[at] = static_cast<int>(static_cast<signed char>(tail[2]));
    }
  } else if (mode == 2) {
    for (std::size_t i = 0; i + 1 < tail.size(); i += 2)
      ids.push_back(static_cast<std::int16_t>(static_cast<unsigned char>(tail[i]) |
                                              (static_cast<unsigned char>(tail[i + 1]) << 8)));
  }
  return ids;
}

bool is_permutation_of_iota(const std::vector<int>& ids, std::int64_t n) {
  if (static_cast<std::int64_t>(ids.size()) != n) return false;
  std::vector<char> seen(ids.size(), 0);
  for (int id : ids) {
    if (id < 0 || id >= n || seen[static_cast<std::size_t>(id)]) return false;
    seen[static_cast<std::size_t>(id)] = 1;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text_and_tail = fuzz::split_once(fuzz::as_text(data, size), '\0');
  const std::string_view text = text_and_tail.first, tail = text_and_tail.second;

  const xshard::checked<xshard::mesh_axes> parsed = xshard::parse_mesh_axes(text);
  xshard::mesh_axes thrown_axes;
  const bool get_ok = fuzz::accepts([&] { thrown_axes = xshard::parse_mesh_axes(text).get(text); });
  fuzz::check(get_ok == parsed.ok(), "checked<>::get throws exactly when the diagnostic is an error");

  if (!parsed.ok()) {
    const xshard::diagnostic& d = parsed.diag;
    if (d.code == xshard::errc::mesh_syntax)
      fuzz::check(d.column >= 1 && static_cast<std::size_t>(d.column) <= text.size() + 1,
                  "a syntax error's column lies in the text");
    fuzz::check(!fuzz::accepts([&] { xshard::runtime_mesh m(text); }), "runtime_mesh rejects what the parser rejects");
    return 0;
  }

  const xshard::mesh_axes& axes = parsed.value;
  fuzz::check(thrown_axes == axes, "get() returns the parsed axes");
  check_rules(axes);

  // Printing round-trips, and the printed text is a fixed point.
  const std::string printed = xshard::mesh_text(axes).str();
  const xshard::checked<xshard::mesh_axes> again = xshard::parse_mesh_axes(printed);
  fuzz::check(again.ok(), "printed mesh text parses", printed);
  fuzz::check(again.value == axes, "parse(print(axes)) == axes", printed);
  fuzz::check(xshard::mesh_text(again.value).str() == printed, "printing is a fixed point", printed);

  // The torch_xla-order constructor builds the same axes.
  std::vector<std::int64_t> sizes;
  std::vector<std::string_view> names;
  for (const xshard::mesh_axis& a : axes) {
    sizes.push_back(a.size);
    if (!a.name.empty()) names.push_back(a.name.view());
  }
  const auto made = xshard::make_mesh_axes(sizes, names);
  fuzz::check(made.ok() && made.value == axes, "make_mesh_axes(sizes, names) == parse_mesh_axes(text)", printed);

  const std::int64_t n = xshard::mesh_size(axes);
  if (n > 4096) return 0;  // runtime_mesh stores one id per device: keep runs fast
  const std::vector<int> ids = choose_ids(tail, n);
  const bool want = ids.empty() || is_permutation_of_iota(ids, n);
  std::vector<int> got_ids;
  std::string got_text;
  const bool got = fuzz::accepts([&] {
    const xshard::runtime_mesh m(text, ids);
    got_ids = m.device_ids();
    got_text = m.text();
    fuzz::check(m.size() == n && m.rank() == axes.size() && m.shape() == axes, "runtime_mesh has the parsed axes");
    fuzz::check(m.logical_mesh().values == got_ids, "the logical mesh holds the ids in row-major order");
  });
  fuzz::check(got == want, want ? "runtime_mesh accepts a permutation of 0..n-1" : "runtime_mesh rejects bad ids");
  if (got) {
    fuzz::check(got_text == printed, "runtime_mesh::text() is mesh_text");
    if (!ids.empty()) fuzz::check(got_ids == ids, "runtime_mesh keeps the given ids");
    for (std::size_t i = 0; ids.empty() && i < got_ids.size(); ++i)
      fuzz::check(got_ids[i] == static_cast<int>(i), "default ids are 0..n-1");
  }
  return 0;
}
