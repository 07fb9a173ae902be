// xshard/ops/composite_policy.hpp - named, versioned composite ops and the
// policy that picks, per op, its decomposition or its fused kernel.
//
// A composite (torch_xla / StableHLO `stablehlo.composite`) is an op with a
// name, a version and attributes, whose meaning is a *decomposition* into
// primitive ops, and which a backend may replace by one *fused kernel*:
//
//   name                        version  attributes
//   xshard.gelu                 1        approximate = "none" | "tanh"
//   xshard.gelu_backward        1        approximate = "none" | "tanh"
//   xshard.softmax              1        dim (default -1, the last dim)
//   xshard.softmax_backward     1        dim (default -1, the last dim)
//   xshard.layer_norm           1        eps (default 1e-05), over the last dim
//   xshard.layer_norm_backward  1        over the last dim
//   xshard.rms_norm             1        eps (default 1e-06, as T5 and LLaMA), over the last dim
//   xshard.rms_norm_backward    1        over the last dim
//
// Which of the two runs is decided per op, latest rule wins:
//   1. the compile-time default: the fused kernel (define
//      XSHARD_COMPOSITES_DEFAULT_DECOMPOSE to make it the decomposition);
//   2. the environment variable XSHARD_COMPOSITES, read once at first use:
//        XSHARD_COMPOSITES="gelu:kernel,softmax:decompose,all:decompose"
//      entries "op:mode" separated by commas; op is the short name ("gelu"),
//      the full name ("xshard.gelu") or "all"; mode is "kernel" or
//      "decompose". An unknown op or mode throws xshard::error naming it (on
//      the first composite call or policy query);
//   3. code: composite_policy::set("gelu", composite_mode::decompose), or a
//      scoped_composite_mode for one block; composite_policy::reset() drops
//      the settings made in code.
// A backward composite follows its own name ("gelu_backward"), not the
// forward's. Settings are process-wide (device threads see them too), so a
// scoped override is meant for one thread at a time.
//
// composites() lists every composite with its current mode; it prints as
//   xshard.gelu v1 {approximate = "none"|"tanh"} mode=kernel (default)
#pragma once

#include <array>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdlib>  // std::getenv
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/error.hpp"

namespace xshard {

/// What a composite call runs.
enum class composite_mode : std::uint8_t {
  kernel,     ///< the fused xsimd kernel
  decompose,  ///< the decomposition into primitive xtensor expressions
};

/// Where a composite's current mode comes from.
enum class composite_source : std::uint8_t { default_, environment, code };

/// Every composite, in registry order.
enum class composite_id : std::uint8_t {
  gelu,
  gelu_backward,
  softmax,
  softmax_backward,
  layer_norm,
  layer_norm_backward,
  rms_norm,
  rms_norm_backward,
};
inline constexpr std::size_t composite_count = 8;

#if defined(XSHARD_COMPOSITES_DEFAULT_DECOMPOSE)
inline constexpr composite_mode default_composite_mode = composite_mode::decompose;
#else
inline constexpr composite_mode default_composite_mode = composite_mode::kernel;
#endif

/// The name of the environment variable read by the policy.
inline constexpr std::string_view composite_environment_variable = "XSHARD_COMPOSITES";

constexpr std::string_view to_string(composite_mode m) { return m == composite_mode::kernel ? "kernel" : "decompose"; }
constexpr std::string_view to_string(composite_source s) {
  switch (s) {
    case composite_source::default_:
      return "default";
    case composite_source::environment:
      return "environment";
    case composite_source::code:
      return "code";
  }
  return "default";
}
inline std::ostream& operator<<(std::ostream& os, composite_mode m) { return os << to_string(m); }

/// One attribute of a composite: its name, allowed values and default, as text.
struct composite_attribute {
  std::string_view name;
  std::string_view values;         ///< e.g. "\"none\"|\"tanh\"" or "int"
  std::string_view default_value;  ///< empty if the attribute has no default
};

/// The static description of a composite.
struct composite_descriptor {
  composite_id id;
  std::string_view op;    ///< short name, used by the policy: "gelu"
  std::string_view name;  ///< full name: "xshard.gelu"
  int version;
  std::span<const composite_attribute> attributes;
};

namespace detail {
inline constexpr std::array<composite_attribute, 1> gelu_attributes{{{"approximate", "\"none\"|\"tanh\"", "\"none\""}}};
inline constexpr std::array<composite_attribute, 1> softmax_attributes{{{"dim", "int", "-1"}}};
inline constexpr std::array<composite_attribute, 1> layer_norm_attributes{{{"eps", "float", "1e-05"}}};
inline constexpr std::array<composite_attribute, 1> rms_norm_attributes{{{"eps", "float", "1e-06"}}};
}  // namespace detail

/// The registry: every composite xshard defines.
inline constexpr std::array<composite_descriptor, composite_count> composite_registry{{
    {composite_id::gelu, "gelu", "xshard.gelu", 1, detail::gelu_attributes},
    {composite_id::gelu_backward, "gelu_backward", "xshard.gelu_backward", 1, detail::gelu_attributes},
    {composite_id::softmax, "softmax", "xshard.softmax", 1, detail::softmax_attributes},
    {composite_id::softmax_backward, "softmax_backward", "xshard.softmax_backward", 1, detail::softmax_attributes},
    {composite_id::layer_norm, "layer_norm", "xshard.layer_norm", 1, detail::layer_norm_attributes},
    {composite_id::layer_norm_backward, "layer_norm_backward", "xshard.layer_norm_backward", 1, {}},
    {composite_id::rms_norm, "rms_norm", "xshard.rms_norm", 1, detail::rms_norm_attributes},
    {composite_id::rms_norm_backward, "rms_norm_backward", "xshard.rms_norm_backward", 1, {}},
}};

constexpr const composite_descriptor& descriptor(composite_id id) {
  return composite_registry[static_cast<std::size_t>(id)];
}

/// The composite called `op` (short or full name), if there is one.
constexpr std::optional<composite_id> find_composite(std::string_view op) {
  for (const auto& d : composite_registry)
    if (d.op == op || d.name == op) return d.id;
  return std::nullopt;
}

/// One rule of a policy text: set `ids` to `mode`.
struct composite_setting {
  std::vector<composite_id> ids;  ///< one id, or all of them for "all"
  composite_mode mode;
};

namespace detail {
constexpr std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
// The run-time parts below are templates of an unused parameter: a TU that
// never reads or sets the policy instantiates none of them.
template <class = void>
std::string known_composites_text() {
  std::string t;
  for (const auto& d : composite_registry) t += std::string(d.op) + ", ";
  return t + "all";
}
template <class = void>
[[noreturn]] void composite_policy_error(std::string_view source, const std::string& what) {
  throw error("xshard: " + std::string(source) + ": " + what);
}
template <class = void>
std::vector<composite_id> resolve_composite_op(std::string_view op, std::string_view source, std::string_view context) {
  if (op == "all") {
    std::vector<composite_id> all;
    for (const auto& d : composite_registry) all.push_back(d.id);
    return all;
  }
  if (auto id = find_composite(op)) return {*id};
  composite_policy_error(source, "unknown composite '" + std::string(op) + "'" +
                                     (context.empty() ? std::string() : " in \"" + std::string(context) + "\"") +
                                     " (known: " + known_composites_text() + ")");
}
}  // namespace detail

/// Parses a policy text in the XSHARD_COMPOSITES format: comma-separated
/// "op:mode" entries (blank entries are skipped), e.g.
///   parse_composite_policy("gelu:kernel, softmax:decompose")
/// Throws xshard::error naming the entry, op or mode that is wrong; `source`
/// prefixes the message (the variable's name by default).
template <class = void>
std::vector<composite_setting> parse_composite_policy(std::string_view text,
                                                      std::string_view source = composite_environment_variable) {
  std::vector<composite_setting> out;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view entry = detail::trim(text.substr(0, comma));
    if (!entry.empty()) {
      const std::size_t colon = entry.find(':');
      if (colon == std::string_view::npos)
        detail::composite_policy_error(
            source, "entry \"" + std::string(entry) + "\" is not \"op:mode\" (e.g. \"gelu:decompose\")");
      const std::string_view op = detail::trim(entry.substr(0, colon));
      const std::string_view mode = detail::trim(entry.substr(colon + 1));
      composite_setting s{detail::resolve_composite_op(op, source, entry), composite_mode::kernel};
      if (mode == "kernel")
        s.mode = composite_mode::kernel;
      else if (mode == "decompose")
        s.mode = composite_mode::decompose;
      else
        detail::composite_policy_error(source, "unknown mode '" + std::string(mode) + "' for composite '" +
                                                   std::string(op) + "' in \"" + std::string(entry) +
                                                   "\" (modes: kernel, decompose)");
      out.push_back(std::move(s));
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

namespace detail {
inline constexpr int unset_mode = -1;

/// Modes read from the environment, once (-1: not set there).
struct composite_environment {
  std::array<int, composite_count> mode{};
};
template <class = void>
const composite_environment& environment_modes() {
  // If the text is bad the initialiser throws, the static stays
  // uninitialised and every later call reports the same error.
  static const composite_environment env = [] {
    composite_environment e;
    e.mode.fill(unset_mode);
    if (const char* text = std::getenv(composite_environment_variable.data()))
      for (const auto& s : parse_composite_policy(text))
        for (composite_id id : s.ids) e.mode[static_cast<std::size_t>(id)] = static_cast<int>(s.mode);
    return e;
  }();
  return env;
}

/// Modes set in code (-1: not set).
inline std::array<std::atomic<int>, composite_count>& code_modes() {
  static std::array<std::atomic<int>, composite_count> modes{
      {{unset_mode}, {unset_mode}, {unset_mode}, {unset_mode}, {unset_mode}, {unset_mode}, {unset_mode}, {unset_mode}}};
  static_assert(composite_count == 8, "one initialiser per composite");
  return modes;
}
}  // namespace detail

/// The policy: which of decomposition and kernel each composite runs
/// (`composite_policy`: a template only so that a TU that never asks
/// instantiates none of it).
template <class Unused = void>
struct basic_composite_policy {
  /// The mode `id` runs now (code, else environment, else default).
  static composite_mode get(composite_id id) { return resolve(id).first; }
  static composite_mode get(std::string_view op) { return get(one(op)); }
  /// Where get(id) takes its answer from.
  static composite_source source(composite_id id) { return resolve(id).second; }

  /// Sets `op` ("gelu", "xshard.gelu" or "all") to `mode` in code.
  static void set(std::string_view op, composite_mode mode) {
    for (composite_id id : detail::resolve_composite_op(op, "composite_policy::set", {})) set(id, mode);
  }
  static void set(composite_id id, composite_mode mode) {
    detail::code_modes()[static_cast<std::size_t>(id)].store(static_cast<int>(mode), std::memory_order_relaxed);
  }
  /// Applies a policy text (XSHARD_COMPOSITES format) in code.
  static void apply(std::string_view text) {
    for (const auto& s : parse_composite_policy(text, "composite_policy::apply"))
      for (composite_id id : s.ids) set(id, s.mode);
  }
  /// Drops the setting made in code for `op` (or "all"), or for every op.
  static void reset(std::string_view op) {
    for (composite_id id : detail::resolve_composite_op(op, "composite_policy::reset", {}))
      detail::code_modes()[static_cast<std::size_t>(id)].store(detail::unset_mode, std::memory_order_relaxed);
  }
  static void reset() { reset("all"); }

 private:
  static composite_id one(std::string_view op) {
    if (op == "all") detail::composite_policy_error("composite_policy::get", "'all' names more than one composite");
    return detail::resolve_composite_op(op, "composite_policy::get", {}).front();
  }
  static std::pair<composite_mode, composite_source> resolve(composite_id id) {
    const auto i = static_cast<std::size_t>(id);
    const int env = detail::environment_modes().mode[i];  // throws on a bad XSHARD_COMPOSITES
    const int code = detail::code_modes()[i].load(std::memory_order_relaxed);
    if (code != detail::unset_mode) return {static_cast<composite_mode>(code), composite_source::code};
    if (env != detail::unset_mode) return {static_cast<composite_mode>(env), composite_source::environment};
    return {default_composite_mode, composite_source::default_};
  }
};
using composite_policy = basic_composite_policy<>;

/// Sets `op` (or "all") to `mode` for the lifetime of this object, then
/// restores what was set in code before (`scoped_composite_mode`).
template <class Unused = void>
class basic_scoped_composite_mode {
 public:
  basic_scoped_composite_mode(std::string_view op, composite_mode mode)
      : ids_(detail::resolve_composite_op(op, "scoped_composite_mode", {})) {
    for (composite_id id : ids_) {
      saved_.push_back(detail::code_modes()[static_cast<std::size_t>(id)].load(std::memory_order_relaxed));
      composite_policy::set(id, mode);
    }
  }
  basic_scoped_composite_mode(const basic_scoped_composite_mode&) = delete;
  basic_scoped_composite_mode& operator=(const basic_scoped_composite_mode&) = delete;
  ~basic_scoped_composite_mode() {
    for (std::size_t k = 0; k < ids_.size(); ++k)
      detail::code_modes()[static_cast<std::size_t>(ids_[k])].store(saved_[k], std::memory_order_relaxed);
  }

 private:
  std::vector<composite_id> ids_;
  std::vector<int> saved_;
};
using scoped_composite_mode = basic_scoped_composite_mode<>;

/// A registry entry with the mode it runs now.
struct composite_info {
  std::string_view name;
  std::string_view op;
  int version;
  std::span<const composite_attribute> attributes;
  composite_mode mode;
  composite_source source;
};

template <std::same_as<composite_info> Info>  // a template: instantiated only where printed
std::ostream& operator<<(std::ostream& os, const Info& c) {
  os << c.name << " v" << c.version << " {";
  bool first = true;
  for (const auto& a : c.attributes) {
    os << (first ? "" : ", ") << a.name << " = " << a.values;
    if (!a.default_value.empty()) os << " (default " << a.default_value << ")";
    first = false;
  }
  return os << "} mode=" << to_string(c.mode) << " (" << to_string(c.source) << ")";
}

/// Every composite, in registry order, with its current mode.
template <class = void>
std::vector<composite_info> composites() {
  std::vector<composite_info> out;
  for (const auto& d : composite_registry)
    out.push_back({d.name, d.op, d.version, d.attributes, composite_policy::get(d.id), composite_policy::source(d.id)});
  return out;
}

template <std::same_as<composite_info> Info>
std::ostream& operator<<(std::ostream& os, const std::vector<Info>& list) {
  for (const auto& c : list) os << c << '\n';
  return os;
}

}  // namespace xshard
