// train_mlp's model, data and the single-device reference run, shared by
// its two translation units: main.cpp (the mesh run, the plans, the checks)
// and single_device.cpp (the same training on one device). Two TUs compile
// in parallel and each instantiates only its own half of the templates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>
#include <xshard/core/workspace.hpp>
#include <xshard/nn/mlp.hpp>
#include <xshard/optim/optimizer.hpp>
#include <xshard/scan/scan_layers.hpp>  // stacked_params
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "options.hpp"

namespace train_mlp {

using T = float;
using Mesh = xshard::mesh<"data=2, model=2">;
using Layout = xshard::data_model_mlp<Mesh>;
using Block = xshard::mlp_block<T, Layout>;  // on the mesh
using DenseBlock = xshard::mlp_block<T>;     // one device, the reference
using MeshParams = xshard::stacked_params<Block>;
using DenseParams = xshard::stacked_params<DenseBlock>;

constexpr std::size_t layers = 8, width = 128, hidden = 512, batch = 64, samples = 1024;
constexpr T learning_rate = 0.1f;             // SGD (the default)
constexpr double adamw_learning_rate = 1e-3;  // AdamW, weight decay 0.01

/// The update rule, as xshard::optimizer takes it.
template <class Rule>
Rule make_rule() {
  if constexpr (std::is_same_v<Rule, xshard::adamw>)
    return {.lr = adamw_learning_rate, .weight_decay = 0.01};
  else
    return {.lr = learning_rate};
}

inline std::string checkpoint_file(const std::string& dir) { return dir + "/checkpoint.h5"; }

struct data_set {
  xt::xtensor<T, 2> x, y;
};

/// Targets from a fixed random "teacher": y = sin(x A) / 2.
data_set make_data();

/// The initial parameters of every layer (a fixed seed).
std::vector<DenseBlock::params> init_params();

/// The batch of rows used at `step` (a view of a).
inline auto batch_rows(const xt::xtensor<T, 2>& a, std::size_t step) {
  const std::size_t first = (step * batch) % samples;
  return xt::view(a, xt::range(first, first + batch), xt::all());
}

/// The same training on one device, from `init` or from `o.resume_dir`'s
/// checkpoint (global step `first_step`), for `o.steps` steps: its final
/// parameters per layer, every step's loss and its wall time. With
/// `o.devices == 1` it is the run itself: it prints progress and saves to
/// `o.save_dir`.
struct single_device_run {
  std::vector<DenseBlock::params> params;
  std::vector<float> losses;
  double seconds = 0;
  xshard::workspace::statistics workspace;          // its tensors' workspace, at the end
  std::size_t workspace_allocations_by_step_3 = 0;  // the buffers it had made before step 3
};
single_device_run train_single_device(const data_set& data, const std::vector<DenseBlock::params>& init,
                                      const options& o, std::size_t first_step);

/// A run's parameters against a checkpoint's (`--compare FILE`).
struct comparison {
  std::int64_t step = 0;  // the checkpoint's
  bool identical = false;
  double max_diff = 0, max_param = 0;
};
#if defined(XSHARD_WITH_HDF5)
comparison compare_with_checkpoint(const std::vector<DenseBlock::params>& trained, const std::string& file);
#endif

}  // namespace train_mlp
