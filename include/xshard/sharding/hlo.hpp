// xshard/sharding/hlo.hpp - XLA's HloSharding: conversion from torch_xla's
// OpSharding, XLA's normal form, text in the V1 (device list) and V2 (iota)
// formats, and a parser for both.
//
//   {replicated}
//   {maximal device=3}
//   {devices=[4,2]0,1,2,3,4,5,6,7}                        V1, tiled
//   {devices=[4,1,2]0,1,2,3,4,5,6,7 last_tile_dim_replicate}
//   {devices=[4,2]<=[8]}                                  V2: iota(8) reshaped
//   {devices=[2,4]<=[4,2]T(1,0)}                          V2: iota reshaped [4,2], transposed
//
// Normal form (XLA's HloSharding::PartialTile): a partially replicated tile
// whose last dim covers every device is {replicated}; one whose last dim is
// 1 is a plain tile; otherwise the devices inside each replication group
// (each run along the last dim) are sorted ascending.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"
#include "../core/text.hpp"
#include "../mesh/axes.hpp"
#include "op_sharding.hpp"

namespace xshard {

/// An XLA sharding (the parts torch_xla's SPMD uses).
struct xla_sharding {
  enum class kind : std::uint8_t { replicated, maximal, tiled, manual };
  kind type = kind::replicated;
  int device = 0;                                           ///< maximal only
  static_vector<std::int64_t, max_array_rank> tile_dims{};  ///< tiled only; includes the replicated last dim
  std::vector<int> devices{};                               ///< tiled only; row-major over tile_dims
  bool last_tile_dim_replicate = false;

  constexpr bool is_tiled() const { return type == kind::tiled; }
  /// Number of dims of the tensor this tiles (excludes the replicated dim).
  constexpr std::size_t data_rank() const { return tile_dims.size() - (last_tile_dim_replicate ? 1 : 0); }
  /// Replicas per tile (the last dim when partially replicated, else 1).
  constexpr std::int64_t replicas() const { return last_tile_dim_replicate ? tile_dims.back() : 1; }
  friend constexpr bool operator==(const xla_sharding&, const xla_sharding&) = default;
};

/// XLA's HloSharding::PartialTile: normal form of a tile whose last dim
/// holds replicas.
constexpr xla_sharding partial_tile(const static_vector<std::int64_t, max_array_rank>& dims, std::vector<int> devices) {
  xla_sharding out;
  const std::int64_t last = dims.empty() ? 1 : dims.back();
  if (dims.size() <= 1 || last == static_cast<std::int64_t>(devices.size())) return out;  // {replicated}
  out.type = xla_sharding::kind::tiled;
  out.tile_dims = dims;
  if (last == 1) {
    out.tile_dims.pop_back();
  } else {
    out.last_tile_dim_replicate = true;
    for (std::size_t g = 0; g < devices.size(); g += static_cast<std::size_t>(last))
      std::sort(devices.begin() + static_cast<std::ptrdiff_t>(g),
                devices.begin() + static_cast<std::ptrdiff_t>(g) + static_cast<std::ptrdiff_t>(last));
  }
  out.devices = std::move(devices);
  return out;
}

/// What torch_xla hands XLA for an OpSharding (REPLICATED and MAXIMAL both
/// become {replicated}, as torch_xla maps them).
constexpr xla_sharding to_xla(const op_sharding& op) {
  xla_sharding out;
  switch (op.type) {
    case sharding_type::tiled:
      out.type = xla_sharding::kind::tiled;
      out.tile_dims = op.tile_assignment.shape;
      out.devices = op.tile_assignment.values;
      return out;
    case sharding_type::partial: {
      static_vector<std::int64_t, max_array_rank> dims = op.group_assignment.shape;
      const std::size_t group_size = op.replication_groups.empty() ? 1 : op.replication_groups[0].size();
      dims.push_back(static_cast<std::int64_t>(group_size));
      std::vector<int> devices;
      devices.reserve(op.group_assignment.values.size() * group_size);
      for (int g : op.group_assignment.values)
        for (int d : op.replication_groups[static_cast<std::size_t>(g)]) devices.push_back(d);
      return partial_tile(dims, std::move(devices));
    }
    case sharding_type::manual:
      out.type = xla_sharding::kind::manual;
      return out;
    default:
      return out;
  }
}

/// Text formats: V1 lists devices; V2 writes an iota form when the devices
/// are a transposed iota (else it falls back to the list, as XLA does).
enum class hlo_format : std::uint8_t { v1, v2 };

/// A transposed-iota description of a device list: devices ==
/// iota(N).reshape(reshape_dims).transpose(perm), flattened.
struct iota_form {
  static_vector<std::int64_t, max_array_rank> reshape_dims{};
  static_vector<int, max_array_rank> perm{};
  bool valid = false;
};

/// Finds the canonical iota form of `devices` (adjacent dims merged, no
/// size-1 dims), if there is one. Greedy maximal strided runs from the
/// innermost dim recover the coalesced layout; the result is then verified.
constexpr iota_form find_iota(std::span<const int> devices) {
  iota_form out;
  const std::int64_t n = static_cast<std::int64_t>(devices.size());
  if (n == 0 || devices[0] != 0) return out;
  struct dim {
    std::int64_t size, stride;
  };
  static_vector<dim, max_array_rank> dims;  // innermost first
  std::int64_t block = 1;
  while (block < n) {
    const std::int64_t stride = devices[static_cast<std::size_t>(block)];
    if (stride <= 0 || dims.full()) return out;
    std::int64_t k = 1;
    while (k * block < n && devices[static_cast<std::size_t>(k * block)] == k * stride) ++k;
    if (n % (block * k) != 0) return out;
    dims.push_back({k, stride});
    block *= k;
  }
  // Verify every element: device(i) = sum over dims of digit * stride.
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t rest = i, v = 0;
    for (const dim& d : dims) {
      v += (rest % d.size) * d.stride;
      rest /= d.size;
    }
    if (v != devices[static_cast<std::size_t>(i)]) return out;
  }
  // Compact: sorted by stride, each stride is the product of the smaller sizes.
  static_vector<int, max_array_rank> order;  // dims indices sorted by stride descending
  for (std::size_t i = 0; i < dims.size(); ++i) order.push_back(static_cast<int>(i));
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return dims[static_cast<std::size_t>(a)].stride > dims[static_cast<std::size_t>(b)].stride;
  });
  std::int64_t expect = 1;
  for (std::size_t i = order.size(); i-- > 0;) {
    const dim& d = dims[static_cast<std::size_t>(order[i])];
    if (d.stride != expect) return out;
    expect *= d.size;
  }
  for (int o : order) out.reshape_dims.push_back(dims[static_cast<std::size_t>(o)].size);
  // Output dims run outermost first: dims reversed. perm[j] = position of
  // output dim j in reshape_dims.
  for (std::size_t j = dims.size(); j-- > 0;)
    for (std::size_t p = 0; p < order.size(); ++p)
      if (order[p] == static_cast<int>(j)) out.perm.push_back(static_cast<int>(p));
  if (out.reshape_dims.empty()) out.reshape_dims.push_back(1);
  out.valid = true;
  return out;
}

/// XLA's text for a sharding.
constexpr text_builder hlo_text(const xla_sharding& s, hlo_format fmt = hlo_format::v1) {
  text_builder t;
  switch (s.type) {
    case xla_sharding::kind::replicated:
      t << "{replicated}";
      return t;
    case xla_sharding::kind::manual:
      t << "{manual}";
      return t;
    case xla_sharding::kind::maximal:
      t << "{maximal device=" << s.device << '}';
      return t;
    case xla_sharding::kind::tiled:
      break;
  }
  t << "{devices=[";
  t.join(s.tile_dims, ",");
  t << ']';
  const iota_form iota = fmt == hlo_format::v2 ? find_iota(s.devices) : iota_form{};
  if (iota.valid) {
    t << "<=[";
    t.join(iota.reshape_dims, ",");
    t << ']';
    bool identity = true;
    for (std::size_t i = 0; i < iota.perm.size(); ++i) identity = identity && iota.perm[i] == static_cast<int>(i);
    if (!identity) {
      t << "T(";
      t.join(iota.perm, ",");
      t << ')';
    }
  } else {
    t.join(s.devices, ",");
  }
  if (s.last_tile_dim_replicate) t << " last_tile_dim_replicate";
  t << '}';
  return t;
}

namespace detail {
constexpr bool read_int_list(cursor& c, char close, static_vector<std::int64_t, max_array_rank>& out) {
  c.skip_space();
  while (true) {
    c.skip_space();
    std::int64_t v = 0;
    if (out.full() || !c.integer(v, max_mesh_devices)) return false;
    out.push_back(v);
    c.skip_space();
    if (c.eat(close)) return true;
    if (!c.eat(',')) return false;
  }
}
constexpr diagnostic hlo_invalid(std::string_view why) {
  diagnostic d;
  d.code = errc::hlo_invalid;
  d.detail.assign(why);
  return d;
}
}  // namespace detail

namespace detail {

/// How a part of HLO sharding text read: fine, a syntax error at the
/// cursor, or invalid text (the diagnostic set).
enum class hlo_read { ok, syntax, invalid };

constexpr hlo_read reject_hlo(diagnostic& d, std::string_view why) {
  d = hlo_invalid(why);
  return hlo_read::invalid;
}

/// "[reshape dims] T(perm)" after "<=": the iota device list of `count`
/// devices, reshaped and transposed (the transpose optional).
constexpr hlo_read read_iota_devices(cursor& c, std::int64_t count, xla_sharding& s, diagnostic& d) {
  c.skip_space();
  if (!c.eat('[')) return hlo_read::syntax;
  static_vector<std::int64_t, max_array_rank> reshape;
  if (!read_int_list(c, ']', reshape)) return hlo_read::syntax;
  std::int64_t n = 1;
  // Stops multiplying once past max_mesh_devices (each d is at most that),
  // so the product never overflows; a product that large never matches.
  for (std::int64_t r : reshape) n = n > max_mesh_devices ? n : n * r;
  if (n != count) return reject_hlo(d, "iota reshape dims do not multiply to the tile size");
  static_vector<std::int64_t, max_array_rank> perm;
  c.skip_space();
  if (c.eat('T')) {
    c.skip_space();
    if (!c.eat('(')) return hlo_read::syntax;
    if (!read_int_list(c, ')', perm)) return hlo_read::syntax;
    bool seen[max_array_rank]{};
    bool ok = perm.size() == reshape.size();
    for (std::int64_t p : perm) {
      ok = ok && p < static_cast<std::int64_t>(reshape.size()) && !seen[p];
      if (ok) seen[p] = true;
    }
    if (!ok) return reject_hlo(d, "transpose is not a permutation of the iota dims");
  } else {
    for (std::size_t i = 0; i < reshape.size(); ++i) perm.push_back(static_cast<std::int64_t>(i));
  }
  int_array iota;
  iota.shape = reshape;
  iota.values.assign(static_cast<std::size_t>(count), 0);
  for (std::size_t i = 0; i < iota.values.size(); ++i) iota.values[i] = static_cast<int>(i);
  static_vector<int, max_array_rank> p32;
  for (std::int64_t p : perm) p32.push_back(static_cast<int>(p));
  s.devices = transpose(iota, std::span<const int>(p32.begin(), p32.end())).values;
  return hlo_read::ok;
}

/// "d0,d1,...": exactly `count` distinct device ids.
constexpr hlo_read read_device_list(cursor& c, std::int64_t count, xla_sharding& s, diagnostic& d) {
  while (true) {
    c.skip_space();
    std::int64_t id = 0;
    if (!c.integer(id, max_mesh_devices)) return hlo_read::syntax;
    if (static_cast<std::int64_t>(s.devices.size()) == count)
      return reject_hlo(d, "more devices than the tile dims hold");
    s.devices.push_back(static_cast<int>(id));
    c.skip_space();
    if (!c.eat(',')) break;
  }
  if (static_cast<std::int64_t>(s.devices.size()) != count)
    return reject_hlo(d, "fewer devices than the tile dims hold");
  std::vector<int> sorted = s.devices;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) return reject_hlo(d, "a device appears twice");
  return hlo_read::ok;
}

/// "=[tile dims]" then the devices (an iota "<=..." or a list), then an
/// optional last_tile_dim_replicate: the text after "devices".
constexpr hlo_read read_tiled(cursor& c, xla_sharding& s, diagnostic& d) {
  s.type = xla_sharding::kind::tiled;
  c.skip_space();
  if (!c.eat('=')) return hlo_read::syntax;
  c.skip_space();
  if (!c.eat('[')) return hlo_read::syntax;
  if (!read_int_list(c, ']', s.tile_dims)) return hlo_read::syntax;
  std::int64_t count = 1;
  for (std::int64_t t : s.tile_dims) {
    count *= t;
    if (count > max_mesh_devices) return reject_hlo(d, "too many devices");
  }
  if (count == 0) return reject_hlo(d, "a tile dim is 0");
  c.skip_space();
  const hlo_read r = c.eat("<=") ? read_iota_devices(c, count, s, d) : read_device_list(c, count, s, d);
  if (r != hlo_read::ok) return r;
  c.skip_space();
  if (c.eat("last_tile_dim_replicate")) s.last_tile_dim_replicate = true;
  return hlo_read::ok;
}

/// "device=N" after "maximal".
constexpr hlo_read read_maximal(cursor& c, xla_sharding& s) {
  s.type = xla_sharding::kind::maximal;
  c.skip_space();
  if (!c.eat("device")) return hlo_read::syntax;
  c.skip_space();
  if (!c.eat('=')) return hlo_read::syntax;
  c.skip_space();
  std::int64_t dev = 0;
  if (!c.integer(dev, max_mesh_devices)) return hlo_read::syntax;
  s.device = static_cast<int>(dev);
  return hlo_read::ok;
}

}  // namespace detail

/// Parses V1 and V2 text into XLA's normal form. Syntax errors name the
/// column and character; inconsistent text (device count != tile product,
/// repeated devices, a bad transpose) is hlo_invalid.
constexpr checked<xla_sharding> parse_hlo(std::string_view text) {
  checked<xla_sharding> out;
  detail::cursor c{text};
  xla_sharding& s = out.value;
  const detail::hlo_read r = [&] {
    using enum detail::hlo_read;
    c.skip_space();
    if (!c.eat('{')) return syntax;
    c.skip_space();
    detail::hlo_read body = ok;
    if (c.eat("replicated")) {
    } else if (c.eat("manual")) {
      s.type = xla_sharding::kind::manual;
    } else if (c.eat("maximal")) {
      body = detail::read_maximal(c, s);
    } else if (c.eat("devices")) {
      body = detail::read_tiled(c, s, out.diag);
    } else {
      return syntax;
    }
    if (body != ok) return body;
    c.skip_space();
    if (!c.eat('}')) return syntax;
    c.skip_space();
    return c.at_end() ? ok : syntax;
  }();
  if (r == detail::hlo_read::syntax) out.diag = detail::syntax_error(errc::hlo_syntax, text, c.pos);
  if (r != detail::hlo_read::ok) return out;
  if (s.last_tile_dim_replicate) s = partial_tile(s.tile_dims, std::move(s.devices));
  return out;
}

/// Run-time: parse or throw xshard::error.
inline xla_sharding parse_hlo_or_throw(std::string_view text) { return parse_hlo(text).get(text); }

/// Run-time face of hlo_sharding<M, S>(): XLA's text for a mesh and spec.
inline std::string hlo_sharding_text(const runtime_mesh& m, std::string_view spec_text,
                                     hlo_format fmt = hlo_format::v1) {
  return hlo_text(to_xla(get_op_sharding(m, spec_text)), fmt).str();
}

}  // namespace xshard
