// xshard/sharding/shardable.hpp - can a tensor type be sharded by (M, S)?
//
// Example (compiled in tests/compile/doc_sharding.cpp):
//   static_assert(xshard::shardable<M, xshard::spec<"data, None">, xt::xtensor<float, 2>>);
//   static_assert(!xshard::shardable<M, xshard::spec<"data">, xt::xtensor<float, 2>>);
//   static_assert(xshard::evenly_shardable<M, S, xt::xtensor_fixed<float, xt::xshape<8, 6>>>);
//   static_assert(xshard::check_shardable<M, S, T>());  // else a compile error naming both ranks, or the dim
//
// The concepts are quiet (usable in `requires` and overload sets); the
// check_* functions report the offender. Tensor types are recognised without
// including xtensor: a static `rank` member (xt::xtensor, xt::xtensor_fixed)
// gives the rank; a `shape_type` that is some `Shape<std::size_t...>`
// (xt::fixed_shape) gives static extents. A type with neither has unknown rank
// (xt::xarray's dynamic rank counts as unknown) and passes the rank check.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../core/diagnostics.hpp"
#include "../core/tensor_traits.hpp"
#include "sharding.hpp"

namespace xshard {

namespace detail {
template <Mesh M, Spec S, class T>
constexpr diagnostic shardable_diag(bool even) {
  diagnostic d = op_diag<M, S>;
  if (!d.ok()) return d;
  constexpr std::int64_t rank = tensor_rank_v<T>;
  if (rank >= 0 && rank != static_cast<std::int64_t>(S::rank())) {
    d.code = errc::spec_rank_mismatch;
    d.a = static_cast<std::int64_t>(S::rank());
    d.b = rank;
    return d;
  }
  if constexpr (static_extents<T>::known) {
    if (even && static_extents<T>::value.size() == S::rank()) {
      const xla_sharding x = to_xla(op_of<M, S>().value);
      if (x.is_tiled())
        for (std::size_t i = 0; i < x.data_rank(); ++i)
          if (static_extents<T>::value[i] % x.tile_dims[i] != 0) {
            d.code = errc::uneven_shard;
            d.a = static_cast<std::int64_t>(i);
            d.b = static_extents<T>::value[i];
            d.column = static_cast<int>(x.tile_dims[i]);
            return d;
          }
    }
  }
  return d;
}
}  // namespace detail

/// S fits M and the rank of S equals the static rank of T (if T has one).
template <class M, class S, class T>
concept shardable = Mesh<M> && Spec<S> &&(detail::shardable_diag<M, S, T>(false).ok());

/// shardable, and every static extent of T divides evenly into its tiles.
template <class M, class S, class T>
concept evenly_shardable = shardable<M, S, T> && static_extents<T>::known &&
    (detail::shardable_diag<M, S, T>(true).ok());

/// Compile error naming the offender unless shardable<M, S, T>.
template <Mesh M, Spec S, class T>
consteval bool check_shardable() {
  return raise<detail::shardable_diag<M, S, T>(false)>();
}
/// Compile error naming the dim and extent unless every extent divides.
template <Mesh M, Spec S, class T>
consteval bool check_evenly_shardable() {
  return raise<detail::shardable_diag<M, S, T>(true)>();
}

}  // namespace xshard
