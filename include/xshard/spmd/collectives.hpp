// xshard/spmd/collectives.hpp - what every device backend shares: the
// collective kinds, reduction ops, axis sets, process groups along mesh axes,
// the bytes-sent convention and the per-device counters.
//
// A group is the set of devices that share their coordinates on every mesh
// axis *not* in the axis set; a device's rank in its group is the
// row-major index of its coordinates on the axes in the set (lower axis index
// = more major). So on mesh<"data=4, model=2">, the group of `model` holds
// the 2 devices of one data row, ranked by their model coordinate, and the
// group of {data, model} is the whole mesh in row-major order.
//
// Both backends (spmd/thread_mesh.hpp, spmd/mpi_mesh.hpp) hand the SPMD body
// a device with the same collective interface:
//
//   dev.all_reduce(std::span<T> data, reduce_op, axis_set)            in place
//   dev.all_gather(std::span<const T> in, std::span<T> out, axis_set)  out = in of rank 0, 1, ...
//   dev.reduce_scatter(std::span<const T> in, std::span<T> out, reduce_op, axis_set)
//                                    in = G equal chunks; out = reduced chunk[rank]
//   dev.all_to_all(std::span<const T> in, std::span<T> out, axis_set)  chunk j of in -> rank j;
//                                    chunk i of out <- rank i
//   dev.permute(std::span<const T> in, std::span<T> out, axis_set, pairs)
//                                    (source rank, target rank) pairs; a target
//                                    with no source gets zeros
//   dev.barrier(axis_set)
//
// Every call counts itself in dev.counters(): calls and bytes sent by this
// device per kind, by collective_bytes_sent() (the ring/bucket algorithms'
// volume: what a plan promises and what tests compare).
//
// The second half of this header is that interface, written once:
// basic_device<Impl> takes any contiguous buffers (std::span, std::vector,
// std::array), checks the element types at compile time, handles a group of
// one locally, describes each call as a collective_call and hands it to the
// backend, which exchanges the descriptions inside the group and checks them
// with check_collective_calls() before it moves data. So a mismatch (sizes,
// element types, reduce ops, permute pairs, or one device calling a different
// collective) is the same xshard::error on every member of the group, with
// the same words on both backends:
//
//   xshard: all-reduce over {model}: device 3 has 10 elements, device 2 has 12
//
// Buffers may not overlap, except all_gather's input may be this device's own
// chunk of its output and reduce_scatter's output this device's own chunk of
// its input (the in-place forms). Everything else that overlaps is refused.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>  // std::memcpy, std::memset: the local moves of a group of one
#include <initializer_list>
#include <iterator>  // std::begin, std::data, std::size, std::contiguous_iterator
#include <memory>    // std::to_address
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/static_vector.hpp"
#include "../core/text.hpp"
#include "../mesh/axes.hpp"
#include "../trace/trace.hpp"

namespace xshard {

enum class reduce_op { sum, max, min };

enum class collective_kind : int { all_gather = 0, all_reduce, reduce_scatter, all_to_all, permute };
inline constexpr std::size_t collective_kind_count = 5;

constexpr std::string_view collective_name(collective_kind k) {
  switch (k) {
    case collective_kind::all_gather:
      return "all-gather";
    case collective_kind::all_reduce:
      return "all-reduce";
    case collective_kind::reduce_scatter:
      return "reduce-scatter";
    case collective_kind::all_to_all:
      return "all-to-all";
    case collective_kind::permute:
      return "permute";
  }
  return "?";
}

/// A set of mesh axes: bit i is axis i.
using axis_set = std::uint32_t;

constexpr axis_set axis_bit(std::size_t axis) { return axis_set{1} << axis; }

/// Number of devices in a group of `axes` on a mesh of `shape`.
constexpr std::int64_t group_size(std::span<const std::int64_t> shape, axis_set axes) {
  std::int64_t n = 1;
  for (std::size_t a = 0; a < shape.size(); ++a)
    if (axes & axis_bit(a)) n *= shape[a];
  return n;
}

/// Row-major coordinates of mesh position `pos` on a mesh of `shape`.
constexpr static_vector<std::int64_t, max_mesh_axes> mesh_coords(std::span<const std::int64_t> shape,
                                                                 std::int64_t pos) {
  static_vector<std::int64_t, max_mesh_axes> c;
  for (std::size_t a = 0; a < shape.size(); ++a) c.push_back(0);
  for (std::size_t a = shape.size(); a-- > 0;) {
    c[a] = pos % shape[a];
    pos /= shape[a];
  }
  return c;
}

/// The rank of mesh position `pos` inside its group of `axes`.
constexpr std::int64_t group_rank(std::span<const std::int64_t> shape, axis_set axes, std::int64_t pos) {
  const auto c = mesh_coords(shape, pos);
  std::int64_t r = 0;
  for (std::size_t a = 0; a < shape.size(); ++a)
    if (axes & axis_bit(a)) r = r * shape[a] + c[a];
  return r;
}

/// The mesh position of rank `rank` in the group of `axes` that holds
/// position `pos` (its other coordinates kept).
constexpr std::int64_t group_member(std::span<const std::int64_t> shape, axis_set axes, std::int64_t pos,
                                    std::int64_t rank) {
  auto c = mesh_coords(shape, pos);
  for (std::size_t a = shape.size(); a-- > 0;)
    if (axes & axis_bit(a)) {
      c[a] = rank % shape[a];
      rank /= shape[a];
    }
  std::int64_t p = 0;
  for (std::size_t a = 0; a < shape.size(); ++a) p = p * shape[a] + c[a];
  return p;
}

/// The index of the group of `axes` holding position `pos` (row-major over
/// the coordinates of the axes not in the set); groups are numbered
/// 0 .. mesh size / group size - 1.
constexpr std::int64_t group_index(std::span<const std::int64_t> shape, axis_set axes, std::int64_t pos) {
  const auto c = mesh_coords(shape, pos);
  std::int64_t g = 0;
  for (std::size_t a = 0; a < shape.size(); ++a)
    if (!(axes & axis_bit(a))) g = g * shape[a] + c[a];
  return g;
}

/// Bytes one device sends for a collective over a group of `group` devices
/// whose per-device input holds `bytes` (all-gather: the local piece;
/// all-reduce: the buffer; reduce-scatter and all-to-all: the whole input of
/// G chunks; permute: the buffer, sent once if this device is a source).
/// Ring all-gather (G-1) pieces; ring all-reduce 2 (G-1)/G of the buffer;
/// reduce-scatter and all-to-all (G-1)/G of the input.
constexpr std::int64_t collective_bytes_sent(collective_kind k, std::int64_t group, std::int64_t bytes) {
  if (group <= 1) return 0;
  switch (k) {
    case collective_kind::all_gather:
      return (group - 1) * bytes;
    case collective_kind::all_reduce:
      return 2 * (group - 1) * bytes / group;
    case collective_kind::reduce_scatter:
    case collective_kind::all_to_all:
      return (group - 1) * bytes / group;
    case collective_kind::permute:
      return bytes;
  }
  return 0;
}

/// Per-device counts of the collectives it took part in.
struct collective_counters {
  std::array<std::int64_t, collective_kind_count> calls{};
  std::array<std::int64_t, collective_kind_count> bytes{};
  constexpr std::int64_t calls_of(collective_kind k) const { return calls[static_cast<std::size_t>(k)]; }
  constexpr std::int64_t bytes_of(collective_kind k) const { return bytes[static_cast<std::size_t>(k)]; }
  constexpr std::int64_t total_calls() const {
    std::int64_t n = 0;
    for (std::int64_t c : calls) n += c;
    return n;
  }
  constexpr void add(collective_kind k, std::int64_t group, std::int64_t in_bytes) {
    if (group <= 1) return;  // a group of one moves nothing and is not counted
    calls[static_cast<std::size_t>(k)] += 1;
    bytes[static_cast<std::size_t>(k)] += collective_bytes_sent(k, group, in_bytes);
  }
  friend constexpr bool operator==(const collective_counters&, const collective_counters&) = default;
};

// ---------------------------------------------------------------------------
// Naming axis sets.

/// "{data, model}" (axis indices for unnamed axes; "{}" for the empty set).
constexpr text_builder axis_set_text(const mesh_axes& axes, axis_set set) {
  text_builder t;
  t << '{';
  bool first = true;
  for (std::size_t a = 0; a < axes.size(); ++a) {
    if (!(set & axis_bit(a))) continue;
    if (!first) t << ", ";
    first = false;
    if (axes[a].name.empty())
      t << a;
    else
      t << axes[a].name.view();
  }
  t << '}';
  return t;
}

namespace detail {
// Not constexpr on purpose: reached in a constant expression, the call is the
// compile error, and its name says what was wrong.
[[noreturn]] inline void axis_set_names_unknown_axis(const mesh_axes& axes, std::string_view text,
                                                     std::string_view name) {
  throw error("xshard: unknown axis name '" + std::string(name) + "' in axis set \"" + std::string(text) +
              "\"; the mesh's axes are " + axis_names_text(axes).str());
}
[[noreturn]] inline void axis_set_names_an_axis_twice(std::string_view text, std::string_view name) {
  throw error("xshard: axis '" + std::string(name) + "' appears more than once in axis set \"" + std::string(text) +
              '"');
}
[[noreturn]] inline void axis_set_text_is_malformed(std::string_view text, std::size_t pos) {
  text_builder t;
  t << "xshard: malformed axis set \"" << text << "\": unexpected ";
  detail::append_char(t, pos < text.size() ? text[pos] : '\0');
  t << " at column " << static_cast<std::int64_t>(pos + 1) << " (expected \"name, name, ...\")";
  throw error(t.str());
}
}  // namespace detail

/// The axis set named by `names`: "model", "data, model", "{data, model}"
/// (what axis_set_text prints) or "" for no axes; axis indices name unnamed
/// axes. An unknown or repeated name throws xshard::error naming it; in a
/// constant expression that is a compile error (a call to
/// detail::axis_set_names_unknown_axis and so on).
///
///   parse_axis_set(mesh<"data=4, model=2">::axes, "model") == 0b10
constexpr axis_set parse_axis_set(const mesh_axes& axes, std::string_view names) {
  detail::cursor c{names};
  c.skip_space();
  const bool braced = c.eat('{');
  axis_set set = 0;
  c.skip_space();
  const bool empty = braced ? c.peek() == '}' : c.at_end();
  while (!empty) {
    c.skip_space();
    const std::size_t start = c.pos;
    std::string_view name = c.name();
    int axis = -1;
    if (!name.empty()) {
      axis = find_axis(axes, name);
    } else if (detail::is_digit(c.peek())) {
      std::int64_t index = 0;
      if (!c.integer(index, static_cast<std::int64_t>(max_mesh_axes))) detail::axis_set_text_is_malformed(names, c.pos);
      name = names.substr(start, c.pos - start);
      if (index < static_cast<std::int64_t>(axes.size()) && axes[static_cast<std::size_t>(index)].name.empty())
        axis = static_cast<int>(index);
    } else {
      detail::axis_set_text_is_malformed(names, c.pos);
    }
    if (axis < 0) detail::axis_set_names_unknown_axis(axes, names, name);
    if (set & axis_bit(static_cast<std::size_t>(axis))) detail::axis_set_names_an_axis_twice(names, name);
    set |= axis_bit(static_cast<std::size_t>(axis));
    c.skip_space();
    if (!c.eat(',')) break;
  }
  c.skip_space();
  if (braced && !c.eat('}')) detail::axis_set_text_is_malformed(names, c.pos);
  c.skip_space();
  if (!c.at_end()) detail::axis_set_text_is_malformed(names, c.pos);
  return set;
}

// ---------------------------------------------------------------------------
// Describing one device's part in a collective, and checking a group's parts.

/// (source rank, target rank) inside the group, for permute.
using rank_pair = std::pair<std::int64_t, std::int64_t>;

constexpr std::string_view reduce_op_name(reduce_op op) {
  switch (op) {
    case reduce_op::sum:
      return "sum";
    case reduce_op::max:
      return "max";
    case reduce_op::min:
      return "min";
  }
  return "?";
}

namespace detail {

/// The kind a barrier posts (after the collective kinds).
inline constexpr std::int64_t barrier_call = static_cast<std::int64_t>(collective_kind_count);

inline constexpr std::int64_t call_overlap = 1;        // flag: the buffers overlap in a refused way
inline constexpr std::int64_t call_count_too_big = 2;  // flag: more elements than the backend can move in one call
inline constexpr std::int64_t call_parts_overlap = 4;  // flag: two of all_reduce_many's parts overlap

/// One device's part in a collective, as the group's members exchange it
/// (plain int64s, so MPI can all-gather it as is).
struct collective_call {
  std::int64_t kind = 0;  // collective_kind, or barrier_call
  std::int64_t in_count = 0;
  std::int64_t out_count = 0;
  std::int64_t type = 0;  // element_code<T>()
  std::int64_t op = 0;    // reduce_op, for reductions
  std::int64_t key = 0;   // hash of the permute pairs
  std::int64_t flags = 0;
};
inline constexpr int collective_call_fields = 7;
static_assert(sizeof(collective_call) == collective_call_fields * sizeof(std::int64_t));

/// Element types a reduction accepts: arithmetic, not bool.
template <class T>
inline constexpr bool reducible_v = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

/// What kind of number T is and its size, to tell element types apart.
template <class T>
constexpr std::int64_t element_code() {
  std::int64_t kind = 0;  // other trivially copyable types
  if constexpr (std::is_same_v<T, long double>)
    kind = 4;
  else if constexpr (std::is_floating_point_v<T>)
    kind = 3;
  else if constexpr (std::is_integral_v<T>)
    kind = std::is_signed_v<T> ? 1 : 2;
  return (kind << 32) | static_cast<std::int64_t>(sizeof(T));
}

/// "float32", "int64", "long double", "12-byte".
inline std::string element_name(std::int64_t code) {
  const std::int64_t size = code & 0xffffffff;
  const std::string bits = std::to_string(8 * size);
  switch (code >> 32) {
    case 1:
      return "int" + bits;
    case 2:
      return "uint" + bits;
    case 3:
      return "float" + bits;
    case 4:
      return "long double";
    default:
      return std::to_string(size) + "-byte";
  }
}

inline std::string_view call_name(std::int64_t kind) {
  return kind == barrier_call ? std::string_view("barrier") : collective_name(static_cast<collective_kind>(kind));
}

/// FNV-1a over the sizes of an all_reduce's parts: equal splits give equal
/// keys (a plain all_reduce has key 0).
template <class T>
std::int64_t parts_key(std::span<const std::span<T>> parts) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(parts.size());
  for (const std::span<T>& p : parts) mix(p.size());
  return static_cast<std::int64_t>(h | 1);
}

/// FNV-1a over the pairs: equal pairs give equal keys.
inline std::int64_t pairs_key(std::span<const rank_pair> pairs) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::int64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (static_cast<std::uint64_t>(v) >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(static_cast<std::int64_t>(pairs.size()));
  for (const rank_pair& p : pairs) {
    mix(p.first);
    mix(p.second);
  }
  return static_cast<std::int64_t>(h);
}

/// Whether [a, a + an) and [b, b + bn) share a byte.
inline bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) {
  if (an == 0 || bn == 0) return false;
  const auto pa = reinterpret_cast<std::uintptr_t>(a);
  const auto pb = reinterpret_cast<std::uintptr_t>(b);
  return pa < pb + bn && pb < pa + an;
}

/// Whether `p` is `base` + `bytes` (compared as addresses: no pointer
/// arithmetic past the end of a buffer).
inline bool at_offset(const void* p, const void* base, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) == reinterpret_cast<std::uintptr_t>(base) + bytes;
}

}  // namespace detail

/// The group's parts in one collective, by rank (calls[r] from the member of
/// rank r, whose device id is member_id(r)), checked against each other and
/// against the collective's rules. Returns "" when they agree, else the
/// message every member throws. axes_text() names the axes (called only
/// for a message). `pairs` are this member's permute pairs (the same on
/// every member once the keys agree).
template <class MemberId, class AxesText>
std::string check_collective_calls(std::span<const detail::collective_call> calls, MemberId&& member_id,
                                   AxesText&& axes_text, std::span<const rank_pair> pairs) {
  using detail::collective_call;
  const collective_call& c0 = calls[0];
  const auto g = static_cast<std::int64_t>(calls.size());
  // Built only for a message: agreeing calls (every collective of a run)
  // allocate nothing here.
  auto head = [&] {
    return "xshard: " + std::string(detail::call_name(c0.kind)) + " over " + std::string(axes_text()) + ": ";
  };
  auto device = [&](std::int64_t r) { return "device " + std::to_string(member_id(r)); };
  for (std::int64_t r = 1; r < g; ++r)
    if (calls[r].kind != c0.kind)
      return "xshard: mismatched collectives over " + std::string(axes_text()) + ": " + device(r) + " called " +
             std::string(detail::call_name(calls[r].kind)) + ", " + device(0) + " called " +
             std::string(detail::call_name(c0.kind));
  if (c0.kind == detail::barrier_call) return {};
  const auto kind = static_cast<collective_kind>(c0.kind);
  for (std::int64_t r = 1; r < g; ++r)
    if (calls[r].type != c0.type)
      return head() + device(r) + " passes " + detail::element_name(calls[r].type) + " elements, " + device(0) +
             " passes " + detail::element_name(c0.type);
  if (kind == collective_kind::all_reduce || kind == collective_kind::reduce_scatter)
    for (std::int64_t r = 1; r < g; ++r)
      if (calls[r].op != c0.op)
        return head() + device(r) + " reduces with " +
               std::string(reduce_op_name(static_cast<reduce_op>(calls[r].op))) + ", " + device(0) + " with " +
               std::string(reduce_op_name(static_cast<reduce_op>(c0.op)));
  if (kind == collective_kind::all_reduce)
    for (std::int64_t r = 1; r < g; ++r)
      if (calls[r].key != c0.key)
        return head() + device(r) + " splits its elements into other buffers than " + device(0) +
               " (all_reduce_many's parts must have the same sizes on every member)";
  for (std::int64_t r = 1; r < g; ++r)
    if (calls[r].in_count != c0.in_count)
      return head() + device(r) + " has " + std::to_string(calls[r].in_count) + " elements, " + device(0) + " has " +
             std::to_string(c0.in_count);
  const std::int64_t n = c0.in_count;
  if ((kind == collective_kind::reduce_scatter || kind == collective_kind::all_to_all) && n % g != 0)
    return head() + std::to_string(n) + " elements do not split into " + std::to_string(g) + " equal chunks";
  std::int64_t want = n;  // all-reduce, all-to-all, permute: out as large as in
  if (kind == collective_kind::all_gather) want = g * n;
  if (kind == collective_kind::reduce_scatter) want = n / g;
  for (std::int64_t r = 0; r < g; ++r) {
    if (calls[r].out_count != want)
      return head() + device(r) + "'s output has " + std::to_string(calls[r].out_count) + " elements, it needs " +
             std::to_string(want);
    if (calls[r].flags & detail::call_overlap) return head() + device(r) + "'s input and output overlap";
    if (calls[r].flags & detail::call_parts_overlap) return head() + device(r) + "'s parts overlap";
    if (calls[r].flags & detail::call_count_too_big)
      return head() + device(r) + "'s buffers hold more elements than the backend moves in one call";
  }
  if (kind != collective_kind::permute) return {};
  for (std::int64_t r = 1; r < g; ++r)
    if (calls[r].key != c0.key) return head() + device(r) + " passes other pairs than " + device(0);
  auto pair_text = [](const rank_pair& p) {
    return "(" + std::to_string(p.first) + ", " + std::to_string(p.second) + ")";
  };
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const rank_pair& p = pairs[i];
    for (std::int64_t rank : {p.first, p.second})
      if (rank < 0 || rank >= g)
        return head() + "pair " + pair_text(p) + " names rank " + std::to_string(rank) + ", but the group has " +
               std::to_string(g) + " devices";
    for (std::size_t j = 0; j < i; ++j) {
      if (pairs[j].first == p.first)
        return head() + "rank " + std::to_string(p.first) + " is the source of two pairs, " + pair_text(pairs[j]) +
               " and " + pair_text(p);
      if (pairs[j].second == p.second)
        return head() + "rank " + std::to_string(p.second) + " is the target of two pairs, " + pair_text(pairs[j]) +
               " and " + pair_text(p);
    }
  }
  return {};
}

// ---------------------------------------------------------------------------
// The device interface, written once for every backend.

/// A buffer a collective accepts: contiguous and sized (std::span,
/// std::vector, std::array, C arrays). Spelled with <iterator>'s concepts
/// rather than with <ranges>' contiguous_range and sized_range (the same
/// test: contiguous iterators, std::data at the first element, a size), so
/// that this header does not need <ranges>, about 0.05 s of every including
/// TU with g++ 12. A strided view (an xtensor view has data() and size())
/// is not contiguous and is rejected.
template <class R>
concept collective_buffer = requires(R& r) {
  requires std::contiguous_iterator<decltype(std::begin(r))>;
  { std::data(r) } -> std::same_as<decltype(std::to_address(std::begin(r)))>;
  { std::size(r) } -> std::convertible_to<std::size_t>;
};

namespace detail {
template <class R>
using buffer_iterator_t = decltype(std::begin(std::declval<R&>()));
}  // namespace detail

/// The element type of a buffer, without const.
template <class R>
using buffer_value_t = std::remove_cv_t<std::iter_value_t<detail::buffer_iterator_t<R>>>;

/// Whether the buffer's elements may be written through it.
template <class R>
inline constexpr bool mutable_buffer_v =
    !std::is_const_v<std::remove_reference_t<std::iter_reference_t<detail::buffer_iterator_t<R>>>>;

/// Size and rank of one device's group along some axes.
struct group_info {
  std::int64_t size = 1;
  std::int64_t rank = 0;
};

/// The collectives of one device, on top of a backend `Impl` (CRTP) that
/// moves the data. `Impl` provides, for each collective, a member template
///
///   template <class T> void all_reduce_impl(std::span<T> data, reduce_op, axis_set, group_info,
///                                           const detail::collective_call&);
///   ... all_reduce_many_impl(parts, op, axes, group, call),
///   all_gather_impl(in, out, axes, group, call), reduce_scatter_impl(in, out, op, ...),
///   all_to_all_impl(in, out, ...), permute_impl(in, out, pairs, ...), barrier_impl(axes, group, call)
///
/// each called only for groups of two or more devices; it checks the group's
/// calls with check_calls() (every member reaching the same verdict) and
/// then moves the data. This class validates the axes, handles a group of
/// one locally and counts each call that succeeded in counters().
template <class Impl>
class basic_device {
 public:
  /// The device id (the mesh's device_ids at this position).
  int id() const { return id_; }
  /// The row-major position of this device in the mesh.
  std::int64_t position() const { return position_; }
  /// This device's coordinate along mesh axis `axis`.
  std::int64_t coord(std::size_t axis) const {
    if (axis >= shape_.size())
      throw error("xshard: coord(" + std::to_string(axis) + ") on a mesh of " + std::to_string(shape_.size()) +
                  " axes");
    return mesh_coords(shape(), position_)[axis];
  }
  /// Devices in this device's group of `axes`.
  std::int64_t group_size(axis_set axes) const {
    check_axes(axes, "group_size");
    return xshard::group_size(shape(), axes);
  }
  /// This device's rank in its group of `axes`.
  std::int64_t group_rank(axis_set axes) const {
    check_axes(axes, "group_rank");
    return xshard::group_rank(shape(), axes, position_);
  }
  const collective_counters& counters() const { return counters_; }
  void reset_counters() { counters_ = {}; }

  /// Reduces `data` over the group, in place: afterwards every member holds
  /// op over the members' data, element by element (sum in rank order).
  template <collective_buffer R>
  void all_reduce(R&& data, reduce_op op, axis_set axes) {
    using T = buffer_value_t<R>;
    static_assert(detail::reducible_v<T>,
                  "xshard: all_reduce(data, op, axes) needs arithmetic elements (not bool) in 'data'");
    static_assert(mutable_buffer_v<R>, "xshard: all_reduce(data, op, axes) reduces in place: 'data' must be mutable");
    const std::span<T> d(std::data(data), std::size(data));
    detail::collective_call c = make_call<T>(collective_kind::all_reduce, d.size(), d.size());
    c.op = static_cast<std::int64_t>(op);
    const group_info g = group_of(axes, collective_kind::all_reduce);
    if (g.size == 1) {
      check_alone(c, axes, {});
      return;
    }
    run_call(collective_kind::all_reduce, g, static_cast<std::int64_t>(d.size_bytes()),
             static_cast<std::int64_t>(d.size_bytes()), [&] { impl().template all_reduce_impl<T>(d, op, axes, g, c); });
  }

  /// Reduces several buffers over the group in one collective: afterwards
  /// every member's parts[i] holds op over the members' parts[i], element
  /// by element, the same bits as one all_reduce per part (sum in rank
  /// order). One rendezvous instead of one per buffer (a layer's parameter
  /// gradients, graph::program's backward). Every member passes parts of
  /// the same sizes, in the same order; no two parts may overlap.
  template <class T>
  void all_reduce_many(std::span<const std::span<T>> parts, reduce_op op, axis_set axes) {
    static_assert(detail::reducible_v<T>,
                  "xshard: all_reduce_many(parts, op, axes) needs arithmetic elements (not bool) in 'parts'");
    static_assert(!std::is_const_v<T>, "xshard: all_reduce_many(parts, op, axes) reduces in place: parts are mutable");
    std::size_t total = 0;
    for (const std::span<T>& p : parts) total += p.size();
    detail::collective_call c = make_call<T>(collective_kind::all_reduce, total, total);
    c.op = static_cast<std::int64_t>(op);
    c.key = detail::parts_key(parts);
    for (std::size_t i = 0; i < parts.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (detail::overlaps(parts[i].data(), parts[i].size_bytes(), parts[j].data(), parts[j].size_bytes()))
          c.flags |= detail::call_parts_overlap;
    const group_info g = group_of(axes, collective_kind::all_reduce);
    if (g.size == 1) {
      check_alone(c, axes, {});
      return;
    }
    const auto bytes = static_cast<std::int64_t>(total * sizeof(T));
    run_call(collective_kind::all_reduce, g, bytes, bytes,
             [&] { impl().template all_reduce_many_impl<T>(parts, op, axes, g, c); });
  }

  /// out = the members' `in`, concatenated in rank order (out holds group
  /// size x in.size() elements). `in` may be this device's own chunk of `out`.
  template <collective_buffer In, collective_buffer Out>
  void all_gather(In&& in, Out&& out, axis_set axes) {
    using T = buffer_value_t<Out>;
    static_assert(std::is_same_v<buffer_value_t<In>, T>,
                  "xshard: all_gather(in, out, axes) needs the same element type in 'in' and 'out'");
    static_assert(std::is_trivially_copyable_v<T>,
                  "xshard: all_gather(in, out, axes) needs trivially copyable elements");
    static_assert(mutable_buffer_v<Out>, "xshard: all_gather(in, out, axes) writes 'out': it must be mutable");
    const std::span<const T> i(std::data(in), std::size(in));
    const std::span<T> o(std::data(out), std::size(out));
    const group_info g = group_of(axes, collective_kind::all_gather);
    detail::collective_call c = make_call<T>(collective_kind::all_gather, i.size(), o.size());
    const bool own_chunk = static_cast<std::int64_t>(o.size()) == g.size * static_cast<std::int64_t>(i.size()) &&
                           detail::at_offset(i.data(), o.data(), static_cast<std::size_t>(g.rank) * i.size_bytes());
    if (!own_chunk && detail::overlaps(i.data(), i.size_bytes(), o.data(), o.size_bytes()))
      c.flags |= detail::call_overlap;
    if (g.size == 1) {
      check_alone(c, axes, {});
      copy(o.data(), i.data(), i.size());
      return;
    }
    run_call(collective_kind::all_gather, g, static_cast<std::int64_t>(i.size_bytes()),
             static_cast<std::int64_t>(i.size_bytes()), [&] { impl().template all_gather_impl<T>(i, o, axes, g, c); });
  }

  /// `in` holds group-size equal chunks; out = op over the members' chunk
  /// [rank]. `out` may be this device's own chunk of `in`.
  template <collective_buffer In, collective_buffer Out>
  void reduce_scatter(In&& in, Out&& out, reduce_op op, axis_set axes) {
    using T = buffer_value_t<Out>;
    static_assert(std::is_same_v<buffer_value_t<In>, T>,
                  "xshard: reduce_scatter(in, out, op, axes) needs the same element type in 'in' and 'out'");
    static_assert(detail::reducible_v<T>,
                  "xshard: reduce_scatter(in, out, op, axes) needs arithmetic elements (not bool)");
    static_assert(mutable_buffer_v<Out>, "xshard: reduce_scatter(in, out, op, axes) writes 'out': it must be mutable");
    const std::span<const T> i(std::data(in), std::size(in));
    const std::span<T> o(std::data(out), std::size(out));
    const group_info g = group_of(axes, collective_kind::reduce_scatter);
    detail::collective_call c = make_call<T>(collective_kind::reduce_scatter, i.size(), o.size());
    c.op = static_cast<std::int64_t>(op);
    const bool own_chunk = static_cast<std::int64_t>(i.size()) == g.size * static_cast<std::int64_t>(o.size()) &&
                           detail::at_offset(o.data(), i.data(), static_cast<std::size_t>(g.rank) * o.size_bytes());
    if (!own_chunk && detail::overlaps(i.data(), i.size_bytes(), o.data(), o.size_bytes()))
      c.flags |= detail::call_overlap;
    if (g.size == 1) {
      check_alone(c, axes, {});
      copy(o.data(), i.data(), i.size());
      return;
    }
    run_call(collective_kind::reduce_scatter, g, static_cast<std::int64_t>(i.size_bytes()),
             static_cast<std::int64_t>(i.size_bytes()),
             [&] { impl().template reduce_scatter_impl<T>(i, o, op, axes, g, c); });
  }

  /// `in` holds group-size equal chunks: chunk j goes to rank j, and chunk i
  /// of `out` comes from rank i.
  template <collective_buffer In, collective_buffer Out>
  void all_to_all(In&& in, Out&& out, axis_set axes) {
    using T = buffer_value_t<Out>;
    static_assert(std::is_same_v<buffer_value_t<In>, T>,
                  "xshard: all_to_all(in, out, axes) needs the same element type in 'in' and 'out'");
    static_assert(std::is_trivially_copyable_v<T>,
                  "xshard: all_to_all(in, out, axes) needs trivially copyable elements");
    static_assert(mutable_buffer_v<Out>, "xshard: all_to_all(in, out, axes) writes 'out': it must be mutable");
    const std::span<const T> i(std::data(in), std::size(in));
    const std::span<T> o(std::data(out), std::size(out));
    const group_info g = group_of(axes, collective_kind::all_to_all);
    detail::collective_call c = make_call<T>(collective_kind::all_to_all, i.size(), o.size());
    if (detail::overlaps(i.data(), i.size_bytes(), o.data(), o.size_bytes())) c.flags |= detail::call_overlap;
    if (g.size == 1) {
      check_alone(c, axes, {});
      copy(o.data(), i.data(), i.size());
      return;
    }
    run_call(collective_kind::all_to_all, g, static_cast<std::int64_t>(i.size_bytes()),
             static_cast<std::int64_t>(i.size_bytes()), [&] { impl().template all_to_all_impl<T>(i, o, axes, g, c); });
  }

  /// For each (source rank, target rank) pair, the target's `out` = the
  /// source's `in`; a member that is no pair's target gets zeros. Every
  /// member passes the same pairs; no rank is the source (or target) of two.
  template <collective_buffer In, collective_buffer Out, collective_buffer Pairs>
  requires std::is_same_v<buffer_value_t<Pairs>, rank_pair>
  void permute(In&& in, Out&& out, axis_set axes, Pairs&& pairs) {
    permute_pairs(std::forward<In>(in), std::forward<Out>(out), axes,
                  std::span<const rank_pair>(std::data(pairs), std::size(pairs)));
  }
  template <collective_buffer In, collective_buffer Out>
  void permute(In&& in, Out&& out, axis_set axes, std::initializer_list<rank_pair> pairs) {
    permute_pairs(std::forward<In>(in), std::forward<Out>(out), axes,
                  std::span<const rank_pair>(pairs.begin(), pairs.size()));
  }

  /// Returns when every member of the group has called barrier(axes).
  void barrier(axis_set axes) {
    const group_info g = group_of(axes, std::nullopt);
    if (g.size == 1) return;
    detail::collective_call c;
    c.kind = detail::barrier_call;
    impl().barrier_impl(axes, g, c);
  }

 protected:
  /// @pre position < size of the mesh; `axes` and `ids` outlive the device.
  basic_device(const mesh_axes& axes, std::span<const int> ids, std::int64_t position)
      : axes_(&axes), ids_(ids), position_(position), id_(ids[static_cast<std::size_t>(position)]) {
    for (const mesh_axis& a : axes) shape_.push_back(a.size);
  }

  std::span<const std::int64_t> shape() const { return {shape_.begin(), shape_.size()}; }
  /// The device id of rank `rank` in this device's group of `axes`.
  int member_id(axis_set axes, std::int64_t rank) const {
    return ids_[static_cast<std::size_t>(group_member(shape(), axes, position_, rank))];
  }
  /// check_collective_calls for this device's group of `axes`.
  std::string check_calls(std::span<const detail::collective_call> calls, axis_set axes,
                          std::span<const rank_pair> pairs) const {
    return check_collective_calls(
        calls, [&](std::int64_t r) { return member_id(axes, r); }, [&] { return axis_set_text(*axes_, axes).str(); },
        pairs);
  }

 private:
  Impl& impl() { return static_cast<Impl&>(*this); }

  template <class T>
  static detail::collective_call make_call(collective_kind k, std::size_t in, std::size_t out) {
    detail::collective_call c;
    c.kind = static_cast<std::int64_t>(k);
    c.in_count = static_cast<std::int64_t>(in);
    c.out_count = static_cast<std::int64_t>(out);
    c.type = detail::element_code<T>();
    return c;
  }

  void check_axes(axis_set axes, std::string_view what) const {
    if (!(axes >> shape_.size())) return;
    std::size_t bad = shape_.size();
    while (!(axes & axis_bit(bad))) ++bad;
    throw error("xshard: " + std::string(what) + " over axis set " + std::to_string(axes) + ": the mesh has no axis " +
                std::to_string(bad) + " (its axes are " + axis_set_text(*axes_, ~axis_set{0}).str() + ")");
  }
  group_info group_of(axis_set axes, std::optional<collective_kind> k) {
    check_axes(axes, k ? collective_name(*k) : std::string_view("barrier"));
    return {xshard::group_size(shape(), axes), xshard::group_rank(shape(), axes, position_)};
  }
  void check_alone(const detail::collective_call& c, axis_set axes, std::span<const rank_pair> pairs) const {
    const std::string msg = check_calls(std::span<const detail::collective_call>(&c, 1), axes, pairs);
    if (!msg.empty()) throw error(msg);
  }
  /// The shared tail of every collective on a group of more than one
  /// device: a trace event (kind, bytes, group size) around the backend's
  /// call, then the counters.
  template <class F>
  void run_call(collective_kind k, const group_info& g, std::int64_t bytes, std::int64_t counted, F&& call) {
    const trace_me traced(collective_name(k), {{"bytes", bytes}, {"group", g.size}});
    call();
    counters_.add(k, g.size, counted);
  }
  template <class T>
  static void copy(T* out, const T* in, std::size_t n) {
    if (n != 0 && out != in) std::memcpy(out, in, n * sizeof(T));
  }

  template <collective_buffer In, collective_buffer Out>
  void permute_pairs(In&& in, Out&& out, axis_set axes, std::span<const rank_pair> pairs) {
    using T = buffer_value_t<Out>;
    static_assert(std::is_same_v<buffer_value_t<In>, T>,
                  "xshard: permute(in, out, axes, pairs) needs the same element type in 'in' and 'out'");
    static_assert(std::is_trivially_copyable_v<T>,
                  "xshard: permute(in, out, axes, pairs) needs trivially copyable elements");
    static_assert(mutable_buffer_v<Out>, "xshard: permute(in, out, axes, pairs) writes 'out': it must be mutable");
    const std::span<const T> i(std::data(in), std::size(in));
    const std::span<T> o(std::data(out), std::size(out));
    const group_info g = group_of(axes, collective_kind::permute);
    detail::collective_call c = make_call<T>(collective_kind::permute, i.size(), o.size());
    c.key = detail::pairs_key(pairs);
    if (detail::overlaps(i.data(), i.size_bytes(), o.data(), o.size_bytes())) c.flags |= detail::call_overlap;
    bool source = false;
    for (const rank_pair& p : pairs) source = source || p.first == g.rank;
    if (g.size == 1) {
      check_alone(c, axes, pairs);
      if (source)
        copy(o.data(), i.data(), i.size());
      else if (!o.empty())
        std::memset(static_cast<void*>(o.data()), 0, o.size_bytes());
      return;
    }
    run_call(collective_kind::permute, g, static_cast<std::int64_t>(i.size_bytes()),
             source ? static_cast<std::int64_t>(i.size_bytes()) : 0,
             [&] { impl().template permute_impl<T>(i, o, pairs, axes, g, c); });
  }

  const mesh_axes* axes_;
  std::span<const int> ids_;
  static_vector<std::int64_t, max_mesh_axes> shape_{};
  std::int64_t position_ = 0;
  int id_ = 0;
  collective_counters counters_{};
};

}  // namespace xshard
