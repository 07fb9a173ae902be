// xshard/sharding/spec.hpp - partition specs: parsing, printing, resolving.
//
//   spec<"data, None">            dim 0 split over `data`, dim 1 replicated
//   spec<"(data, model), None">   dim 0 split over data (major) then model
//   spec<"0, None">               mesh axes may be given by index
//   spec<"">                      a scalar (rank 0)
//
// Grammar (whitespace anywhere between tokens is ignored):
//   spec  := '' | entry (',' entry)*
//   entry := 'None' | axis | '(' axis (',' axis)* ')'
//   axis  := name | index
// A one-element tuple "(data)" means the same as "data" and is stored so.
// Checks against a mesh (resolve_spec), in torch_xla's order: unknown names,
// indices out of range, an axis used twice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "../core/diagnostics.hpp"
#include "../core/error.hpp"
#include "../core/fixed_string.hpp"
#include "../core/static_vector.hpp"
#include "../mesh/axes.hpp"

namespace xshard {

inline constexpr std::size_t max_spec_rank = 16;

/// A mesh axis as written in a spec: by name, or by index (index >= 0).
struct axis_ref {
  axis_name name{};
  std::int64_t index = -1;
  constexpr bool by_index() const { return index >= 0; }
  friend constexpr bool operator==(const axis_ref&, const axis_ref&) = default;
};

/// One spec entry: None (no axes), one axis, or a tuple of axes.
struct spec_entry {
  static_vector<axis_ref, max_mesh_axes> axes{};
  constexpr bool is_none() const { return axes.empty(); }
  constexpr bool is_tuple() const { return axes.size() > 1; }
  friend constexpr bool operator==(const spec_entry&, const spec_entry&) = default;
};

struct partition_spec {
  static_vector<spec_entry, max_spec_rank> entries{};
  constexpr std::size_t rank() const { return entries.size(); }
  friend constexpr bool operator==(const partition_spec&, const partition_spec&) = default;
};

namespace detail {
/// Reads an axis name or index; a name longer than max_axis_name is
/// reported as such (`too_long` set), anything else unreadable as syntax.
constexpr bool read_axis_ref(cursor& c, axis_ref& out, bool& too_long) {
  const std::string_view name = c.name();
  if (!name.empty()) {
    too_long = name.size() > max_axis_name;
    if (name == "None" || too_long) return false;
    out.name.assign(name);
    return true;
  }
  return c.integer(out.index, max_mesh_devices);
}
}  // namespace detail

/// Parses spec text. Reports the column and character of a syntax error.
constexpr checked<partition_spec> parse_spec(std::string_view text) {
  checked<partition_spec> out;
  detail::cursor c{text};
  auto fail = [&](errc code, std::size_t pos) {
    out.diag = detail::syntax_error(code, text, pos);
    return out;
  };
  auto name_too_long = [&](std::size_t pos) {
    detail::cursor n{text, pos};
    out.diag.code = errc::axis_name_too_long;
    out.diag.name.assign(n.name().substr(0, max_axis_name));
    return out;
  };
  c.skip_space();
  if (c.at_end()) return out;  // rank 0
  while (true) {
    c.skip_space();
    spec_entry entry;
    const std::size_t entry_pos = c.pos;
    if (c.eat('(')) {
      while (true) {
        c.skip_space();
        if (c.peek() == '(') return fail(errc::nested_tuple, c.pos);
        if (c.peek() == ')' && entry.axes.empty()) return fail(errc::empty_tuple, entry_pos);
        const std::size_t axis_pos = c.pos;
        axis_ref ref;
        bool too_long = false;
        if (!detail::read_axis_ref(c, ref, too_long))
          return too_long ? name_too_long(axis_pos) : fail(errc::spec_syntax, axis_pos);
        if (entry.axes.full()) {
          out.diag.code = errc::too_many_axes;
          out.diag.a = static_cast<std::int64_t>(max_mesh_axes) + 1;
          out.diag.b = static_cast<std::int64_t>(max_mesh_axes);
          return out;
        }
        entry.axes.push_back(ref);
        c.skip_space();
        if (c.eat(')')) break;
        if (!c.eat(',')) return fail(errc::spec_syntax, c.pos);
      }
    } else {
      const std::size_t save = c.pos;
      if (c.name() != "None") {
        c.pos = save;
        axis_ref ref;
        bool too_long = false;
        if (!detail::read_axis_ref(c, ref, too_long))
          return too_long ? name_too_long(save) : fail(errc::spec_syntax, save);
        entry.axes.push_back(ref);
      }
    }
    if (out.value.entries.full()) {
      out.diag.code = errc::spec_too_long;
      out.diag.a = static_cast<std::int64_t>(max_spec_rank) + 1;
      out.diag.b = static_cast<std::int64_t>(max_spec_rank);
      return out;
    }
    out.value.entries.push_back(entry);
    c.skip_space();
    if (c.at_end()) break;
    if (!c.eat(',')) return fail(errc::spec_syntax, c.pos);
  }
  return out;
}

/// "data, None", "(data, model), 0": prints back what parse_spec reads.
constexpr text_builder spec_text(const partition_spec& s) {
  text_builder t;
  auto put = [&](const axis_ref& a) {
    if (a.by_index())
      t << a.index;
    else
      t << a.name.view();
  };
  for (std::size_t i = 0; i < s.rank(); ++i) {
    if (i) t << ", ";
    const spec_entry& e = s.entries[i];
    if (e.is_none()) {
      t << "None";
    } else if (e.is_tuple()) {
      t << '(';
      for (std::size_t j = 0; j < e.axes.size(); ++j) {
        if (j) t << ", ";
        put(e.axes[j]);
      }
      t << ')';
    } else {
      put(e.axes[0]);
    }
  }
  return t;
}

/// A spec with every axis turned into the mesh-axis index it names.
struct resolved_spec {
  static_vector<axis_list, max_spec_rank> dims{};
  constexpr std::size_t rank() const { return dims.size(); }
  friend constexpr bool operator==(const resolved_spec&, const resolved_spec&) = default;
};

/// The inverse of resolve_spec: each mesh axis by its name, by its index
/// when the axis is unnamed (what spec_text then prints: "data, None, (x, y)").
constexpr partition_spec unresolve_spec(const resolved_spec& s, const mesh_axes& axes) {
  partition_spec out;
  for (const axis_list& dim : s.dims) {
    spec_entry e;
    for (const mesh_axis_t ax : dim) {
      axis_ref r;
      const mesh_axis& m = axes[static_cast<std::size_t>(ax)];
      if (m.name.empty())
        r.index = static_cast<std::int64_t>(ax);
      else
        r.name = m.name;
      e.axes.push_back(r);
    }
    out.entries.push_back(e);
  }
  return out;
}

/// Resolves names and indices against the mesh axes; checks that every axis
/// exists and is used at most once.
constexpr checked<resolved_spec> resolve_spec(const partition_spec& s, const mesh_axes& axes) {
  checked<resolved_spec> out;
  // Names first (torch_xla translates the names before checking anything).
  for (const spec_entry& e : s.entries) {
    axis_list dim;
    for (const axis_ref& a : e.axes) {
      if (a.by_index()) {  // an index out of range is reported below, before it is used
        dim.push_back(static_cast<mesh_axis_t>(a.index >= 0 && a.index < std::int64_t{max_mesh_axes} ? a.index : 0));
        continue;
      }
      const int idx = find_axis(axes, a.name.view());
      if (idx < 0) {
        out.diag.code = errc::unknown_axis_name;
        out.diag.name = a.name;
        out.diag.detail.assign(axis_names_text(axes).view());
        return out;
      }
      dim.push_back(static_cast<mesh_axis_t>(idx));
    }
    out.value.dims.push_back(dim);
  }
  for (const spec_entry& e : s.entries)
    for (const axis_ref& a : e.axes)
      if (a.by_index() && a.index >= static_cast<std::int64_t>(axes.size())) {
        out.diag.code = errc::axis_index_out_of_range;
        out.diag.a = a.index;
        out.diag.b = static_cast<std::int64_t>(axes.size());
        return out;
      }
  int uses[max_mesh_axes]{};
  for (std::size_t i = 0; i < s.rank(); ++i)
    for (std::size_t j = 0; j < s.entries[i].axes.size(); ++j) {
      const int idx = out.value.dims[i][j];
      if (++uses[idx] > 1) {
        const axis_ref& a = s.entries[i].axes[j];
        out.diag.code = errc::axis_used_twice;
        if (!axes[static_cast<std::size_t>(idx)].name.empty())
          out.diag.name = axes[static_cast<std::size_t>(idx)].name;
        else
          out.diag.name.assign((text_builder{} << a.index).view());
        return out;
      }
    }
  return out;
}

/// A partition spec whose text is part of its type. A malformed spec is a
/// compile error naming the column and character.
template <fixed_string Text>
struct spec {
 private:
  static constexpr checked<partition_spec> parsed_ = parse_spec(Text.view());
  static_assert(raise<parsed_.diag>());

 public:
  static constexpr fixed_string text = Text;
  static constexpr partition_spec value = parsed_.value;
  static constexpr std::size_t rank() { return value.rank(); }
};

/// Specs compare by meaning of their text: whitespace does not matter.
template <fixed_string A, fixed_string B>
constexpr bool operator==(spec<A>, spec<B>) {
  return spec<A>::value == spec<B>::value;
}

template <class T>
inline constexpr bool is_spec_v = false;
template <fixed_string Text>
inline constexpr bool is_spec_v<spec<Text>> = true;
template <class T>
concept Spec = is_spec_v<T>;

/// Run-time parse; throws xshard::error naming the column and character.
inline partition_spec parse_spec_or_throw(std::string_view text) { return parse_spec(text).get(text); }

}  // namespace xshard
