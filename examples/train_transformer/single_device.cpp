// train_transformer: the task's data, the initial parameters, the loss's
// gradient and the same training on one device (plain tensors). See
// model.hpp.
#include <algorithm>
#include <cmath>
#include <random>

#include "train_loop.hpp"

namespace train_transformer {

xt::xtensor<std::int64_t, 2> make_samples(std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> digit(0, 9);
  xt::xtensor<std::int64_t, 2> t = xt::xtensor<std::int64_t, 2>::from_shape({count, seq});
  for (std::size_t b = 0; b < count; ++b) {
    for (std::size_t i = 0; i < digits; ++i) t(b, i) = digit(rng);
    t(b, digits) = sep;
    for (std::size_t i = 0; i < digits; ++i) t(b, digits + 1 + i) = t(b, digits - 1 - i);
    t(b, seq - 1) = end;
  }
  return t;
}

xt::xtensor<std::int64_t, 2> training_batch(std::size_t step) { return make_samples(batch, 1 + step); }

xt::xtensor<T, 3> one_hot_inputs(const xt::xtensor<std::int64_t, 2>& tokens) {
  const std::size_t b = tokens.shape()[0];
  xt::xtensor<T, 3> x = xt::zeros<T>({b, seq, table});
  for (std::size_t i = 0; i < b; ++i)
    for (std::size_t s = 0; s < seq; ++s) {
      x(i, s, static_cast<std::size_t>(tokens(i, s))) = 1;
      x(i, s, vocab + s) = 1;
    }
  return x;
}

xt::xtensor<T, 3> loss_gradient(const xt::xtensor<std::int64_t, 2>& tokens) {
  const std::size_t b = tokens.shape()[0];
  xt::xtensor<T, 3> g = xt::zeros<T>({b, seq, vocab});
  const T w = T(-1) / static_cast<T>(b * answer_count);
  for (std::size_t i = 0; i < b; ++i)
    for (std::size_t s = answer_first; s < answer_first + answer_count; ++s)
      g(i, s, static_cast<std::size_t>(tokens(i, s + 1))) = w;
  return g;
}

std::pair<std::size_t, std::size_t> answer_hits(const xt::xtensor<T, 3>& log_probs,
                                                const xt::xtensor<std::int64_t, 2>& tokens) {
  std::size_t hits = 0, total = 0;
  for (std::size_t i = 0; i < tokens.shape()[0]; ++i)
    for (std::size_t s = answer_first; s < answer_first + answer_count; ++s) {
      std::size_t best = 0;
      for (std::size_t v = 1; v < vocab; ++v)
        if (log_probs(i, s, v) > log_probs(i, s, best)) best = v;
      hits += static_cast<std::int64_t>(best) == tokens(i, s + 1);
      ++total;
    }
  return {hits, total};
}

Dense::params init_params() {
  std::mt19937_64 rng(11);
  std::normal_distribution<T> normal(0, static_cast<T>(init_std));
  auto randn = [&]<std::size_t R>(std::array<std::size_t, R> shape) {
    xt::xtensor<T, R> t = xt::xtensor<T, R>::from_shape(shape);
    for (T& v : t) v = normal(rng);
    return t;
  };
  Dense::params p;
  std::get<0>(p.embedding) = randn(std::array<std::size_t, 2>{table, width});
  std::vector<Dense::block::params> per_layer;
  for (std::size_t l = 0; l < layers; ++l) {
    Dense::block::params b;
    std::get<0>(b) = xt::ones<T>({width});  // attention norm's gain
    for (auto* w : {&std::get<1>(b), &std::get<2>(b), &std::get<3>(b), &std::get<4>(b)})
      *w = randn(std::array<std::size_t, 3>{heads, head_dim, width});
    std::get<5>(b) = xt::ones<T>({width});  // MLP norm's gain
    std::get<6>(b) = randn(std::array<std::size_t, 2>{hidden, width});
    std::get<7>(b) = xt::zeros<T>({hidden});
    std::get<8>(b) = randn(std::array<std::size_t, 2>{width, hidden});
    std::get<9>(b) = xt::zeros<T>({width});
    per_layer.push_back(std::move(b));
  }
  p.blocks = xshard::stack_params<Dense::block>(per_layer);
  std::get<0>(p.out) = xt::ones<T>({width});
  std::get<1>(p.out) = randn(std::array<std::size_t, 2>{vocab, width});
  return p;
}

run_result train_single_device(const Dense::params& init, const options& o, std::size_t first_step) {
  one_device here;
  return train_on<xshard::replicated_decoder>(here, init, o, first_step, o.devices == 1);
}

std::pair<double, double> max_abs_diff(const Dense::params& a, const Dense::params& b) {
  double diff = 0, largest = 0;
  auto one = [&](const auto& x, const auto& y) {
    diff = std::max<double>(diff, xt::amax(xt::abs(x - y))());
    largest = std::max<double>(largest, xt::amax(xt::abs(y))());
  };
  auto all = [&](const auto& p, const auto& q) {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (one(std::get<I>(p), std::get<I>(q)), ...); }
    (std::make_index_sequence<std::tuple_size_v<std::remove_cvref_t<decltype(p)>>>{});
  };
  all(a.embedding, b.embedding);
  all(a.blocks, b.blocks);
  all(a.out, b.out);
  return {diff, largest};
}

}  // namespace train_transformer
