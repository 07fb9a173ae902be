// fuzz_topology: topology JSON ([{"id": 0, "coords": [0, 0, 0], "slice_index": 0}, ...])
// and the hybrid (ICI x DCN) meshes built from it.
//
// Input: the JSON text, optionally '\0' and bytes that choose the mesh
// shapes: a mode byte (0: ici = the physical extent of the devices' coords,
// 1: ici = (devices / a, a), 2: ici and dcn from the next bytes, 3: no dcn),
// then the bytes the mode reads.
//
// Properties:
//  - try_parse_topology and parse_topology agree; a rejection is
//    xshard::error only, with the same sentence, free of control characters
//    (the CLI prints it as one line);
//  - an accepted list keeps the rules: ids unique, every id, coord and
//    slice_index in [0, INT_MAX], slice_index on every device or on none;
//    to_json writes it so that it parses back equal;
//  - try_hybrid_device_layout and hybrid_device_layout agree (xshard::error
//    only); a layout has mesh_shape = ici * dcn, holds every device exactly
//    once, and in a multislice layout the block at row-major dcn position g
//    holds exactly the devices of the g-th smallest slice_index;
//  - hybrid_mesh works or throws xshard::error, and then has the layout's ids.
#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>
#include <xshard/mesh/hybrid.hpp>
#include <xshard/mesh/topology.hpp>

#include "fuzz_common.hpp"

namespace {

void check_devices(const std::vector<xshard::device_attributes>& devices) {
  std::vector<int> ids;
  for (const auto& d : devices) {
    fuzz::check(d.id >= 0 && d.id <= INT_MAX, "an id is in [0, INT_MAX]");
    for (int c : d.coords) fuzz::check(c >= 0 && c <= INT_MAX, "a coord is in [0, INT_MAX]");
    fuzz::check(!d.slice_index || *d.slice_index >= 0, "a slice_index is >= 0");
    fuzz::check(d.slice_index.has_value() == devices[0].slice_index.has_value(),
                "slice_index on every device or on none");
    ids.push_back(d.id);
  }
  std::sort(ids.begin(), ids.end());
  fuzz::check(std::adjacent_find(ids.begin(), ids.end()) == ids.end(), "ids are unique");
}

struct shapes {
  std::vector<std::int64_t> ici, dcn;
};

shapes choose_shapes(std::string_view tail, const std::vector<xshard::device_attributes>& devices) {
  shapes s;
  const unsigned mode = tail.empty() ? 0u : static_cast<unsigned char>(tail[0]) % 4;
  if (!tail.empty()) tail.remove_prefix(1);
  auto byte = [&](std::size_t i) { return i < tail.size() ? static_cast<unsigned char>(tail[i]) : 0u; };
  const auto n = static_cast<std::int64_t>(devices.size());
  std::vector<int> slices;
  for (const auto& d : devices)
    if (d.slice_index) slices.push_back(*d.slice_index);
  std::sort(slices.begin(), slices.end());
  slices.erase(std::unique(slices.begin(), slices.end()), slices.end());
  const std::int64_t k = slices.empty() ? 1 : static_cast<std::int64_t>(slices.size());
  switch (mode) {
    case 0: {  // the physical extent (what a matching single-slice mesh has)
      std::array<int, 3> top{};
      for (const auto& d : devices) top = std::max(top, d.coords);
      for (int t : top) s.ici.push_back(std::int64_t{t} + 1);
      if (k > 1) s.dcn = {k, 1, 1};
      break;
    }
    case 1: {  // two axes splitting the devices of one slice
      const std::int64_t per_slice = std::max<std::int64_t>(1, n / k);
      std::int64_t a = 1 + byte(0) % 4;
      if (per_slice % a != 0) a = 1;
      s.ici = {per_slice / a, a};
      if (k > 1) s.dcn = {1, k};
      break;
    }
    case 2: {
      const std::size_t rank = 1 + byte(0) % 4;
      for (std::size_t i = 0; i < rank; ++i) s.ici.push_back(byte(1 + i) % 6);
      if (byte(5) & 1)
        for (std::size_t i = 0; i < rank + (byte(5) >> 7); ++i) s.dcn.push_back(byte(6 + i) % 4);
      break;
    }
    default:
      s.ici = {std::max<std::int64_t>(1, n / k)};
      break;
  }
  return s;
}

void check_layout(const std::vector<xshard::device_attributes>& devices, const shapes& s,
                  const xshard::hybrid_layout& L) {
  const std::size_t rank = s.ici.size();
  fuzz::check(L.mesh_shape.size() == rank, "mesh_shape has ici's rank");
  std::int64_t product = 1;
  for (std::size_t k = 0; k < rank; ++k) {
    fuzz::check(L.mesh_shape[k] == s.ici[k] * (s.dcn.empty() ? 1 : s.dcn[k]), "mesh_shape = ici * dcn");
    product *= L.mesh_shape[k];
  }
  fuzz::check(product == static_cast<std::int64_t>(devices.size()), "the mesh holds every device");
  std::vector<int> got = L.device_ids, want;
  for (const auto& d : devices) want.push_back(d.id);
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  fuzz::check(got == want, "the layout holds each device exactly once");
  if (!devices[0].slice_index) return;
  std::vector<int> keys;
  for (const auto& d : devices) keys.push_back(*d.slice_index);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::vector<std::int64_t> index(rank, 0);
  for (const int id : L.device_ids) {
    std::int64_t group = 0;
    for (std::size_t k = 0; k < rank; ++k) group = group * s.dcn[k] + index[k] / s.ici[k];
    const auto it = std::find_if(devices.begin(), devices.end(), [&](const auto& d) { return d.id == id; });
    fuzz::check(*it->slice_index == keys[static_cast<std::size_t>(group)],
                "dcn block g holds the devices of the g-th slice");
    for (std::size_t k = rank; k-- > 0;) {
      if (++index[k] < L.mesh_shape[k]) break;
      index[k] = 0;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text_and_tail = fuzz::split_once(fuzz::as_text(data, size), '\0');
  const std::string_view text = text_and_tail.first, tail = text_and_tail.second;

  auto parsed = xshard::try_parse_topology(text);
  std::vector<xshard::device_attributes> thrown;
  std::string thrown_message;
  const bool ok = fuzz::accepts([&] {
    try {
      thrown = xshard::parse_topology(text);
    } catch (const xshard::error& e) {
      thrown_message = e.what();
      throw;
    }
  });
  fuzz::check(ok == parsed.ok(), "parse_topology throws exactly when try_parse_topology fails");
  if (!ok) {
    const std::string message = parsed.message.str();
    fuzz::check(thrown_message == "xshard: " + message, "the thrown sentence is the diagnostic's");
    for (char c : message)
      fuzz::check(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f, "an error message has no control characters",
                  message);
    return 0;
  }
  const std::vector<xshard::device_attributes>& devices = parsed.value;
  fuzz::check(thrown == devices, "parse_topology returns try_parse_topology's value");
  check_devices(devices);
  const std::string json = xshard::to_json(devices);
  fuzz::check(xshard::parse_topology(json) == devices, "to_json writes what parses back equal", json);
  if (devices.empty()) {
    fuzz::check(!fuzz::accepts([&] { xshard::hybrid_device_layout(devices, std::vector<std::int64_t>{1}); }),
                "a hybrid mesh needs devices");
    return 0;
  }

  const shapes s = choose_shapes(tail, devices);
  const auto layout = xshard::try_hybrid_device_layout(devices, s.ici, s.dcn);
  xshard::hybrid_layout thrown_layout;
  fuzz::check(
      fuzz::accepts([&] { thrown_layout = xshard::hybrid_device_layout(devices, s.ici, s.dcn); }) == layout.ok(),
      "hybrid_device_layout throws exactly when try_hybrid_device_layout fails");
  if (!layout.ok()) {
    fuzz::check(!fuzz::accepts([&] { xshard::hybrid_mesh(devices, s.ici, s.dcn); }), "hybrid_mesh fails too");
    return 0;
  }
  fuzz::check(thrown_layout == layout.value, "the two faces agree");
  check_layout(devices, s, layout.value);
  std::vector<int> mesh_ids;
  if (fuzz::accepts([&] { mesh_ids = xshard::hybrid_mesh(devices, s.ici, s.dcn).device_ids(); }))
    fuzz::check(mesh_ids == layout.value.device_ids, "hybrid_mesh has the layout's ids");
  return 0;
}
