// xshard/nn/decoder.hpp - a pre-norm transformer decoder written once as
// graphs (graph/graph.hpp): the block, the token embedding and the output
// head. Their vjps, remat residuals and sharded collectives are derived.
//
//   decoder block, x [b, s, d]:
//     n  = rms_norm(x) g_attn                        (then gathered to `full`)
//     q, k, v = einsum("bsd,hed->bshe", n, W)        W [heads, head_dim, d]: no reshape
//     p  = softmax(causal_mask(einsum("bqhe,bshe->bhqs", q, k) / sqrt(head_dim)))
//     x1 = x + einsum("bqhe,hed->bqd", einsum("bhqs,bshe->bqhe", p, v), Wo)
//     n2 = rms_norm(x1) g_mlp
//     y  = x1 + einsum("bsf,df->bsd", gelu(einsum("bsd,fd->bsf", n2, W1) + b1), W2) + b2
//   embedding: x = einsum("bsv,vd->bsd", one_hot, table)
//   head:      log_softmax(einsum("bsd,vd->bsv", rms_norm(x) g, W))
//
// The embedding reads one-hot rows, so its table may hold token and
// position rows side by side (one row per token and one per position: the
// sum of the two embeddings is one einsum). Split over the vocabulary, each
// device multiplies only its slice of the one-hot rows (the masked lookup)
// and the partial sums are all-reduced.
//
// The same code runs on one device and on a mesh; the Layout parameter
// names the specs:
//   replicated_decoder            plain xt::xtensor, one device
//   tensor_parallel_decoder<M>    Megatron on axes "data" and "model": batch
//                                 on data; heads, the MLP's hidden units and
//                                 the vocabulary on model; one all-reduce
//                                 over model after attention and after the
//                                 MLP in the forward
//   sequence_parallel_decoder<M>  the same, with the activations between
//                                 blocks split over the sequence on model:
//                                 an all-gather before attention and before
//                                 the MLP, a reduce-scatter after each,
//                                 instead of the all-reduces
// The plans of every node are compile-time values (forward_plan(),
// backward_plan(), forward_collectives(), backward_collectives()).
#pragma once

#include <array>
#include <cstddef>
#include <string_view>
#include <tuple>
#include <xtensor/xtensor.hpp>

#include "../graph/graph.hpp"
#include "../sharding/spec.hpp"
#include "../spmd/sharded.hpp"

namespace xshard {

/// One device, plain tensors.
struct replicated_decoder {
  template <class T, std::size_t R, class S>
  using tensor = xt::xtensor<T, R>;
  using act = void;     ///< x between blocks [b, s, d]
  using full = void;    ///< the normed x the projections read [b, s, d]
  using heads = void;   ///< W_q, W_k, W_v, W_o [heads, head_dim, d]
  using w_in = void;    ///< W1 [f, d]
  using b_in = void;    ///< b1 [f]
  using w_out = void;   ///< W2 [d, f]
  using vec = void;     ///< the norms' gains and b2 [d]
  using table = void;   ///< the embedding table and the head's weight [vocab, d]
  using tokens = void;  ///< one-hot rows [b, s, vocab]
  using logits = void;  ///< the head's log-probabilities [b, s, vocab]
};

/// Megatron tensor parallelism on mesh M (axes "data" and "model").
template <Mesh M>
struct tensor_parallel_decoder {
  template <class T, std::size_t R, class S>
  using tensor = sharded<T, R, M, S>;
  using act = spec<"data, None, None">;
  using full = spec<"data, None, None">;
  using heads = spec<"model, None, None">;
  using w_in = spec<"model, None">;
  using b_in = spec<"model">;
  using w_out = spec<"None, model">;
  using vec = spec<"None">;
  using table = spec<"model, None">;
  using tokens = spec<"data, None, model">;
  using logits = spec<"data, None, model">;
};

/// Sequence parallelism on top of tensor parallelism: between blocks the
/// sequence is split over model.
template <Mesh M>
struct sequence_parallel_decoder : tensor_parallel_decoder<M> {
  using act = spec<"data, model, None">;
};

namespace detail {
constexpr double constexpr_sqrt(double v) {
  double r = v > 1 ? v : 1;
  for (int i = 0; i < 64; ++i) r = 0.5 * (r + v / r);
  return r;
}
}  // namespace detail

/// 1 / sqrt(n), the attention scores' scale, as graph::scale_by takes it.
template <std::size_t N>
struct inverse_sqrt {
  static constexpr double value = 1.0 / detail::constexpr_sqrt(static_cast<double>(N));
};

/// The MLP's activation as nodes: gelu(h + b1), h saved by the name "h"
/// (graph::save_only<"h">). A user's fused kernel goes here: graph::custom
/// with its signature, whose sharding rule runs it on each device's blocks.
struct gelu_activation {
  template <class H, class B>
  static constexpr auto apply(H h, B b) {
    return graph::gelu(graph::save<"h">(h + b));
  }
};

/// The pre-norm decoder block (the file's comment).
template <class T, std::size_t HeadDim, class Layout = replicated_decoder, class Activation = gelu_activation>
struct decoder_def {
  template <std::size_t R, class S>
  using tensor = typename Layout::template tensor<T, R, S>;
  using input = tensor<3, typename Layout::act>;
  using params =
      std::tuple<tensor<1, typename Layout::vec>, tensor<3, typename Layout::heads>, tensor<3, typename Layout::heads>,
                 tensor<3, typename Layout::heads>, tensor<3, typename Layout::heads>, tensor<1, typename Layout::vec>,
                 tensor<2, typename Layout::w_in>, tensor<1, typename Layout::b_in>, tensor<2, typename Layout::w_out>,
                 tensor<1, typename Layout::vec>>;
  static constexpr std::array<std::string_view, 10> param_names{"attn_norm", "w_q",  "w_k",  "w_v",   "w_o",
                                                                "mlp_norm",  "w_in", "b_in", "w_out", "b_out"};

  template <class X, class G1, class WQ, class WK, class WV, class WO, class G2, class W1, class B1, class W2, class B2>
  static auto forward(X x, G1 g1, WQ wq, WK wk, WV wv, WO wo, G2 g2, W1 w1, B1 b1, W2 w2, B2 b2) {
    namespace g = graph;
    using act = typename Layout::act;
    using full = typename Layout::full;
    auto n = g::constrain<full>(g::rms_norm(x) * g1);
    auto q = g::einsum<"bsd,hed->bshe">(n, wq);
    auto k = g::einsum<"bsd,hed->bshe">(n, wk);
    auto v = g::einsum<"bsd,hed->bshe">(n, wv);
    auto scores = g::scale_by<inverse_sqrt<HeadDim>>(g::einsum<"bqhe,bshe->bhqs">(q, k));
    auto p = g::softmax<-1>(g::causal_mask<-2, -1>(scores));
    auto attended = g::einsum<"bhqs,bshe->bqhe">(p, v);
    auto x1 = x + g::scope<"attention">(g::einsum_to<"bqhe,hed->bqd", act>(attended, wo));
    auto n2 = g::constrain<full>(g::rms_norm(x1) * g2);
    auto a = Activation::apply(g::einsum<"bsd,fd->bsf">(n2, w1), b1);
    return x1 + g::scope<"mlp">(g::einsum_to<"bsf,df->bsd", act>(a, w2) + b2);
  }
};

/// x = one_hot table: the token (and position) embedding.
template <class T, class Layout = replicated_decoder>
struct embedding_def {
  template <std::size_t R, class S>
  using tensor = typename Layout::template tensor<T, R, S>;
  using input = tensor<3, typename Layout::tokens>;
  using output = tensor<3, typename Layout::act>;
  using params = std::tuple<tensor<2, typename Layout::table>>;
  static constexpr std::array<std::string_view, 1> param_names{"embedding"};
  template <class X, class E>
  static auto forward(X one_hot, E table) {
    return graph::einsum_to<"bsv,vd->bsd", typename Layout::act>(one_hot, table);
  }
};

/// The output head: log-probabilities over the vocabulary (split over
/// model on a mesh: partial max and sum, no gather of the vocabulary).
template <class T, class Layout = replicated_decoder>
struct head_def {
  template <std::size_t R, class S>
  using tensor = typename Layout::template tensor<T, R, S>;
  using input = tensor<3, typename Layout::act>;
  using output = tensor<3, typename Layout::logits>;
  using params = std::tuple<tensor<1, typename Layout::vec>, tensor<2, typename Layout::table>>;
  static constexpr std::array<std::string_view, 2> param_names{"final_norm", "unembedding"};
  template <class X, class G, class W>
  static auto forward(X x, G gain, W w) {
    namespace g = graph;
    auto n = g::constrain<typename Layout::full>(g::rms_norm(x) * gain);
    return g::log_softmax<-1>(g::einsum<"bsd,vd->bsv">(n, w));
  }
};

/// The layers (graph::layer: forward, vjp, remat, plans).
template <class T, std::size_t HeadDim, class Layout = replicated_decoder, class Activation = gelu_activation>
struct decoder_block : graph::layer<decoder_def<T, HeadDim, Layout, Activation>> {};
template <class T, class Layout = replicated_decoder>
struct embedding_layer : graph::layer<embedding_def<T, Layout>> {};
template <class T, class Layout = replicated_decoder>
struct head_layer : graph::layer<head_def<T, Layout>> {};

}  // namespace xshard
