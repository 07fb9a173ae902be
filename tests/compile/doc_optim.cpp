// The usage examples at the top of the optim/ headers, compiled: each
// header's example lines appear here verbatim (scripts/check_doc_examples.sh
// checks it), inside the context they need: a data x model MLP block's
// stacked parameters inside an SPMD body.
#include <tuple>
#include <vector>
#include <xshard/nn/mlp.hpp>
#include <xshard/optim/accumulate.hpp>
#include <xshard/optim/optimizer.hpp>
#include <xshard/scan/scan_layers.hpp>
#include <xshard/spmd/thread_mesh.hpp>

namespace xshard_doc_optim {  // named: the examples declare functions they never define

using M = xshard::mesh<"data=2, model=2">;
using xshard::spec;
using Block = xshard::mlp_block<float, xshard::data_model_mlp<M>>;

namespace doc_tensors {  // optim/tensors.hpp
using P = std::tuple<xshard::sharded<float, 2, M, spec<"model, None">>, xshard::sharded<float, 1, M, spec<"None">>>;
static_assert(xshard::optim_tuple<P>);
}  // namespace doc_tensors

namespace doc_optimizer {                 // optim/optimizer.hpp
using P = xshard::stacked_params<Block>;  // or any tuple of tensors
[[maybe_unused]] void example(P& params, const P& grads) {
  xshard::optimizer<xshard::adamw, P> opt({.lr = 1e-3}, params, {.max_grad_norm = 1.0});
  opt.step(params, grads);  // grads: P, or P partial over "data"

  xshard::optimizer<xshard::adamw, P, xshard::zero1<"data">> z({.lr = 1e-3}, params);
  static_assert(decltype(z)::plan<P>(false).collective_count() == 1);  // the all-gather
}
}  // namespace doc_optimizer

namespace doc_accumulate {  // optim/accumulate.hpp
// G: the parameters' tensors as partial sums over "data" (axis 0: bit 1).
template <class X>
struct partial_over_data;
template <class T, std::size_t R, class Mm, class S, xshard::axis_set A>
struct partial_over_data<xshard::sharded<T, R, Mm, S, A>> {
  using type = xshard::sharded<T, R, Mm, S, 1>;
};
template <class... X>
struct partial_over_data<std::tuple<X...>> {
  using type = std::tuple<typename partial_over_data<X>::type...>;
};
using P = xshard::stacked_params<Block>;
using G = partial_over_data<P>::type;
G local_gradient(int micro_batch);
[[maybe_unused]] void example(xshard::optimizer<xshard::adamw, P>& opt, P& params,
                              const std::vector<int>& micro_batches, const G& g) {
  xshard::grad_accumulator<G, xshard::grad_sync::at_end> acc;  // G: gradients partial over "data"
  for (auto& mb : micro_batches) acc.add(local_gradient(mb));  // no communication
  opt.step(params, acc.mean());  // still partial: the optimizer reduces once (all-reduce or ZeRO's
                                 // reduce-scatter)

  xshard::grad_accumulator<G, xshard::grad_sync::every_micro_batch> acc2;
  acc2.add(g);                    // one all-reduce per micro-batch (overlappable with the next backward)
  opt.step(params, acc2.mean());  // already reduced
}
}  // namespace doc_accumulate

}  // namespace xshard_doc_optim
