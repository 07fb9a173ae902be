// Helpers shared by the graph tests (runtime/graph_test.cpp,
// runtime/graph_sharded_test.cpp): the MLP block written once
// (nn/mlp.hpp), random tensors and parameters, the largest difference.
#pragma once

#include <array>
#include <cstddef>
#include <xshard/nn/mlp.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>

namespace xshard_test {

namespace g = xshard::graph;

template <class T, class Layout = xshard::replicated_mlp>
using mlp_def = xshard::mlp_def<T, Layout>;

template <class T>
using graph_mlp = g::layer<mlp_def<T>>;

template <class T, std::size_t R>
xt::xtensor<T, R> randn(const std::array<std::size_t, R>& shape) {
  return xt::random::randn<T>(shape);
}

/// An MLP block's parameters for width d and hidden width f.
template <class T>
typename graph_mlp<T>::params mlp_params(std::size_t d, std::size_t f) {
  return {randn<T, 2>({f, d}), randn<T, 1>({f}), randn<T, 2>({f, d}), randn<T, 1>({d})};
}

template <class A, class B>
double max_diff(const A& a, const B& b) {
  return xt::amax(xt::abs(a - b))();
}

}  // namespace xshard_test
