// train_mlp: the data, the initial parameters and the same training on one
// device (the reference the mesh run is checked against). See model.hpp.
#include <chrono>
#include <cmath>
#include <utility>
#include <xshard/einsum/einsum.hpp>
#include <xshard/scan/scan_layers.hpp>
#include <xtensor/xrandom.hpp>

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
    ps.push_back({xt::xtensor<T, 2>(xt::random::randn<T>({hidden, width}) / std::sqrt(T(width))),
                  xt::xtensor<T, 1>(xt::zeros<T>({hidden})),
                  xt::xtensor<T, 2>(xt::random::randn<T>({width, hidden}) * T(0.1) / std::sqrt(T(hidden))),
                  xt::xtensor<T, 1>(xt::zeros<T>({width}))});
  return ps;
}

single_device_run train_single_device(const data_set& data, const std::vector<DenseBlock::params>& init,
                                      std::size_t steps) {
  const auto t1 = std::chrono::steady_clock::now();
  DenseBlock dense;
  auto ref = xshard::stack_params<DenseBlock>(init);
  single_device_run run;
  for (std::size_t step = 0; step < steps; ++step) {
    const auto x = rows(data.x, step);
    auto [y, pullback] = xshard::scan_layers_vjp(dense, ref, x, policy);
    const xt::xtensor<T, 2> diff = y - rows(data.y, step);
    run.final_loss = xt::sum(diff * diff)() / T(batch * width);
    const auto grads = pullback(diff * (T(2) / T(batch * width))).first;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((std::get<I>(ref) -= learning_rate * std::get<I>(grads)), ...);
    }
    (std::make_index_sequence<4>{});
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  for (std::size_t l = 0; l < layers; ++l) {
    const auto p = xshard::layer_params<DenseBlock>(ref, l);
    run.params.push_back({xt::xtensor<T, 2>(std::get<0>(p)), xt::xtensor<T, 1>(std::get<1>(p)),
                          xt::xtensor<T, 2>(std::get<2>(p)), xt::xtensor<T, 1>(std::get<3>(p))});
  }
  return run;
}

}  // namespace train_mlp
