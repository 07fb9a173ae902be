// The examples in the top comments of include/xshard/optim/*.hpp, compiled
// (never run): each header's `// Example (compiled in ...)` block is copied
// here line for line, and scripts/check_doc_examples.sh (CTest
// docs.examples) fails when a line of it is missing. Anything else in this
// file is the context an example takes for granted (its mesh, parameters,
// gradients, a user's function), and run-time statements sit in functions
// that are never called.
#include <tuple>
#include <vector>
#include <xshard/nn/mlp.hpp>
#include <xshard/optim/accumulate.hpp>
#include <xshard/optim/optimizer.hpp>
#include <xshard/optim/tensors.hpp>
#include <xshard/scan/scan_layers.hpp>  // stacked_params
#include <xtensor/xtensor.hpp>

// clang-format off
namespace {

using M = xshard::mesh<"data=2, model=2">;

// --- xshard/optim/optimizer.hpp ---
namespace optimizer_hpp {
using Block = xshard::mlp_block<float, xshard::data_model_mlp<M>>;

[[maybe_unused]] void example(xshard::stacked_params<Block>& params, const xshard::stacked_params<Block>& grads) {
  using P = xshard::stacked_params<Block>;                      // or any tuple of tensors
  xshard::optimizer<xshard::adamw, P> opt({.lr = 1e-3}, params, {.max_grad_norm = 1.0});
  opt.step(params, grads);                                      // grads: P, or P partial over "data"

  xshard::optimizer<xshard::adamw, P, xshard::zero1<"data">> z({.lr = 1e-3}, params);
  static_assert(decltype(z)::plan<P>(false).collective_count() == 1);   // the all-gather
}
}  // namespace optimizer_hpp

// --- xshard/optim/accumulate.hpp ---
namespace accumulate_hpp {
constexpr xshard::axis_set data = xshard::parse_axis_set(M::axes, "data");
using G = std::tuple<xshard::sharded<float, 2, M, xshard::spec<"model, None">, data>,
                     xshard::sharded<float, 1, M, xshard::spec<"model">, data>>;
using P = xshard::reduced_tuple_t<G>;
struct micro_batch {
  G gradient;
};
G local_gradient(const micro_batch& mb) { return mb.gradient; }

[[maybe_unused]] void example(xshard::optimizer<xshard::adamw, P>& opt, P& params,
                              std::vector<micro_batch>& micro_batches, const G& g) {
  xshard::grad_accumulator<G, xshard::grad_sync::at_end> acc;   // G: gradients partial over "data"
  for (auto& mb : micro_batches) acc.add(local_gradient(mb));    // no communication
  opt.step(params, acc.mean());   // still partial: the optimizer reduces once (all-reduce or ZeRO's
                                  // reduce-scatter)

  xshard::grad_accumulator<G, xshard::grad_sync::every_micro_batch> acc2;
  acc2.add(g);                    // one all-reduce per micro-batch (overlappable with the next backward)
  opt.step(params, acc2.mean());  // already reduced
}
}  // namespace accumulate_hpp

// --- xshard/optim/tensors.hpp ---
namespace tensors_hpp {
using P = std::tuple<xshard::sharded<float, 2, M, xshard::spec<"model, None">>,
                     xshard::sharded<float, 1, M, xshard::spec<"None">>>;
static_assert(xshard::optim_tuple<P>);
}  // namespace tensors_hpp

}  // namespace
// clang-format on
