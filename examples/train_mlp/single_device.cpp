// train_mlp: the data, the initial parameters and the same training on one
// device (the reference the mesh run is checked against, or the run itself
// with --devices 1). See model.hpp.
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <utility>
#include <xshard/einsum/einsum.hpp>
#include <xshard/scan/scan_layers.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xrandom.hpp>
#if defined(XSHARD_WITH_HDF5)
#include <xshard/checkpoint/checkpoint.hpp>
#endif

#include "model.hpp"

namespace train_mlp {

data_set make_data() {
  xt::random::seed(7);
  data_set d;
  d.x = xt::random::randn<T>({samples, width});
  const xt::xtensor<T, 2> a = xt::random::randn<T>({width, width}) / std::sqrt(T(width));
  d.y = xt::sin(xshard::einsum<"bi,io->bo">(d.x, a)) / T(2);
  return d;
}

std::vector<DenseBlock::params> init_params() {
  xt::random::seed(11);
  std::vector<DenseBlock::params> ps;
  for (std::size_t l = 0; l < layers; ++l)
    ps.push_back(
        {xt::xtensor<T, 2>(xt::random::randn<T>({hidden, width}) / std::sqrt(T(width))),
         xt::xtensor<T, 1>(xt::zeros<T>({hidden})),
         // W2 [hidden, width]: the [width, hidden] draw of a PyTorch fc2.weight, transposed
         xt::xtensor<T, 2>(xt::transpose(xt::random::randn<T>({width, hidden})) * T(0.1) / std::sqrt(T(hidden))),
         xt::xtensor<T, 1>(xt::zeros<T>({width}))});
  return ps;
}

namespace {

std::vector<DenseBlock::params> unstack(const DenseParams& stacked) {
  std::vector<DenseBlock::params> out;
  for (std::size_t l = 0; l < layers; ++l) {
    const auto p = xshard::layer_params<DenseBlock>(stacked, l);
    out.push_back({xt::xtensor<T, 2>(std::get<0>(p)), xt::xtensor<T, 1>(std::get<1>(p)),
                   xt::xtensor<T, 2>(std::get<2>(p)), xt::xtensor<T, 1>(std::get<3>(p))});
  }
  return out;
}

template <class Rule>
single_device_run train(const data_set& data, const std::vector<DenseBlock::params>& init, const options& o,
                        std::size_t first_step) {
  const auto t1 = std::chrono::steady_clock::now();
  DenseBlock dense;
  auto ref = xshard::stack_params<DenseBlock>(init);
  xshard::optimizer<Rule, DenseParams> opt(make_rule<Rule>(), ref);
#if defined(XSHARD_WITH_HDF5)
  if (!o.resume_dir.empty()) {
    xshard::checkpoint_reader r(checkpoint_file(o.resume_dir));  // the whole tensors
    r.read_tuple("params", ref, DenseBlock::param_names);
    r.read_optimizer("optimizer", opt, ref, DenseBlock::param_names);
    r.read_rng("rng/xtensor", xt::random::get_default_random_engine());
  }
#endif
  single_device_run run;
  run.losses.resize(o.steps);
  const bool alone = o.devices == 1;
  // Every tensor of a step comes from this workspace and goes back to it:
  // from the second step on, a step allocates nothing.
  xshard::workspace ws;
  const xshard::workspace::scope use(ws);
  for (std::size_t i = 0; i < o.steps; ++i) {
    const std::size_t step = first_step + i;
    if (i == 2) run.workspace_allocations_by_step_3 = ws.stats().allocations;
    auto x = ws.tensor<T, 2>({batch, width});
    xt::noalias(x) = batch_rows(data.x, step);
    auto [y, pullback] = xshard::scan_layers_vjp(dense, ref, std::move(x), o.policy);
    auto gy = ws.tensor<T, 2>({batch, width});
    xt::noalias(gy) = y - batch_rows(data.y, step);
    ws.recycle(std::move(y));
    run.losses[i] = xt::sum(gy * gy)() / T(batch * width);
    gy *= T(2) / T(batch * width);  // the loss's gradient
    // Each layer updated while its gradients are still in cache (the
    // optimizer in the backward: the same arithmetic as opt.step on a
    // gradient stack, which is never written). The batch is data: no input
    // gradient (the first layer's dx GEMM is skipped).
    pullback.params_only(std::move(gy), opt.layer_updates(ref));
    if (alone && o.progress && (i % std::max<std::size_t>(1, o.steps / 10) == 0 || i + 1 == o.steps))
      std::cout << "step " << step + 1 << "  loss " << run.losses[i] << "\n";
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  run.workspace = ws.stats();
  if (o.steps <= 2) run.workspace_allocations_by_step_3 = run.workspace.allocations;
#if defined(XSHARD_WITH_HDF5)
  if (alone && !o.save_dir.empty()) {
    std::filesystem::create_directories(o.save_dir);
    xshard::checkpoint_writer w(checkpoint_file(o.save_dir), static_cast<std::int64_t>(first_step + o.steps));
    w.add_tuple("params", ref, DenseBlock::param_names);
    w.add_optimizer("optimizer", opt, DenseBlock::param_names);
    w.add_rng("rng/xtensor", xt::random::get_default_random_engine());
    w.commit();
  }
#endif
  run.params = unstack(ref);
  return run;
}

}  // namespace

single_device_run train_single_device(const data_set& data, const std::vector<DenseBlock::params>& init,
                                      const options& o, std::size_t first_step) {
  return o.opt == optimizer_kind::sgd ? train<xshard::sgd>(data, init, o, first_step)
                                      : train<xshard::adamw>(data, init, o, first_step);
}

#if defined(XSHARD_WITH_HDF5)
comparison compare_with_checkpoint(const std::vector<DenseBlock::params>& trained, const std::string& file) {
  xshard::checkpoint_reader r(file);
  DenseParams other = xshard::stack_params<DenseBlock>(trained);
  r.read_tuple("params", other, DenseBlock::param_names);
  comparison c{.step = r.step(), .identical = true};
  const std::vector<DenseBlock::params> want = unstack(other);
  for (std::size_t l = 0; l < layers; ++l) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((c.identical = c.identical && std::get<I>(trained[l]) == std::get<I>(want[l])), ...);
      ((c.max_diff = std::max<double>(c.max_diff, xt::amax(xt::abs(std::get<I>(trained[l]) - std::get<I>(want[l])))())),
       ...);
      ((c.max_param = std::max<double>(c.max_param, xt::amax(xt::abs(std::get<I>(want[l])))())), ...);
    }
    (std::make_index_sequence<4>{});
  }
  return c;
}
#endif

}  // namespace train_mlp
