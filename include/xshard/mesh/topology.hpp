// xshard/mesh/topology.hpp - device topology: what HybridMesh needs to know
// about each device (its id, its torus coordinates, its slice), read from and
// written to a small JSON file.
//
//   [{"id": 0, "coords": [0, 0, 0], "slice_index": 0},
//    {"id": 1, "coords": [1, 0, 0], "slice_index": 0}, ...]
//
// Grammar (RFC 8259 JSON restricted to this shape; whitespace is space, tab,
// LF or CR anywhere between tokens; a leading UTF-8 byte-order mark is skipped):
//   document := '[' (device (',' device)*)? ']'
//   device   := '{' (member (',' member)*)? '}'
//   member   := "id" ':' int | "coords" ':' '[' int ',' int ',' int ']'
//             | "slice_index" ':' int             (keys in any order, each once)
//   int      := '-'? ('0' | [1-9][0-9]*)          (no '+', fraction or exponent)
// Keys are JSON strings (escapes allowed). Rules on values: id, every coord and
// slice_index are non-negative and at most INT_MAX; ids are unique; either
// every device has a slice_index or none has.
//
// The parser is iterative (the document has a fixed nesting depth, so there
// is no recursion), reads each byte at most a bounded number of times and
// never past the end, and reports the first problem as one sentence that names
// the offender: the column and character for syntax, the key for key
// problems, the device (index in the list and id) for bad values. It is
// constexpr, so a topology written in the source can be checked at compile
// time; the run-time entry points throw `xshard::error`.
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>  // EISDIR: fopen "opens" a directory on Linux; the read fails
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>  // std::fopen, std::fread: no <fstream> or <filesystem> for one read
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/text.hpp"

namespace xshard {

/// One device as the runtime describes it (torch_xla's
/// `global_runtime_device_attributes()` entries, reduced to what HybridMesh reads).
struct device_attributes {
  int id = 0;                        // device ordinal; the number placed in meshes
  std::array<int, 3> coords{};       // position in the slice's physical torus
  std::optional<int> slice_index{};  // which slice (multislice only)

  friend constexpr bool operator==(const device_attributes&, const device_attributes&) = default;
};

namespace detail {

/// A value or the sentence saying why there is none. Constexpr-friendly
/// (text_builder rather than std::string, which Clang 14 cannot evaluate).
template <class T>
struct topology_result {
  T value{};
  text_builder message{};
  bool failed = false;

  constexpr bool ok() const { return !failed; }
};

/// Throws the run-time face of a failed check. Deliberately not constexpr:
/// reaching it during constant evaluation is a compile error.
[[noreturn]] inline void raise_topology_error(const text_builder& message) { throw error("xshard: " + message.str()); }

constexpr bool json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
constexpr bool json_digit(char c) { return c >= '0' && c <= '9'; }

/// Appends `c` so that any byte is readable in a message: 'x' for printable
/// ASCII, '\x0a' style for everything else.
constexpr void put_quoted_char(text_builder& t, char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f && c != '\'' && c != '\\') {
    t << '\'' << c << '\'';
    return;
  }
  constexpr std::string_view hex = "0123456789abcdef";
  if (c == '\'' || c == '\\') {
    t << "'\\" << c << '\'';
    return;
  }
  t << "'\\x" << hex[u >> 4] << hex[u & 15] << '\'';
}

/// Appends a key read from the document, double-quoted, escaping what is not
/// printable and cutting very long keys short.
constexpr void put_quoted_key(text_builder& t, std::string_view key) {
  constexpr std::size_t limit = 40;
  constexpr std::string_view hex = "0123456789abcdef";
  t << '"';
  for (std::size_t i = 0; i < key.size() && i < limit; ++i) {
    const char c = key[i];
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\')
      t << '\\' << c;
    else if (u >= 0x20 && u < 0x7f)
      t << c;
    else
      t << "\\x" << hex[u >> 4] << hex[u & 15];
  }
  if (key.size() > limit) t << "...";
  t << '"';
}

/// "device at index 2 (id 7)", or without the id when it is not known.
constexpr void put_device(text_builder& t, std::size_t index, std::optional<std::int64_t> id) {
  t << "device at index " << index;
  if (id) t << " (id " << *id << ')';
}

constexpr void put_coords(text_builder& t, const std::array<int, 3>& c) {
  t << '(' << c[0] << ", " << c[1] << ", " << c[2] << ')';
}

/// Value rules for one device; the parser, to_json and the hybrid layout all
/// apply them. Returns false and writes the message on the first violation.
constexpr bool check_device(const device_attributes& d, std::size_t index, text_builder& err) {
  auto head = [&] {
    err << "invalid topology: ";
    put_device(err, index, d.id);
    err << ": ";
  };
  if (d.id < 0) {
    head();
    err << "\"id\" must be a non-negative integer, got " << d.id;
    return false;
  }
  for (int c : d.coords)
    if (c < 0) {
      head();
      err << "\"coords\" must be 3 non-negative integers, got ";
      put_coords(err, d.coords);
      return false;
    }
  if (d.slice_index && *d.slice_index < 0) {
    head();
    err << "\"slice_index\" must be a non-negative integer, got " << *d.slice_index;
    return false;
  }
  return true;
}

/// Rules across devices: slice_index on all or none, unique ids.
constexpr bool check_device_set(std::span<const device_attributes> devices, text_builder& err) {
  for (std::size_t i = 1; i < devices.size(); ++i) {
    if (devices[i].slice_index.has_value() != devices[0].slice_index.has_value()) {
      const std::size_t with = devices[0].slice_index ? 0 : i;
      const std::size_t without = devices[0].slice_index ? i : 0;
      err << "invalid topology: \"slice_index\" must be given for every device or for none, but ";
      put_device(err, with, devices[with].id);
      err << " has one and ";
      put_device(err, without, devices[without].id);
      err << " does not";
      return false;
    }
  }
  std::vector<std::pair<int, std::size_t>> ids;
  ids.reserve(devices.size());
  for (std::size_t i = 0; i < devices.size(); ++i) ids.emplace_back(devices[i].id, i);
  std::sort(ids.begin(), ids.end());
  for (std::size_t i = 1; i < ids.size(); ++i)
    if (ids[i].first == ids[i - 1].first) {
      err << "invalid topology: duplicate device id " << ids[i].first << " (devices at index " << ids[i - 1].second
          << " and " << ids[i].second << ')';
      return false;
    }
  return true;
}

/// The reader. One object per parse; `fail_*` record the first error and
/// every step returns false from then on.
class topology_reader {
 public:
  constexpr explicit topology_reader(std::string_view text) : text_(text) {}

  constexpr topology_result<std::vector<device_attributes>> run() {
    topology_result<std::vector<device_attributes>> out;
    if (!read_document(out.value) || !check_device_set(out.value, err_)) {
      out.value.clear();
      out.message = std::move(err_);
      out.failed = true;
    }
    return out;
  }

 private:
  enum class key : std::uint8_t { id, coords, slice_index };

  struct pending_device {  // a device while its object is being read
    std::optional<std::int64_t> id{};
    std::optional<std::int64_t> slice_index{};
    std::array<std::int64_t, 3> coords{};
    std::size_t coord_count = 0;
    bool has_coords = false;
  };

  std::string_view text_;
  std::size_t pos_ = 0;
  text_builder err_{};

  constexpr char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  constexpr bool at_end() const { return pos_ >= text_.size(); }
  constexpr void skip_space() {
    while (pos_ < text_.size() && json_space(text_[pos_])) ++pos_;
  }

  /// "column 17", or "line 3, column 5" once the document spans lines.
  constexpr void put_position(std::size_t at) {
    std::size_t line = 1;
    std::size_t line_start = 0;
    for (std::size_t i = 0; i < at && i < text_.size(); ++i)
      if (text_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    bool multi_line = line > 1;
    for (std::size_t i = at; !multi_line && i < text_.size(); ++i) multi_line = text_[i] == '\n';
    if (multi_line) err_ << "line " << line << ", ";
    err_ << "column " << (at - line_start + 1);
  }

  /// "malformed topology: unexpected 'x' at column 17 (expected ...)"
  constexpr bool fail_syntax(std::string_view expected) {
    err_ << "malformed topology: unexpected ";
    if (at_end())
      err_ << "end of text";
    else
      put_quoted_char(err_, text_[pos_]);
    err_ << " at ";
    put_position(pos_);
    if (!expected.empty()) err_ << " (expected " << expected << ')';
    return false;
  }

  constexpr bool expect(char c, std::string_view expected) {
    if (at_end() || text_[pos_] != c) return fail_syntax(expected);
    ++pos_;
    return true;
  }

  constexpr bool read_document(std::vector<device_attributes>& devices) {
    if (text_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;  // UTF-8 byte-order mark
    skip_space();
    if (!expect('[', "'[' starting the list of devices")) return false;
    skip_space();
    if (peek() == ']' && !at_end()) {
      ++pos_;
    } else {
      while (true) {
        device_attributes d;
        if (!read_device(devices.size(), d)) return false;
        devices.push_back(d);
        skip_space();
        if (at_end() || (peek() != ',' && peek() != ']')) return fail_syntax("',' or ']' after a device");
        if (text_[pos_++] == ']') break;
        skip_space();
      }
    }
    skip_space();
    if (!at_end()) return fail_syntax("nothing after the closing ']'");
    return true;
  }

  constexpr bool read_device(std::size_t index, device_attributes& out) {
    if (!expect('{', "'{' starting a device")) return false;
    pending_device p;
    skip_space();
    if (peek() == '}' && !at_end()) {
      ++pos_;
    } else {
      while (true) {
        if (!read_member(index, p)) return false;
        skip_space();
        if (at_end() || (peek() != ',' && peek() != '}')) return fail_syntax("',' or '}' after a value");
        if (text_[pos_++] == '}') break;
        skip_space();
      }
    }
    return finish_device(index, p, out);
  }

  constexpr bool read_member(std::size_t index, pending_device& p) {
    const std::size_t key_pos = pos_;
    std::vector<char> name;
    if (!read_string(name, "'\"' starting a key")) return false;
    const std::string_view k(name.data(), name.size());
    key which = key::id;
    if (k == "id") {
      which = key::id;
    } else if (k == "coords") {
      which = key::coords;
    } else if (k == "slice_index") {
      which = key::slice_index;
    } else {
      err_ << "invalid topology: unknown key ";
      put_quoted_key(err_, k);
      err_ << " in ";
      put_device(err_, index, p.id);
      err_ << " at ";
      put_position(key_pos);
      err_ << R"( (the keys are "id", "coords" and "slice_index"))";
      return false;
    }
    const bool seen = (which == key::id && p.id) || (which == key::coords && p.has_coords) ||
                      (which == key::slice_index && p.slice_index);
    if (seen) {
      err_ << "invalid topology: duplicate key ";
      put_quoted_key(err_, k);
      err_ << " in ";
      put_device(err_, index, p.id);
      err_ << " at ";
      put_position(key_pos);
      return false;
    }
    skip_space();
    if (!expect(':', "':' after a key")) return false;
    skip_space();
    switch (which) {
      case key::id: {
        std::int64_t v = 0;
        if (!read_integer(v, "an integer for \"id\"")) return false;
        p.id = v;
        return true;
      }
      case key::slice_index: {
        std::int64_t v = 0;
        if (!read_integer(v, "an integer for \"slice_index\"")) return false;
        p.slice_index = v;
        return true;
      }
      case key::coords:
        return read_coords(p);
    }
    return false;
  }

  constexpr bool read_coords(pending_device& p) {
    if (!expect('[', "'[' starting \"coords\"")) return false;
    p.has_coords = true;
    skip_space();
    if (peek() == ']' && !at_end()) {
      ++pos_;
      return true;
    }
    while (true) {
      std::int64_t v = 0;
      if (!read_integer(v, "an integer in \"coords\"")) return false;
      if (p.coord_count < p.coords.size()) p.coords[p.coord_count] = v;
      ++p.coord_count;
      skip_space();
      if (at_end() || (peek() != ',' && peek() != ']')) return fail_syntax("',' or ']' in \"coords\"");
      if (text_[pos_++] == ']') return true;
      skip_space();
    }
  }

  /// A JSON integer whose magnitude fits in an int.
  constexpr bool read_integer(std::int64_t& out, std::string_view what) {
    const std::size_t start = pos_;
    bool negative = false;
    if (peek() == '-' && !at_end()) {
      negative = true;
      ++pos_;
    }
    if (at_end() || !json_digit(text_[pos_])) return fail_syntax(what);
    std::int64_t v = 0;
    if (text_[pos_] == '0') {
      ++pos_;
      if (!at_end() && json_digit(text_[pos_])) return fail_syntax("no leading zeros in an integer");
    } else {
      while (!at_end() && json_digit(text_[pos_])) {
        v = v * 10 + (text_[pos_] - '0');
        if (v > INT_MAX) {
          err_ << "invalid topology: the integer at ";
          put_position(start);
          err_ << " is out of range (its magnitude must be at most " << INT_MAX << ')';
          return false;
        }
        ++pos_;
      }
    }
    if (!at_end() && text_[pos_] == '.') return fail_syntax("an integer; fractions are not allowed");
    if (!at_end() && (text_[pos_] == 'e' || text_[pos_] == 'E'))
      return fail_syntax("an integer; exponents are not allowed");
    out = negative ? -v : v;
    return true;
  }

  /// A JSON string; `out` receives the decoded bytes (\u escapes as UTF-8).
  constexpr bool read_string(std::vector<char>& out, std::string_view what) {
    if (!expect('"', what)) return false;
    while (true) {
      if (at_end()) return fail_syntax("'\"' closing the key");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) return fail_syntax("a printable character (escape control characters)");
      if (c != '\\') {
        out.push_back(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (at_end()) return fail_syntax("an escape character after '\\'");
      const char e = text_[pos_];
      switch (e) {
        case '"':
          out.push_back('"');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '/':
          out.push_back('/');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          unsigned cp = 0;
          for (int i = 0; i < 4; ++i) {
            ++pos_;
            const char h = peek();
            unsigned digit = 16;  // not a hex digit (also at the end of the text, where peek() is '\0')
            if (h >= '0' && h <= '9')
              digit = static_cast<unsigned>(h - '0');
            else if (h >= 'a' && h <= 'f')
              digit = static_cast<unsigned>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F')
              digit = static_cast<unsigned>(h - 'A' + 10);
            if (digit == 16) return fail_syntax(R"(4 hex digits after \u)");
            cp = cp * 16 + digit;
          }
          if (cp < 0x80) {
            out.push_back(static_cast<char>(cp));
          } else if (cp < 0x800) {
            out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
            out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
          } else {
            out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
            out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
            out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
          }
          break;
        }
        default:
          return fail_syntax(R"(one of " \ / b f n r t u after '\')");
      }
      ++pos_;
    }
  }

  constexpr bool finish_device(std::size_t index, const pending_device& p, device_attributes& out) {
    auto missing = [&](std::string_view k) {
      err_ << "invalid topology: ";
      put_device(err_, index, p.id);
      err_ << " is missing the key \"" << k << '"';
      return false;
    };
    if (!p.id) return missing("id");
    if (!p.has_coords) return missing("coords");
    if (p.coord_count != 3) {
      err_ << "invalid topology: ";
      put_device(err_, index, p.id);
      err_ << ": \"coords\" must be 3 non-negative integers, got " << p.coord_count << " value"
           << (p.coord_count == 1 ? "" : "s");
      return false;
    }
    // Every integer was range-checked by integer(): the casts are exact.
    out.id = static_cast<int>(*p.id);
    for (std::size_t i = 0; i < 3; ++i) out.coords[i] = static_cast<int>(p.coords[i]);
    if (p.slice_index) out.slice_index = static_cast<int>(*p.slice_index);
    return check_device(out, index, err_);
  }
};

}  // namespace detail

/// Parses a topology document; the result or the first problem.
constexpr detail::topology_result<std::vector<device_attributes>> try_parse_topology(std::string_view json) {
  return detail::topology_reader(json).run();
}

/// Parses a topology document (see the grammar at the top of this header).
/// @throws xshard::error naming the column and character, the key or the device.
constexpr std::vector<device_attributes> parse_topology(std::string_view json) {
  auto r = try_parse_topology(json);
  if (r.failed) detail::raise_topology_error(r.message);
  return std::move(r.value);
}

/// Reads and parses a topology file; every error message names `path`.
inline std::vector<device_attributes> read_topology_file(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) throw error("xshard: cannot open topology file '" + path + "'");
  std::string text;
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  const int read_errno = errno;
  std::fclose(file);
  if (failed && read_errno == EISDIR)
    throw error("xshard: cannot read topology file '" + path + "': it is a directory");
  if (failed) throw error("xshard: cannot read topology file '" + path + "'");
  auto r = try_parse_topology(text);
  if (r.failed) throw error("xshard: topology file '" + path + "': " + r.message.str());
  return std::move(r.value);
}

/// Writes devices as a topology document that parse_topology reads back
/// equal (one device per line).
/// @throws xshard::error if the devices break a rule the parser enforces
/// (negative values, duplicate ids, slice_index on some devices only).
inline std::string to_json(std::span<const device_attributes> devices) {
  text_builder err;
  for (std::size_t i = 0; i < devices.size(); ++i)
    if (!detail::check_device(devices[i], i, err)) detail::raise_topology_error(err);
  if (!detail::check_device_set(devices, err)) detail::raise_topology_error(err);
  if (devices.empty()) return "[]";
  text_builder t;
  t << "[\n";
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const device_attributes& d = devices[i];
    t << "  {\"id\": " << d.id << ", \"coords\": [" << d.coords[0] << ", " << d.coords[1] << ", " << d.coords[2] << ']';
    if (d.slice_index) t << ", \"slice_index\": " << *d.slice_index;
    t << '}' << (i + 1 < devices.size() ? ",\n" : "\n");
  }
  t << ']';
  return t.str();
}

}  // namespace xshard
