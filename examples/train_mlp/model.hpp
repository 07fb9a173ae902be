// train_mlp's model, data and the single-device reference run, shared by
// its two translation units: main.cpp (the mesh run, the plans, the checks)
// and single_device.cpp (the same training on one device). Two TUs compile
// in parallel and each instantiates only its own half of the templates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>
#include <xshard/nn/mlp.hpp>
#include <xshard/scan/remat.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

namespace train_mlp {

using T = float;
using Mesh = xshard::mesh<"data=2, model=2">;
using Layout = xshard::data_model_mlp<Mesh>;
using Block = xshard::mlp_block<T, Layout>;            // on the mesh
using DenseBlock = xshard::mlp_block<T>;               // one device, the reference
constexpr auto policy = xshard::remat::dots_saveable;  // keep x and h per layer, recompute gelu

constexpr std::size_t layers = 8, width = 128, hidden = 512, batch = 64, samples = 1024;
constexpr T learning_rate = 0.1f;

struct data_set {
  xt::xtensor<T, 2> x, y;
};

/// Targets from a fixed random "teacher": y = sin(x A) / 2.
data_set make_data();

/// The initial parameters of every layer (a fixed seed).
std::vector<DenseBlock::params> init_params();

/// The batch of rows used at `step`.
inline xt::xtensor<T, 2> rows(const xt::xtensor<T, 2>& a, std::size_t step) {
  const std::size_t first = (step * batch) % samples;
  return xt::view(a, xt::range(first, first + batch), xt::all());
}

/// The same training on one device: its final parameters per layer, its last
/// loss and its wall time.
struct single_device_run {
  std::vector<DenseBlock::params> params;
  float final_loss = 0;
  double seconds = 0;
};
single_device_run train_single_device(const data_set& data, const std::vector<DenseBlock::params>& init,
                                      std::size_t steps);

}  // namespace train_mlp
