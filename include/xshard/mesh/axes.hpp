// xshard/mesh/axes.hpp - mesh axes: parsing "data=4, model=2" and validating
// a mesh's device ids. constexpr, so the typed mesh and runtime_mesh share it.
//
//   parse_mesh_axes("data=4, model=2")  -> {{"data", 4}, {"model", 2}}
//   parse_mesh_axes("4, 2")             -> two unnamed axes (specs use indices)
//
// Grammar (whitespace anywhere between tokens):
//   mesh  := axis (',' axis)*
//   axis  := name '=' size | size          (all named or all unnamed)
//   name  := [A-Za-z_][A-Za-z0-9_]*        ("None" is reserved)
//   size  := [0-9]+                        (>= 1)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "../core/error.hpp"
#include "../core/fixed_string.hpp"
#include "../core/static_vector.hpp"

namespace xshard {

inline constexpr std::size_t max_mesh_axes = 8;
/// A mesh-axis index (in [0, max_mesh_axes)) as specs, layouts and plans
/// store it: one byte, so the compile-time plans that hold many of them stay
/// small (a sharded einsum plan holds thousands) and cheap to evaluate.
using mesh_axis_t = std::int8_t;
/// The mesh axes of one tensor dim, major to minor.
using axis_list = static_vector<mesh_axis_t, max_mesh_axes>;
inline constexpr std::size_t max_axis_name = 32;
/// Largest device count a mesh may have (keeps products far from overflow).
inline constexpr std::int64_t max_mesh_devices = std::int64_t{1} << 24;

using axis_name = static_string<max_axis_name>;

struct mesh_axis {
  axis_name name{};
  std::int64_t size = 0;
  friend constexpr bool operator==(const mesh_axis&, const mesh_axis&) = default;
};

using mesh_axes = static_vector<mesh_axis, max_mesh_axes>;

namespace detail {

constexpr bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
constexpr bool is_digit(char c) { return c >= '0' && c <= '9'; }
constexpr bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
constexpr bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

/// A tiny cursor over text, shared by the mesh, spec and HLO parsers.
struct cursor {
  std::string_view text;
  std::size_t pos = 0;

  constexpr void skip_space() {
    while (pos < text.size() && is_space(text[pos])) ++pos;
  }
  constexpr bool at_end() const { return pos >= text.size(); }
  constexpr char peek() const { return pos < text.size() ? text[pos] : '\0'; }
  constexpr bool eat(char c) {
    if (peek() != c || at_end()) return false;
    ++pos;
    return true;
  }
  constexpr bool eat(std::string_view word) {
    if (text.substr(pos, word.size()) != word) return false;
    pos += word.size();
    return true;
  }
  constexpr std::string_view name() {
    const std::size_t start = pos;
    if (!is_name_start(peek())) return {};
    while (pos < text.size() && is_name_char(text[pos])) ++pos;
    return text.substr(start, pos - start);
  }
  /// Reads a non-negative decimal integer; false if there is none or it
  /// exceeds `limit` (pos is then left at the first digit for the report).
  constexpr bool integer(std::int64_t& out, std::int64_t limit) {
    const std::size_t start = pos;
    if (!is_digit(peek())) return false;
    std::int64_t v = 0;
    while (pos < text.size() && is_digit(text[pos])) {
      v = v * 10 + (text[pos] - '0');
      if (v > limit) {
        pos = start;
        return false;
      }
      ++pos;
    }
    out = v;
    return true;
  }
};

}  // namespace detail

namespace detail {
/// Appends an axis after the checks every way of building a mesh shares:
/// size in [1, max_mesh_devices], a name not used before, room for it, and
/// a total device count within max_mesh_devices. `product` is the running
/// device count.
constexpr diagnostic append_axis(mesh_axes& axes, const mesh_axis& axis, std::int64_t& product) {
  diagnostic d;
  if (axis.size < 1 || axis.size > max_mesh_devices) {
    d.code = errc::bad_axis_size;
    d.name = axis.name;
    d.a = axis.size;
    return d;
  }
  for (const mesh_axis& other : axes)
    if (!axis.name.empty() && other.name == axis.name) {
      d.code = errc::duplicate_axis_name;
      d.name = axis.name;
      return d;
    }
  if (axes.full()) {
    d.code = errc::too_many_axes;
    d.a = static_cast<std::int64_t>(max_mesh_axes) + 1;
    d.b = static_cast<std::int64_t>(max_mesh_axes);
    return d;
  }
  product *= axis.size;
  if (product > max_mesh_devices) {
    d.code = errc::too_many_devices;
    d.a = product;
    d.b = max_mesh_devices;
    return d;
  }
  axes.push_back(axis);
  return d;
}
}  // namespace detail

/// Parses mesh text. Checks syntax, name rules, sizes >= 1, duplicate names,
/// the axis count and the total device count.
constexpr checked<mesh_axes> parse_mesh_axes(std::string_view text) {
  checked<mesh_axes> out;
  detail::cursor c{text};
  auto fail = [&](errc code) {
    out.diag = detail::syntax_error(code, text, c.pos);
    return out;
  };
  c.skip_space();
  if (c.at_end()) {
    out.diag.code = errc::mesh_empty;
    return out;
  }
  int named = -1;  // unknown until the first axis
  std::int64_t product = 1;
  while (true) {
    c.skip_space();
    mesh_axis axis;
    const std::size_t name_pos = c.pos;
    const std::string_view name = c.name();
    if (!name.empty()) {
      if (named == 0 || name == "None") {
        c.pos = name_pos;
        return fail(errc::mesh_syntax);
      }
      named = 1;
      if (name.size() > max_axis_name) {
        out.diag.code = errc::axis_name_too_long;
        out.diag.name.assign(name.substr(0, max_axis_name));
        return out;
      }
      axis.name.assign(name);
      c.skip_space();
      if (!c.eat('=')) return fail(errc::mesh_syntax);
      c.skip_space();
    } else {
      if (named == 1) return fail(errc::mesh_syntax);
      named = 0;
    }
    if (!c.integer(axis.size, max_mesh_devices)) {
      if (!detail::is_digit(c.peek())) return fail(errc::mesh_syntax);
      axis.size = max_mesh_devices + 1;  // too large to read: report it as a bad size
    }
    out.diag = detail::append_axis(out.value, axis, product);
    if (!out.ok()) return out;
    c.skip_space();
    if (c.at_end()) break;
    if (!c.eat(',')) return fail(errc::mesh_syntax);
  }
  return out;
}

/// Builds axes from sizes and (optional) names, with the same checks as the
/// text parser. torch_xla's Mesh(device_ids, mesh_shape, axis_names) order.
constexpr checked<mesh_axes> make_mesh_axes(std::span<const std::int64_t> sizes,
                                            std::span<const std::string_view> names) {
  checked<mesh_axes> out;
  if (sizes.empty()) {
    out.diag.code = errc::mesh_empty;
    return out;
  }
  if (sizes.size() > max_mesh_axes) {
    out.diag.code = errc::too_many_axes;
    out.diag.a = static_cast<std::int64_t>(sizes.size());
    out.diag.b = static_cast<std::int64_t>(max_mesh_axes);
    return out;
  }
  if (!names.empty() && names.size() != sizes.size()) {
    out.diag.code = errc::axis_names_mismatch;
    out.diag.a = static_cast<std::int64_t>(names.size());
    out.diag.b = static_cast<std::int64_t>(sizes.size());
    return out;
  }
  std::int64_t product = 1;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    mesh_axis axis;
    if (!names.empty()) {
      const std::string_view name = names[i];
      if (name.size() > max_axis_name) {
        out.diag.code = errc::axis_name_too_long;
        out.diag.name.assign(name.substr(0, max_axis_name));
        return out;
      }
      bool valid = !name.empty() && detail::is_name_start(name[0]) && name != "None";
      for (char ch : name) valid = valid && detail::is_name_char(ch);
      if (!valid) {
        out.diag.code = errc::bad_axis_name;
        out.diag.name.assign(name);
        return out;
      }
      axis.name.assign(name);
    }
    axis.size = sizes[i];
    out.diag = detail::append_axis(out.value, axis, product);
    if (!out.ok()) return out;
  }
  return out;
}

constexpr std::int64_t mesh_size(const mesh_axes& axes) {
  std::int64_t n = 1;
  for (const mesh_axis& a : axes) n *= a.size;
  return n;
}

/// Index of the axis called `name`, or -1.
constexpr int find_axis(const mesh_axes& axes, std::string_view name) {
  for (std::size_t i = 0; i < axes.size(); ++i)
    if (!axes[i].name.empty() && axes[i].name == name) return static_cast<int>(i);
  return -1;
}

/// "data, model" (or "0, 1" for unnamed axes): used in messages.
constexpr text_builder axis_names_text(const mesh_axes& axes) {
  text_builder t;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    if (i) t << ", ";
    if (axes[i].name.empty())
      t << i;
    else
      t << axes[i].name.view();
  }
  return t;
}

/// "data=4, model=2": prints back what parse_mesh_axes reads.
constexpr text_builder mesh_text(const mesh_axes& axes) {
  text_builder t;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    if (i) t << ", ";
    if (!axes[i].name.empty()) t << axes[i].name.view() << '=';
    t << axes[i].size;
  }
  return t;
}

/// torch_xla's device-id rules: as many ids as devices, unique, each in
/// [0, size). (torch_xla asserts `d < mesh.size()`; negatives are refused too.)
constexpr diagnostic check_device_ids(const mesh_axes& axes, std::span<const int> ids) {
  diagnostic d;
  const std::int64_t n = mesh_size(axes);
  if (static_cast<std::int64_t>(ids.size()) != n) {
    d.code = errc::device_count_mismatch;
    d.a = static_cast<std::int64_t>(ids.size());
    d.b = n;
    return d;
  }
  std::vector<char> seen(static_cast<std::size_t>(n), 0);  // not vector<bool>: Clang 14 cannot evaluate it
  for (int id : ids) {
    if (id < 0 || id >= n) {
      d.code = errc::device_id_out_of_range;
      d.a = id;
      d.b = n;
      return d;
    }
    if (seen[static_cast<std::size_t>(id)]) {
      d.code = errc::duplicate_device_id;
      d.a = id;
      return d;
    }
    seen[static_cast<std::size_t>(id)] = 1;
  }
  return d;
}

/// What the engine reads of a mesh: its axes and its device ids in row-major
/// order of the axes. Typed meshes and runtime_mesh both hand out one.
struct mesh_ref {
  mesh_axes axes{};
  std::span<const int> device_ids{};
  constexpr std::int64_t size() const { return mesh_size(axes); }
};

}  // namespace xshard
