// xshard/ops/composite.hpp - every composite op: the registry and policy
// (composite_policy.hpp) and the ops themselves.
//
//   xshard.gelu, xshard.gelu_backward             ops/gelu.hpp
//   xshard.softmax, xshard.softmax_backward       ops/softmax.hpp
//   xshard.layer_norm, xshard.layer_norm_backward ops/layer_norm.hpp
//   xshard.rms_norm, xshard.rms_norm_backward     ops/rms_norm.hpp
//
// Example (compiled in tests/compile/doc_ops.cpp):
//   auto y  = xshard::gelu(x, "tanh");                    // policy's choice
//   auto y2 = xshard::gelu(x, xshard::gelu_approximate::tanh,
//                          xshard::composite_mode::decompose);  // forced
//   xshard::scoped_composite_mode d("softmax", xshard::composite_mode::decompose);
//   std::cout << xshard::composites();                    // the registry
#pragma once

#include "composite_policy.hpp"
#include "gelu.hpp"
#include "layer_norm.hpp"
#include "rms_norm.hpp"
#include "softmax.hpp"
