// The typed face of einsum: einsum<"...">(ops...) gives results bit-identical
// to the run-time face einsum("...", ops...) on the same inputs; its result
// types (xt::xtensor<T, R> when every operand's rank is static, else
// xt::xarray<T>); einsum_into (writes in place, overwrites, never
// reallocates, refuses an output that overlaps an operand).
//
// Every typed instantiation costs compile time, so each equation here is
// instantiated once and reused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>
#include <xshard/xshard.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xfixed.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "../support/expect_error.hpp"

namespace {

using ::testing::HasSubstr;

template <class T>
T random_tensor(std::mt19937_64& rng, const typename T::shape_type& shape) {
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  T t = T::from_shape(shape);
  for (auto& x : t) x = static_cast<typename T::value_type>(value(rng));
  return t;
}
template <class T, std::size_t N>
xt::xtensor<T, N> rnd(std::mt19937_64& rng, const std::array<std::size_t, N>& shape) {
  return random_tensor<xt::xtensor<T, N>>(rng, shape);
}

/// Same shape and the same bits in every element.
template <class A, class B>
::testing::AssertionResult bit_identical(const A& typed, const B& runtime) {
  if (typed.dimension() != runtime.dimension()) return ::testing::AssertionFailure() << "ranks differ";
  for (std::size_t d = 0; d < typed.dimension(); ++d)
    if (typed.shape()[d] != runtime.shape()[d])
      return ::testing::AssertionFailure() << "extent of dim " << d << " differs";
  auto r = runtime.begin();
  std::size_t i = 0;
  for (auto t = typed.begin(); t != typed.end(); ++t, ++r, ++i) {
    const auto a = *t, b = *r;
    if (std::memcmp(&a, &b, sizeof a) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": typed " << a << ", run-time " << b;
  }
  return ::testing::AssertionSuccess();
}

// Same inputs through einsum<EQ> and einsum(EQ); EXPECT_EQ on every element's bits.
#define EXPECT_TYPED_MATCHES_RUNTIME(EQ, ...)                     \
  do {                                                            \
    const auto typed_ = xshard::einsum<EQ>(__VA_ARGS__);          \
    const auto runtime_ = xshard::einsum(EQ, __VA_ARGS__);        \
    EXPECT_TRUE(bit_identical(typed_, runtime_)) << "\"" EQ "\""; \
    ++checked;                                                    \
  } while (false)

TEST(EinsumTyped, BitIdenticalToRunTime) {
  std::mt19937_64 rng(42);
  int checked = 0;
  // The benchmark shapes of the issue, scaled down; K = 400 spans two KC panels.
  const auto x = rnd<float, 3>(rng, {2, 3, 40});
  const auto w = rnd<float, 2>(rng, {24, 40});
  const auto y = rnd<float, 3>(rng, {2, 3, 24});
  EXPECT_TYPED_MATCHES_RUNTIME("...n,mn->...m", x, w);
  EXPECT_TYPED_MATCHES_RUNTIME("...m,mn->...n", y, w);
  EXPECT_TYPED_MATCHES_RUNTIME("...m,...n->mn", y, x);
  EXPECT_TYPED_MATCHES_RUNTIME("...m->m", y);
  const auto q = rnd<float, 4>(rng, {2, 3, 8, 16}), k = rnd<float, 4>(rng, {2, 3, 8, 16});
  EXPECT_TYPED_MATCHES_RUNTIME("bhqd,bhkd->bhqk", q, k);
  const auto p = rnd<float, 4>(rng, {2, 3, 8, 8});
  EXPECT_TYPED_MATCHES_RUNTIME("bhqk,bhkd->bhqd", p, k);
  const auto a3 = rnd<float, 3>(rng, {12, 5, 6}), b3 = rnd<float, 3>(rng, {6, 5, 7});
  EXPECT_TYPED_MATCHES_RUNTIME("ikj,jkl->il", a3, b3);
  const auto lk = rnd<float, 2>(rng, {20, 400}), kr = rnd<float, 2>(rng, {400, 30});
  EXPECT_TYPED_MATCHES_RUNTIME("ij,jk->ik", lk, kr);
  const auto sq = rnd<double, 2>(rng, {7, 7});
  EXPECT_TYPED_MATCHES_RUNTIME("ii->i", sq);
  EXPECT_TYPED_MATCHES_RUNTIME("ij->", sq);
  const auto u = rnd<double, 1>(rng, {5}), v = rnd<double, 1>(rng, {9});
  EXPECT_TYPED_MATCHES_RUNTIME("i,j->ij", u, v);
  EXPECT_TYPED_MATCHES_RUNTIME("i,i->", v, v);
  const auto c1 = rnd<double, 2>(rng, {6, 11}), c2 = rnd<double, 2>(rng, {11, 13}), c3 = rnd<double, 2>(rng, {13, 4});
  EXPECT_TYPED_MATCHES_RUNTIME("ij,jk,kl->il", c1, c2, c3);
  const auto ba = rnd<float, 3>(rng, {4, 9, 17}), bb = rnd<float, 3>(rng, {4, 17, 10});
  EXPECT_TYPED_MATCHES_RUNTIME("bij,bjk", ba, bb);
  const auto col = rnd<float, 2>(rng, {5, 1}), row = rnd<float, 2>(rng, {1, 7});
  EXPECT_TYPED_MATCHES_RUNTIME("ij,ij->ij", col, row);
  // a transposed view (static rank) and a stepped view
  const auto m = rnd<double, 2>(rng, {8, 10});
  EXPECT_TYPED_MATCHES_RUNTIME("ba", xt::transpose(m));
  const auto m2 = rnd<double, 2>(rng, {10, 6});
  EXPECT_TYPED_MATCHES_RUNTIME("ij,jk->ik", xt::view(m, xt::range(0, 8, 3), xt::all()),
                               xt::view(m2, xt::range(9, xt::placeholders::_, -1), xt::range(1, 5)));
  // static extents
  xt::xtensor_fixed<double, xt::xshape<3, 2, 4>> f1 = rnd<double, 3>(rng, {3, 2, 4});
  xt::xtensor_fixed<double, xt::xshape<4, 5>> f2 = rnd<double, 2>(rng, {4, 5});
  EXPECT_TYPED_MATCHES_RUNTIME("...ij,...jk->...ik", f1, f2);
  EXPECT_GE(checked, 15);
}

TEST(EinsumTyped, ResultTypes) {
  const xt::xtensor<float, 3> x = xt::ones<float>({2, 3, 4});
  const xt::xtensor<float, 2> w = xt::ones<float>({5, 4});
  const xt::xarray<float> xa = x;
  const xt::xtensor<double, 2> d = xt::ones<double>({3, 3});
  const xt::xtensor_fixed<double, xt::xshape<3, 3>> fd = d;
  static_assert(std::is_same_v<decltype(xshard::einsum<"...n,mn->...m">(x, w)), xt::xtensor<float, 3>>);
  static_assert(std::is_same_v<decltype(xshard::einsum<"...m,...n->mn">(x, x)), xt::xtensor<float, 2>>);
  static_assert(std::is_same_v<decltype(xshard::einsum<"...n,mn->...m">(xa, w)), xt::xarray<float>>);
  static_assert(std::is_same_v<decltype(xshard::einsum<"ij->">(d)), xt::xtensor<double, 0>>);
  static_assert(std::is_same_v<decltype(xshard::einsum<"ii->i">(fd)), xt::xtensor<double, 1>>);
  static_assert(std::is_same_v<decltype(xshard::einsum<"ij,jk">(d, fd)), xt::xtensor<double, 2>>);
  static_assert(std::is_same_v<decltype(xshard::einsum<"ba">(xt::transpose(d))), xt::xtensor<double, 2>>);
  // an expression (evaluated once) keeps its static rank
  static_assert(std::is_same_v<decltype(xshard::einsum<"ij->ji">(d + d)), xt::xtensor<double, 2>>);
  static_assert(std::is_same_v<decltype(xshard::einsum("...n,mn->...m", x, w)), xt::xarray<float>>);
  static_assert(std::is_same_v<decltype(xshard::einsum("ij->", d)), xt::xarray<double>>);
  // and the values behind them
  const auto y = xshard::einsum<"...n,mn->...m">(x, w);
  EXPECT_EQ(y.shape(), (std::array<std::size_t, 3>{2, 3, 5}));
  EXPECT_EQ(y(1, 2, 4), 4.f);
  const auto ya = xshard::einsum<"...n,mn->...m">(xa, w);
  EXPECT_EQ(ya.dimension(), 3u);
  EXPECT_EQ(ya(1, 2, 4), 4.f);
  EXPECT_EQ(xshard::einsum<"ij->">(d)(), 9.0);
  EXPECT_EQ(xshard::einsum<"ii->i">(fd), (xt::xtensor<double, 1>{1, 1, 1}));
  EXPECT_EQ(xshard::einsum<"ij->ji">(d + d), (xt::xtensor<double, 2>(2.0 * xt::ones<double>({3, 3}))));
  EXPECT_EQ(xshard::einsum<"ij,jk">(d, fd), (xt::xtensor<double, 2>(3.0 * xt::ones<double>({3, 3}))));
  EXPECT_EQ(xshard::einsum<"...m,...n->mn">(x, x), (xt::xtensor<float, 2>(6.f * xt::ones<float>({4, 4}))));
}

// ---------------------------------------------------------------------------
// einsum_into

TEST(EinsumInto, WritesInPlaceOverwritesAndNeverReallocates) {
  std::mt19937_64 rng(7);
  xt::xtensor<float, 2> out = xt::xtensor<float, 2>::from_shape({6, 9});
  out.fill(std::numeric_limits<float>::quiet_NaN());  // read before written -> NaN shows
  const float* buffer = out.data();
  for (int round = 0; round < 4; ++round) {
    const auto a = rnd<float, 2>(rng, {6, 13}), b = rnd<float, 2>(rng, {13, 9});
    xshard::einsum_into<"ij,jk->ik">(out, a, b);
    EXPECT_EQ(out.data(), buffer) << "round " << round;
    EXPECT_TRUE(bit_identical(out, xshard::einsum("ij,jk->ik", a, b))) << "round " << round;  // not accumulated
  }
  // into an xarray, through a transposed view of a buffer, into a scalar
  const auto a = rnd<double, 2>(rng, {4, 5}), b = rnd<double, 2>(rng, {5, 3});
  const xt::xarray<double> want = xshard::einsum("ij,jk->ik", a, b);
  xt::xarray<double> oa = xt::xarray<double>::from_shape({4, 3});
  const double* oa_data = oa.data();
  xshard::einsum_into<"ij,jk->ik">(oa, a, b);
  EXPECT_EQ(oa.data(), oa_data);
  EXPECT_TRUE(bit_identical(oa, want));
  xt::xtensor<double, 2> buf = xt::xtensor<double, 2>::from_shape({3, 4});
  auto bt = xt::transpose(buf);
  xshard::einsum_into<"ij,jk->ik">(bt, a, b);
  EXPECT_TRUE(bit_identical(buf, xt::xarray<double>(xt::transpose(want))));
  xt::xtensor<double, 0> s;
  xshard::einsum_into<"ij,ij->">(s, a, a);
  EXPECT_NEAR(s(), xt::sum(a * a)(), 1e-12);
  // one and three operands
  xt::xtensor<double, 1> diag = xt::xtensor<double, 1>::from_shape({5});
  const auto sq = rnd<double, 2>(rng, {5, 5});
  xshard::einsum_into<"ii->i">(diag, sq);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(diag(i), sq(i, i));
  xt::xtensor<double, 2> chain = xt::xtensor<double, 2>::from_shape({4, 5});
  xshard::einsum_into<"ij,jk,kl->il">(chain, a, b, xt::transpose(b));
  EXPECT_TRUE(bit_identical(chain, xshard::einsum("ij,jk,kl->il", a, b, xt::transpose(b))));
}

TEST(EinsumInto, StridedOutputs) {
  std::mt19937_64 rng(8);
  const auto a = rnd<double, 2>(rng, {4, 5}), b = rnd<double, 2>(rng, {5, 3});
  const xt::xarray<double> want = xshard::einsum("ij,jk->ik", a, b);
  // every other column, rows reversed (negative stride); the gaps stay untouched
  xt::xtensor<double, 2> buf = xt::xtensor<double, 2>::from_shape({4, 6});
  buf.fill(-7.0);
  auto out = xt::view(buf, xt::range(3, xt::placeholders::_, -1), xt::range(0, 6, 2));
  xshard::einsum_into<"ij,jk->ik">(out, a, b);
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(buf(3 - i, 2 * k), want(i, k)) << i << "," << k;
      EXPECT_EQ(buf(3 - i, 2 * k + 1), -7.0) << i << "," << k;
    }
  // a static-extent output keeps its storage
  xt::xtensor_fixed<double, xt::xshape<4, 3>> fixed;
  const double* fixed_data = fixed.data();
  xshard::einsum_into<"ij,jk->ik">(fixed, a, b);
  EXPECT_EQ(fixed.data(), fixed_data);
  EXPECT_TRUE(bit_identical(fixed, want));
}

TEST(EinsumInto, EmptySumOverwritesWithZero) {
  xt::xtensor<float, 2> out = xt::xtensor<float, 2>::from_shape({2, 3});
  out.fill(std::numeric_limits<float>::quiet_NaN());
  const xt::xtensor<float, 2> a = xt::xtensor<float, 2>::from_shape({2, 0});
  const xt::xtensor<float, 2> b = xt::xtensor<float, 2>::from_shape({0, 3});
  xshard::einsum_into<"ij,jk->ik">(out, a, b);
  for (float v : out) EXPECT_EQ(v, 0.f);
}

TEST(EinsumInto, WrongShapeIsAnError) {
  const xt::xtensor<float, 2> a = xt::ones<float>({2, 3}), b = xt::ones<float>({3, 5});
  xt::xtensor<float, 2> out = xt::xtensor<float, 2>::from_shape({2, 4});
  EXPECT_XSHARD_ERROR((xshard::einsum_into<"ij,jk->ik">(out, a, b)),
                      "einsum output has shape [2,4] but \"ij,jk->ik\" gives [2,5]");
  xt::xarray<float> out3 = xt::xarray<float>::from_shape({2, 5, 1});
  EXPECT_THROW(xshard::einsum_into<"ij,jk->ik">(out3, a, b), xshard::error);
}

TEST(EinsumInto, OutputOverlappingAnOperandIsRefused) {
  xt::xtensor<double, 2> a = xt::ones<double>({3, 3});
  EXPECT_XSHARD_ERROR((xshard::einsum_into<"ij->ji">(a, a)), "overlaps an operand");
  // the output is a view into an operand
  xt::xtensor<double, 2> big = xt::ones<double>({4, 3});
  const xt::xtensor<double, 2> w = xt::ones<double>({3, 3});
  auto top = xt::view(big, xt::range(0, 2), xt::all());
  auto bottom = xt::view(big, xt::range(2, 4), xt::all());
  EXPECT_THROW(xshard::einsum_into<"ij,jk->ik">(top, big, w), xshard::error);
  EXPECT_THROW(xshard::einsum_into<"ij,jk->ik">(top, w, xt::transpose(big)), xshard::error);
  // disjoint parts of one buffer are fine: bottom = top @ w
  xt::view(big, 0, xt::all()) = xt::xtensor<double, 1>{1, 2, 3};
  xshard::einsum_into<"ij,jk->ik">(bottom, top, w);
  EXPECT_EQ(big, (xt::xtensor<double, 2>{{1, 2, 3}, {1, 1, 1}, {6, 6, 6}, {3, 3, 3}}));
}

}  // namespace
