// The einsum linear layer: forward against a naive loop, backward against
// finite differences, and the point of torch_xla's change: the leading dims
// are kept, where a flatten-to-2D linear collapses them.
#include <gtest/gtest.h>

#include <cmath>
#include <xshard/nn/linear.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xview.hpp>

namespace {

TEST(Linear, ForwardMatchesNaiveLoopAndKeepsLeadingDims) {
  xt::random::seed(7);
  const xshard::linear<double> layer(4, 5, true, 42);
  const xt::xtensor<double, 3> x = xt::random::randn<double>({2, 3, 4});
  const auto y = layer.forward(x);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(y)>, xt::xtensor<double, 3>>);
  ASSERT_EQ(y.shape(), (std::array<std::size_t, 3>{2, 3, 5}));
  for (std::size_t a = 0; a < 2; ++a)
    for (std::size_t b = 0; b < 3; ++b)
      for (std::size_t m = 0; m < 5; ++m) {
        double s = (*layer.bias())(m);
        for (std::size_t n = 0; n < 4; ++n) s += x(a, b, n) * layer.weight()(m, n);
        EXPECT_NEAR(y(a, b, m), s, 1e-12);
      }
}

TEST(Linear, FlattenTo2DCollapsesLeadingDimsEinsumKeepsThem) {
  xt::random::seed(8);
  const xshard::linear<double> layer(4, 5, false, 1);
  const xt::xtensor<double, 3> x = xt::random::randn<double>({2, 3, 4});
  // The pre-einsum torch_xla linear: flatten to (batch * seq, features).
  const xt::xtensor<double, 2> flat = xt::reshape_view(x, {6, 4});
  const xt::xtensor<double, 2> y_flat = xshard::einsum<"in,mn->im">(flat, layer.weight());
  EXPECT_EQ(y_flat.dimension(), 2u);  // the batch and sequence dims are one dim now
  const auto y = layer.forward(x);
  EXPECT_EQ(y.dimension(), 3u);  // einsum keeps both, so a 2-D sharding of them survives
  const xt::xtensor<double, 2> y_collapsed = xt::reshape_view(y, {6, 5});
  EXPECT_EQ(y_collapsed, y_flat);
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  xt::random::seed(9);
  xshard::linear<double> layer(4, 3, true, 3);
  xt::xtensor<double, 3> x = xt::random::randn<double>({2, 2, 4});
  const xt::xtensor<double, 3> r = xt::random::randn<double>({2, 2, 3});
  auto loss = [&] { return xt::sum(layer.forward(x) * r)(); };
  const auto [dx, g] = layer.backward(x, r);
  ASSERT_TRUE(g.bias.has_value());
  const double h = 1e-6;
  auto check = [&](auto& t, const auto& grad) {
    for (std::size_t k = 0; k < t.size(); ++k) {
      const double save = t.data()[k];
      t.data()[k] = save + h;
      const double lp = loss();
      t.data()[k] = save - h;
      const double lm = loss();
      t.data()[k] = save;
      EXPECT_NEAR((lp - lm) / (2 * h), grad.data()[k], 1e-7);
    }
  };
  check(x, dx);
  check(layer.weight(), g.weight);
  check(*layer.bias(), *g.bias);
  EXPECT_EQ(dx.dimension(), 3u);  // the input gradient keeps the leading dims too
}

// SplitMix64's published stream from seed 0 (Vigna's splitmix64.c).
TEST(Linear, GeneratorIsSplitMix64) {
  xshard::detail::splitmix64 g(0);
  EXPECT_EQ(g(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(g(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(g(), 0x06c45d188009454fULL);
}

// U(-1/sqrt(in), 1/sqrt(in)) as PyTorch's default: every value in range, the
// sample mean and variance of 16384 weights within 5 standard errors of 0
// and bound^2 / 3, the same values for the same seed, others for another.
TEST(Linear, InitialisationIsUniformWithinTheBound) {
  const std::size_t in = 256, out = 64;
  const xshard::linear<double> a(in, out, true, 5);
  const double bound = 1.0 / 16.0;
  double sum = 0, sum2 = 0;
  for (const double w : a.weight()) {
    ASSERT_GE(w, -bound);
    ASSERT_LT(w, bound);
    sum += w;
    sum2 += w * w;
  }
  for (const double b : *a.bias()) {
    ASSERT_GE(b, -bound);
    ASSERT_LT(b, bound);
  }
  const double n = static_cast<double>(in * out);
  const double var = bound * bound / 3;
  EXPECT_NEAR(sum / n, 0.0, 5 * std::sqrt(var / n));
  // The variance of w^2 for w ~ U(-b, b) is 4 b^4 / 45.
  EXPECT_NEAR(sum2 / n, var, 5 * std::sqrt(4 * std::pow(bound, 4) / 45 / n));
  const xshard::linear<double> same(in, out, true, 5), other(in, out, true, 6);
  EXPECT_EQ(a.weight(), same.weight());
  EXPECT_EQ(*a.bias(), *same.bias());
  EXPECT_NE(a.weight(), other.weight());
  const xshard::linear<float> f(in, out, false, 5);  // float: the same stream, rounded
  for (std::size_t k = 0; k < f.weight().size(); ++k)
    EXPECT_EQ(f.weight().data()[k], static_cast<float>(a.weight().data()[k]));
}

TEST(Linear, BiasSizeMismatchIsAnError) {
  EXPECT_THROW(xshard::linear<float>(xt::xtensor<float, 2>::from_shape({3, 4}), xt::xtensor<float, 1>::from_shape({2})),
               xshard::error);
}

}  // namespace
