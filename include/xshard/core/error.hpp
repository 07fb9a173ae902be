// xshard/core/error.hpp - one vocabulary of errors for both faces.
//
// Every validating function of the engine is constexpr and returns a
// `diagnostic` instead of throwing. The run-time API turns a failed diagnostic
// into `xshard::error` with `describe()`; the typed API turns it into a
// compile error by instantiating a diagnostic template (see
// core/diagnostics.hpp) whose arguments name the offender. The words are the
// same in both: they come from the same diagnostic.
//
// The codes are one list, core/errors.def: each row gives the enumerator, its
// compile-time template and fields, and its summary. `errc`, `error_summary`
// and the dispatch of `describe_text` are generated from it here; the
// templates and `raise<D>()` in core/diagnostics.hpp. A new code is one row
// there, its sentence in `detail::error_text` below, and its compile-fail test.
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

/// What went wrong: `ok`, then one enumerator per row of core/errors.def
/// (the list of codes, with their compile-time names and fields), in its order.
enum class errc : std::uint8_t {
  ok = 0,
#define XSHARD_ERROR(code, ...) code,
#include "errors.def"
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

/// The row's summary of a code (core/errors.def): the static_assert text
/// after "xshard: ", and the head of the run-time sentence where it can be.
constexpr std::string_view error_summary(errc code) {
  switch (code) {
    case errc::ok:
      return "no error";
#define XSHARD_ERROR(code, name, parameters, arguments, summary) \
  case errc::code:                                               \
    return summary;
#include "errors.def"
  }
  return {};
}

namespace detail {
/// ` in "subject"`, when there is a subject.
constexpr void put_subject(text_builder& t, std::string_view subject) {
  if (!subject.empty()) t << " in \"" << subject << '"';
}

/// The run-time sentence of each code, one function per row of
/// core/errors.def, named after the code: `describe_text` calls
/// `error_text::<code>(t, d, subject)` for every row. `subject` is the text
/// that was being read, quoted with put_subject.
namespace error_text {
// mesh text and mesh values
/// The syntax errors' shared sentence: "<summary>: unexpected 'c' at column n"
/// and the subject; each adds what it expected.
constexpr void unexpected_at(text_builder& t, errc code, const diagnostic& d, std::string_view subject) {
  t << error_summary(code) << ": unexpected ";
  append_char(t, d.ch);
  t << " at column " << d.column;
  put_subject(t, subject);
}
constexpr void mesh_syntax(text_builder& t, const diagnostic& d, std::string_view subject) {
  unexpected_at(t, errc::mesh_syntax, d, subject);
  t << " (expected \"name=size, ...\")";
}
constexpr void mesh_empty(text_builder& t, const diagnostic&, std::string_view) {
  t << error_summary(errc::mesh_empty);
}
constexpr void axis_name_too_long(text_builder& t, const diagnostic& d, std::string_view) {
  t << "axis name '" << d.name.view() << "' is longer than " << static_cast<int>(d.name.capacity()) << " characters";
}
constexpr void bad_axis_name(text_builder& t, const diagnostic& d, std::string_view) {
  t << error_summary(errc::bad_axis_name) << " '" << d.name.view()
    << "' (a letter or '_' then letters, digits or '_'; not None)";
}
constexpr void axis_names_mismatch(text_builder& t, const diagnostic& d, std::string_view) {
  t << d.a << " axis names given for " << d.b << " mesh axes";
}
constexpr void too_many_axes(text_builder& t, const diagnostic& d, std::string_view) {
  t << error_summary(errc::too_many_axes) << ": " << d.a << " (at most " << d.b << ")";
}
constexpr void too_many_devices(text_builder& t, const diagnostic& d, std::string_view) {
  t << error_summary(errc::too_many_devices) << ": " << d.a << " (at most " << d.b << ")";
}
constexpr void bad_axis_size(text_builder& t, const diagnostic& d, std::string_view) {
  t << "mesh axis '" << d.name.view() << "' has size " << d.a << "; sizes must be >= 1";
}
constexpr void duplicate_axis_name(text_builder& t, const diagnostic& d, std::string_view) {
  t << "duplicate axis name '" << d.name.view() << "' in mesh";
}
constexpr void device_count_mismatch(text_builder& t, const diagnostic& d, std::string_view) {
  t << "device count " << d.a << " does not equal the product of the axis sizes " << d.b;
}
constexpr void duplicate_device_id(text_builder& t, const diagnostic& d, std::string_view) {
  t << "duplicate device id " << d.a << " in mesh";
}
constexpr void device_id_out_of_range(text_builder& t, const diagnostic& d, std::string_view) {
  t << "device id " << d.a << " is out of range for a mesh of " << d.b << " devices";
}
// partition spec text and its resolution against a mesh
constexpr void spec_syntax(text_builder& t, const diagnostic& d, std::string_view subject) {
  unexpected_at(t, errc::spec_syntax, d, subject);
  t << " (entries are an axis name, an axis index, a tuple (a, b) or None)";
}
constexpr void nested_tuple(text_builder& t, const diagnostic& d, std::string_view subject) {
  t << error_summary(errc::nested_tuple) << " (column " << d.column << ")";
  put_subject(t, subject);
}
constexpr void empty_tuple(text_builder& t, const diagnostic& d, std::string_view subject) {
  t << error_summary(errc::empty_tuple) << " (column " << d.column << ")";
  put_subject(t, subject);
}
constexpr void spec_too_long(text_builder& t, const diagnostic& d, std::string_view) {
  t << "partition spec has " << d.a << " entries (at most " << d.b << ")";
}
constexpr void unknown_axis_name(text_builder& t, const diagnostic& d, std::string_view) {
  t << "unknown axis name '" << d.name.view() << "' in partition spec; the mesh's axes are " << d.detail.view();
}
constexpr void axis_index_out_of_range(text_builder& t, const diagnostic& d, std::string_view) {
  t << "axis index " << d.a << " in partition spec is out of range for a mesh of " << d.b << " axes";
}
constexpr void axis_used_twice(text_builder& t, const diagnostic& d, std::string_view) {
  t << "mesh axis '" << d.name.view() << "' appears more than once in partition spec";
}
constexpr void spec_rank_mismatch(text_builder& t, const diagnostic& d, std::string_view) {
  t << "partition spec length (" << d.a << ") does not equal the tensor rank (" << d.b << ")";
}
constexpr void uneven_shard(text_builder& t, const diagnostic& d, std::string_view) {
  t << "dim " << d.a << " of extent " << d.b << " does not divide evenly into " << d.column << " shards";
}
constexpr void bad_extent(text_builder& t, const diagnostic& d, std::string_view) {
  t << "dim " << d.a << " has extent " << d.b << "; extents must be >= 0";
}
// HLO sharding text
constexpr void hlo_syntax(text_builder& t, const diagnostic& d, std::string_view subject) {
  unexpected_at(t, errc::hlo_syntax, d, subject);
}
constexpr void hlo_invalid(text_builder& t, const diagnostic& d, std::string_view subject) {
  t << error_summary(errc::hlo_invalid) << ": " << d.detail.view();
  put_subject(t, subject);
}
// Shardy (sdy dialect) text
constexpr void sdy_syntax(text_builder& t, const diagnostic& d, std::string_view subject) {
  unexpected_at(t, errc::sdy_syntax, d, subject);
  t << " (expected sdy.mesh @name = <[\"a\"=2, ...]> lines, then #sdy.sharding<@name, [{\"a\"}, {}]>)";
}
constexpr void sdy_unsupported(text_builder& t, const diagnostic& d, std::string_view subject) {
  t << error_summary(errc::sdy_unsupported) << ", " << d.detail.view() << ": ";
  append_char(t, d.ch);
  t << " at column " << d.column;
  put_subject(t, subject);
}
constexpr void sdy_invalid(text_builder& t, const diagnostic& d, std::string_view subject) {
  t << error_summary(errc::sdy_invalid) << " at column " << d.column << ": " << d.detail.view();
  put_subject(t, subject);
}
// hybrid meshes and topology: the sentence is the detail
constexpr void topology(text_builder& t, const diagnostic& d, std::string_view) { t << d.detail.view(); }
// einsum equations and operands
constexpr void einsum_syntax(text_builder& t, const diagnostic& d, std::string_view subject) {
  unexpected_at(t, errc::einsum_syntax, d, subject);
  t << " (letters a-z A-Z, '...', ',' and '->')";
}
constexpr void einsum_ellipsis(text_builder& t, const diagnostic& d, std::string_view subject) {
  t << "einsum: '.' at column " << d.column << " is not part of an ellipsis '...'";
  put_subject(t, subject);
}
constexpr void einsum_two_ellipses(text_builder& t, const diagnostic& d, std::string_view subject) {
  t << "einsum: a second ellipsis in one term at column " << d.column;
  put_subject(t, subject);
}
constexpr void einsum_output_unknown(text_builder& t, const diagnostic& d, std::string_view subject) {
  t << "einsum: output subscript '" << d.ch << "' at column " << d.column << " appears in no input";
  put_subject(t, subject);
}
constexpr void einsum_output_twice(text_builder& t, const diagnostic& d, std::string_view subject) {
  t << "einsum: output subscript '" << d.ch << "' at column " << d.column << " appears more than once";
  put_subject(t, subject);
}
constexpr void einsum_output_ellipsis(text_builder& t, const diagnostic& d, std::string_view subject) {
  t << "einsum: ellipsis in the output at column " << d.column << " but in no input";
  put_subject(t, subject);
}
constexpr void einsum_too_many(text_builder& t, const diagnostic& d, std::string_view) {
  t << "einsum: " << d.a << " terms or subscripts (at most " << d.b << ")";
}
constexpr void einsum_operand_count(text_builder& t, const diagnostic& d, std::string_view subject) {
  t << "einsum: the equation has " << d.a << " input subscripts but " << d.b << " operands were given";
  put_subject(t, subject);
}
constexpr void einsum_rank(text_builder& t, const diagnostic& d, std::string_view subject) {
  t << "einsum: operand " << d.column << " has rank " << d.b << " but its subscripts name " << d.a << " dims";
  put_subject(t, subject);
}
constexpr void einsum_extent(text_builder& t, const diagnostic& d, std::string_view subject) {
  if (d.ch == '.')
    t << "einsum: ellipsis dims do not broadcast: extents " << d.a << " and " << d.b;
  else
    t << "einsum: subscript '" << d.ch << "' has extents " << d.a << " and " << d.b << " (they must match or be 1)";
  put_subject(t, subject);
}
constexpr void einsum_diagonal(text_builder& t, const diagnostic& d, std::string_view subject) {
  t << "einsum: subscript '" << d.ch << "' is repeated in operand " << d.column << " with different extents " << d.a
    << " and " << d.b;
  put_subject(t, subject);
}
}  // namespace error_text
}  // namespace detail

/// The human-readable sentence for a diagnostic. `subject` is the text that
/// was being read (a mesh, a spec, an HLO string), quoted in the message.
constexpr text_builder describe_text(const diagnostic& d, std::string_view subject = {}) {
  text_builder t;
  switch (d.code) {
    case errc::ok:
      t << error_summary(errc::ok);
      break;
#define XSHARD_ERROR(code, ...)              \
  case errc::code:                           \
    detail::error_text::code(t, d, subject); \
    break;
#include "errors.def"
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
