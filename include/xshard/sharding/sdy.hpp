// xshard/sharding/sdy.hpp - Shardy text (the MLIR `sdy` dialect JAX uses
// since it moved off GSPMD) for a (mesh, spec): printing and parsing.
//
// Example (compiled in tests/compile/doc_sharding.cpp):
//   using M = xshard::mesh<"data=4, model=2">;
//   static_assert(xshard::sdy_mesh<M>() == R"(sdy.mesh @mesh = <["data"=4, "model"=2]>)");
//   static_assert(xshard::sdy_sharding<M, xshard::spec<"data, None">>() == R"(#sdy.sharding<@mesh, [{"data"}, {}]>)");
//   static_assert(xshard::sdy_sharding<M, xshard::spec<"(data, model)">>() ==
//                 R"(#sdy.sharding<@mesh, [{"data", "model"}]>)");
//   using M2 = xshard::mesh<"x=4", 3, 0, 2, 1>;
//   static_assert(xshard::sdy_sharding_inline<M2, xshard::spec<"x">>() ==
//                 R"(#sdy.sharding<mesh<["x"=4], device_ids=[3, 0, 2, 1]>, [{"x"}]>)");
//
//   auto p = xshard::parse_sdy_or_throw(R"(sdy.mesh @mesh = <["x"=4, "y"=2]>
//                                          #sdy.sharding<@mesh, [{"y", ?}, {}], replicated={"x"}>)");
//   // p.mesh == runtime_mesh("x=4, y=2"), p.spec_text() == "y, None"
//
// Printing (one canonical form, the one Shardy's own printer writes):
//   - a mesh is <["name"=size, ...]>, plus `, device_ids=[...]` only when the
//     order is not 0..n-1; size-1 axes are kept; a mesh of unnamed axes
//     ("4, 2") names them "0", "1", ...;
//   - a spec entry is a closed dim: None -> {}, an axis -> {"a"}, a tuple ->
//     {"a", "b"} (major to minor, as in torch_xla); axes given by index are
//     written by name; unused axes are implicitly replicated (no
//     `replicated=` list: with every dim closed that is the same sharding).
//
// Parsing accepts (whitespace, including newlines, anywhere between tokens):
//   text     := mesh_line* sharding
//   mesh_line:= 'sdy.mesh' '@'symbol '=' mesh
//   sharding := ['sdy.sharding' '='] ['#sdy.sharding'] '<' mesh_ref ',' '[' [dim (',' dim)*] ']'
//               [',' 'replicated' '=' axis_list] [',' 'unreduced' '=' axis_list] '>'
//               (replicated and unreduced each at most once, in either order)
//   mesh_ref := '@'symbol (declared by a mesh_line) | ['#sdy.'] 'mesh' mesh
//   mesh     := '<' '[' [axis (',' axis)*] ']' [',' 'device_ids' '=' '[' id (',' id)* ']'] '>'
//   axis     := '"'name'"' '=' size
//   dim      := '{' '}' | '{' '?' '}' | '{' ref (',' ref)* [',' '?'] '}'
//   axis_list:= '{' [ref (',' ref)*] '}'
//   ref      := '"'name'"'
// parse_sdy_mesh reads one mesh alone: a mesh_line, '#sdy.mesh' mesh,
// 'mesh' mesh or a bare mesh.
// Meaning in xshard's terms:
//   - open dims ({"a", ?}, {?}) are read as their listed axes: a spec has no
//     notion of open or closed, and the printer writes every dim closed;
//   - `replicated={...}` axes are checked (they exist, appear once in the
//     whole sharding) and dropped: unused axes are replicated in xshard;
//   - axis names must be xshard names ([A-Za-z_][A-Za-z0-9_]*, at most 32
//     characters, not None), or exactly "0", "1", ... for a mesh of unnamed
//     axes (whose spec then refers to axes by index);
//   - device_ids: as many as devices, each in [0, n), each once (Shardy's
//     rule); an explicit 0..n-1 is accepted and means the default order.
// Refused with xshard::error naming the column and character, never read
// as something else: sub-axes ("a":(1)2), dim priorities ({"a"}p1), a
// non-empty `unreduced=` (partial sums), a maximal-sharding mesh
// (<[], device_ids=[3]>), an empty mesh (<[]>), escapes in quoted names,
// a reference to a mesh no line declares.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/diagnostics.hpp"
#include "../core/error.hpp"
#include "../core/fixed_string.hpp"
#include "../core/text.hpp"
#include "../mesh/axes.hpp"
#include "../mesh/mesh.hpp"
#include "sharding.hpp"
#include "spec.hpp"

namespace xshard {

namespace detail {

/// An MLIR bare identifier, as Shardy's mesh symbols are: [A-Za-z_][A-Za-z0-9_$.]*.
constexpr bool is_sdy_symbol(std::string_view s) {
  if (s.empty() || !is_name_start(s[0])) return false;
  for (char c : s)
    if (!is_name_char(c) && c != '$' && c != '.') return false;
  return true;
}

constexpr bool is_iota(std::span<const int> ids) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] != static_cast<int>(i)) return false;
  return true;
}

/// "data", or "3" for the unnamed axis 3.
constexpr void sdy_axis_name(text_builder& t, const mesh_axes& axes, std::size_t i) {
  t << '"';
  if (axes[i].name.empty())
    t << i;
  else
    t << axes[i].name.view();
  t << '"';
}

}  // namespace detail

/// <["data"=4, "model"=2]>, with `, device_ids=[...]` when the order is not 0..n-1.
constexpr text_builder sdy_mesh_body(const mesh_ref& m) {
  text_builder t;
  t << "<[";
  for (std::size_t i = 0; i < m.axes.size(); ++i) {
    if (i) t << ", ";
    detail::sdy_axis_name(t, m.axes, i);
    t << '=' << m.axes[i].size;
  }
  t << ']';
  if (!detail::is_iota(m.device_ids)) {
    t << ", device_ids=[";
    t.join(m.device_ids, ", ");
    t << ']';
  }
  t << '>';
  return t;
}

/// sdy.mesh @name = <["data"=4, "model"=2]>   (@pre is_sdy_symbol(name))
constexpr text_builder sdy_mesh_decl(const mesh_ref& m, std::string_view name = "mesh") {
  text_builder t;
  t << "sdy.mesh @" << name << " = " << sdy_mesh_body(m).view();
  return t;
}

/// #sdy.sharding<@name, [{"data"}, {}]> for a spec resolved on `m`; with an
/// empty `mesh_name` the mesh is written inline: #sdy.sharding<mesh<[...]>, [...]>.
constexpr text_builder sdy_sharding_attr(const mesh_ref& m, const resolved_spec& s,
                                         std::string_view mesh_name = "mesh") {
  text_builder t;
  t << "#sdy.sharding<";
  if (mesh_name.empty())
    t << "mesh" << sdy_mesh_body(m).view();
  else
    t << '@' << mesh_name;
  t << ", [";
  for (std::size_t d = 0; d < s.rank(); ++d) {
    if (d) t << ", ";
    t << '{';
    for (std::size_t k = 0; k < s.dims[d].size(); ++k) {
      if (k) t << ", ";
      detail::sdy_axis_name(t, m.axes, static_cast<std::size_t>(s.dims[d][k]));
    }
    t << '}';
  }
  t << "]>";
  return t;
}

// ---------------------------------------------------------------------------
// Parsing.

/// A mesh read from Shardy text.
struct sdy_mesh_value {
  std::string_view name{};        ///< its @symbol (a view into the parsed text); empty when inline or bare
  mesh_axes axes{};               ///< unnamed when the text names the axes "0", "1", ...
  std::vector<int> device_ids{};  ///< row-major; 0..n-1 when the text gives none
  constexpr mesh_ref ref() const { return {axes, device_ids}; }
  friend constexpr bool operator==(const sdy_mesh_value&, const sdy_mesh_value&) = default;
};

/// A sharding read from Shardy text: the mesh it is bound to and the spec.
struct sdy_sharding_value {
  sdy_mesh_value mesh{};
  partition_spec spec{};  ///< axes by name (by index on a mesh of unnamed axes); resolves on `mesh`
  friend constexpr bool operator==(const sdy_sharding_value&, const sdy_sharding_value&) = default;
};

namespace detail {

class sdy_parser {
 public:
  constexpr explicit sdy_parser(std::string_view text) : c_{text} {}

  diagnostic diag{};

  /// text := mesh_line* sharding
  constexpr bool sharding_text(sdy_sharding_value& out) {
    std::vector<sdy_mesh_value> declared;
    while (true) {
      c_.skip_space();
      const std::size_t at = c_.pos;
      if (!c_.eat("sdy.mesh")) break;
      sdy_mesh_value m;
      if (!mesh_line(m)) return false;
      for (const sdy_mesh_value& other : declared)
        if (other.name == m.name) return invalid(at, "a second sdy.mesh line declares the same mesh name");
      declared.push_back(std::move(m));
    }
    c_.skip_space();
    if (c_.eat("sdy.sharding") && !expect('=')) return false;
    c_.skip_space();
    (void)c_.eat("#sdy.sharding");
    if (!expect('<')) return false;
    c_.skip_space();
    const std::size_t ref_at = c_.pos;
    if (c_.eat('@')) {
      std::string_view name;
      if (!symbol(name)) return false;
      const sdy_mesh_value* found = nullptr;
      for (const sdy_mesh_value& m : declared)
        if (m.name == name) found = &m;
      if (!found) {
        text_builder why;
        why << "the sharding refers to mesh @" << name << ", which no sdy.mesh line before it declares";
        return invalid(ref_at, why.view());
      }
      out.mesh = *found;
    } else {
      (void)c_.eat("#sdy.");
      if (!word("mesh") || !mesh(out.mesh)) return false;
    }
    if (!expect(',') || !dims(out)) return false;
    bool seen_replicated = false, seen_unreduced = false;
    while (true) {
      c_.skip_space();
      if (c_.eat('>')) break;
      if (!c_.eat(',')) return syntax();
      c_.skip_space();
      const std::size_t list_at = c_.pos;
      if (!seen_replicated && c_.eat("replicated")) {
        seen_replicated = true;
        if (!expect('=') || !axis_list(out, false)) return false;
      } else if (!seen_unreduced && c_.eat("unreduced")) {
        seen_unreduced = true;
        if (!expect('=') || !axis_list(out, true)) return false;
      } else {
        c_.pos = list_at;
        return syntax();
      }
    }
    return at_end();
  }

  /// One mesh alone: a mesh line, #sdy.mesh<...>, mesh<...> or <...>.
  constexpr bool mesh_text(sdy_mesh_value& out) {
    c_.skip_space();
    if (c_.eat("sdy.mesh")) {
      if (!mesh_line(out)) return false;
    } else {
      if (c_.eat("#sdy.")) {
        if (!word("mesh")) return false;
      } else {
        (void)c_.eat("mesh");
      }
      if (!mesh(out)) return false;
    }
    return at_end();
  }

 private:
  cursor c_;
  int used_[max_mesh_axes]{};  // uses of each mesh axis in the sharding

  constexpr bool syntax() {
    diag = syntax_error(errc::sdy_syntax, c_.text, c_.pos);
    return false;
  }
  constexpr bool unsupported(std::size_t at, std::string_view what) {
    diag = syntax_error(errc::sdy_unsupported, c_.text, at);
    diag.detail.assign(what);
    return false;
  }
  constexpr bool invalid(std::size_t at, std::string_view why) {
    diag = syntax_error(errc::sdy_invalid, c_.text, at);
    diag.detail.assign(why);
    return false;
  }
  constexpr bool expect(char ch) {
    c_.skip_space();
    return c_.eat(ch) || syntax();
  }
  constexpr bool word(std::string_view w) {
    c_.skip_space();
    return c_.eat(w) || syntax();
  }
  constexpr bool at_end() {
    c_.skip_space();
    return c_.at_end() || syntax();
  }
  /// A bare identifier after '@'.
  constexpr bool symbol(std::string_view& out) {
    const std::size_t start = c_.pos;
    if (!is_name_start(c_.peek())) return syntax();
    while (!c_.at_end() && (is_name_char(c_.peek()) || c_.peek() == '$' || c_.peek() == '.')) ++c_.pos;
    out = c_.text.substr(start, c_.pos - start);
    return true;
  }
  /// "name": the characters between the quotes (no escapes).
  constexpr bool quoted(std::string_view& out) {
    c_.skip_space();
    if (!c_.eat('"')) return syntax();
    const std::size_t start = c_.pos;
    while (!c_.at_end() && c_.peek() != '"') {
      if (c_.peek() == '\\') return unsupported(c_.pos, "escapes in quoted names");
      if (c_.peek() == '\n') return syntax();
      ++c_.pos;
    }
    if (c_.at_end()) return syntax();
    out = c_.text.substr(start, c_.pos - start);
    ++c_.pos;  // the closing quote
    return true;
  }

  /// 'sdy.mesh' already read: '@'symbol '=' mesh
  constexpr bool mesh_line(sdy_mesh_value& out) {
    if (!expect('@') || !symbol(out.name) || !expect('=')) return false;
    return mesh(out);
  }

  /// A quoted axis name of a mesh whose axes so far are `axes`: "0", "1",
  /// ... in order for unnamed axes, never mixed with names (`named`: -1
  /// until the first axis, then 1 for names, 0 for indices).
  constexpr bool mesh_axis_name(const mesh_axes& axes, int& named, mesh_axis& axis) {
    c_.skip_space();
    const std::size_t name_at = c_.pos + 1;
    std::string_view name;
    if (!quoted(name)) return false;
    const bool unnamed = !name.empty() && is_digit(name[0]);
    if (named == (unnamed ? 1 : 0))
      return invalid(name_at, "the axis names \"0\", \"1\", ... (unnamed axes) cannot be mixed with other names");
    named = unnamed ? 0 : 1;
    if (unnamed) {
      text_builder index;
      index << axes.size();
      if (name == index.view()) return true;
      diag.code = errc::bad_axis_name;
      diag.name.assign(name.substr(0, max_axis_name));
      return false;
    }
    if (name.size() > max_axis_name) {
      diag.code = errc::axis_name_too_long;
      diag.name.assign(name.substr(0, max_axis_name));
      return false;
    }
    bool valid = !name.empty() && is_name_start(name[0]) && name != "None";
    for (char ch : name) valid = valid && is_name_char(ch);
    if (!valid) {
      diag.code = errc::bad_axis_name;
      diag.name.assign(name);
      return false;
    }
    axis.name.assign(name);
    return true;
  }

  /// The axes after '[' up to ']': '"name"' '=' size, comma separated.
  constexpr bool mesh_axis_list(mesh_axes& axes) {
    std::int64_t product = 1;
    int named = -1;
    c_.skip_space();
    if (c_.eat(']')) return true;
    while (true) {
      mesh_axis axis;
      if (!mesh_axis_name(axes, named, axis) || !expect('=')) return false;
      c_.skip_space();
      if (!c_.integer(axis.size, max_mesh_devices)) {
        if (!is_digit(c_.peek())) return syntax();
        axis.size = max_mesh_devices + 1;  // too large to read: a bad size
      }
      diag = append_axis(axes, axis, product);
      if (!diag.ok()) return false;
      c_.skip_space();
      if (c_.eat(']')) return true;
      if (!c_.eat(',')) return syntax();
    }
  }

  /// The ids after "device_ids = [" up to ']'.
  constexpr bool mesh_device_ids(std::vector<int>& ids) {
    while (true) {
      c_.skip_space();
      std::int64_t id = 0;
      const std::size_t id_at = c_.pos;
      if (!c_.integer(id, max_mesh_devices)) {
        if (!is_digit(c_.peek())) return syntax();
        return invalid(id_at, "device id too large");
      }
      ids.push_back(static_cast<int>(id));
      c_.skip_space();
      if (c_.eat(']')) return true;
      if (!c_.eat(',')) return syntax();
    }
  }

  /// '<' '[' axes ']' [',' 'device_ids' '=' '[' ids ']'] '>'
  constexpr bool mesh(sdy_mesh_value& out) {
    c_.skip_space();
    const std::size_t mesh_at = c_.pos;
    if (!expect('<') || !expect('[') || !mesh_axis_list(out.axes)) return false;
    c_.skip_space();
    const bool have_ids = c_.eat(',');
    if (have_ids && (!word("device_ids") || !expect('=') || !expect('[') || !mesh_device_ids(out.device_ids)))
      return false;
    if (!expect('>')) return false;
    if (out.axes.empty()) {
      if (have_ids) return unsupported(mesh_at, "maximal-sharding meshes (device_ids without axes)");
      diag.code = errc::mesh_empty;
      return false;
    }
    if (!have_ids) {
      out.device_ids.assign(static_cast<std::size_t>(mesh_size(out.axes)), 0);
      for (std::size_t i = 0; i < out.device_ids.size(); ++i) out.device_ids[i] = static_cast<int>(i);
    }
    diag = check_device_ids(out.axes, out.device_ids);
    return diag.ok();
  }

  /// A quoted axis reference of the sharding's mesh: its axis index, used
  /// once in the whole sharding; sub-axes refused.
  constexpr bool axis_ref_of(const sdy_sharding_value& v, int& index) {
    c_.skip_space();
    std::string_view name;
    if (!quoted(name)) return false;
    const mesh_axes& axes = v.mesh.axes;
    index = -1;
    if (axes[0].name.empty()) {  // unnamed axes are "0", "1", ...
      for (std::size_t i = 0; i < axes.size(); ++i) {
        text_builder t;
        t << i;
        if (t.view() == name) index = static_cast<int>(i);
      }
    } else {
      index = find_axis(axes, name);
    }
    if (index < 0) {
      diag.code = errc::unknown_axis_name;
      diag.name.assign(name.substr(0, max_axis_name));
      diag.detail.assign(axis_names_text(axes).view());
      return false;
    }
    c_.skip_space();
    if (c_.peek() == ':') return unsupported(c_.pos, "sub-axes (\"a\":(m)k)");
    if (++used_[index] > 1) {
      diag.code = errc::axis_used_twice;
      diag.name.assign(name);
      return false;
    }
    return true;
  }

  /// '[' [dim (',' dim)*] ']'
  constexpr bool dims(sdy_sharding_value& v) {
    if (!expect('[')) return false;
    c_.skip_space();
    if (c_.eat(']')) return true;
    const bool by_index = v.mesh.axes[0].name.empty();
    while (true) {
      if (!expect('{')) return false;
      spec_entry entry;
      c_.skip_space();
      if (!c_.eat('}')) {
        while (true) {
          c_.skip_space();
          if (c_.eat('?')) {  // open: read as its listed axes
            if (!expect('}')) return false;
            break;
          }
          int index = 0;
          if (!axis_ref_of(v, index)) return false;
          axis_ref ref;
          if (by_index)
            ref.index = index;
          else
            ref.name = v.mesh.axes[static_cast<std::size_t>(index)].name;
          entry.axes.push_back(ref);  // never full: each of <= max_mesh_axes axes is used once
          c_.skip_space();
          if (c_.eat('}')) break;
          if (!c_.eat(',')) return syntax();
        }
      }
      c_.skip_space();
      if (c_.peek() == 'p') return unsupported(c_.pos, "dimension priorities ({\"a\"}p1)");
      if (v.spec.entries.full()) {
        diag.code = errc::spec_too_long;
        diag.a = static_cast<std::int64_t>(max_spec_rank) + 1;
        diag.b = static_cast<std::int64_t>(max_spec_rank);
        return false;
      }
      v.spec.entries.push_back(entry);
      if (c_.eat(']')) return true;
      if (!c_.eat(',')) return syntax();
    }
  }

  /// '{' [ref (',' ref)*] '}' after replicated= (checked, dropped) or
  /// unreduced= (only the empty list).
  constexpr bool axis_list(const sdy_sharding_value& v, bool unreduced) {
    if (!expect('{')) return false;
    c_.skip_space();
    if (c_.eat('}')) return true;
    if (unreduced) return unsupported(c_.pos, "unreduced axes (partial sums)");
    while (true) {
      int index = 0;
      if (!axis_ref_of(v, index)) return false;
      c_.skip_space();
      if (c_.eat('}')) return true;
      if (!c_.eat(',')) return syntax();
    }
  }
};

}  // namespace detail

/// Parses Shardy text: sdy.mesh lines, then one sharding (see the header
/// comment for the grammar). Errors name the column and character.
constexpr checked<sdy_sharding_value> parse_sdy(std::string_view text) {
  checked<sdy_sharding_value> out;
  detail::sdy_parser p(text);
  if (!p.sharding_text(out.value)) out.diag = p.diag;
  return out;
}

/// Parses one Shardy mesh: `sdy.mesh @m = <...>`, `#sdy.mesh<...>`, `mesh<...>` or `<...>`.
constexpr checked<sdy_mesh_value> parse_sdy_mesh(std::string_view text) {
  checked<sdy_mesh_value> out;
  detail::sdy_parser p(text);
  if (!p.mesh_text(out.value)) out.diag = p.diag;
  return out;
}

// ---------------------------------------------------------------------------
// Typed face: compile-time text, like hlo_sharding<M, S>().

/// sdy.mesh @Name = <["data"=4, "model"=2]> (device_ids when M's order is not 0..n-1).
template <Mesh M, fixed_string Name = "mesh">
consteval auto sdy_mesh() {
  static_assert(detail::is_sdy_symbol(Name.view()),
                "xshard: a Shardy mesh name is an MLIR identifier: [A-Za-z_][A-Za-z0-9_$.]*");
  return to_fixed_string<[] { return sdy_mesh_decl(M::ref(), Name.view()); }>();
}

/// #sdy.sharding<@Name, [{"data"}, {}]>: the sharding of (M, S) bound to the
/// mesh line sdy_mesh<M, Name>() declares. A spec that does not fit M is a
/// compile error naming the offender.
template <Mesh M, Spec S, fixed_string Name = "mesh">
consteval auto sdy_sharding() {
  static_assert(detail::is_sdy_symbol(Name.view()),
                "xshard: a Shardy mesh name is an MLIR identifier: [A-Za-z_][A-Za-z0-9_$.]*");
  static_assert(detail::check_spec_on_mesh<M, S>());
  if constexpr (!detail::op_diag<M, S>.ok()) {
    return fixed_string<0>{};
  } else {
    return to_fixed_string<[] {
      return sdy_sharding_attr(M::ref(), resolve_spec(S::value, M::axes).value, Name.view());
    }>();
  }
}

/// The same with the mesh inline: #sdy.sharding<mesh<["x"=4]>, [{"x"}]>.
template <Mesh M, Spec S>
consteval auto sdy_sharding_inline() {
  static_assert(detail::check_spec_on_mesh<M, S>());
  if constexpr (!detail::op_diag<M, S>.ok()) {
    return fixed_string<0>{};
  } else {
    return to_fixed_string<[] { return sdy_sharding_attr(M::ref(), resolve_spec(S::value, M::axes).value, ""); }>();
  }
}

// ---------------------------------------------------------------------------
// Run-time face: the same functions; errors throw xshard::error.

namespace detail {
inline void check_sdy_symbol(std::string_view name) {
  if (!is_sdy_symbol(name))
    throw error("xshard: Shardy mesh name \"" + std::string(name) +
                "\" is not an MLIR identifier ([A-Za-z_][A-Za-z0-9_$.]*)");
}
}  // namespace detail

/// Run-time twin of sdy_mesh<M, Name>().
inline std::string sdy_mesh_text(const runtime_mesh& m, std::string_view name = "mesh") {
  detail::check_sdy_symbol(name);
  return sdy_mesh_decl(m.ref(), name).str();
}

/// Run-time twin of sdy_sharding<M, S, Name>().
inline std::string sdy_sharding_text(const runtime_mesh& m, const partition_spec& spec,
                                     std::string_view mesh_name = "mesh") {
  detail::check_sdy_symbol(mesh_name);
  return sdy_sharding_attr(m.ref(), resolve_spec(spec, m.shape()).get(), mesh_name).str();
}
inline std::string sdy_sharding_text(const runtime_mesh& m, std::string_view spec_text,
                                     std::string_view mesh_name = "mesh") {
  detail::check_sdy_symbol(mesh_name);
  return sdy_sharding_attr(m.ref(), resolve_spec(parse_spec_or_throw(spec_text), m.shape()).get(spec_text), mesh_name)
      .str();
}

/// Run-time twin of sdy_sharding_inline<M, S>().
inline std::string sdy_sharding_inline_text(const runtime_mesh& m, std::string_view spec_text) {
  return sdy_sharding_attr(m.ref(), resolve_spec(parse_spec_or_throw(spec_text), m.shape()).get(spec_text), "").str();
}

/// What parse_sdy_or_throw reads: a mesh and a spec, ready for the engine
/// (get_op_sharding(p.mesh, p.spec), hlo_sharding_text(p.mesh, p.spec_text()), ...).
struct sdy_parsed {
  runtime_mesh mesh;
  partition_spec spec;
  std::string mesh_name;  ///< the @symbol the sharding used; empty for an inline mesh
  /// The spec as xshard text: "data, None", "(x, y)", "0, None" on unnamed axes.
  std::string spec_text() const { return xshard::spec_text(spec).str(); }
};

namespace detail {
inline runtime_mesh to_runtime_mesh(const sdy_mesh_value& m) {
  return runtime_mesh(mesh_text(m.axes).str(), m.device_ids);
}
}  // namespace detail

/// Reads Shardy text (mesh lines then a sharding); throws xshard::error
/// naming the column and character.
inline sdy_parsed parse_sdy_or_throw(std::string_view text) {
  const sdy_sharding_value v = parse_sdy(text).get(text);
  return {detail::to_runtime_mesh(v.mesh), v.spec, std::string(v.mesh.name)};
}

/// Reads one Shardy mesh; throws xshard::error.
inline runtime_mesh parse_sdy_mesh_or_throw(std::string_view text) {
  return detail::to_runtime_mesh(parse_sdy_mesh(text).get(text));
}

}  // namespace xshard
