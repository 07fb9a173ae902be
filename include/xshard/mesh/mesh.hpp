// xshard/mesh/mesh.hpp - device meshes: typed (`mesh<"data=4, model=2">`) and
// run-time (`runtime_mesh`), with torch_xla's Mesh rules, plus the global
// default mesh and the 1-D mesh helper.
//
// Example (compiled in tests/compile/doc_mesh.cpp):
//   using M = xshard::mesh<"data=4, model=2">;           // devices 0..7, row-major
//   using M2 = xshard::mesh<"x=4, y=2", 7, 6, 5, 4, 3, 2, 1, 0>;
//   static_assert(M::size() == 8 && M::axis_index("model") == 1);
//   static_assert(M2::logical_mesh()(0, 1) == 6);
//
//   xshard::runtime_mesh rm("data=4, model=2");          // same rules, run time
//   xshard::runtime_mesh tm({0, 1, 2, 3}, {2, 2}, {"x", "y"});  // torch_xla order
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "../core/diagnostics.hpp"
#include "../core/error.hpp"
#include "../core/fixed_string.hpp"
#include "axes.hpp"

namespace xshard {

/// A small row-major array of ints with a shape: logical meshes, tile and
/// group assignments. `values` is flat; `shape` has one entry per dim.
/// Tile assignments have at most one dim per spec entry plus the mesh axes.
inline constexpr std::size_t max_array_rank = 2 * max_mesh_axes + 2;

namespace detail {
/// Row-major position of the element at (idx...) of an array of `shape`.
template <class Shape, class... I>
constexpr std::size_t flat_index(const Shape& shape, I... idx) {
  const std::int64_t ix[] = {static_cast<std::int64_t>(idx)...};
  std::int64_t flat = 0;
  for (std::size_t d = 0; d < sizeof...(I); ++d) flat = flat * shape[d] + ix[d];
  return static_cast<std::size_t>(flat);
}
}  // namespace detail

struct int_array {
  static_vector<std::int64_t, max_array_rank> shape{};
  std::vector<int> values{};

  constexpr std::size_t rank() const { return shape.size(); }
  constexpr std::size_t size() const { return values.size(); }
  template <class... I>
  constexpr int operator()(I... idx) const {
    return values[detail::flat_index(shape, idx...)];
  }
  friend constexpr bool operator==(const int_array&, const int_array&) = default;
};

/// A compile-time snapshot of an int_array with exactly N values.
template <std::size_t N>
struct fixed_int_array {
  static_vector<std::int64_t, max_array_rank> shape{};
  std::array<int, N> values{};

  constexpr std::size_t rank() const { return shape.size(); }
  static constexpr std::size_t size() { return N; }
  template <class... I>
  constexpr int operator()(I... idx) const {
    return values[detail::flat_index(shape, idx...)];
  }
  int_array runtime() const { return {shape, std::vector<int>(values.begin(), values.end())}; }
  friend constexpr bool operator==(const fixed_int_array& a, const int_array& b) {
    return a.shape == b.shape && std::equal(a.values.begin(), a.values.end(), b.values.begin(), b.values.end());
  }
};

template <std::size_t N>
constexpr fixed_int_array<N> to_fixed(const int_array& a) {
  fixed_int_array<N> out;
  out.shape = a.shape;
  for (std::size_t i = 0; i < N && i < a.values.size(); ++i) out.values[i] = a.values[i];
  return out;
}

/// The device ids shaped as the mesh (torch_xla's get_logical_mesh).
constexpr int_array logical_mesh_of(const mesh_ref& m) {
  int_array out;
  for (const mesh_axis& a : m.axes) out.shape.push_back(a.size);
  out.values.assign(m.device_ids.begin(), m.device_ids.end());
  return out;
}

namespace detail {
template <std::size_t N>
constexpr std::array<int, N> iota_ids() {
  std::array<int, N> ids{};
  for (std::size_t i = 0; i < N; ++i) ids[i] = static_cast<int>(i);
  return ids;
}
}  // namespace detail

namespace detail {
// The accessors both meshes share, written once over their axes.

/// The axis sizes alone (torch_xla's mesh_shape).
constexpr static_vector<std::int64_t, max_mesh_axes> axis_sizes(const mesh_axes& axes) {
  static_vector<std::int64_t, max_mesh_axes> s;
  for (const mesh_axis& a : axes) s.push_back(a.size);
  return s;
}
/// Index of the named axis, or nullopt (torch_xla's get_axis_name_idx).
constexpr std::optional<std::size_t> axis_position(const mesh_axes& axes, std::string_view name) {
  const int i = find_axis(axes, name);
  return i < 0 ? std::nullopt : std::optional<std::size_t>(static_cast<std::size_t>(i));
}
}  // namespace detail

class runtime_mesh;

/// A mesh whose axes and device ids are part of its type.
///
/// @tparam Text  "name=size, ..." (or "size, ..." for unnamed axes)
/// @tparam Ids   the device ids in row-major order; 0..size-1 if omitted.
/// Misuse (syntax, duplicate names or ids, wrong id count, ids out of range)
/// is a compile error naming the offender.
template <fixed_string Text, int... Ids>
struct mesh {
 private:
  static constexpr checked<mesh_axes> parsed_ = parse_mesh_axes(Text.view());
  static_assert(raise<parsed_.diag>());
  static constexpr std::size_t n_ = parsed_.ok() ? static_cast<std::size_t>(mesh_size(parsed_.value)) : 0;
  static constexpr std::size_t stored_ = sizeof...(Ids) ? sizeof...(Ids) : n_;

 public:
  static constexpr fixed_string text = Text;
  static constexpr mesh_axes axes = parsed_.value;
  static constexpr std::array<int, stored_> device_ids = [] {
    if constexpr (sizeof...(Ids) > 0)
      return std::array<int, stored_>{Ids...};
    else
      return detail::iota_ids<stored_>();
  }();

 private:
  static constexpr diagnostic ids_diag_ = parsed_.ok() ? check_device_ids(parsed_.value, device_ids) : diagnostic{};
  static_assert(raise<ids_diag_>());

 public:
  static constexpr std::size_t rank() { return axes.size(); }
  static constexpr std::int64_t size() { return static_cast<std::int64_t>(n_); }
  /// The axes in order, each with its name and size (torch_xla's shape()).
  static constexpr mesh_axes shape() { return axes; }
  /// The axis sizes alone (torch_xla's mesh_shape).
  static constexpr static_vector<std::int64_t, max_mesh_axes> mesh_shape() { return detail::axis_sizes(axes); }
  /// Index of the named axis, or nullopt (torch_xla's get_axis_name_idx).
  static constexpr std::optional<std::size_t> axis_index(std::string_view name) {
    return detail::axis_position(axes, name);
  }
  static constexpr mesh_ref ref() { return {axes, device_ids}; }
  static constexpr int_array logical_mesh() { return logical_mesh_of(ref()); }
  static runtime_mesh runtime();
};

/// A mesh known only at run time: the same rules, reported as xshard::error.
class runtime_mesh {
 public:
  /// From mesh text; device ids default to 0..size-1.
  /// (A template so that a braced list such as {0, 1} never reads as text.)
  template <class Text>
  requires std::is_convertible_v<const Text&, std::string_view>
  explicit runtime_mesh(const Text& text, std::vector<int> device_ids = {}) {
    const std::string_view t = text;
    axes_ = parse_mesh_axes(t).get(t);
    init_ids(std::move(device_ids));
  }
  /// torch_xla's Mesh(device_ids, mesh_shape, axis_names) argument order;
  /// empty device_ids mean 0..size-1.
  runtime_mesh(std::vector<int> device_ids, const std::vector<std::int64_t>& mesh_shape,
               const std::vector<std::string>& axis_names = {}) {
    std::vector<std::string_view> names(axis_names.begin(), axis_names.end());
    axes_ = make_mesh_axes(mesh_shape, names).get();
    init_ids(std::move(device_ids));
  }

  std::size_t rank() const { return axes_.size(); }
  std::int64_t size() const { return mesh_size(axes_); }
  const mesh_axes& shape() const { return axes_; }
  std::vector<std::int64_t> mesh_shape() const {
    const auto s = detail::axis_sizes(axes_);
    return {s.begin(), s.end()};
  }
  std::vector<std::string> axis_names() const {
    std::vector<std::string> s;
    for (const mesh_axis& a : axes_) s.push_back(a.name.str());
    return s;
  }
  std::optional<std::size_t> axis_index(std::string_view name) const { return detail::axis_position(axes_, name); }
  const std::vector<int>& device_ids() const { return ids_; }
  mesh_ref ref() const { return {axes_, ids_}; }
  int_array logical_mesh() const { return logical_mesh_of(ref()); }
  /// "data=4, model=2".
  std::string text() const { return mesh_text(axes_).str(); }

  friend bool operator==(const runtime_mesh& a, const runtime_mesh& b) {
    return a.axes_ == b.axes_ && a.ids_ == b.ids_;
  }

 private:
  void init_ids(std::vector<int> ids) {
    if (ids.empty()) {
      ids.resize(static_cast<std::size_t>(size()));
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
    }
    throw_if_error(check_device_ids(axes_, ids));
    ids_ = std::move(ids);
  }

  mesh_axes axes_{};
  std::vector<int> ids_{};
};

template <fixed_string Text, int... Ids>
runtime_mesh mesh<Text, Ids...>::runtime() {
  return runtime_mesh(Text.view(), std::vector<int>(device_ids.begin(), device_ids.end()));
}

/// True for instantiations of xshard::mesh.
template <class T>
inline constexpr bool is_mesh_v = false;
template <fixed_string Text, int... Ids>
inline constexpr bool is_mesh_v<mesh<Text, Ids...>> = true;
template <class T>
concept Mesh = is_mesh_v<T>;

// ---------------------------------------------------------------------------
// 1-D meshes and the process-wide default mesh (torch_xla's get_1d_mesh,
// set_global_mesh, get_global_mesh).

namespace detail {
template <fixed_string Name, std::int64_t N>
consteval auto mesh_1d_text() {
  return to_fixed_string<[] {
    text_builder t;
    if (!Name.view().empty()) t << Name.view() << '=';
    t << N;
    return t;
  }>();
}
}  // namespace detail

/// `mesh_1d<"data", 8>` is `mesh<"data=8">`; `mesh_1d<"", 8>` is unnamed.
template <fixed_string Name, std::int64_t N>
using mesh_1d = mesh<detail::mesh_1d_text<Name, N>()>;

/// Devices this process drives: $XSHARD_NUM_DEVICES if set (a positive
/// integer), else the hardware's thread count.
inline std::int64_t device_count() {
  if (const char* env = std::getenv("XSHARD_NUM_DEVICES")) {
    detail::cursor c{env};
    std::int64_t n = 0;
    if (!c.integer(n, max_mesh_devices) || !c.at_end() || n < 1)
      throw error(std::string("xshard: XSHARD_NUM_DEVICES must be a positive integer, got \"") + env + '"');
    return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw ? static_cast<std::int64_t>(hw) : 1;
}

/// All devices in one axis (named `axis_name`, or unnamed if empty).
inline runtime_mesh get_1d_mesh(std::string_view axis_name = {}, std::int64_t num_devices = device_count()) {
  std::vector<std::string> names;
  if (!axis_name.empty()) names.emplace_back(axis_name);
  return runtime_mesh({}, {num_devices}, names);
}

namespace detail {
struct global_mesh_state {
  std::mutex mu;
  std::optional<runtime_mesh> mesh;
};
inline global_mesh_state& global_mesh() {
  static global_mesh_state s;
  return s;
}
}  // namespace detail

/// Sets the mesh used where none is given.
inline void set_global_mesh(runtime_mesh m) {
  auto& g = detail::global_mesh();
  std::lock_guard lock(g.mu);
  g.mesh = std::move(m);
}
template <Mesh M>
void set_global_mesh() {
  set_global_mesh(M::runtime());
}
/// The global mesh, or nullopt if none was set.
inline std::optional<runtime_mesh> get_global_mesh() {
  auto& g = detail::global_mesh();
  std::lock_guard lock(g.mu);
  return g.mesh;
}
inline void clear_global_mesh() {
  auto& g = detail::global_mesh();
  std::lock_guard lock(g.mu);
  g.mesh.reset();
}

}  // namespace xshard
