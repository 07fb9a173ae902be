// tests/spmd/collective_cases.hpp - the collective test cases, shared by the
// thread backend's gtest (tests/runtime/spmd_thread_test.cpp) and the MPI
// backend's program (tests/mpi/spmd_mpi_test.cpp).
//
// run_collective_cases(backend) runs one SPMD body on every device of the
// backend (a thread_mesh<M> or an mpi_mesh<M>). Each device fills its buffers
// with value<T>(position, index) and checks what every collective returns
// against an expectation computed here from those known inputs, for every
// subset of the mesh's axes. The groups are computed naively too (the
// positions that agree with this one off the axis set, in ascending order),
// not with the library's group functions. Failures are returned as text, one
// line each, from the devices this process drives.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>
#include <xshard/core/error.hpp>
#include <xshard/spmd/collectives.hpp>

namespace xshard_test {

using xshard::axis_set;
using xshard::collective_kind;
using xshard::rank_pair;
using xshard::reduce_op;

/// A trivially copyable element that is not a number.
struct pod {
  std::int32_t a = 0;
  std::int16_t b = 0;
  friend bool operator==(const pod&, const pod&) = default;
};

/// The element at `index` of the buffer of the device at `pos`: small
/// integers of both signs, so float sums are exact in any order.
template <class T>
T value(std::int64_t pos, std::int64_t index) {
  if constexpr (std::is_same_v<T, pod>)
    return pod{static_cast<std::int32_t>(pos), static_cast<std::int16_t>(index)};
  else
    return static_cast<T>((pos * 31 + index * 7) % 23 - 11);
}

template <class T>
T apply(reduce_op op, T a, T b) {
  switch (op) {
    case reduce_op::sum:
      return static_cast<T>(a + b);
    case reduce_op::max:
      return a < b ? b : a;
    case reduce_op::min:
      return b < a ? b : a;
  }
  return a;
}

template <class T>
std::string show(const T& v) {
  std::ostringstream s;
  if constexpr (std::is_same_v<T, pod>)
    s << '{' << v.a << ", " << v.b << '}';
  else
    s << +v;
  return s.str();
}

inline const char* type_name(int) { return "int"; }
inline const char* type_name(float) { return "float"; }
inline const char* type_name(double) { return "double"; }
inline const char* type_name(pod) { return "pod"; }

/// Mesh facts for the device at `pos`, computed without the library.
struct naive_mesh {
  std::vector<std::int64_t> shape;
  std::vector<int> ids;

  std::vector<std::int64_t> coords(std::int64_t p) const {
    std::vector<std::int64_t> c(shape.size());
    for (std::size_t a = shape.size(); a-- > 0;) {
      c[a] = p % shape[a];
      p /= shape[a];
    }
    return c;
  }
  std::int64_t size() const {
    std::int64_t n = 1;
    for (std::int64_t s : shape) n *= s;
    return n;
  }
  /// The members of pos's group of `axes`, by rank.
  std::vector<std::int64_t> members(axis_set axes, std::int64_t pos) const {
    std::vector<std::int64_t> m;
    const auto mine = coords(pos);
    for (std::int64_t q = 0; q < size(); ++q) {
      const auto c = coords(q);
      bool same = true;
      for (std::size_t a = 0; a < shape.size(); ++a)
        if (!(axes & (axis_set{1} << a)) && c[a] != mine[a]) same = false;
      if (same) m.push_back(q);
    }
    return m;
  }
};

/// "{x, y}" for the axes of `axes`, from the mesh's names.
template <class M>
std::string axes_text(axis_set axes) {
  std::string s = "{";
  bool first = true;
  for (std::size_t a = 0; a < M::axes.size(); ++a)
    if (axes & (axis_set{1} << a)) {
      if (!first) s += ", ";
      first = false;
      s += std::string(M::axes[a].name.view());
    }
  return s + "}";
}

/// One device's checks: the log of what failed and the counters it should show.
class device_cases {
 public:
  std::vector<std::string> failures;
  xshard::collective_counters expected{};

  template <class Dev>
  void run(Dev& dev) {
    using M = typename Dev::mesh_type;
    mesh_.shape.clear();
    for (std::int64_t s : M::mesh_shape()) mesh_.shape.push_back(s);
    mesh_.ids.assign(M::device_ids.begin(), M::device_ids.end());
    pos_ = dev.position();
    prefix_ = std::string("mesh \"") + std::string(M::text.view()) + "\" device " + std::to_string(dev.id()) + ": ";
    dev.reset_counters();
    if (dev.id() != mesh_.ids[static_cast<std::size_t>(pos_)]) fail("id() is " + std::to_string(dev.id()));
    const auto c = mesh_.coords(pos_);
    for (std::size_t a = 0; a < c.size(); ++a)
      if (dev.coord(a) != c[a]) fail("coord(" + std::to_string(a) + ") is " + std::to_string(dev.coord(a)));

    const axis_set all = (axis_set{1} << M::rank()) - 1;
    for (axis_set axes = 0; axes <= all; ++axes) {
      axes_ = axes;
      where_ = axes_text<M>(axes);
      members_ = mesh_.members(axes, pos_);
      g_ = static_cast<std::int64_t>(members_.size());
      rank_ = 0;
      while (members_[static_cast<std::size_t>(rank_)] != pos_) ++rank_;
      if (dev.group_size(axes) != g_) fail(where_ + " group_size " + std::to_string(dev.group_size(axes)));
      if (dev.group_rank(axes) != rank_) fail(where_ + " group_rank " + std::to_string(dev.group_rank(axes)));

      for (reduce_op op : {reduce_op::sum, reduce_op::max, reduce_op::min}) {
        for (std::int64_t n : {37, 3, 0}) {
          all_reduce<int>(dev, op, n);
          all_reduce<float>(dev, op, n);
          all_reduce<double>(dev, op, n);
        }
        reduce_scatter<int>(dev, op, 5, false);
        reduce_scatter<float>(dev, op, 5, false);
        reduce_scatter<double>(dev, op, 5, true);
      }
      // 8219 elements are over 32 KiB: thread_mesh copies inputs up to that
      // size into its slots (one barrier) and reads larger ones in place
      // (two), so both paths run for every collective.
      all_reduce<float>(dev, reduce_op::sum, 8219);
      all_reduce<int>(dev, reduce_op::max, 8219);
      // Several buffers in one collective: small (staged), empty parts, and
      // over 32 KiB in all, with parts that straddle the members' chunks.
      all_reduce_many<float>(dev, reduce_op::sum, {37, 0, 5});
      all_reduce_many<int>(dev, reduce_op::min, {3});
      all_reduce_many<double>(dev, reduce_op::max, {});
      all_reduce_many<float>(dev, reduce_op::sum, {8219, 3, 0, 4001});
      reduce_scatter<float>(dev, reduce_op::sum, 8219, false);
      all_gather<int>(dev, 5, false);
      all_gather<int>(dev, 5, true);
      all_gather<float>(dev, 1, false);
      all_gather<double>(dev, 5, false);
      all_gather<pod>(dev, 3, false);
      all_gather<float>(dev, 8219, false);
      all_gather<float>(dev, 8219, true);
      all_to_all<int>(dev, 3);
      all_to_all<float>(dev, 1);
      all_to_all<double>(dev, 3);
      all_to_all<pod>(dev, 2);
      all_to_all<float>(dev, 8219);
      std::vector<rank_pair> shift, partial{{0, g_ - 1}};
      for (std::int64_t r = 0; r < g_; ++r) shift.push_back({r, (r + 1) % g_});
      permute<int>(dev, 7, shift);
      permute<double>(dev, 7, shift);
      permute<pod>(dev, 3, shift);
      permute<float>(dev, 7, partial);
      permute<int>(dev, 4, {});
      permute<float>(dev, 8219, shift);
      dev.barrier(axes);
      if (g_ > 1) mismatches(dev);
    }
    if (!(dev.counters() == expected)) {
      std::string s = "counters differ:";
      for (std::size_t k = 0; k < xshard::collective_kind_count; ++k) {
        const auto kind = static_cast<collective_kind>(k);
        s += " " + std::string(xshard::collective_name(kind)) + " calls " +
             std::to_string(dev.counters().calls_of(kind)) + "/" + std::to_string(expected.calls_of(kind)) + " bytes " +
             std::to_string(dev.counters().bytes_of(kind)) + "/" + std::to_string(expected.bytes_of(kind));
      }
      failures.push_back(prefix_ + s);
    }
  }

 private:
  void fail(const std::string& what) { failures.push_back(prefix_ + what); }

  template <class T>
  std::vector<T> input(std::int64_t n) const {
    std::vector<T> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = value<T>(pos_, i);
    return v;
  }
  template <class T>
  void compare(const std::string& what, const std::vector<T>& got, const std::vector<T>& want) {
    if (got.size() != want.size()) {
      fail(what + ": size " + std::to_string(got.size()) + ", expected " + std::to_string(want.size()));
      return;
    }
    for (std::size_t i = 0; i < got.size(); ++i)
      if (!(got[i] == want[i])) {
        fail(what + ": element " + std::to_string(i) + " is " + show(got[i]) + ", expected " + show(want[i]));
        return;
      }
  }
  std::string name(const char* coll, const char* type, const char* extra = "") const {
    return std::string(coll) + " over " + where_ + " of " + type + extra;
  }
  static const char* op_name(reduce_op op) {
    return op == reduce_op::sum ? " (sum)" : op == reduce_op::max ? " (max)" : " (min)";
  }
  template <class T>
  std::int64_t bytes(std::int64_t n) const {
    return n * static_cast<std::int64_t>(sizeof(T));
  }

  template <class T, class Dev>
  void all_reduce(Dev& dev, reduce_op op, std::int64_t n) {
    std::vector<T> data = input<T>(n), want(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      T acc = value<T>(members_[0], i);
      for (std::size_t j = 1; j < members_.size(); ++j) acc = apply(op, acc, value<T>(members_[j], i));
      want[static_cast<std::size_t>(i)] = acc;
    }
    dev.all_reduce(data, op, axes_);
    expected.add(collective_kind::all_reduce, g_, bytes<T>(n));
    compare(name("all-reduce", type_name(T{}), op_name(op)), data, want);
  }

  /// all_reduce_many over parts of the given sizes, each filled as one
  /// buffer's stretch of input<T> (so the expected values are all_reduce's
  /// of the concatenation).
  template <class T, class Dev>
  void all_reduce_many(Dev& dev, reduce_op op, std::initializer_list<std::int64_t> sizes) {
    std::int64_t n = 0;
    for (std::int64_t s : sizes) n += s;
    const std::vector<T> in = input<T>(n);
    std::vector<std::vector<T>> parts;
    std::vector<std::span<T>> views;
    std::int64_t at = 0;
    for (std::int64_t s : sizes) {
      parts.emplace_back(in.begin() + at, in.begin() + at + s);
      at += s;
    }
    for (std::vector<T>& p : parts) views.emplace_back(p);
    dev.all_reduce_many(std::span<const std::span<T>>(views), op, axes_);
    expected.add(collective_kind::all_reduce, g_, bytes<T>(n));
    std::vector<T> got, want(static_cast<std::size_t>(n));
    for (const std::vector<T>& p : parts) got.insert(got.end(), p.begin(), p.end());
    for (std::int64_t i = 0; i < n; ++i) {
      T acc = value<T>(members_[0], i);
      for (std::size_t j = 1; j < members_.size(); ++j) acc = apply(op, acc, value<T>(members_[j], i));
      want[static_cast<std::size_t>(i)] = acc;
    }
    const std::string what = "all-reduce of " + std::to_string(sizes.size()) + " parts";
    compare(name(what.c_str(), type_name(T{}), op_name(op)), got, want);
  }

  template <class T, class Dev>
  void reduce_scatter(Dev& dev, reduce_op op, std::int64_t m, bool in_place) {
    std::vector<T> in = input<T>(g_ * m), out(static_cast<std::size_t>(m)), want(static_cast<std::size_t>(m));
    for (std::int64_t i = 0; i < m; ++i) {
      T acc = value<T>(members_[0], rank_ * m + i);
      for (std::size_t j = 1; j < members_.size(); ++j) acc = apply(op, acc, value<T>(members_[j], rank_ * m + i));
      want[static_cast<std::size_t>(i)] = acc;
    }
    if (in_place) {
      std::span<T> mine(in.data() + rank_ * m, static_cast<std::size_t>(m));
      dev.reduce_scatter(in, mine, op, axes_);
      out.assign(mine.begin(), mine.end());
    } else {
      dev.reduce_scatter(in, out, op, axes_);
    }
    expected.add(collective_kind::reduce_scatter, g_, bytes<T>(g_ * m));
    compare(name("reduce-scatter", type_name(T{}), in_place ? " in place" : op_name(op)), out, want);
  }

  template <class T, class Dev>
  void all_gather(Dev& dev, std::int64_t n, bool in_place) {
    std::vector<T> in = input<T>(n), out(static_cast<std::size_t>(g_ * n)), want;
    for (std::int64_t q : members_)
      for (std::int64_t i = 0; i < n; ++i) want.push_back(value<T>(q, i));
    if (in_place) {
      std::copy(in.begin(), in.end(), out.begin() + rank_ * n);
      dev.all_gather(std::span<const T>(out.data() + rank_ * n, static_cast<std::size_t>(n)), out, axes_);
    } else {
      dev.all_gather(in, out, axes_);
    }
    expected.add(collective_kind::all_gather, g_, bytes<T>(n));
    compare(name("all-gather", type_name(T{}), in_place ? " in place" : ""), out, want);
  }

  template <class T, class Dev>
  void all_to_all(Dev& dev, std::int64_t m) {
    const std::vector<T> in = input<T>(g_ * m);
    std::vector<T> out(static_cast<std::size_t>(g_ * m)), want;
    for (std::int64_t q : members_)
      for (std::int64_t i = 0; i < m; ++i) want.push_back(value<T>(q, rank_ * m + i));
    dev.all_to_all(in, out, axes_);
    expected.add(collective_kind::all_to_all, g_, bytes<T>(g_ * m));
    compare(name("all-to-all", type_name(T{})), out, want);
  }

  template <class T, class Dev>
  void permute(Dev& dev, std::int64_t n, const std::vector<rank_pair>& pairs) {
    const std::vector<T> in = input<T>(n);
    std::vector<T> out(static_cast<std::size_t>(n), value<T>(99, 1)), want(static_cast<std::size_t>(n));
    bool source = false;
    for (const rank_pair& p : pairs) {
      source = source || p.first == rank_;
      if (p.second == rank_)
        for (std::int64_t i = 0; i < n; ++i)
          want[static_cast<std::size_t>(i)] = value<T>(members_[static_cast<std::size_t>(p.first)], i);
    }
    dev.permute(in, out, axes_, pairs);
    expected.add(collective_kind::permute, g_, source ? bytes<T>(n) : 0);
    compare(name("permute", type_name(T{}), pairs.size() == members_.size() ? " (shift)" : " (partial)"), out, want);
  }

  /// Calls that disagree across the group: every member throws the same
  /// error, nothing is counted, and the group works again afterwards.
  template <class Dev>
  void mismatches(Dev& dev) {
    const bool first_group = members_[0] == 0;  // the group that holds position 0
    const std::string id0 = std::to_string(mesh_.ids[static_cast<std::size_t>(members_[0])]);
    const std::string id1 = std::to_string(mesh_.ids[static_cast<std::size_t>(members_[1])]);
    const std::string g = std::to_string(g_);
    auto expect_error = [&](const char* what, const std::string& want, auto&& call) {
      try {
        call();
        if (!want.empty()) fail(std::string(what) + " over " + where_ + ": no error, expected \"" + want + '"');
      } catch (const xshard::error& e) {
        if (want.empty())
          fail(std::string(what) + " over " + where_ + ": unexpected error \"" + e.what() + '"');
        else if (e.what() != want)
          fail(std::string(what) + " over " + where_ + ": error \"" + e.what() + "\", expected \"" + want + '"');
      }
    };

    // Sizes differ: position 0 (rank 0 of its group) passes `first`
    // elements, its peers `rest`; every member of that group gets the error.
    auto size_mismatch = [&]<class T>(std::int64_t first, std::int64_t rest) {
      std::vector<T> data = input<T>(pos_ == 0 ? first : rest);
      expect_error("size mismatch",
                   first_group ? "xshard: all-reduce over " + where_ + ": device " + id1 + " has " +
                                     std::to_string(rest) + " elements, device " + id0 + " has " + std::to_string(first)
                               : std::string(),
                   [&] { dev.all_reduce(data, reduce_op::sum, axes_); });
      if (!first_group) expected.add(collective_kind::all_reduce, g_, bytes<T>(rest));
    };
    size_mismatch.template operator()<int>(8, 7);
    // One side over thread_mesh's staging size and the other under it (one
    // reads copies, the other reads in place and would meet twice): the same
    // error, and no member waits for a second meeting.
    size_mismatch.template operator()<float>(8219, 5);
    // The same number of elements split into other parts: position 0
    // passes 8 + 4, its peers 12 (one part).
    {
      std::vector<float> a = input<float>(8), b = input<float>(4), whole = input<float>(12);
      std::vector<std::span<float>> parts;
      if (pos_ == 0) {
        parts = {std::span<float>(a), std::span<float>(b)};
      } else {
        parts = {std::span<float>(whole)};
      }
      expect_error("split mismatch",
                   first_group ? "xshard: all-reduce over " + where_ + ": device " + id1 +
                                     " splits its elements into other buffers than device " + id0 +
                                     " (all_reduce_many's parts must have the same sizes on every member)"
                               : std::string(),
                   [&] { dev.all_reduce_many(std::span<const std::span<float>>(parts), reduce_op::sum, axes_); });
      if (!first_group) expected.add(collective_kind::all_reduce, g_, bytes<float>(12));
    }
    // A different collective: position 0 calls barrier, its peers all_gather.
    {
      const std::vector<double> in = input<double>(2);
      std::vector<double> out(static_cast<std::size_t>(2 * g_));
      expect_error("mismatched kinds",
                   first_group ? "xshard: mismatched collectives over " + where_ + ": device " + id1 +
                                     " called all-gather, device " + id0 + " called barrier"
                               : std::string(),
                   [&] {
                     if (pos_ == 0)
                       dev.barrier(axes_);
                     else
                       dev.all_gather(in, out, axes_);
                   });
      if (!first_group) expected.add(collective_kind::all_gather, g_, bytes<double>(2));
    }
    // Rank 1's output is one element short.
    {
      const std::vector<float> in = input<float>(3);
      std::vector<float> out(static_cast<std::size_t>(3 * g_ - (rank_ == 1 ? 1 : 0)));
      expect_error("short output",
                   "xshard: all-gather over " + where_ + ": device " + id1 + "'s output has " +
                       std::to_string(3 * g_ - 1) + " elements, it needs " + std::to_string(3 * g_),
                   [&] { dev.all_gather(in, out, axes_); });
    }
    // Element types differ.
    {
      std::vector<float> f = input<float>(4);
      std::vector<double> d = input<double>(4);
      expect_error("type mismatch",
                   "xshard: all-reduce over " + where_ + ": device " + id1 + " passes float64 elements, device " + id0 +
                       " passes float32",
                   [&] {
                     if (rank_ == 0)
                       dev.all_reduce(f, reduce_op::max, axes_);
                     else
                       dev.all_reduce(d, reduce_op::max, axes_);
                   });
    }
    // Reduce ops differ.
    {
      std::vector<int> data = input<int>(4);
      expect_error(
          "op mismatch",
          "xshard: all-reduce over " + where_ + ": device " + id1 + " reduces with min, device " + id0 + " with sum",
          [&] { dev.all_reduce(data, rank_ == 0 ? reduce_op::sum : reduce_op::min, axes_); });
    }
    // Not divisible into group-size chunks.
    {
      const std::vector<int> in = input<int>(2 * g_ + 1);
      std::vector<int> out(2);
      expect_error("uneven reduce-scatter",
                   "xshard: reduce-scatter over " + where_ + ": " + std::to_string(2 * g_ + 1) +
                       " elements do not split into " + g + " equal chunks",
                   [&] { dev.reduce_scatter(in, out, reduce_op::sum, axes_); });
    }
    // A rank outside the group.
    {
      const std::vector<int> in = input<int>(3);
      std::vector<int> out(3);
      const std::vector<rank_pair> bad{{0, 1}, {1, g_}};
      expect_error("bad pair",
                   "xshard: permute over " + where_ + ": pair (1, " + g + ") names rank " + g + ", but the group has " +
                       g + " devices",
                   [&] { dev.permute(in, out, axes_, bad); });
      const std::vector<rank_pair> twice{{0, 1}, {1, 1}};
      expect_error("target twice",
                   "xshard: permute over " + where_ + ": rank 1 is the target of two pairs, (0, 1) and (1, 1)",
                   [&] { dev.permute(in, out, axes_, twice); });
    }
    // Overlapping input and output.
    {
      std::vector<int> buf = input<int>(2 * g_);
      expect_error("overlap", "xshard: all-to-all over " + where_ + ": device " + id0 + "'s input and output overlap",
                   [&] { dev.all_to_all(std::span<const int>(buf), std::span<int>(buf), axes_); });
    }
    // And the group still works.
    all_reduce<int>(dev, reduce_op::sum, 9);
  }

  naive_mesh mesh_;
  std::int64_t pos_ = 0;
  std::string prefix_;
  axis_set axes_ = 0;
  std::string where_;
  std::vector<std::int64_t> members_;
  std::int64_t g_ = 1, rank_ = 0;
};

/// Runs every case on every device `backend` drives; returns the failures.
template <class Backend>
std::vector<std::string> run_collective_cases(Backend& backend) {
  using M = typename Backend::mesh_type;
  std::vector<device_cases> cases(static_cast<std::size_t>(M::size()));
  backend.run([&](auto& dev) { cases[static_cast<std::size_t>(dev.position())].run(dev); });
  std::vector<std::string> failures;
  for (const device_cases& c : cases) failures.insert(failures.end(), c.failures.begin(), c.failures.end());
  return failures;
}

}  // namespace xshard_test
