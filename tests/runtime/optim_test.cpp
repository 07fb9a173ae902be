// Optimizers (optim/): SGD with momentum and AdamW against naive double
// references written here from the textbook formulas, several steps;
// global-norm clipping against a naive norm; the same updates on a 2x2
// thread mesh (parameters sharded over model, uneven extents, a stacked
// rank-3 parameter, gradients partial over data) equal to one device, with
// ZeRO-1 equal to unsharded AdamW; gradient accumulation equal to the big
// batch in both synchronisation modes; every device's collective counters
// equal to the compile-time plans; layer_updates (a stack updated layer by
// layer, plain and sharded) equal to the stacked step, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>
#include <xshard/optim/accumulate.hpp>
#include <xshard/optim/optimizer.hpp>
#include <xshard/spmd/thread_mesh.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

namespace {

using T = double;
using mat = xt::xtensor<T, 2>;
using vec = xt::xtensor<T, 1>;
using cube = xt::xtensor<T, 3>;
using M = xshard::mesh<"data=2, model=2">;
using xshard::collective_kind;
using xshard::spec;
constexpr xshard::axis_set data = 1;

// Shapes: uneven over model=2 (5 rows: blocks of 3 and 2), a replicated
// bias, and a stacked (scan_layers) weight "None, model, None".
const std::array<std::size_t, 2> w1_shape{5, 3};
const std::array<std::size_t, 1> b1_shape{5};
const std::array<std::size_t, 2> w2_shape{3, 5};
const std::array<std::size_t, 1> b2_shape{3};
const std::array<std::size_t, 3> st_shape{2, 5, 3};

using S_w1 = spec<"model, None">;
using S_b1 = spec<"model">;
using S_w2 = spec<"None, model">;
using S_b2 = spec<"None">;
using S_st = spec<"None, model, None">;

using Dense = std::tuple<mat, vec, mat, vec, cube>;
template <xshard::axis_set P = 0>
using Sharded =
    std::tuple<xshard::sharded<T, 2, M, S_w1, P>, xshard::sharded<T, 1, M, S_b1, P>, xshard::sharded<T, 2, M, S_w2, P>,
               xshard::sharded<T, 1, M, S_b2, P>, xshard::sharded<T, 3, M, S_st, P>>;
using P = Sharded<>;
using Gp = Sharded<data>;  // gradients partial over data

// The plans, from the types alone.
using Adam = xshard::optimizer<xshard::adamw, P>;
using Zero = xshard::optimizer<xshard::adamw, P, xshard::zero1<"data">>;
static_assert(Adam::plan<P>(false).collective_count() == 0);
static_assert(Adam::plan<Gp>(false).collective_count() == 1 && Adam::plan<Gp>(false).gradient_axes == data);
static_assert(Adam::plan<Gp>(true).count(collective_kind::all_reduce) == 2);
static_assert(Zero::plan<Gp>(false).count(collective_kind::reduce_scatter) == 1 &&
              Zero::plan<Gp>(false).count(collective_kind::all_gather) == 1 &&
              Zero::plan<Gp>(false).collective_count() == 2);
static_assert(Zero::plan<P>(true).collective_count() == 2);  // all-gather + the norm
static_assert(xshard::optimizer<xshard::sgd, Dense>::plan<Dense>(true).collective_count() == 0);
static_assert(xshard::grad_accumulator<Gp, xshard::grad_sync::every_micro_batch>::collectives(4) == 4);
static_assert(xshard::grad_accumulator<Gp, xshard::grad_sync::at_end>::collectives(4) == 0);
static_assert(std::is_same_v<xshard::reduced_tuple_t<Gp>, P>);

/// A deterministic tensor: values of both signs and several magnitudes.
template <std::size_t R>
xt::xtensor<T, R> pattern(const std::array<std::size_t, R>& shape, double seed) {
  xt::xtensor<T, R> t(shape);
  for (std::size_t i = 0; i < t.size(); ++i)
    t.data()[i] = std::sin(seed * 1.7 + 0.91 * static_cast<double>(i)) * (1.0 + 0.3 * std::cos(seed + i));
  return t;
}

Dense dense_pattern(double seed) {
  return {pattern(w1_shape, seed), pattern(b1_shape, seed + 1), pattern(w2_shape, seed + 2),
          pattern(b2_shape, seed + 3), pattern(st_shape, seed + 4)};
}

/// Gradient of data rank c at step s; the global gradient is the sum over c.
Dense grad_part(int step, int c) { return dense_pattern(100.0 * step + 10.0 * c + 0.5); }

Dense grad_sum(int step) {
  Dense a = grad_part(step, 0);
  const Dense b = grad_part(step, 1);
  xshard::detail::for_each_index<5>(
      [&](auto i) { std::get<i.value>(a) = std::get<i.value>(a) + std::get<i.value>(b); });
  return a;
}

template <class F>
void for_each_element(Dense& p, const Dense& g, F&& f) {
  xshard::detail::for_each_index<5>([&](auto i) {
    auto& x = std::get<i.value>(p);
    const auto& y = std::get<i.value>(g);
    for (std::size_t k = 0; k < x.size(); ++k) f(i.value, k, x.data()[k], y.data()[k]);
  });
}

double max_rel_diff(const Dense& a, const Dense& b) {
  double d = 0;
  xshard::detail::for_each_index<5>([&](auto i) {
    const auto& x = std::get<i.value>(a);
    const auto& y = std::get<i.value>(b);
    for (std::size_t k = 0; k < x.size(); ++k)
      d = std::max(d, std::abs(x.data()[k] - y.data()[k]) / std::max(1.0, std::abs(y.data()[k])));
  });
  return d;
}

bool bit_equal(const Dense& a, const Dense& b) {
  bool eq = true;
  xshard::detail::for_each_index<5>([&](auto i) { eq = eq && std::get<i.value>(a) == std::get<i.value>(b); });
  return eq;
}

// ---------------------------------------------------------------------------
// Naive references (double, element by element, textbook form).

struct ref_adamw {
  double lr, b1, b2, eps, wd;
  std::vector<std::vector<double>> m, v;
  int t = 0;
  void step(Dense& p, const Dense& g, double scale = 1) {
    ++t;
    if (m.empty()) m.assign(5, {}), v.assign(5, {});
    for_each_element(p, g, [&](std::size_t i, std::size_t k, double& x, double gk) {
      if (m[i].size() <= k) m[i].resize(k + 1, 0.0), v[i].resize(k + 1, 0.0);
      gk *= scale;
      m[i][k] = b1 * m[i][k] + (1 - b1) * gk;
      v[i][k] = b2 * v[i][k] + (1 - b2) * gk * gk;
      const double mhat = m[i][k] / (1 - std::pow(b1, t));
      const double vhat = v[i][k] / (1 - std::pow(b2, t));
      x = x - lr * wd * x - lr * mhat / (std::sqrt(vhat) + eps);
    });
  }
};

struct ref_sgd {
  double lr, mu, wd;
  bool nesterov;
  std::vector<std::vector<double>> buf;
  void step(Dense& p, const Dense& g) {
    if (buf.empty()) buf.assign(5, {});
    for_each_element(p, g, [&](std::size_t i, std::size_t k, double& x, double gk) {
      if (buf[i].size() <= k) buf[i].resize(k + 1, 0.0);
      const double d = gk + wd * x;
      buf[i][k] = mu * buf[i][k] + d;
      x -= lr * (nesterov ? d + mu * buf[i][k] : buf[i][k]);
    });
  }
};

double naive_norm(const Dense& g) {
  double s = 0;
  Dense copy = g;
  for_each_element(copy, g, [&](std::size_t, std::size_t, double&, double gk) { s += gk * gk; });
  return std::sqrt(s);
}

// ---------------------------------------------------------------------------
// One device.

TEST(Optim, AdamwMatchesNaiveReference) {
  const xshard::adamw rule{.lr = 0.05, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1};
  Dense p = dense_pattern(1);
  Dense want = p;
  xshard::optimizer<xshard::adamw, Dense> opt(rule, p);
  ref_adamw ref{0.05, 0.8, 0.95, 1e-6, 0.1, {}, {}};
  for (int s = 0; s < 6; ++s) {
    opt.step(p, grad_sum(s));
    ref.step(want, grad_sum(s));
  }
  EXPECT_EQ(opt.steps(), 6);
  EXPECT_LT(max_rel_diff(p, want), 1e-13);
  // The states are the moments.
  const Dense m = opt.state(0);
  EXPECT_NEAR(std::get<4>(m)(1, 2, 0), ref.m[4][1 * 15 + 2 * 3 + 0], 1e-14);
  EXPECT_EQ(opt.state_name(1), "v");
}

// The float update (AVX-512 or AVX2 kernel where the CPU has one; the isa.*
// CTests rerun this with XSHARD_ISA capped): against the double reference,
// and the same bits however the elements are cut into calls (ZeRO-1 updates
// shards of a tensor; the vector kernels pad the tail instead of switching
// to other arithmetic).
TEST(Optim, AdamwFloatKernelMatchesReferenceAndIgnoresChunking) {
  const xshard::adamw rule{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1};
  for (const std::size_t n : {1u, 7u, 8u, 15u, 16u, 17u, 33u, 100u}) {
    std::vector<float> p(n), g(n), m(n, 0.0f), v(n, 0.0f);
    std::vector<double> pd(n), md(n, 0.0), vd(n, 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      p[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i) + 0.3));
      pd[i] = p[i];
    }
    std::vector<float> pc = p, mc = m, vc = v;  // updated in chunks of 5
    for (std::int64_t t = 1; t <= 3; ++t) {
      for (std::size_t i = 0; i < n; ++i) g[i] = static_cast<float>(std::cos(1.3 * static_cast<double>(i) + t));
      float* s[] = {m.data(), v.data()};
      rule.update(p.data(), g.data(), 0.5f, s, n, t);
      for (std::size_t at = 0; at < n; at += 5) {
        float* sc[] = {mc.data() + at, vc.data() + at};
        rule.update(pc.data() + at, g.data() + at, 0.5f, sc, std::min<std::size_t>(5, n - at), t);
      }
      for (std::size_t i = 0; i < n; ++i) {
        const double gi = 0.5 * g[i];
        md[i] = 0.9 * md[i] + 0.1 * gi;
        vd[i] = 0.99 * vd[i] + 0.01 * gi * gi;
        const double mhat = md[i] / (1 - std::pow(0.9, t)), vhat = vd[i] / (1 - std::pow(0.99, t));
        pd[i] = pd[i] - 0.01 * 0.1 * pd[i] - 0.01 * mhat / (std::sqrt(vhat) + 1e-6);
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(p[i], pd[i], 1e-6) << "n " << n << ", element " << i;
      EXPECT_EQ(p[i], pc[i]) << "n " << n << ", element " << i;
      EXPECT_EQ(m[i], mc[i]) << "n " << n << ", element " << i;
      EXPECT_EQ(v[i], vc[i]) << "n " << n << ", element " << i;
    }
  }
}

// SGD's float update (the AVX-512 or AVX2 kernel where the CPU has one; the
// isa.* CTests rerun it capped at avx2 and generic) against the same
// formulas in a plain float loop, bit for bit, in each of its forms, and the
// same bits however the elements are cut into calls.
TEST(Optim, SgdFloatKernelIsThePlainLoopAndIgnoresChunking) {
  struct form {
    xshard::sgd rule;
    const char* name;
  };
  const form forms[] = {{{.lr = 0.1}, "plain"},
                        {{.lr = 0.1, .weight_decay = 0.01}, "weight decay"},
                        {{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01}, "momentum"},
                        {{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}, "nesterov"}};
  for (const form& f : forms) {
    const float lr = static_cast<float>(f.rule.lr), mu = static_cast<float>(f.rule.momentum),
                wd = static_cast<float>(f.rule.weight_decay), scale = 0.5f;
    for (const std::size_t n : {1u, 7u, 8u, 15u, 16u, 17u, 33u, 100u}) {
      std::vector<float> p(n), g(n), b(n, 0.0f);
      for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i) + 0.3));
      std::vector<float> want = p, want_b = b, pc = p, bc = b;  // pc, bc: updated in chunks of 5
      for (int t = 1; t <= 3; ++t) {
        for (std::size_t i = 0; i < n; ++i) g[i] = static_cast<float>(std::cos(1.3 * static_cast<double>(i) + t));
        float* s[] = {b.data()};
        f.rule.update(p.data(), g.data(), scale, s, n, t);
        for (std::size_t at = 0; at < n; at += 5) {
          float* sc[] = {bc.data() + at};
          f.rule.update(pc.data() + at, g.data() + at, scale, sc, std::min<std::size_t>(5, n - at), t);
        }
        for (std::size_t i = 0; i < n; ++i) {
          if (f.rule.momentum == 0) {
            const float gi = f.rule.weight_decay == 0 ? g[i] * scale : g[i] * scale + wd * want[i];
            want[i] = want[i] - lr * gi;
          } else {
            const float gi = g[i] * scale + wd * want[i];
            want_b[i] = mu * want_b[i] + gi;
            want[i] = want[i] - lr * (f.rule.nesterov ? gi + mu * want_b[i] : want_b[i]);
          }
        }
      }
      for (std::size_t i = 0; i < n; ++i) {
        EXPECT_EQ(p[i], want[i]) << f.name << ", n " << n << ", element " << i;
        EXPECT_EQ(pc[i], want[i]) << f.name << ", n " << n << ", element " << i << " (chunks of 5)";
        if (f.rule.momentum != 0) {
          EXPECT_EQ(b[i], want_b[i]) << f.name << ", n " << n << ", element " << i;
        }
      }
    }
  }
}

TEST(Optim, SgdMomentumMatchesNaiveReference) {
  for (bool nesterov : {false, true}) {
    const xshard::sgd rule{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = nesterov};
    Dense p = dense_pattern(2);
    Dense want = p;
    xshard::optimizer<xshard::sgd, Dense> opt(rule, p);
    ref_sgd ref{0.1, 0.9, 0.01, nesterov, {}};
    for (int s = 0; s < 5; ++s) {
      opt.step(p, grad_sum(s));
      ref.step(want, grad_sum(s));
    }
    EXPECT_LT(max_rel_diff(p, want), 1e-13) << "nesterov " << nesterov;
    EXPECT_EQ(opt.state_count(), 1u);
  }
}

TEST(Optim, PlainSgdIsExactlyTheUsualUpdate) {
  Dense p = dense_pattern(3);
  Dense want = p;
  xshard::optimizer<xshard::sgd, Dense> opt({.lr = 0.1}, p);
  EXPECT_EQ(opt.state_count(), 0u);
  for (int s = 0; s < 3; ++s) {
    const Dense g = grad_sum(s);
    opt.step(p, g);
    xshard::detail::for_each_index<5>([&](auto i) { std::get<i.value>(want) -= 0.1 * std::get<i.value>(g); });
  }
  EXPECT_TRUE(bit_equal(p, want));
}

// layer_updates: the update of a stack one layer at a time (a backward
// handing over each layer's gradients) is the stacked step, bit for bit, for
// every rule; floats run the SIMD kernels, whose vector and tail split
// differs between a layer's slice (20 and 5 elements) and the whole stack.
template <class V, class Rule>
void expect_layer_updates_equal_the_step(const Rule& rule, const char* name) {
  using Stack = std::tuple<xt::xtensor<V, 3>, xt::xtensor<V, 2>>;
  constexpr std::size_t depth = 3;
  auto make = [&](double seed) {
    Stack s{xt::xtensor<V, 3>::from_shape({depth, 5, 4}), xt::xtensor<V, 2>::from_shape({depth, 5})};
    xshard::detail::for_each_index<2>([&](auto i) {
      auto& x = std::get<i.value>(s);
      for (std::size_t k = 0; k < x.size(); ++k)
        x.data()[k] = static_cast<V>(std::sin(seed * 1.3 + 0.77 * static_cast<double>(k + 11 * i.value)));
    });
    return s;
  };
  Stack stepped = make(1), layered = stepped;
  xshard::optimizer<Rule, Stack> a(rule, stepped), b(rule, layered);
  for (int t = 0; t < 3; ++t) {
    const Stack g = make(10.0 + t);
    a.step(stepped, g);
    auto update = b.layer_updates(layered);
    for (std::size_t l = depth; l-- > 0;)  // last layer first, as a backward makes them
      update(l, std::tuple<xt::xtensor<V, 2>, xt::xtensor<V, 1>>(xt::view(std::get<0>(g), l),
                                                                 xt::view(std::get<1>(g), l)));
  }
  EXPECT_EQ(b.steps(), a.steps()) << name;
  EXPECT_EQ(std::get<0>(layered), std::get<0>(stepped)) << name;
  EXPECT_EQ(std::get<1>(layered), std::get<1>(stepped)) << name;
  for (std::size_t k = 0; k < a.state_count(); ++k) {
    EXPECT_EQ(std::get<0>(b.state(k)), std::get<0>(a.state(k))) << name << ", state " << k;
    EXPECT_EQ(std::get<1>(b.state(k)), std::get<1>(a.state(k))) << name << ", state " << k;
  }
}

TEST(Optim, LayerUpdatesEqualTheStackedStep) {
  const xshard::sgd plain{.lr = 0.1};
  const xshard::sgd nesterov{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true};
  const xshard::adamw adam{.lr = 0.01};
  expect_layer_updates_equal_the_step<float>(plain, "sgd, float");
  expect_layer_updates_equal_the_step<float>(nesterov, "nesterov, float");
  expect_layer_updates_equal_the_step<float>(adam, "adamw, float");
  expect_layer_updates_equal_the_step<double>(nesterov, "nesterov, double");
  expect_layer_updates_equal_the_step<double>(adam, "adamw, double");
}

TEST(Optim, LayerUpdatesRefuseWhatTheyCannotDo) {
  using Stack = std::tuple<cube, mat>;
  Stack p{cube(xt::zeros<T>({2, 5, 3})), mat(xt::zeros<T>({2, 5}))};
  xshard::optimizer<xshard::sgd, Stack> opt({.lr = 0.1}, p);
  auto update = opt.layer_updates(p);
  auto message = [&](std::size_t l, const mat& w, const vec& b) -> std::string {
    try {
      update(l, std::tuple<mat, vec>(w, b));
    } catch (const xshard::error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message(1, mat(xt::zeros<T>({5, 4})), vec(xt::zeros<T>({5}))),
            "xshard: optimizer::layer_updates: layer 1's gradient of tensor 0 has shape [5,4], the stack [2,5,3]");
  EXPECT_EQ(message(2, mat(xt::zeros<T>({5, 3})), vec(xt::zeros<T>({5}))),
            "xshard: optimizer::layer_updates: layer 2's gradient of tensor 0 has shape [5,3], the stack [2,5,3]");
  EXPECT_EQ(message(0, mat(xt::zeros<T>({5, 3})), vec(xt::zeros<T>({5}))), "no error");
  // Clipping needs the norm of every gradient before the first update.
  xshard::optimizer<xshard::sgd, Stack> clipped({.lr = 0.1}, p, {.max_grad_norm = 1.0});
  EXPECT_THROW((void)clipped.layer_updates(p), xshard::error);
}

TEST(Optim, ClippingMatchesNaiveNorm) {
  const Dense g = grad_sum(0);
  const double norm = naive_norm(g);
  EXPECT_NEAR(xshard::global_norm(g), norm, 1e-12 * norm);
  Dense c = g;
  EXPECT_NEAR(xshard::clip_by_global_norm(c, 0.5 * norm), norm, 1e-12 * norm);
  EXPECT_NEAR(xshard::global_norm(c), 0.5 * norm, 1e-12 * norm);
  Dense u = g;  // a norm below the limit leaves the gradients alone
  xshard::clip_by_global_norm(u, 2 * norm);
  EXPECT_TRUE(bit_equal(u, g));
  EXPECT_THROW(xshard::clip_by_global_norm(u, 0.0), xshard::error);

  // Inside the step: the update of the clipped gradients.
  Dense p = dense_pattern(4), want = p;
  xshard::optimizer<xshard::adamw, Dense> opt({.lr = 0.01}, p, {.max_grad_norm = 1.0});
  ref_adamw ref{0.01, 0.9, 0.999, 1e-8, 0.01, {}, {}};
  for (int s = 0; s < 3; ++s) {
    const double n = opt.step(p, grad_sum(s));
    EXPECT_NEAR(n, naive_norm(grad_sum(s)), 1e-12 * n);
    ref.step(want, grad_sum(s), std::min(1.0, 1.0 / naive_norm(grad_sum(s))));
  }
  EXPECT_LT(max_rel_diff(p, want), 1e-13);
}

// A user's own update rule (the update_rule concept: states(),
// state_names, update_range): a heavy ball without decay, s += g, p -= s / 2,
// over the five tensors, against the same loop written out, for two steps;
// the state comes back through state(0). A rule claiming three states is an
// error.
struct heavy_ball {
  static constexpr std::array<std::string_view, 1> state_names{"velocity"};
  std::size_t states() const { return 1; }
  template <class V>
  void update_range(V* p, const V* g, V scale, V* const* s, std::size_t n, std::int64_t) const {
    for (std::size_t i = 0; i < n; ++i) {
      s[0][i] += g[i] * scale;
      p[i] -= s[0][i] / 2;
    }
  }
};
struct three_states : heavy_ball {
  std::size_t states() const { return 3; }
};

TEST(Optim, AUsersRuleRunsThroughTheOptimizer) {
  Dense p = dense_pattern(6), want = p, velocity = p;
  xshard::detail::for_each_index<5>([&](auto i) { std::get<i.value>(velocity).fill(0); });
  xshard::optimizer<heavy_ball, Dense> opt({}, p);
  ASSERT_EQ(opt.state_count(), 1u);
  for (int step = 0; step < 2; ++step) {
    const Dense g = grad_sum(step);
    opt.step(p, g);
    xshard::detail::for_each_index<5>([&](auto i) {
      auto& w = std::get<i.value>(want);
      auto& v = std::get<i.value>(velocity);
      const auto& gi = std::get<i.value>(g);
      for (std::size_t k = 0; k < w.size(); ++k) {
        v.data()[k] += gi.data()[k] * 1.0;
        w.data()[k] -= v.data()[k] / 2;
      }
    });
  }
  EXPECT_TRUE(bit_equal(p, want));
  EXPECT_TRUE(bit_equal(opt.state(0), velocity));
  EXPECT_THROW((xshard::optimizer<three_states, Dense>({}, p)), xshard::error);
}

TEST(Optim, BadInputIsAnError) {
  Dense p = dense_pattern(5);
  xshard::optimizer<xshard::adamw, Dense> opt({}, p);
  Dense g = grad_sum(0);
  std::get<1>(g) = vec(xt::zeros<T>({4}));
  EXPECT_THROW(opt.step(p, g), xshard::error);
  EXPECT_THROW((void)opt.state(2), xshard::error);
  EXPECT_THROW(opt.set_steps(-1), xshard::error);
  EXPECT_THROW((xshard::optimizer<xshard::sgd, Dense>({}, p, {.max_grad_norm = -1})), xshard::error);
}

// ---------------------------------------------------------------------------
// On the 2x2 mesh.

template <class Dev, xshard::axis_set Part = 0>
Sharded<Part> to_mesh(Dev& dev, const Dense& d) {
  auto one = [&]<class S, std::size_t R>(std::type_identity<S>, const xt::xtensor<T, R>& g) {
    auto x = xshard::distribute<S>(dev, g);
    return xshard::from_local<S, Part>(dev, x.global_shape(), x.local());
  };
  return {one(std::type_identity<S_w1>{}, std::get<0>(d)), one(std::type_identity<S_b1>{}, std::get<1>(d)),
          one(std::type_identity<S_w2>{}, std::get<2>(d)), one(std::type_identity<S_b2>{}, std::get<3>(d)),
          one(std::type_identity<S_st>{}, std::get<4>(d))};
}

template <class X>
Dense to_dense(const X& s) {
  return {xshard::gather(std::get<0>(s)), xshard::gather(std::get<1>(s)), xshard::gather(std::get<2>(s)),
          xshard::gather(std::get<3>(s)), xshard::gather(std::get<4>(s))};
}

struct failures {
  std::mutex mu;
  std::vector<std::string> list;
  void add(std::string s) {
    std::lock_guard l(mu);
    list.push_back(std::move(s));
  }
};

std::string counter_mismatch(const xshard::collective_counters& c, const xshard::optimizer_plan& plan) {
  for (auto k : {collective_kind::all_reduce, collective_kind::all_gather, collective_kind::reduce_scatter,
                 collective_kind::all_to_all, collective_kind::permute})
    if (c.calls_of(k) != plan.count(k))
      return std::string(xshard::collective_name(k)) + ": " + std::to_string(c.calls_of(k)) + " calls, plan " +
             std::to_string(plan.count(k));
  return {};
}

/// Runs `steps` AdamW steps on the mesh with States, gradients partial over
/// data (or already reduced), and returns the gathered parameters.
template <class States, bool partial>
Dense mesh_adamw(int steps, double clip, failures& f, Dense* m_out = nullptr) {
  using G = std::conditional_t<partial, Gp, P>;
  using Opt = xshard::optimizer<xshard::adamw, P, States>;
  constexpr auto plan_clip = Opt::template plan<G>(true), plan_plain = Opt::template plan<G>(false);
  xshard::thread_mesh<M> mesh;
  Dense out, m0;
  mesh.run([&](auto& dev) {
    P p = to_mesh(dev, dense_pattern(1));
    Opt opt({.lr = 0.05, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1}, p, {.max_grad_norm = clip});
    const int c = static_cast<int>(dev.coord(0));
    for (int s = 0; s < steps; ++s) {
      dev.reset_counters();
      if constexpr (partial)
        opt.step(p, to_mesh<decltype(dev), data>(dev, grad_part(s, c)));
      else
        opt.step(p, to_mesh(dev, grad_sum(s)));
      const std::string bad = counter_mismatch(dev.counters(), clip > 0 ? plan_clip : plan_plain);
      if (!bad.empty()) f.add("device " + std::to_string(dev.id()) + " step " + std::to_string(s) + ": " + bad);
    }
    Dense d = to_dense(p);
    Dense m = to_dense(opt.state(0));
    if (dev.id() == 0) out = d, m0 = m;
  });
  if (m_out) *m_out = m0;
  return out;
}

Dense dense_adamw(int steps, double clip, Dense* m_out = nullptr) {
  Dense p = dense_pattern(1);
  xshard::optimizer<xshard::adamw, Dense> opt(
      {.lr = 0.05, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1}, p, {.max_grad_norm = clip});
  for (int s = 0; s < steps; ++s) opt.step(p, grad_sum(s));
  if (m_out) *m_out = opt.state(0);
  return p;
}

TEST(OptimMesh, AdamwShardedEqualsOneDevice) {
  failures f;
  Dense m_mesh, m_dense;
  const Dense want = dense_adamw(5, 0, &m_dense);
  // Partial gradients: the fused all-reduce sums in rank order, as
  // grad_sum does, so the result is bit-identical.
  EXPECT_TRUE(bit_equal(mesh_adamw<xshard::param_sharded_states, true>(5, 0, f, &m_mesh), want));
  EXPECT_TRUE(bit_equal(m_mesh, m_dense));
  EXPECT_TRUE(bit_equal(mesh_adamw<xshard::param_sharded_states, false>(5, 0, f), want));
  for (const auto& s : f.list) ADD_FAILURE() << s;
}

TEST(OptimMesh, Zero1EqualsUnshardedAdamw) {
  failures f;
  Dense m_mesh, m_dense;
  const Dense want = dense_adamw(5, 0, &m_dense);
  EXPECT_TRUE(bit_equal(mesh_adamw<xshard::zero1<"data">, true>(5, 0, f, &m_mesh), want));
  EXPECT_TRUE(bit_equal(m_mesh, m_dense));  // the state gathered back into the parameters' layout
  EXPECT_TRUE(bit_equal(mesh_adamw<xshard::zero1<"data">, false>(5, 0, f), want));
  for (const auto& s : f.list) ADD_FAILURE() << s;
}

TEST(OptimMesh, ClippingCountsEveryElementOnce) {
  // The norm is summed in another order on the mesh: equal to rounding.
  failures f;
  const Dense want = dense_adamw(4, 1.0);
  EXPECT_LT(max_rel_diff(mesh_adamw<xshard::param_sharded_states, true>(4, 1.0, f), want), 1e-12);
  EXPECT_LT(max_rel_diff(mesh_adamw<xshard::zero1<"data">, true>(4, 1.0, f), want), 1e-12);
  // A wrong count (a replicated bias counted twice) would change the norm:
  // check the norm itself too.
  xshard::thread_mesh<M> mesh;
  std::vector<double> norms(4);
  mesh.run([&](auto& dev) {
    const P g = to_mesh(dev, grad_sum(0));
    norms[static_cast<std::size_t>(dev.position())] = xshard::global_norm(g);
  });
  for (double n : norms) EXPECT_NEAR(n, naive_norm(grad_sum(0)), 1e-12 * n);
  for (const auto& s : f.list) ADD_FAILURE() << s;
}

TEST(OptimMesh, LayerUpdatesOfAShardedStackEqualOneDevice) {
  // The stacked weight "None, model, None" (uneven: 5 rows over model) and
  // its layers "model, None": each device updates its block of layer l.
  using Stack = std::tuple<xshard::sharded<T, 3, M, S_st>>;
  using Layer = std::tuple<xshard::sharded<T, 2, M, S_w1>>;
  const xshard::adamw rule{.lr = 0.05, .weight_decay = 0.1};
  std::tuple<cube> want{pattern(st_shape, 1)};
  xshard::optimizer<xshard::adamw, std::tuple<cube>> dense(rule, want);
  for (int s = 0; s < 3; ++s) dense.step(want, std::tuple<cube>{pattern(st_shape, 10 + s)});
  xshard::thread_mesh<M> mesh;
  failures f;
  mesh.run([&](auto& dev) {
    Stack p{xshard::distribute<S_st>(dev, pattern(st_shape, 1))};
    xshard::optimizer<xshard::adamw, Stack> opt(rule, p);
    for (int s = 0; s < 3; ++s) {
      const cube g = pattern(st_shape, 10 + s);
      auto update = opt.layer_updates(p);
      for (std::size_t l = st_shape[0]; l-- > 0;) update(l, Layer{xshard::distribute<S_w1>(dev, mat(xt::view(g, l)))});
    }
    if (xshard::gather(std::get<0>(p)) != std::get<0>(want))
      f.add("device " + std::to_string(dev.id()) + ": the parameters differ");
  });
  for (const auto& s : f.list) ADD_FAILURE() << s;
}

TEST(OptimMesh, SgdMomentumShardedEqualsOneDevice) {
  const xshard::sgd rule{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
  Dense want = dense_pattern(1);
  xshard::optimizer<xshard::sgd, Dense> dense(rule, want);
  for (int s = 0; s < 4; ++s) dense.step(want, grad_sum(s));
  xshard::thread_mesh<M> mesh;
  Dense got_zero, got;
  mesh.run([&](auto& dev) {
    P a = to_mesh(dev, dense_pattern(1)), b = a;
    xshard::optimizer<xshard::sgd, P> o1(rule, a);
    xshard::optimizer<xshard::sgd, P, xshard::zero1<"data">> o2(rule, b);
    for (int s = 0; s < 4; ++s) {
      const auto g = to_mesh<decltype(dev), data>(dev, grad_part(s, static_cast<int>(dev.coord(0))));
      o1.step(a, g);
      o2.step(b, g);
    }
    Dense da = to_dense(a), db = to_dense(b);
    if (dev.id() == 0) got = da, got_zero = db;
  });
  EXPECT_TRUE(bit_equal(got, want));
  EXPECT_TRUE(bit_equal(got_zero, want));
}

TEST(OptimMesh, Zero1StateRoundTrip) {
  // set_state(state()) on a ZeRO-1 optimizer changes nothing, and a state
  // moved into a param-sharded optimizer continues identically.
  xshard::thread_mesh<M> mesh;
  Dense a_out, b_out;
  mesh.run([&](auto& dev) {
    P a = to_mesh(dev, dense_pattern(1));
    xshard::optimizer<xshard::adamw, P, xshard::zero1<"data">> z({.lr = 0.05}, a);
    for (int s = 0; s < 3; ++s) z.step(a, to_mesh(dev, grad_sum(s)));
    P b = a;
    xshard::optimizer<xshard::adamw, P> q({.lr = 0.05}, b);
    for (std::size_t k = 0; k < 2; ++k) {
      q.set_state(k, z.state(k));
      z.set_state(k, z.state(k));
    }
    q.set_steps(z.steps());
    for (int s = 3; s < 5; ++s) {
      z.step(a, to_mesh(dev, grad_sum(s)));
      q.step(b, to_mesh(dev, grad_sum(s)));
    }
    Dense da = to_dense(a), db = to_dense(b);
    if (dev.id() == 0) a_out = da, b_out = db;
  });
  EXPECT_TRUE(bit_equal(a_out, b_out));
  EXPECT_TRUE(bit_equal(a_out, [] {
    Dense p = dense_pattern(1);
    xshard::optimizer<xshard::adamw, Dense> o({.lr = 0.05}, p);
    for (int s = 0; s < 5; ++s) o.step(p, grad_sum(s));
    return p;
  }()));
}

// ---------------------------------------------------------------------------
// Gradient accumulation: k micro-batches against the big batch.

/// Per-example "gradients" e_i; the big batch's gradient is their mean.
Dense example_grad(int i) { return dense_pattern(0.37 * i + 3); }

Dense mean_of(int first, int count) {
  Dense s = example_grad(first);
  for (int i = first + 1; i < first + count; ++i) {
    const Dense e = example_grad(i);
    xshard::detail::for_each_index<5>([&](auto k) { std::get<k.value>(s) += std::get<k.value>(e); });
  }
  xshard::detail::for_each_index<5>([&](auto k) { std::get<k.value>(s) /= static_cast<T>(count); });
  return s;
}

Dense sum_of(int first, int count, double scale) {
  Dense s = example_grad(first);
  for (int i = first + 1; i < first + count; ++i) {
    const Dense e = example_grad(i);
    xshard::detail::for_each_index<5>([&](auto k) { std::get<k.value>(s) += std::get<k.value>(e); });
  }
  xshard::detail::for_each_index<5>([&](auto k) { std::get<k.value>(s) *= static_cast<T>(scale); });
  return s;
}

TEST(OptimAccumulate, OneDeviceEqualsBigBatch) {
  constexpr int batch = 16, micro = 4, k = batch / micro;
  const Dense big = mean_of(0, batch);
  xshard::grad_accumulator<Dense, xshard::grad_sync::at_end> acc;
  for (int j = 0; j < k; ++j) acc.add(mean_of(j * micro, micro));
  EXPECT_EQ(acc.count(), k);
  EXPECT_LT(max_rel_diff(acc.mean(), big), 1e-14);
  acc.clear();
  EXPECT_THROW((void)acc.mean(), xshard::error);
}

template <xshard::grad_sync Sync>
void mesh_accumulation(failures& f, Dense& result) {
  constexpr int batch = 16, micro = 4, k = batch / micro, half = micro / 2;
  using Acc = xshard::grad_accumulator<Gp, Sync>;
  using Opt = xshard::optimizer<xshard::adamw, P>;
  constexpr auto plan = Opt::plan<typename Acc::value_type>(false);
  xshard::thread_mesh<M> mesh;
  mesh.run([&](auto& dev) {
    P p = to_mesh(dev, dense_pattern(1));
    Opt opt({.lr = 0.05}, p);
    Acc acc;
    const int c = static_cast<int>(dev.coord(0));
    dev.reset_counters();
    // Each data rank takes half of every micro-batch; its part of the
    // micro-batch's mean gradient is the sum of its examples / micro.
    for (int j = 0; j < k; ++j)
      acc.add(to_mesh<decltype(dev), data>(dev, sum_of(j * micro + c * half, half, 1.0 / micro)));
    if (dev.counters().total_calls() != Acc::collectives(k))
      f.add("accumulation ran " + std::to_string(dev.counters().total_calls()) + " collectives, plan " +
            std::to_string(Acc::collectives(k)));
    dev.reset_counters();
    opt.step(p, acc.mean());
    const std::string bad = counter_mismatch(dev.counters(), plan);
    if (!bad.empty()) f.add("step: " + bad);
    Dense d = to_dense(p);
    if (dev.id() == 0) result = d;
  });
}

TEST(OptimAccumulate, MeshEqualsBigBatchInBothModes) {
  failures f;
  Dense want = dense_pattern(1);
  xshard::optimizer<xshard::adamw, Dense> opt({.lr = 0.05}, want);
  opt.step(want, mean_of(0, 16));
  Dense every, at_end;
  mesh_accumulation<xshard::grad_sync::every_micro_batch>(f, every);
  mesh_accumulation<xshard::grad_sync::at_end>(f, at_end);
  // AdamW's first step is nearly sign(g) lr: compare to rounding.
  EXPECT_LT(max_rel_diff(every, want), 1e-12);
  EXPECT_LT(max_rel_diff(at_end, want), 1e-12);
  for (const auto& s : f.list) ADD_FAILURE() << s;
}

}  // namespace
