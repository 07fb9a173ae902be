// xshard/core/tensor_traits.hpp - what is static about a tensor type, found
// without including xtensor: the rank and, where known, the extents.
//
//   tensor_rank_v<xt::xtensor<float, 2>>                      == 2
//   tensor_rank_v<decltype(xt::transpose(xtensor<float, 3>))> == 3   (shape_type is std::array)
//   tensor_rank_v<xt::xarray<float>>                          == -1  (dynamic)
//   static_extents<xt::xtensor_fixed<float, xt::xshape<8, 6>>>::value == {8, 6}
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

namespace xshard {

namespace detail {
/// std::tuple and std::pair (what std::apply takes).
template <class T>
struct is_tuple_like : std::false_type {};
template <class... T>
struct is_tuple_like<std::tuple<T...>> : std::true_type {};
template <class A, class B>
struct is_tuple_like<std::pair<A, B>> : std::true_type {};

template <class S>
struct shape_rank {
  static constexpr std::int64_t value = -1;
};
template <class V, std::size_t N>
struct shape_rank<std::array<V, N>> {
  static constexpr std::int64_t value = static_cast<std::int64_t>(N);
};
template <template <std::size_t...> class Shape, std::size_t... X>
struct shape_rank<Shape<X...>> {
  static constexpr std::int64_t value = static_cast<std::int64_t>(sizeof...(X));
};

template <class T>
struct static_extents_of {
  static constexpr bool known = false;
};
template <template <std::size_t...> class Shape, std::size_t... X>
struct static_extents_of<Shape<X...>> {
  static constexpr bool known = true;
  static constexpr std::array<std::int64_t, sizeof...(X)> value{static_cast<std::int64_t>(X)...};
};

template <class T>
constexpr std::int64_t static_rank_of() {
  if constexpr (requires { typename T::shape_type; }) {
    if constexpr (shape_rank<typename T::shape_type>::value >= 0) return shape_rank<typename T::shape_type>::value;
  }
  if constexpr (requires { T::rank; }) {
    // xtensor marks a dynamic rank with SIZE_MAX.
    if constexpr (static_cast<std::size_t>(T::rank) != static_cast<std::size_t>(-1))
      return static_cast<std::int64_t>(T::rank);
  }
  return -1;
}
}  // namespace detail

/// Static rank of a tensor type, or -1 if it is only known at run time.
template <class T>
inline constexpr std::int64_t tensor_rank_v = detail::static_rank_of<std::remove_cvref_t<T>>();

/// Static extents of a tensor type (known == false unless all are static).
template <class T>
struct static_extents : detail::static_extents_of<void> {};
template <class T>
requires requires { typename std::remove_cvref_t<T>::shape_type; }
struct static_extents<T> : detail::static_extents_of<typename std::remove_cvref_t<T>::shape_type> {};

}  // namespace xshard
