// scan_grad: scan over a differentiable step and scan_vjp. The gradients
// equal a hand-unrolled forward and backward (bit for bit), central finite
// differences of sum(gc * final) + sum(gy * ys), and are identical under
// every remat policy, unroll, and with reverse; none xs / ys, tuple carries,
// scalar steps, length 0, argument errors and trace scopes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>
#include <xshard/einsum/einsum.hpp>
#include <xshard/einsum/grad.hpp>
#include <xshard/scan/scan_grad.hpp>
#include <xshard/trace/trace.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "../support/expect_error.hpp"

namespace {

using T = double;
using vec = xt::xtensor<T, 1>;
using mat = xt::xtensor<T, 2>;
using cube = xt::xtensor<T, 3>;

constexpr std::size_t B = 2, N = 3, M = 2;  // batch, hidden, input

/// a = h W^T + x U^T + b (the einsum linear, as nn/layer.hpp writes it).
mat pre_activation(const mat& w, const mat& u, const vec& b, const mat& h, const mat& x) {
  mat a = xshard::einsum<"...n,mn->...m">(h, w);
  a += xshard::einsum<"...n,mn->...m">(x, u);
  a += b;
  return a;
}

/// h' = tanh(h W^T + x U^T + b), y = h'. With forward_saving_dots / restore
/// (the pre-activation is the saved "dot").
struct rnn_step {
  using params = std::tuple<mat, mat, vec>;  // W [n,n], U [n,m], b [n]
  using carry = mat;                         // h [b,n]
  using x = mat;                             // x_t [b,m]
  using y = mat;                             // h' [b,n]
  struct residuals {
    mat h, x, h_next;
  };
  using dots = mat;  // the pre-activation

  std::tuple<carry, y, residuals> forward(const params& p, const carry& h, const x& x_t) const {
    mat h_next = xt::tanh(pre_activation(std::get<0>(p), std::get<1>(p), std::get<2>(p), h, x_t));
    return {h_next, h_next, residuals{h, x_t, h_next}};
  }
  std::tuple<params, carry, x> vjp(const params& p, const residuals& r, const carry& g_carry, const y& g_y) const {
    const mat ga = (g_carry + g_y) * (1.0 - r.h_next * r.h_next);
    mat dh = xshard::einsum_vjp<"...n,mn->...m", 0>(ga, r.h, std::get<0>(p));
    mat dw = xshard::einsum_vjp<"...n,mn->...m", 1>(ga, r.h, std::get<0>(p));
    mat dx = xshard::einsum_vjp<"...n,mn->...m", 0>(ga, r.x, std::get<1>(p));
    mat du = xshard::einsum_vjp<"...n,mn->...m", 1>(ga, r.x, std::get<1>(p));
    vec db = xshard::broadcast_vjp<"...m", "m">(ga);
    return {params{std::move(dw), std::move(du), std::move(db)}, std::move(dh), std::move(dx)};
  }
  std::tuple<carry, y, dots> forward_saving_dots(const params& p, const carry& h, const x& x_t) const {
    mat a = pre_activation(std::get<0>(p), std::get<1>(p), std::get<2>(p), h, x_t);
    mat h_next = xt::tanh(a);
    return {h_next, h_next, std::move(a)};
  }
  residuals restore(const params&, const carry& h, const x& x_t, const dots& a) const {
    return residuals{h, x_t, mat(xt::tanh(a))};
  }
};

/// A tuple carry (h, s), a tuple x (u, v) and a tuple y:
///   h' = tanh(h W^T + u U^T + b), s' = s + h' * v, y = (h', s').
/// No forward_saving_dots: dots_saveable runs as save_all.
struct pair_step {
  using params = std::tuple<mat, mat, vec>;
  using carry = std::tuple<mat, mat>;  // h [b,n], s [b,n]
  using x = std::tuple<mat, mat>;      // u [b,m], v [b,n]
  using y = std::tuple<mat, mat>;
  struct residuals {
    mat h, u, v, h_next;
  };

  std::tuple<carry, y, residuals> forward(const params& p, const carry& c, const x& x_t) const {
    const auto& [h, s] = c;
    const auto& [u, v] = x_t;
    mat h_next = xt::tanh(pre_activation(std::get<0>(p), std::get<1>(p), std::get<2>(p), h, u));
    mat s_next = s + h_next * v;
    return {carry{h_next, s_next}, y{h_next, s_next}, residuals{h, u, v, h_next}};
  }
  std::tuple<params, carry, x> vjp(const params& p, const residuals& r, const carry& gc, const y& gy) const {
    const mat gs = std::get<1>(gc) + std::get<1>(gy);             // d s'
    const mat gh = std::get<0>(gc) + std::get<0>(gy) + gs * r.v;  // d h'
    const mat ga = gh * (1.0 - r.h_next * r.h_next);
    mat dh = xshard::einsum_vjp<"...n,mn->...m", 0>(ga, r.h, std::get<0>(p));
    mat dw = xshard::einsum_vjp<"...n,mn->...m", 1>(ga, r.h, std::get<0>(p));
    mat du = xshard::einsum_vjp<"...n,mn->...m", 0>(ga, r.u, std::get<1>(p));
    mat dU = xshard::einsum_vjp<"...n,mn->...m", 1>(ga, r.u, std::get<1>(p));
    vec db = xshard::broadcast_vjp<"...m", "m">(ga);
    mat dv = gs * r.h_next;
    return {params{std::move(dw), std::move(dU), std::move(db)}, carry{std::move(dh), gs},
            x{std::move(du), std::move(dv)}};
  }
};

/// No xs, no ys: h' = tanh(h W^T + b). Its vjp omits the x gradient.
struct decay_step {
  using params = std::tuple<mat, vec>;
  using carry = mat;
  using x = xshard::none_t;
  using y = xshard::none_t;
  struct residuals {
    mat h, h_next;
  };

  std::tuple<carry, y, residuals> forward(const params& p, const carry& h, const x&) const {
    mat a = xshard::einsum<"...n,mn->...m">(h, std::get<0>(p));
    a += std::get<1>(p);
    mat h_next = xt::tanh(a);
    return {h_next, xshard::none, residuals{h, h_next}};
  }
  std::tuple<params, carry> vjp(const params& p, const residuals& r, const carry& g_carry, const y&) const {
    const mat ga = g_carry * (1.0 - r.h_next * r.h_next);
    mat dh = xshard::einsum_vjp<"...n,mn->...m", 0>(ga, r.h, std::get<0>(p));
    mat dw = xshard::einsum_vjp<"...n,mn->...m", 1>(ga, r.h, std::get<0>(p));
    vec db = xshard::broadcast_vjp<"...m", "m">(ga);
    return {params{std::move(dw), std::move(db)}, std::move(dh)};
  }
};

/// Scalars, no params: c' = c * x + x, y = c' (xs of rank 1).
struct scalar_step {
  using params = std::tuple<>;
  using carry = T;
  using x = T;
  using y = T;
  struct residuals {
    T c, x;
  };

  std::tuple<carry, y, residuals> forward(const params&, const carry& c, const x& x_t) const {
    const T next = c * x_t + x_t;
    return {next, next, residuals{c, x_t}};
  }
  std::tuple<params, carry, x> vjp(const params&, const residuals& r, const carry& gc, const y& gy) const {
    const T g = gc + gy;
    return {params{}, g * r.x, g * (r.c + 1)};
  }
};

/// A buggy step: its x gradient has one column too many.
struct bad_x_grad_step : rnn_step {
  std::tuple<params, carry, x> vjp(const params& p, const residuals& r, const carry& g_carry, const y& g_y) const {
    auto g = rnn_step::vjp(p, r, g_carry, g_y);
    std::get<2>(g) = xt::zeros<T>({B, M + 1});
    return g;
  }
};

static_assert(xshard::scan_step<rnn_step> && xshard::dots_saving_scan_step<rnn_step>);
static_assert(xshard::scan_step<pair_step> && !xshard::dots_saving_scan_step<pair_step>);
static_assert(xshard::scan_step<decay_step> && xshard::scan_step<scalar_step>);
static_assert(!xshard::scan_step<int>);
static_assert(xshard::effective_scan_policy<pair_step>(xshard::remat::dots_saveable) == xshard::remat::save_all);
static_assert(xshard::effective_scan_policy<rnn_step>(xshard::remat::dots_saveable) == xshard::remat::dots_saveable);
static_assert(std::is_same_v<xshard::scan_ys_t<rnn_step>, cube>);
static_assert(std::is_same_v<xshard::scan_xs_grad_t<pair_step>, std::tuple<cube, cube>>);
static_assert(std::is_same_v<xshard::scan_xs_grad_t<decay_step>, xshard::none_t>);
static_assert(std::is_same_v<xshard::scan_xs_grad_t<scalar_step>, vec>);

constexpr xshard::remat all_policies[] = {xshard::remat::save_all, xshard::remat::recompute,
                                          xshard::remat::dots_saveable};

template <class C>
T sum_product(const C& a, const C& b) {
  return xt::sum(a * b)();
}

/// Central differences of loss() in every element of `v`, against `grad`.
template <class V, class G>
void expect_finite_differences(const std::function<T()>& loss, V& v, const G& grad, const std::string& what) {
  ASSERT_EQ(v.size(), grad.size()) << what;
  const T eps = 1e-6;
  for (std::size_t k = 0; k < v.size(); ++k) {
    const T old = v.data()[k];
    v.data()[k] = old + eps;
    const T up = loss();
    v.data()[k] = old - eps;
    const T down = loss();
    v.data()[k] = old;
    const T fd = (up - down) / (2 * eps);
    EXPECT_NEAR(grad.data()[k], fd, 1e-7 * (1 + std::abs(fd))) << what << " element " << k;
  }
}

struct rnn_case {
  rnn_step::params p;
  mat h0;
  cube xs;
  mat gc;
  cube gys;
};

rnn_case random_rnn(std::size_t length, unsigned seed) {
  xt::random::seed(seed);
  rnn_case c;
  c.p = {mat(xt::random::randn<T>({N, N}) * 0.5), mat(xt::random::randn<T>({N, M}) * 0.5),
         vec(xt::random::randn<T>({N}) * 0.1)};
  c.h0 = xt::random::randn<T>({B, N});
  c.xs = xt::random::randn<T>({length, B, M});
  c.gc = xt::random::randn<T>({B, N});
  c.gys = xt::random::randn<T>({length, B, N});
  return c;
}

/// The RNN written out by hand: forward, then backward, no scan.
struct hand_rnn {
  mat final;
  cube ys;
  rnn_step::params g_params;
  mat g_init;
  cube g_xs;
};

hand_rnn run_by_hand(const rnn_case& c, bool reverse) {
  const auto& [w, u, b] = c.p;
  const std::size_t n = c.xs.shape()[0];
  hand_rnn out;
  out.ys = xt::zeros<T>({n, B, N});
  std::vector<mat> h_in(n), h_out(n);
  mat h = c.h0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t t = reverse ? n - 1 - i : i;
    h_in[t] = h;
    h = xt::tanh(pre_activation(w, u, b, h, mat(xt::view(c.xs, t))));
    h_out[t] = h;
    xt::view(out.ys, t) = h;
  }
  out.final = h;
  mat g = c.gc;
  mat dw = xt::zeros<T>({N, N}), du = xt::zeros<T>({N, M});
  vec db = xt::zeros<T>({N});
  out.g_xs = xt::zeros<T>({n, B, M});
  for (std::size_t i = n; i-- > 0;) {  // the forward's last step first
    const std::size_t t = reverse ? n - 1 - i : i;
    const mat x = xt::view(c.xs, t), gy = xt::view(c.gys, t);
    const mat ga = (g + gy) * (1.0 - h_out[t] * h_out[t]);
    dw += xshard::einsum_vjp<"...n,mn->...m", 1>(ga, h_in[t], w);
    du += xshard::einsum_vjp<"...n,mn->...m", 1>(ga, x, u);
    db += xshard::broadcast_vjp<"...m", "m">(ga);
    xt::view(out.g_xs, t) = xshard::einsum_vjp<"...n,mn->...m", 0>(ga, x, u);
    g = xshard::einsum_vjp<"...n,mn->...m", 0>(ga, h_in[t], w);
  }
  out.g_params = {dw, du, db};
  out.g_init = g;
  return out;
}

void expect_same_grads(const xshard::scan_grads<rnn_step>& a, const xshard::scan_grads<rnn_step>& b,
                       const std::string& what) {
  EXPECT_EQ(std::get<0>(a.params), std::get<0>(b.params)) << what;  // identical bits, not a tolerance
  EXPECT_EQ(std::get<1>(a.params), std::get<1>(b.params)) << what;
  EXPECT_EQ(std::get<2>(a.params), std::get<2>(b.params)) << what;
  EXPECT_EQ(a.init, b.init) << what;
  EXPECT_EQ(a.xs, b.xs) << what;
}

TEST(ScanGrad, StepFormEqualsTheLambdaFormAndTheHandLoop) {
  const rnn_case c = random_rnn(4, 1);
  for (bool reverse : {false, true}) {
    const auto [final, ys] = xshard::scan(rnn_step{}, c.p, c.h0, c.xs, {.reverse = reverse});
    const hand_rnn want = run_by_hand(c, reverse);
    EXPECT_EQ(final, want.final) << "reverse " << reverse;
    EXPECT_EQ(ys, want.ys) << "reverse " << reverse;
  }
}

TEST(ScanGrad, RnnGradientsEqualTheHandUnrolledBackward) {
  const rnn_case c = random_rnn(4, 2);
  const hand_rnn want = run_by_hand(c, false);
  const auto g = xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, c.gc, c.gys);
  EXPECT_EQ(std::get<0>(g.params), std::get<0>(want.g_params));
  EXPECT_EQ(std::get<1>(g.params), std::get<1>(want.g_params));
  EXPECT_EQ(std::get<2>(g.params), std::get<2>(want.g_params));
  EXPECT_EQ(g.init, want.g_init);
  EXPECT_EQ(g.xs, want.g_xs);
}

void check_rnn_finite_differences(bool reverse, unsigned seed) {
  rnn_case c = random_rnn(4, seed);
  const xshard::scan_options opts{.reverse = reverse};
  const auto g = xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, c.gc, c.gys, opts);
  const std::function<T()> loss = [&] {
    const auto [final, ys] = xshard::scan(rnn_step{}, c.p, c.h0, c.xs, opts);
    return sum_product(c.gc, final) + sum_product(c.gys, ys);
  };
  expect_finite_differences(loss, std::get<0>(c.p), std::get<0>(g.params), "W");
  expect_finite_differences(loss, std::get<1>(c.p), std::get<1>(g.params), "U");
  expect_finite_differences(loss, std::get<2>(c.p), std::get<2>(g.params), "bias");
  expect_finite_differences(loss, c.h0, g.init, "init");
  expect_finite_differences(loss, c.xs, g.xs, "xs");
}

TEST(ScanGrad, RnnGradientsMatchFiniteDifferences) { check_rnn_finite_differences(false, 3); }

TEST(ScanGrad, ReverseMatchesTheHandLoopAndFiniteDifferences) {
  const rnn_case c = random_rnn(4, 4);
  const hand_rnn want = run_by_hand(c, true);
  const auto g = xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, c.gc, c.gys, {.reverse = true});
  EXPECT_EQ(std::get<0>(g.params), std::get<0>(want.g_params));
  EXPECT_EQ(std::get<1>(g.params), std::get<1>(want.g_params));
  EXPECT_EQ(std::get<2>(g.params), std::get<2>(want.g_params));
  EXPECT_EQ(g.init, want.g_init);
  EXPECT_EQ(g.xs, want.g_xs);
  // reverse changes the answer (ys[t] stays paired with xs[t])
  EXPECT_NE(g.init, xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, c.gc, c.gys).init);
  check_rnn_finite_differences(true, 5);
}

TEST(ScanGrad, EveryRematPolicyGivesIdenticalBits) {
  const rnn_case c = random_rnn(5, 6);
  for (bool reverse : {false, true}) {
    const xshard::scan_options opts{.reverse = reverse};
    const auto want = xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, c.gc, c.gys, opts, xshard::remat::save_all);
    for (auto policy : all_policies)
      expect_same_grads(xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, c.gc, c.gys, opts, policy), want,
                        "policy " + std::to_string(static_cast<int>(policy)) + " reverse " + std::to_string(reverse));
  }
}

TEST(ScanGrad, UnrollGivesIdenticalResults) {
  const rnn_case c = random_rnn(5, 7);  // odd: unroll 2 leaves a remainder step
  for (bool reverse : {false, true}) {
    const auto [f1, ys1] = xshard::scan(rnn_step{}, c.p, c.h0, c.xs, {.reverse = reverse});
    const auto [f2, ys2] = xshard::scan(rnn_step{}, c.p, c.h0, c.xs, {.reverse = reverse, .unroll = 2});
    EXPECT_EQ(f1, f2);
    EXPECT_EQ(ys1, ys2);
    for (auto policy : all_policies) {
      const auto want = xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, c.gc, c.gys, {.reverse = reverse}, policy);
      for (std::size_t unroll : {2, 3, 5, 8})
        expect_same_grads(
            xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, c.gc, c.gys, {.reverse = reverse, .unroll = unroll}, policy),
            want, "unroll " + std::to_string(unroll));
    }
  }
}

TEST(ScanGrad, NoneXsWithLengthAndNoneYs) {
  xt::random::seed(8);
  decay_step::params p{mat(xt::random::randn<T>({N, N}) * 0.5), vec(xt::random::randn<T>({N}) * 0.1)};
  mat h0 = xt::random::randn<T>({B, N});
  const mat gc = xt::random::randn<T>({B, N});
  const xshard::scan_options opts{.length = 5};
  const auto [final, ys] = xshard::scan(decay_step{}, p, h0, xshard::none, opts);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(ys)>, xshard::none_t>);
  // Hand loop.
  mat h = h0;
  std::vector<mat> hs{h0};
  for (int t = 0; t < 5; ++t) {
    mat a = xshard::einsum<"...n,mn->...m">(h, std::get<0>(p));
    a += std::get<1>(p);
    h = xt::tanh(a);
    hs.push_back(h);
  }
  EXPECT_EQ(final, h);

  const auto g = xshard::scan_vjp(decay_step{}, p, h0, xshard::none, gc, xshard::none, opts);
  static_assert(std::is_same_v<decltype(g.xs), xshard::none_t>);
  for (auto policy : all_policies) {
    const auto gp = xshard::scan_vjp(decay_step{}, p, h0, xshard::none, gc, xshard::none, opts, policy);
    EXPECT_EQ(std::get<0>(gp.params), std::get<0>(g.params));
    EXPECT_EQ(std::get<1>(gp.params), std::get<1>(g.params));
    EXPECT_EQ(gp.init, g.init);
  }
  const std::function<T()> loss = [&] {
    return sum_product(gc, xshard::scan(decay_step{}, p, h0, xshard::none, opts).first);
  };
  expect_finite_differences(loss, std::get<0>(p), std::get<0>(g.params), "W");
  expect_finite_differences(loss, std::get<1>(p), std::get<1>(g.params), "bias");
  expect_finite_differences(loss, h0, g.init, "init");
  // xs none without options.length: scan's own error.
  EXPECT_XSHARD_ERROR((void)xshard::scan_vjp(decay_step{}, p, h0, xshard::none, gc, xshard::none),
                      "xs is none, so options.length is needed");
}

TEST(ScanGrad, TupleCarryTupleXsTupleYs) {
  xt::random::seed(9);
  const std::size_t n = 4;
  pair_step::params p{mat(xt::random::randn<T>({N, N}) * 0.5), mat(xt::random::randn<T>({N, M}) * 0.5),
                      vec(xt::random::randn<T>({N}) * 0.1)};
  pair_step::carry init{mat(xt::random::randn<T>({B, N})), mat(xt::random::randn<T>({B, N}))};
  std::tuple<cube, cube> xs{cube(xt::random::randn<T>({n, B, M})), cube(xt::random::randn<T>({n, B, N}))};
  const pair_step::carry gc{mat(xt::random::randn<T>({B, N})), mat(xt::random::randn<T>({B, N}))};
  const std::tuple<cube, cube> gys{cube(xt::random::randn<T>({n, B, N})), cube(xt::random::randn<T>({n, B, N}))};

  for (bool reverse : {false, true}) {
    const xshard::scan_options opts{.reverse = reverse};
    const auto g = xshard::scan_vjp(pair_step{}, p, init, xs, gc, gys, opts);
    for (auto policy : all_policies) {  // dots_saveable falls back to save_all
      const auto gp = xshard::scan_vjp(pair_step{}, p, init, xs, gc, gys, opts, policy);
      EXPECT_EQ(gp.params, g.params);
      EXPECT_EQ(gp.init, g.init);
      EXPECT_EQ(gp.xs, g.xs);
    }
    const std::function<T()> loss = [&] {
      const auto [final, ys] = xshard::scan(pair_step{}, p, init, xs, opts);
      return sum_product(std::get<0>(gc), std::get<0>(final)) + sum_product(std::get<1>(gc), std::get<1>(final)) +
             sum_product(std::get<0>(gys), std::get<0>(ys)) + sum_product(std::get<1>(gys), std::get<1>(ys));
    };
    const std::string r = reverse ? " (reverse)" : "";
    expect_finite_differences(loss, std::get<0>(p), std::get<0>(g.params), "W" + r);
    expect_finite_differences(loss, std::get<1>(p), std::get<1>(g.params), "U" + r);
    expect_finite_differences(loss, std::get<2>(p), std::get<2>(g.params), "bias" + r);
    expect_finite_differences(loss, std::get<0>(init), std::get<0>(g.init), "h0" + r);
    expect_finite_differences(loss, std::get<1>(init), std::get<1>(g.init), "s0" + r);
    expect_finite_differences(loss, std::get<0>(xs), std::get<0>(g.xs), "us" + r);
    expect_finite_differences(loss, std::get<1>(xs), std::get<1>(g.xs), "vs" + r);
  }
}

TEST(ScanGrad, ScalarStepsOverARank1Xs) {
  const vec xs = {0.5, -1.5, 2.0, 0.25};
  const T c0 = 0.75, gc = 1.25;
  const vec gys = {0.1, -0.2, 0.3, 0.4};
  const auto [final, ys] = xshard::scan(scalar_step{}, {}, c0, xs);
  const auto g = xshard::scan_vjp(scalar_step{}, {}, c0, xs, gc, gys);
  // By hand.
  std::vector<T> cs{c0};
  for (std::size_t t = 0; t < 4; ++t) cs.push_back(cs.back() * xs(t) + xs(t));
  EXPECT_EQ(final, cs.back());
  T gcur = gc;
  vec gxs = xt::zeros<T>({4});
  for (std::size_t t = 4; t-- > 0;) {
    const T gt = gcur + gys(t);
    gxs(t) = gt * (cs[t] + 1);
    gcur = gt * xs(t);
  }
  EXPECT_EQ(g.init, gcur);
  EXPECT_EQ(g.xs, gxs);
  EXPECT_EQ(g.params, std::tuple<>{});
}

TEST(ScanGrad, NoneCotangentsAreZeros) {
  const rnn_case c = random_rnn(4, 10);
  const cube zero_ys = xt::zeros<T>({std::size_t{4}, B, N});
  const mat zero_c = xt::zeros<T>({B, N});
  expect_same_grads(xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, c.gc, xshard::none),
                    xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, c.gc, zero_ys), "g_ys none");
  expect_same_grads(xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, xshard::none, c.gys),
                    xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, zero_c, c.gys), "g_final_carry none");
}

TEST(ScanGrad, MismatchedCotangentShapesAreErrors) {
  const rnn_case c = random_rnn(4, 11);
  EXPECT_XSHARD_ERROR((void)xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, mat(xt::zeros<T>({B, N + 1})), c.gys),
                      "xshard: scan_vjp: g_final_carry has shape [2,4], the carry [2,3]");
  EXPECT_XSHARD_ERROR(
      (void)xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, c.gc, cube(xt::zeros<T>({std::size_t{3}, B, N}))),
      "xshard: scan_vjp: g_ys has length 3, the scan 4");
  EXPECT_XSHARD_ERROR(
      (void)xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, c.gc, cube(xt::zeros<T>({std::size_t{4}, B, N + 2}))),
      "xshard: scan_vjp: g_ys has shape [4,2,5], the ys [4,2,3]");
  // A tuple carry: the tensor is named.
  const pair_step::params p = c.p;
  const pair_step::carry init{c.h0, c.h0};
  const std::tuple<cube, cube> xs{c.xs, cube(xt::zeros<T>({std::size_t{4}, B, N}))};
  const std::tuple<cube, cube> gys{c.gys, c.gys};
  EXPECT_XSHARD_ERROR(
      (void)xshard::scan_vjp(pair_step{}, p, init, xs, pair_step::carry{c.gc, mat(xt::zeros<T>({B + 1, N}))}, gys),
      "xshard: scan_vjp: g_final_carry tensor 1 has shape [3,3], the carry's tensor 1 [2,3]");
  EXPECT_XSHARD_ERROR((void)xshard::scan_vjp(pair_step{}, p, init, xs, init,
                                             std::tuple<cube, cube>{c.gys, cube(xt::zeros<T>({std::size_t{5}, B, N}))}),
                      "xshard: scan_vjp: g_ys has length 5, the scan 4");
  // A step whose vjp returns a wrongly shaped gradient.
  EXPECT_XSHARD_ERROR(
      (void)xshard::scan_vjp(bad_x_grad_step{}, c.p, c.h0, c.xs, c.gc, c.gys),
      "xshard: scan_vjp: the step's vjp returned an x gradient of shape [2,3] at step 3, x has shape [2,2]");
}

TEST(ScanGrad, LengthZero) {
  const rnn_case c = random_rnn(0, 12);
  for (auto policy : all_policies) {
    const auto g = xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, c.gc, c.gys, {}, policy);
    EXPECT_EQ(std::get<0>(g.params), mat(xt::zeros<T>({N, N})));
    EXPECT_EQ(std::get<1>(g.params), mat(xt::zeros<T>({N, M})));
    EXPECT_EQ(std::get<2>(g.params), vec(xt::zeros<T>({N})));
    EXPECT_EQ(g.init, c.gc);
    EXPECT_EQ(g.xs.shape(), c.xs.shape());
  }
  EXPECT_XSHARD_ERROR(
      (void)xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, c.gc, cube(xt::zeros<T>({std::size_t{1}, B, N}))),
      "g_ys has length 1, the scan 0");
  // No xs, length 0.
  const decay_step::params p{mat(xt::ones<T>({N, N})), vec(xt::ones<T>({N}))};
  const auto g = xshard::scan_vjp(decay_step{}, p, c.h0, xshard::none, c.gc, xshard::none, {.length = 0});
  EXPECT_EQ(std::get<0>(g.params), mat(xt::zeros<T>({N, N})));
  EXPECT_EQ(std::get<1>(g.params), vec(xt::zeros<T>({N})));
  EXPECT_EQ(g.init, c.gc);
}

TEST(ScanGrad, TracesOneBackwardScopePerStep) {
  const rnn_case c = random_rnn(5, 13);
  auto& tracer = xshard::tracer::instance();
  for (bool reverse : {false, true}) {
    tracer.clear();
    tracer.start();
    (void)xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, c.gc, c.gys, {.reverse = reverse}, xshard::remat::recompute);
    tracer.stop();
    std::vector<std::int64_t> backward_ts;
    std::size_t forward_steps = 0;
    for (const auto& e : tracer.events()) {
      if (e.name == "scan/step") ++forward_steps;
      if (e.name != "scan/backward") continue;
      ASSERT_EQ(e.args.size(), 1u);
      EXPECT_EQ(e.args[0].key, "t");
      backward_ts.push_back(std::get<std::int64_t>(e.args[0].value));
    }
    EXPECT_EQ(forward_steps, 5u);
    // In the order they ran (events are sorted by start time): the forward's last step first.
    const std::vector<std::int64_t> want =
        reverse ? std::vector<std::int64_t>{0, 1, 2, 3, 4} : std::vector<std::int64_t>{4, 3, 2, 1, 0};
    EXPECT_EQ(backward_ts, want) << "reverse " << reverse;
  }
  tracer.clear();
  // Off: nothing recorded.
  (void)xshard::scan_vjp(rnn_step{}, c.p, c.h0, c.xs, c.gc, c.gys);
  EXPECT_TRUE(tracer.events().empty());
}

}  // namespace
