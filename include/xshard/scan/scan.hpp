// xshard/scan/scan.hpp - JAX's lax.scan over xtensor values.
//
// Example (compiled in tests/compile/doc_scan.cpp):
//   auto [final, ys] = xshard::scan(
//       [](const xt::xtensor<float, 1>& c, const xt::xtensor<float, 1>& x) {
//         xt::xtensor<float, 1> next = c + x;
//         return std::pair{next, next};                    // (new carry, y)
//       },
//       init, xs);                                         // xs: leading dim = length
//   // ys[t] = the y of step t, stacked on a new leading dim
//
// Semantics (JAX's):
//  - f(carry, x_t) returns (carry', y_t) as a std::pair or std::tuple; the
//    carry is any value (a tensor, a scalar, a std::tuple / std::pair of
//    them, nested); y_t a tensor, a scalar, a tuple of them, or
//    xshard::none (no ys).
//  - xs is a tensor whose leading dim is the length (a rank-1 xs gives
//    scalar steps), a std::tuple of such
//    tensors (same length), or xshard::none with options.length.
//  - options.reverse runs t = length-1 .. 0; ys[t] still pairs with xs[t].
//  - options.unroll runs that many steps per loop trip (the same results).
//  - Tensors are static-rank (xt::xtensor, xt::xtensor_fixed). A scan of
//    length 0 returns the initial carry and default-constructed (empty) ys.
//  - The carry's type must not change (a compile error naming both types:
//    for xt::xtensor_fixed this is a static shape change), nor its run-time
//    shapes (an xshard::error naming the step, the old and the new shape).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "../core/error.hpp"
#include "../core/tensor_traits.hpp"  // is_tuple_like
#include "../core/text.hpp"
#include "../trace/trace.hpp"

namespace xshard {

/// "Nothing here": xs with no data (use options.length), or no ys.
struct none_t {
  friend constexpr bool operator==(none_t, none_t) { return true; }
};
inline constexpr none_t none{};

struct scan_options {
  std::optional<std::size_t> length{};  ///< required when xs is none; checked otherwise
  bool reverse = false;
  std::size_t unroll = 1;  ///< steps per loop trip (>= 1)
};

namespace detail {

template <class T>
concept shaped = requires(const T& t) {
  t.shape();
  t.dimension();
};

/// The shapes of every tensor inside a carry, flattened in order.
template <class C>
void collect_shapes(const C& c, std::vector<std::vector<std::size_t>>& out) {
  if constexpr (is_tuple_like<C>::value) {
    std::apply([&](const auto&... e) { (collect_shapes(e, out), ...); }, c);
  } else if constexpr (shaped<C>) {
    out.emplace_back(c.shape().begin(), c.shape().end());
  } else if constexpr (requires { c.global_shape(); }) {  // a sharded tensor: its global shape
    out.emplace_back(c.global_shape().begin(), c.global_shape().end());
  }
}

/// Leading extent of a tensor, or of every tensor of a tuple (checked equal).
template <class Xs>
std::optional<std::size_t> leading_extent(const Xs& xs) {
  if constexpr (std::is_same_v<Xs, none_t>) {
    return std::nullopt;
  } else if constexpr (is_tuple_like<Xs>::value) {
    std::optional<std::size_t> n;
    std::apply(
        [&](const auto&... e) {
          (
              [&] {
                const auto m = leading_extent(e);
                if (n && m && *n != *m)
                  throw error("xshard: scan: xs have different lengths (" + std::to_string(*n) + " and " +
                              std::to_string(*m) + ")");
                if (m) n = m;
              }(),
              ...);
        },
        xs);
    return n;
  } else {
    if (xs.dimension() == 0) throw error("xshard: scan: an xs tensor has rank 0 (no leading dim to scan over)");
    return static_cast<std::size_t>(xs.shape()[0]);
  }
}

/// Step t of xs: a view of row t (or a tuple of them).
template <class Xs>
decltype(auto) slice_step(const Xs& xs, std::size_t t) {
  if constexpr (std::is_same_v<Xs, none_t>) {
    return none;
  } else if constexpr (is_tuple_like<Xs>::value) {
    return std::apply([&](const auto&... e) { return std::make_tuple(slice_step(e, t)...); }, xs);
  } else {
    using T = typename Xs::value_type;
    constexpr std::size_t R = std::tuple_size_v<std::remove_cvref_t<decltype(xs.shape())>>;
    if constexpr (R == 1)
      return T(xs(t));  // a rank-1 xs steps over scalars
    else
      return xt::xtensor<T, R - 1>(xt::view(xs, t));
  }
}

/// Stacked ys: storage built on the first step, filled at row t.
template <class Y>
struct stacker {
  // A scalar y: a 1-D tensor of them.
  using type = xt::xtensor<Y, 1>;
  type out;
  void init(std::size_t n, const Y&) { out = type::from_shape({n}); }
  void put(std::size_t t, const Y& y) { out(t) = y; }
};

template <class Y>
requires shaped<Y>
struct stacker<Y> {
  using T = typename Y::value_type;
  static constexpr std::size_t R = std::tuple_size_v<std::remove_cvref_t<decltype(std::declval<Y>().shape())>>;
  using type = xt::xtensor<T, R + 1>;
  type out;
  std::array<std::size_t, R> shape{};
  void init(std::size_t n, const Y& y) {
    std::array<std::size_t, R + 1> s{};
    s[0] = n;
    for (std::size_t d = 0; d < R; ++d) s[d + 1] = shape[d] = y.shape()[d];
    out = type::from_shape(s);
  }
  void put(std::size_t t, const Y& y) {
    for (std::size_t d = 0; d < R; ++d)
      if (y.shape()[d] != shape[d]) {
        std::vector<std::size_t> a(shape.begin(), shape.end()), b(y.shape().begin(), y.shape().end());
        throw error("xshard: scan: y of step " + std::to_string(t) + " has shape " + shape_text(b) + ", step 0's has " +
                    shape_text(a));
      }
    xt::view(out, t) = y;
  }
};

template <>
struct stacker<none_t> {
  using type = none_t;
  type out;
  void init(std::size_t, const none_t&) {}
  void put(std::size_t, const none_t&) {}
};

template <class... Y>
struct stacker<std::tuple<Y...>> {
  using type = std::tuple<typename stacker<Y>::type...>;
  std::tuple<stacker<Y>...> parts;
  void init(std::size_t n, const std::tuple<Y...>& y) {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (std::get<I>(parts).init(n, std::get<I>(y)), ...); }
    (std::index_sequence_for<Y...>{});
  }
  void put(std::size_t t, const std::tuple<Y...>& y) {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (std::get<I>(parts).put(t, std::get<I>(y)), ...); }
    (std::index_sequence_for<Y...>{});
  }
  type take() {
    return std::apply([](auto&... p) { return type{std::move(p.out)...}; }, parts);
  }
};

template <class S>
auto take(S& s) {
  if constexpr (requires { s.take(); })
    return s.take();
  else
    return std::move(s.out);
}

}  // namespace detail

/// JAX's scan (see the header comment). Returns std::pair{final carry,
/// stacked ys}.
template <class F, class Carry, class Xs>
auto scan(F&& f, Carry init, const Xs& xs, scan_options options = {}) {
  using X = std::remove_cvref_t<decltype(detail::slice_step(xs, 0))>;
  using R = std::remove_cvref_t<std::invoke_result_t<F&, const Carry&, const X&>>;
  static_assert(detail::is_tuple_like<R>::value && std::tuple_size_v<R> == 2,
                "xshard::scan: f(carry, x) must return (new carry, y) as a std::pair or std::tuple");
  using NewCarry = std::remove_cvref_t<std::tuple_element_t<0, R>>;
  using Y = std::remove_cvref_t<std::tuple_element_t<1, R>>;
  static_assert(std::is_same_v<NewCarry, Carry>,
                "xshard::scan: f must return a carry of the same type as init (for xt::xtensor_fixed: the same "
                "static shape)");
  const std::optional<std::size_t> from_xs = detail::leading_extent(xs);
  if (!from_xs && !options.length) throw error("xshard: scan: xs is none, so options.length is needed");
  if (from_xs && options.length && *from_xs != *options.length)
    throw error("xshard: scan: options.length is " + std::to_string(*options.length) + " but xs have length " +
                std::to_string(*from_xs));
  if (options.unroll == 0) throw error("xshard: scan: options.unroll must be at least 1");
  const std::size_t n = from_xs ? *from_xs : *options.length;

  std::vector<std::vector<std::size_t>> shapes0, shapes;
  detail::collect_shapes(init, shapes0);
  Carry carry = std::move(init);
  detail::stacker<Y> ys;
  auto step = [&](std::size_t i) {
    const std::size_t t = options.reverse ? n - 1 - i : i;
    const trace_me scope("scan/step", {{"t", t}});
    auto r = f(std::as_const(carry), detail::slice_step(xs, t));
    carry = std::move(std::get<0>(r));
    shapes.clear();
    detail::collect_shapes(carry, shapes);
    for (std::size_t k = 0; k < shapes.size(); ++k)
      if (shapes[k] != shapes0[k])
        throw error("xshard: scan: the carry's tensor " + std::to_string(k) + " changed shape at step " +
                    std::to_string(t) + ": " + detail::shape_text(shapes0[k]) + " -> " + detail::shape_text(shapes[k]));
    if (i == 0) ys.init(n, std::get<1>(r));
    ys.put(t, std::get<1>(r));
  };
  std::size_t i = 0;
  for (; i + options.unroll <= n; i += options.unroll)
    for (std::size_t k = 0; k < options.unroll; ++k) step(i + k);
  for (; i < n; ++i) step(i);
  return std::pair{std::move(carry), detail::take(ys)};
}

}  // namespace xshard
