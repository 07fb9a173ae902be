// xshard/checkpoint/manifest.hpp - the table of contents of a checkpoint:
// which tensors it holds (name, element type, global shape, the spec it was
// saved under), the step, the mesh, the library version. The HDF5 writer
// (checkpoint/checkpoint.hpp) stores it as the dataset /xshard_manifest; the
// loader parses and checks it before it trusts any dataset, and compares
// every dataset with it. No HDF5 here, so the parser is fuzzed on its own
// (tests/fuzz/fuzz_checkpoint_manifest.cpp).
//
//   xshard-checkpoint 1
//   version 0.1.0
//   step 300
//   mesh data=2, model=2
//   devices 0,1,2,3
//   tensor params/w_in float32 [8,512,128] None, model, None
//   tensor rng/data uint8 [5006] None
//   crc32 1c291ca3
//
// Lines end with '\n'; the crc32 (IEEE, of every byte before the crc32
// line) guards against a torn or edited manifest. Names are 1..200
// characters of [A-Za-z0-9_.-] in '/'-separated non-empty parts, not "." or
// "..", not starting with "xshard_". Extents are 0 .. 2^40 and a tensor
// holds at most 2^60 bytes. Anything else is an xshard::error naming the
// line.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"

namespace xshard {

/// The library version written into checkpoints.
inline constexpr std::string_view library_version = "0.1.0";
/// The manifest format this library writes and reads.
inline constexpr std::int64_t checkpoint_format = 1;

/// Element types a checkpoint stores.
enum class dtype : std::uint8_t { float32, float64, int32, int64, uint8, uint32, uint64 };

constexpr std::string_view dtype_name(dtype d) {
  constexpr std::array<std::string_view, 7> names{"float32", "float64", "int32", "int64", "uint8", "uint32", "uint64"};
  return names[static_cast<std::size_t>(d)];
}
constexpr std::size_t dtype_size(dtype d) {
  constexpr std::array<std::size_t, 7> sizes{4, 8, 4, 8, 1, 4, 8};
  return sizes[static_cast<std::size_t>(d)];
}
constexpr bool parse_dtype(std::string_view s, dtype& out) {
  for (std::uint8_t i = 0; i < 7; ++i)
    if (dtype_name(static_cast<dtype>(i)) == s) {
      out = static_cast<dtype>(i);
      return true;
    }
  return false;
}

template <class T>
constexpr bool has_dtype_v = std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::int32_t> ||
                             std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::uint8_t> ||
                             std::is_same_v<T, std::uint32_t> || std::is_same_v<T, std::uint64_t>;

/// The dtype of element type T (a compile error for others).
template <class T>
constexpr dtype dtype_of() {
  static_assert(has_dtype_v<T>,
                "xshard: checkpoints store float, double, int32_t, int64_t, uint8_t, uint32_t or uint64_t tensors");
  if constexpr (std::is_same_v<T, float>)
    return dtype::float32;
  else if constexpr (std::is_same_v<T, double>)
    return dtype::float64;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return dtype::int32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return dtype::int64;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return dtype::uint8;
  else if constexpr (std::is_same_v<T, std::uint32_t>)
    return dtype::uint32;
  else
    return dtype::uint64;
}

struct manifest_tensor {
  std::string name;
  dtype type = dtype::float32;
  std::vector<std::int64_t> shape;
  std::string spec;  ///< the spec it was saved under ("None, model"), as text
  friend bool operator==(const manifest_tensor&, const manifest_tensor&) = default;
};

struct checkpoint_manifest {
  std::int64_t format = checkpoint_format;
  std::string version{library_version};
  std::int64_t step = 0;
  std::string mesh;  ///< "data=2, model=2" ("" for a checkpoint saved without a mesh)
  std::vector<int> devices;
  std::vector<manifest_tensor> tensors;

  const manifest_tensor* find(std::string_view name) const {
    for (const manifest_tensor& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
  friend bool operator==(const checkpoint_manifest&, const checkpoint_manifest&) = default;
};

inline constexpr std::size_t max_tensor_name = 200;
inline constexpr std::int64_t max_checkpoint_extent = std::int64_t{1} << 40;
inline constexpr std::int64_t max_checkpoint_tensor_bytes = std::int64_t{1} << 60;
inline constexpr std::size_t max_checkpoint_rank = 16;

namespace detail {

/// CRC-32 (IEEE 802.3, reflected, as zlib's crc32).
inline std::uint32_t crc32(std::string_view s) {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xFFFFFFFFu;
  for (unsigned char ch : s) c = table[(c ^ ch) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

inline std::string hex32(std::uint32_t v) {
  const char* digits = "0123456789abcdef";
  std::string s(8, '0');
  for (int i = 7; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = digits[v & 15];
  return s;
}

/// Printable, for messages: at most 40 characters, control bytes as '?'.
inline std::string printable(std::string_view s) {
  std::string r;
  for (char c : s.substr(0, 40)) r += (c >= 32 && c < 127) ? c : '?';
  if (s.size() > 40) r += "...";
  return r;
}

inline bool parse_int(std::string_view s, std::int64_t lo, std::int64_t hi, std::int64_t& out) {
  const std::size_t sign = !s.empty() && s[0] == '-' ? 1 : 0;
  // At most 18 digits, so the sum below cannot overflow (a sign does not
  // count: "9999999999999999992" has 19 digits and no sign).
  if (s.size() == sign || s.size() - sign > 18) return false;
  const bool neg = sign == 1;
  std::int64_t v = 0;
  for (std::size_t i = sign; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  if (neg) v = -v;
  if (v < lo || v > hi) return false;
  out = v;
  return true;
}

}  // namespace detail

/// Why `name` cannot name a checkpoint tensor, or "" if it can.
inline std::string tensor_name_problem(std::string_view name) {
  if (name.empty()) return "a tensor name cannot be empty";
  if (name.size() > max_tensor_name)
    return "tensor name \"" + detail::printable(name) + "\" is longer than " + std::to_string(max_tensor_name) +
           " characters";
  if (name.starts_with("xshard_")) return "tensor name \"" + detail::printable(name) + "\" starts with \"xshard_\"";
  std::size_t start = 0;
  while (start <= name.size()) {
    std::size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    const std::string_view part = name.substr(start, end - start);
    if (part.empty() || part == "." || part == "..")
      return "tensor name \"" + detail::printable(name) + "\" has an empty, \".\" or \"..\" part";
    for (char c : part)
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
            c == '.'))
        return "tensor name \"" + detail::printable(name) + "\" has a character outside [A-Za-z0-9_.-/]";
    start = end + 1;
  }
  return {};
}

/// Why a tensor entry is invalid ("" if it is valid).
inline std::string tensor_entry_problem(const manifest_tensor& t) {
  if (std::string p = tensor_name_problem(t.name); !p.empty()) return p;
  if (t.shape.size() > max_checkpoint_rank)
    return "tensor \"" + t.name + "\" has rank " + std::to_string(t.shape.size()) + " (at most " +
           std::to_string(max_checkpoint_rank) + ")";
  std::int64_t bytes = static_cast<std::int64_t>(dtype_size(t.type));
  for (std::int64_t e : t.shape) {
    if (e < 0 || e > max_checkpoint_extent)
      return "tensor \"" + t.name + "\" has an extent " + std::to_string(e) + " outside 0 .. 2^40";
    if (e != 0 && bytes > max_checkpoint_tensor_bytes / e) return "tensor \"" + t.name + "\" is larger than 2^60 bytes";
    bytes *= e;
  }
  for (char c : t.spec)
    if (c == '\n' || c == '\r' || c == '\0') return "tensor \"" + t.name + "\" has a line break in its spec";
  return {};
}

/// The manifest's text (what parse_manifest reads back).
inline std::string print_manifest(const checkpoint_manifest& m) {
  std::string s = "xshard-checkpoint " + std::to_string(m.format) + "\nversion " + m.version + "\nstep " +
                  std::to_string(m.step) + "\nmesh " + m.mesh + "\ndevices ";
  for (std::size_t i = 0; i < m.devices.size(); ++i) s += (i ? "," : "") + std::to_string(m.devices[i]);
  s += "\n";
  for (const manifest_tensor& t : m.tensors) {
    s += "tensor " + t.name + " " + std::string(dtype_name(t.type)) + " [";
    for (std::size_t d = 0; d < t.shape.size(); ++d) s += (d ? "," : "") + std::to_string(t.shape[d]);
    s += "] " + t.spec + "\n";
  }
  s += "crc32 " + detail::hex32(detail::crc32(s)) + "\n";
  return s;
}

namespace detail {

/// The manifest parser's state: the text, the read position and the line
/// number its messages give.
class manifest_reader {
 public:
  manifest_reader(std::string_view text, std::string_view where)
      : text_(text), head_("xshard: " + std::string(where) + ": ") {}

  error fail(const std::string& what) const {
    return error(head_ + "manifest line " + std::to_string(line_no_) + ": " + what);
  }
  /// The next line, or false at the end of the text.
  bool next_line(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    const std::size_t nl = text_.find('\n', pos_);
    if (nl == std::string_view::npos) {
      ++line_no_;
      throw fail("no line break at the end (the manifest is cut short)");
    }
    line = text_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    ++line_no_;
    return true;
  }
  /// The next line, which must exist: `what` names it in the message.
  std::string_view need_line(const std::string& what) {
    std::string_view line;
    if (!next_line(line)) {
      ++line_no_;
      throw fail(what + " (the manifest is cut short)");
    }
    return line;
  }
  static bool field(std::string_view line, std::string_view key, std::string_view& rest) {
    if (!line.starts_with(key) || line.size() < key.size() + 1 || line[key.size()] != ' ') return false;
    rest = line.substr(key.size() + 1);
    return true;
  }
  /// Comma-separated integers in [0, max], at most `count` of them.
  std::vector<std::int64_t> int_list(std::string_view text, std::int64_t max, std::size_t count, const std::string& bad,
                                     const std::string& too_many) const {
    std::vector<std::int64_t> out;
    std::size_t p = 0;
    while (p < text.size()) {
      std::size_t e = text.find(',', p);
      if (e == std::string_view::npos) e = text.size();
      std::int64_t v = 0;
      if (!parse_int(text.substr(p, e - p), 0, max, v)) throw fail(bad);
      if (out.size() >= count) throw fail(too_many);
      out.push_back(v);
      p = e + 1;
      if (e == text.size()) break;
      if (p == text.size()) throw fail(bad);
    }
    return out;
  }
  /// The five header lines, in order.
  void header(checkpoint_manifest& m) {
    static constexpr const char* order[] = {"xshard-checkpoint", "version", "step", "mesh", "devices"};
    for (int k = 0; k < 5; ++k) {
      std::string_view rest;
      const std::string_view line = need_line(std::string("missing \"") + order[k] + "\"");
      if (!field(line, order[k], rest))
        throw fail(std::string("expected \"") + order[k] + " ...\", found \"" + printable(line) + "\"");
      header_field(k, rest, m);
    }
  }
  void header_field(int k, std::string_view rest, checkpoint_manifest& m) const {
    switch (k) {
      case 0:
        if (!parse_int(rest, 0, 1000000, m.format)) throw fail("bad format number");
        if (m.format != checkpoint_format)
          throw fail("format " + std::to_string(m.format) + " (this library reads format " +
                     std::to_string(checkpoint_format) + ")");
        break;
      case 1:
        if (rest.empty() || rest.size() > 32) throw fail("bad version");
        for (char c : rest)
          if (!((c >= '0' && c <= '9') || c == '.' || (c >= 'a' && c <= 'z') || c == '-')) throw fail("bad version");
        m.version = std::string(rest);
        break;
      case 2:
        if (!parse_int(rest, 0, std::int64_t{1} << 62, m.step)) throw fail("bad step");
        break;
      case 3:
        if (rest.size() > 256) throw fail("mesh text too long");
        for (char c : rest)
          if (c < 32 || c >= 127) throw fail("mesh text has a control character");
        m.mesh = std::string(rest);
        break;
      default:
        for (const std::int64_t id : int_list(rest, 1 << 20, std::size_t{1} << 20, "bad device id", "too many devices"))
          m.devices.push_back(static_cast<int>(id));
        break;
    }
  }
  /// "name dtype [extents] spec".
  manifest_tensor tensor_line(std::string_view rest) const {
    manifest_tensor t;
    const std::size_t sp1 = rest.find(' ');
    if (sp1 == std::string_view::npos) throw fail("a tensor line needs a name, a dtype, a shape and a spec");
    t.name = std::string(rest.substr(0, sp1));
    rest.remove_prefix(sp1 + 1);
    const std::size_t sp2 = rest.find(' ');
    if (sp2 == std::string_view::npos) throw fail("a tensor line needs a name, a dtype, a shape and a spec");
    if (!parse_dtype(rest.substr(0, sp2), t.type))
      throw fail("unknown dtype \"" + printable(rest.substr(0, sp2)) + "\"");
    rest.remove_prefix(sp2 + 1);
    if (rest.empty() || rest[0] != '[') throw fail("expected a shape \"[...]\"");
    const std::size_t close = rest.find(']');
    if (close == std::string_view::npos) throw fail("expected a shape \"[...]\"");
    t.shape = int_list(rest.substr(1, close - 1), max_checkpoint_extent, max_checkpoint_rank, "bad extent",
                       "rank above " + std::to_string(max_checkpoint_rank));
    rest.remove_prefix(close + 1);
    if (rest.empty() || rest[0] != ' ') throw fail("expected a spec after the shape");
    t.spec = std::string(rest.substr(1));
    for (char c : t.spec)
      if (c < 32 || c >= 127) throw fail("spec has a control character");
    if (std::string problem = tensor_entry_problem(t); !problem.empty()) throw fail(problem);
    return t;
  }
  /// The crc32 line (hex of the text before it), which must end the text.
  void crc_line(std::string_view rest, std::size_t crc_start) const {
    if (rest.size() != 8) throw fail("bad crc32");
    std::uint32_t want = 0;
    for (char c : rest) {
      int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (v < 0) throw fail("bad crc32");
      want = want << 4 | static_cast<std::uint32_t>(v);
    }
    const std::uint32_t got = crc32(text_.substr(0, crc_start));
    if (got != want)
      throw fail("crc32 " + hex32(got) + " of the manifest differs from the recorded " + hex32(want) +
                 " (the file is corrupt)");
    if (pos_ != text_.size()) throw fail("text after the crc32 line");
  }
  std::size_t pos() const { return pos_; }

 private:
  std::string_view text_;
  std::string head_;
  std::size_t pos_ = 0;
  std::size_t line_no_ = 0;
};

}  // namespace detail

/// Parses and checks a manifest; `where` names the file in messages.
inline checkpoint_manifest parse_manifest(std::string_view text, std::string_view where = "checkpoint") {
  detail::manifest_reader r(text, where);
  checkpoint_manifest m;
  m.version.clear();
  r.header(m);
  while (true) {
    const std::size_t crc_start = r.pos();
    const std::string_view line = r.need_line("no crc32 line");
    std::string_view rest;
    if (detail::manifest_reader::field(line, "crc32", rest)) {
      r.crc_line(rest, crc_start);
      return m;
    }
    if (!detail::manifest_reader::field(line, "tensor", rest)) throw r.fail("expected \"tensor ...\" or \"crc32 ...\"");
    manifest_tensor t = r.tensor_line(rest);
    if (m.find(t.name)) throw r.fail("tensor \"" + t.name + "\" is listed twice");
    m.tensors.push_back(std::move(t));
  }
}

}  // namespace xshard
