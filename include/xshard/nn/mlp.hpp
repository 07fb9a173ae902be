// xshard/nn/mlp.hpp - the transformer MLP block as a layer (nn/layer.hpp):
//
//   h = x W1^T + b1          einsum "...n,mn->...m"   (the einsum linear)
//   a = gelu(h)              composite xshard.gelu (its policy picks kernel
//                            or decomposition; the backward uses
//                            xshard.gelu_backward)
//   y = x + a W2 + b2        einsum "...m,mk->...k", residual connection
//
// Both weights are held hidden-major, W1 [f, d] (PyTorch's fc1.weight) and
// W2 [f, d] (fc2.weight transposed, as a JAX/Flax Dense kernel holds it):
// the hidden dim is the rows of both, so a share of the hidden dim (a
// device's shard on "model", a thread's half of a product on one device)
// is a contiguous block of rows of each weight, of each gradient and of
// each optimizer slot, and each thread of a one-device step reads and
// writes the rows it then updates (einsum's thread grid splits these
// products along the hidden dim). With W2 [d, f] a thread's share of W2's
// gradient was a block of columns, which the update, split by rows, then
// read from the other core (on an AVX2 Zen 1, one device
// on two threads: 58 us per layer for the update against 22 us with W2
// [f, d]; on a Zen 3, train_mlp --devices 1 on two threads, medians of 10
// interleaved rounds' ratios to W2 [d, f] before einsum's split-K: 0.94x
// the time with W2 [f, d], 1.04x with W2 [d, f] and split-K). A PyTorch
// fc2.weight is loaded transposed. (nn/decoder.hpp's MLP keeps W2 [d, f];
// its layout was not measured.)
//
// The same code runs on plain tensors and on sharded ones. The Layout
// parameter names the tensor types: `replicated_mlp` (plain xt::xtensor, one
// device) or `data_model_mlp<M>` (Megatron's column-then-row parallel block
// on a mesh with axes "data" and "model": the batch on data, the rows of
// W1 and W2 (the hidden dim) on model). In the sharded layout the forward runs one
// all-reduce over model (the second einsum's partial sums) and the backward
// one over model (dx) and one over data per parameter gradient; the plans
// are compile-time values (mlp_block::forward_plan(), backward_plan()).
//
// The block's output is constrained to the input's layout (torch_xla's
// mark_sharding inside the scanned body); with these layouts the constraint
// is already met and costs nothing, which the plans show.
//
// The block is written once as a graph (mlp_def below): its vjp, the
// residuals of each remat policy and its collectives are derived
// (graph/graph.hpp). On one device each `einsum + bias` is one node whose
// GEMM adds the bias as it stores the result (graph::fuse_biases_t), so
// remat::dots_saveable keeps x W1^T + b1 and a W2 + b2 and recomputes
// gelu; graph::save_only<"h"> keeps h alone.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <xtensor/xtensor.hpp>

#include "../graph/graph.hpp"
#include "../sharding/spec.hpp"
#include "../spmd/sharded.hpp"

namespace xshard {

/// One device, plain tensors.
struct replicated_mlp {
  template <class T, std::size_t R, class S>
  using tensor = xt::xtensor<T, R>;
  using batch = void;
  using hidden = void;
  using w_in = void;
  using b_in = void;
  using w_out = void;
  using b_out = void;
};

/// Data x model (Megatron) sharding on mesh M, whose axes include "data"
/// and "model" (a compile error names a missing one).
template <Mesh M>
struct data_model_mlp {
  template <class T, std::size_t R, class S>
  using tensor = sharded<T, R, M, S>;
  using batch = spec<"data, None">;    // x, y [b, d]
  using hidden = spec<"data, model">;  // h, a [b, f]
  using w_in = spec<"model, None">;    // W1 [f, d]: column parallel
  using b_in = spec<"model">;          // b1 [f]
  using w_out = spec<"model, None">;   // W2 [f, d]: row parallel
  using b_out = spec<"None">;          // b2 [d]
};

/// The block written once (graph::layer derives the rest):
///   h = save<"h">(x W1^T + b1);   y = constrain<batch>(x + gelu(h) W2 + b2)
template <class T, class Layout = replicated_mlp, graph::gelu_kind Gelu = graph::gelu_kind::none>
struct mlp_def {
  template <std::size_t R, class S>
  using tensor = typename Layout::template tensor<T, R, S>;
  using input = tensor<2, typename Layout::batch>;
  using params = std::tuple<tensor<2, typename Layout::w_in>, tensor<1, typename Layout::b_in>,
                            tensor<2, typename Layout::w_out>, tensor<1, typename Layout::b_out>>;
  static constexpr std::array<std::string_view, 4> param_names{"w_in", "b_in", "w_out", "b_out"};

  template <class X, class W1, class B1, class W2, class B2>
  static auto forward(X x, W1 w1, B1 b1, W2 w2, B2 b2) {
    auto h = graph::save<"h">(graph::einsum<"...n,mn->...m">(x, w1) + b1);
    auto y = x + (graph::einsum<"...m,mk->...k">(graph::gelu<Gelu>(h), w2) + b2);
    if constexpr (std::is_void_v<typename Layout::batch>)
      return y;
    else
      return graph::constrain<typename Layout::batch>(y);  // the block's output keeps the input's layout
  }
};

/// The MLP block as a layer: forward, vjp, remat (forward_saving_dots /
/// restore, graph policies through forward_with), and on the data x model
/// layout the collectives of every node as compile-time values
/// (forward_plan(), backward_plan(), forward_collectives(),
/// backward_collectives()).
template <class T, class Layout = replicated_mlp, graph::gelu_kind Gelu = graph::gelu_kind::none>
struct mlp_block : graph::layer<mlp_def<T, Layout, Gelu>> {};

}  // namespace xshard
