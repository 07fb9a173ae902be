// scan: JAX's semantics against hand-written loops.
#include <gtest/gtest.h>

#include <tuple>
#include <utility>
#include <xshard/scan/scan.hpp>
#include <xtensor/xfixed.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "../support/expect_error.hpp"

namespace {

using vec = xt::xtensor<double, 1>;
using mat = xt::xtensor<double, 2>;

TEST(Scan, CumulativeSumMatchesALoop) {
  xt::random::seed(1);
  const mat xs = xt::random::randn<double>({5, 3});
  const vec init = xt::zeros<double>({3});
  const auto [final, ys] = xshard::scan(
      [](const vec& c, const vec& x) {
        vec next = c + x;
        return std::pair{next, next};
      },
      init, xs);
  vec c = init;
  for (std::size_t t = 0; t < 5; ++t) {
    c = c + vec(xt::view(xs, t));
    EXPECT_EQ(vec(xt::view(ys, t)), c) << "step " << t;
  }
  EXPECT_EQ(final, c);
}

TEST(Scan, ReverseRunsBackwardsAndKeepsYsAlignedWithXs) {
  const mat xs = {{1, 0}, {2, 0}, {3, 0}};
  const auto [final, ys] = xshard::scan(
      [](const vec& c, const vec& x) {
        vec next = c * 10.0 + x;
        return std::pair{next, next};
      },
      vec{0, 0}, xs, {.reverse = true});
  // t = 2: 3; t = 1: 32; t = 0: 321.
  EXPECT_EQ(final(0), 321);
  EXPECT_EQ(ys(2, 0), 3);
  EXPECT_EQ(ys(1, 0), 32);
  EXPECT_EQ(ys(0, 0), 321);
}

TEST(Scan, TupleCarryTupleXsTupleYsAndScalars) {
  const mat a = {{1, 2}, {3, 4}, {5, 6}};
  const vec b = {10, 20, 30};
  using carry = std::tuple<vec, double, int>;
  const auto [final, ys] = xshard::scan(
      [](const carry& c, const std::tuple<vec, double>& x) {
        carry next{std::get<0>(c) + std::get<0>(x), std::get<1>(c) + std::get<1>(x), std::get<2>(c) + 1};
        return std::pair{next, std::tuple<double, vec>{std::get<1>(next), std::get<0>(next)}};
      },
      carry{vec{0, 0}, 0.0, 0}, std::tuple<mat, vec>{a, b});
  EXPECT_EQ(std::get<0>(final), (vec{9, 12}));
  EXPECT_EQ(std::get<1>(final), 60);
  EXPECT_EQ(std::get<2>(final), 3);
  EXPECT_EQ(std::get<0>(ys), (vec{10, 30, 60}));
  EXPECT_EQ(std::get<1>(ys), (mat{{1, 2}, {4, 6}, {9, 12}}));
}

TEST(Scan, NoXsWithLengthAndNoYs) {
  const auto [final, ys] = xshard::scan(
      [](const int& c, xshard::none_t) {
        return std::pair{c * 2, xshard::none};
      },
      1, xshard::none, {.length = 10});
  EXPECT_EQ(final, 1024);
  EXPECT_EQ(ys, xshard::none);
  EXPECT_THROW(xshard::scan(
                   [](const int& c, xshard::none_t) {
                     return std::pair{c, xshard::none};
                   },
                   1, xshard::none),
               xshard::error);
}

TEST(Scan, UnrollGivesTheSameResults) {
  xt::random::seed(2);
  const mat xs = xt::random::randn<double>({7, 4});
  auto f = [](const vec& c, const vec& x) {
    vec next = xt::tanh(c + x);
    return std::pair{next, vec(next * 2.0)};
  };
  const auto ref = xshard::scan(f, vec(xt::zeros<double>({4})), xs);
  for (std::size_t u : {1, 2, 3, 7, 8}) {
    const auto r = xshard::scan(f, vec(xt::zeros<double>({4})), xs, {.unroll = u});
    EXPECT_EQ(r.first, ref.first) << "unroll " << u;
    EXPECT_EQ(r.second, ref.second) << "unroll " << u;
  }
}

TEST(Scan, ACarryThatChangesShapeIsAnErrorNamingTheStep) {
  const mat xs = xt::zeros<double>({3, 2});
  EXPECT_EQ(xshard_test::error_of([&] {
              (void)xshard::scan(
                  [](const vec& c, const vec& x) {
                    vec next = c(0) > 0 ? vec(xt::zeros<double>({3})) : vec(c + x + 1.0);
                    return std::pair{next, xshard::none};
                  },
                  vec{0, 0}, xs);
            }),
            "xshard: scan: the carry's tensor 0 changed shape at step 1: [2] -> [3]");
}

TEST(Scan, LengthMismatchAndRaggedXsAreErrors) {
  const mat xs = xt::zeros<double>({3, 2});
  auto f = [](const double& c, const auto&) { return std::pair{c, xshard::none}; };
  EXPECT_THROW((void)xshard::scan(f, 0.0, xs, {.length = 4}), xshard::error);
  EXPECT_THROW((void)xshard::scan(f, 0.0, std::tuple<mat, vec>{xs, vec{1, 2}}), xshard::error);
}

TEST(Scan, FixedShapeCarry) {
  using F = xt::xtensor_fixed<double, xt::xshape<2>>;
  const mat xs = {{1, 1}, {2, 2}};
  const auto [final, ys] = xshard::scan(
      [](const F& c, const vec& x) {
        F next = c + x;
        return std::pair{next, next(0)};
      },
      F{0, 0}, xs);
  EXPECT_EQ(final, (F{3, 3}));
  EXPECT_EQ(ys, (vec{1, 3}));
}

}  // namespace
