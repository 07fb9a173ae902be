// xshard/scan/scan_layers_unrolled.hpp - a heterogeneous stack: a
// boost::hana::tuple of layers (each its own type; params a hana::tuple of
// their params), unrolled at compile time.
//
//   auto layers = boost::hana::make_tuple(L1{}, L2{}, L3{});
//   auto y = xshard::scan_layers(layers, params, x);
#pragma once

#include <boost/hana/at.hpp>
#include <boost/hana/tuple.hpp>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "../trace/trace.hpp"
#include "remat.hpp"

namespace xshard {

/// Forward through a heterogeneous stack, unrolled.
template <class... L, class... P, class X>
auto scan_layers(const boost::hana::tuple<L...>& layers, const boost::hana::tuple<P...>& params, const X& x) {
  static_assert(sizeof...(L) == sizeof...(P), "xshard::scan_layers: one params entry per layer");
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    auto run = [&](auto self, auto idx, const auto& in) {
      constexpr std::size_t i = decltype(idx)::value;
      if constexpr (i == sizeof...(L)) {
        return in;
      } else {
        const auto& layer_i = boost::hana::at_c<i>(layers);
        return self(self, std::integral_constant<std::size_t, i + 1>{},
                    layer_i.forward(boost::hana::at_c<i>(params), in).first);
      }
    };
    return run(run, std::integral_constant<std::size_t, 0>{}, x);
  }
  (std::index_sequence_for<L...>{});
}

}  // namespace xshard
