// xshard/core/error.hpp - one vocabulary of errors for both faces.
//
// Every validating function of the engine is constexpr and returns a
// `diagnostic` instead of throwing. The run-time API turns a failed diagnostic
// into `xshard::error` with `describe()`; the typed API turns it into a
// compile error by instantiating a diagnostic template (see
// core/diagnostics.hpp) whose arguments name the offender. The words are the
// same in both: they come from the same diagnostic.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "fixed_string.hpp"
#include "text.hpp"

namespace xshard {

/// Thrown by every run-time entry point on bad input.
class error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// What went wrong. Grouped by the text or object being checked.
enum class errc : std::uint8_t {
  ok = 0,
  // mesh text and mesh values
  mesh_syntax,             // column, ch
  mesh_empty,              //
  axis_name_too_long,      // name
  bad_axis_name,           // name
  axis_names_mismatch,     // a = names, b = axes
  too_many_axes,           // a = count, b = capacity
  bad_axis_size,           // name, a = size
  duplicate_axis_name,     // name
  device_count_mismatch,   // a = devices given, b = product of axis sizes
  duplicate_device_id,     // a = id
  device_id_out_of_range,  // a = id, b = mesh size
  // partition spec text and its resolution against a mesh
  spec_syntax,              // column, ch
  nested_tuple,             // column
  empty_tuple,              // column
  spec_too_long,            // a = entries, b = capacity
  unknown_axis_name,        // name, detail = the mesh's axis names
  axis_index_out_of_range,  // a = index, b = mesh rank
  axis_used_twice,          // name (or the index as text)
  spec_rank_mismatch,       // a = spec rank, b = tensor rank
  uneven_shard,             // a = dim, b = extent, column = tiles
  bad_extent,               // a = dim, b = extent
  // HLO sharding text
  hlo_syntax,   // column, ch
  hlo_invalid,  // detail
  // Shardy (sdy dialect) text
  sdy_syntax,       // column, ch
  sdy_unsupported,  // column, ch, detail = the construct
  sdy_invalid,      // column, detail
  // hybrid meshes and topology
  topology,  // detail
  // einsum equations and operands
  einsum_syntax,           // column, ch
  einsum_ellipsis,         // column ('.' not part of "...")
  einsum_two_ellipses,     // column
  einsum_output_unknown,   // column, ch (output letter in no input)
  einsum_output_twice,     // column, ch
  einsum_output_ellipsis,  // column (ellipsis in output but in no input)
  einsum_too_many,         // a = count, b = capacity
  einsum_operand_count,    // a = subscripts, b = operands
  einsum_rank,             // column = operand, a = subscript rank, b = tensor rank
  einsum_extent,           // ch = letter (or '.'), a = one extent, b = the other
  einsum_diagonal,         // column = operand, ch = letter, a, b = the two extents
};

/// The result of a check: `ok()` or what is wrong and where.
/// Structural, so it can be a template argument of a diagnostic template.
struct diagnostic {
  errc code = errc::ok;
  int column = 0;            // 1-based column in the text being parsed, or a count
  char ch = 0;               // the offending character ('\0' for end of text)
  static_string<32> name{};  // the offending name
  std::int64_t a = 0;
  std::int64_t b = 0;
  static_string<160> detail{};  // extra context (e.g. the mesh's axis names)

  constexpr bool ok() const { return code == errc::ok; }
};

namespace detail {
constexpr diagnostic syntax_error(errc code, std::string_view text, std::size_t pos) {
  diagnostic d;
  d.code = code;
  d.column = static_cast<int>(pos) + 1;
  d.ch = pos < text.size() ? text[pos] : '\0';
  return d;
}
constexpr void append_char(text_builder& t, char c) {
  if (c == '\0')
    t << "end of text";
  else
    t << '\'' << c << '\'';
}
}  // namespace detail

/// The human-readable sentence for a diagnostic. `subject` is the text that
/// was being read (a mesh, a spec, an HLO string), quoted in the message.
constexpr text_builder describe_text(const diagnostic& d, std::string_view subject = {}) {
  text_builder t;
  auto quoted = [&] {
    if (!subject.empty()) t << " in \"" << subject << '"';
  };
  switch (d.code) {
    case errc::ok:
      t << "no error";
      break;
    case errc::mesh_syntax:
      t << "malformed mesh text: unexpected ";
      detail::append_char(t, d.ch);
      t << " at column " << d.column;
      quoted();
      t << " (expected \"name=size, ...\")";
      break;
    case errc::mesh_empty:
      t << "a mesh needs at least one axis";
      break;
    case errc::axis_name_too_long:
      t << "axis name '" << d.name.view() << "' is longer than " << static_cast<int>(d.name.capacity())
        << " characters";
      break;
    case errc::bad_axis_name:
      t << "invalid axis name '" << d.name.view() << "' (a letter or '_' then letters, digits or '_'; not None)";
      break;
    case errc::axis_names_mismatch:
      t << d.a << " axis names given for " << d.b << " mesh axes";
      break;
    case errc::too_many_axes:
      t << "too many mesh axes: " << d.a << " (at most " << d.b << ")";
      break;
    case errc::bad_axis_size:
      t << "mesh axis '" << d.name.view() << "' has size " << d.a << "; sizes must be >= 1";
      break;
    case errc::duplicate_axis_name:
      t << "duplicate axis name '" << d.name.view() << "' in mesh";
      break;
    case errc::device_count_mismatch:
      t << "device count " << d.a << " does not equal the product of the axis sizes " << d.b;
      break;
    case errc::duplicate_device_id:
      t << "duplicate device id " << d.a << " in mesh";
      break;
    case errc::device_id_out_of_range:
      t << "device id " << d.a << " is out of range for a mesh of " << d.b << " devices";
      break;
    case errc::spec_syntax:
      t << "malformed partition spec: unexpected ";
      detail::append_char(t, d.ch);
      t << " at column " << d.column;
      quoted();
      t << " (entries are an axis name, an axis index, a tuple (a, b) or None)";
      break;
    case errc::nested_tuple:
      t << "partition spec cannot contain nested tuples (column " << d.column << ")";
      quoted();
      break;
    case errc::empty_tuple:
      t << "empty tuple in partition spec (column " << d.column << ")";
      quoted();
      break;
    case errc::spec_too_long:
      t << "partition spec has " << d.a << " entries (at most " << d.b << ")";
      break;
    case errc::unknown_axis_name:
      t << "unknown axis name '" << d.name.view() << "' in partition spec; the mesh's axes are " << d.detail.view();
      break;
    case errc::axis_index_out_of_range:
      t << "axis index " << d.a << " in partition spec is out of range for a mesh of " << d.b << " axes";
      break;
    case errc::axis_used_twice:
      t << "mesh axis '" << d.name.view() << "' appears more than once in partition spec";
      break;
    case errc::spec_rank_mismatch:
      t << "partition spec length (" << d.a << ") does not equal the tensor rank (" << d.b << ")";
      break;
    case errc::uneven_shard:
      t << "dim " << d.a << " of extent " << d.b << " does not divide evenly into " << d.column << " shards";
      break;
    case errc::bad_extent:
      t << "dim " << d.a << " has extent " << d.b << "; extents must be >= 0";
      break;
    case errc::hlo_syntax:
      t << "malformed HLO sharding: unexpected ";
      detail::append_char(t, d.ch);
      t << " at column " << d.column;
      quoted();
      break;
    case errc::hlo_invalid:
      t << "invalid HLO sharding: " << d.detail.view();
      quoted();
      break;
    case errc::sdy_syntax:
      t << "malformed Shardy text: unexpected ";
      detail::append_char(t, d.ch);
      t << " at column " << d.column;
      quoted();
      t << " (expected sdy.mesh @name = <[\"a\"=2, ...]> lines, then #sdy.sharding<@name, [{\"a\"}, {}]>)";
      break;
    case errc::sdy_unsupported:
      t << "unsupported Shardy construct, " << d.detail.view() << ": ";
      detail::append_char(t, d.ch);
      t << " at column " << d.column;
      quoted();
      break;
    case errc::sdy_invalid:
      t << "invalid Shardy text at column " << d.column << ": " << d.detail.view();
      quoted();
      break;
    case errc::topology:
      t << d.detail.view();
      break;
    case errc::einsum_syntax:
      t << "malformed einsum equation: unexpected ";
      detail::append_char(t, d.ch);
      t << " at column " << d.column;
      quoted();
      t << " (letters a-z A-Z, '...', ',' and '->')";
      break;
    case errc::einsum_ellipsis:
      t << "einsum: '.' at column " << d.column << " is not part of an ellipsis '...'";
      quoted();
      break;
    case errc::einsum_two_ellipses:
      t << "einsum: a second ellipsis in one term at column " << d.column;
      quoted();
      break;
    case errc::einsum_output_unknown:
      t << "einsum: output subscript '" << d.ch << "' at column " << d.column << " appears in no input";
      quoted();
      break;
    case errc::einsum_output_twice:
      t << "einsum: output subscript '" << d.ch << "' at column " << d.column << " appears more than once";
      quoted();
      break;
    case errc::einsum_output_ellipsis:
      t << "einsum: ellipsis in the output at column " << d.column << " but in no input";
      quoted();
      break;
    case errc::einsum_too_many:
      t << "einsum: " << d.a << " terms or subscripts (at most " << d.b << ")";
      break;
    case errc::einsum_operand_count:
      t << "einsum: the equation has " << d.a << " input subscripts but " << d.b << " operands were given";
      quoted();
      break;
    case errc::einsum_rank:
      t << "einsum: operand " << d.column << " has rank " << d.b << " but its subscripts name " << d.a << " dims";
      quoted();
      break;
    case errc::einsum_extent:
      if (d.ch == '.')
        t << "einsum: ellipsis dims do not broadcast: extents " << d.a << " and " << d.b;
      else
        t << "einsum: subscript '" << d.ch << "' has extents " << d.a << " and " << d.b << " (they must match or be 1)";
      quoted();
      break;
    case errc::einsum_diagonal:
      t << "einsum: subscript '" << d.ch << "' is repeated in operand " << d.column << " with different extents " << d.a
        << " and " << d.b;
      quoted();
      break;
  }
  return t;
}

inline std::string describe(const diagnostic& d, std::string_view subject = {}) {
  return "xshard: " + describe_text(d, subject).str();
}

/// The run-time face: throw `xshard::error` if `d` is not ok.
inline void throw_if_error(const diagnostic& d, std::string_view subject = {}) {
  if (!d.ok()) throw error(describe(d, subject));
}

/// Result of a parse or check: a value or a diagnostic.
template <class T>
struct checked {
  T value{};
  diagnostic diag{};
  constexpr bool ok() const { return diag.ok(); }
  T get(std::string_view subject = {}) const& {
    throw_if_error(diag, subject);
    return value;
  }
  T get(std::string_view subject = {}) && {
    throw_if_error(diag, subject);
    return std::move(value);
  }
};

}  // namespace xshard
