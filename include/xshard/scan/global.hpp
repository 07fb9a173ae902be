// xshard/scan/global.hpp - scan_layers and scan_layers_vjp on global arrays
// (spmd/global.hpp): the stack runs on every device of the thread mesh the
// arrays live on, with its planned collectives.
//
// Example (compiled in tests/compile/doc_scan.cpp):
//   xshard::mlp_block<float, xshard::data_model_mlp<M>> block;                      // Megatron on data x model
//   auto W1 = xshard::distribute<xshard::spec<"None, model, None">>(mesh, stacked_w1);  // [layers, f, d]
//   // ... B1, W2 and B2 alike: each the layer's spec with an unsharded leading dim
//   auto params = std::tuple{W1, B1, W2, B2};
//   auto Y = xshard::scan_layers(block, params, X);                                      // a global
//   auto [grads, dX] = xshard::scan_layers_vjp(block, params, X, GY, xshard::remat::dots_saveable);
#pragma once

#include <utility>

#include "../spmd/global.hpp"
#include "scan_layers.hpp"

namespace xshard {

/// scan_layers over stacked parameters given as a tuple of globals.
template <stackable_layer L, class P, Global X>
auto scan_layers(const L& l, const P& stacked, const X& x) {
  return on_mesh([&](const auto& p, const auto& xs) { return scan_layers(l, p, xs); }, stacked, x);
}

/// The stacked parameter gradients (a tuple of globals) and the input's
/// gradient of sum(gy * scan_layers(l, stacked, x)) under `policy`.
template <stackable_layer L, class P, Global X, Global G>
auto scan_layers_vjp(const L& l, const P& stacked, const X& x, const G& gy, remat policy) {
  return on_mesh([&](const auto& p, const auto& xs, const auto& g) { return scan_layers_vjp(l, p, xs, g, policy); },
                 stacked, x, gy);
}

}  // namespace xshard
