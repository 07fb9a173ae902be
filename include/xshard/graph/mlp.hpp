// xshard/graph/mlp.hpp - the transformer MLP block written once as a graph:
//
//   h = save<"h">(x W1^T + b1);   y = constrain<batch>(x + gelu(h) W2^T + b2)
//
// graph::mlp_block<T, Layout> is a layer (nn/layer.hpp) with the
// hand-written xshard::mlp_block's parameters, layouts (replicated_mlp,
// data_model_mlp<M>) and results; its vjp, remat residuals and collective
// counts are derived from this one definition (graph/graph.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "../nn/mlp.hpp"  // the layouts
#include "graph.hpp"

namespace xshard::graph {

template <class T, class Layout = replicated_mlp>
struct mlp_def {
  template <std::size_t R, class S>
  using tensor = typename Layout::template tensor<T, R, S>;
  using input = tensor<2, typename Layout::batch>;
  using params = std::tuple<tensor<2, typename Layout::w_in>, tensor<1, typename Layout::b_in>,
                            tensor<2, typename Layout::w_out>, tensor<1, typename Layout::b_out>>;
  static constexpr std::array<std::string_view, 4> param_names{"w_in", "b_in", "w_out", "b_out"};

  template <class X, class W1, class B1, class W2, class B2>
  static auto forward(X x, W1 w1, B1 b1, W2 w2, B2 b2) {
    auto h = save<"h">(einsum<"...n,mn->...m">(x, w1) + b1);
    auto y = x + (einsum<"...m,km->...k">(gelu(h), w2) + b2);
    if constexpr (std::is_void_v<typename Layout::batch>)
      return y;
    else
      return constrain<typename Layout::batch>(y);  // the block's output keeps the input's layout
  }
};

template <class T, class Layout = replicated_mlp>
using mlp_block = layer<mlp_def<T, Layout>>;

}  // namespace xshard::graph
