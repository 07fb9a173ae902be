// Gradients of einsum: the derived equations (a table), and einsum_vjp
// against central finite differences of L = sum(einsum(...) * r) in double.
#include <gtest/gtest.h>

#include <cstddef>
#include <tuple>
#include <xshard/einsum/grad.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>

#include "../support/expect_error.hpp"

namespace {

using xshard::fixed_string;

// Derived equations, by the rule: inputs = output term, then the other
// operands; output = the operand's term with diagonals once and labels
// found in no other input dropped.
static_assert(xshard::einsum_grad<"...n,mn->...m", 0>() == "...m,mn->...n");
static_assert(xshard::einsum_grad<"...n,mn->...m", 1>() == "...m,...n->mn");
static_assert(xshard::broadcast_grad<"...m", "m">() == "...m->m");
static_assert(xshard::einsum_grad<"ij,jk->ik", 0>() == "ik,jk->ij");
static_assert(xshard::einsum_grad<"ij,jk->ik", 1>() == "ik,ij->jk");
static_assert(xshard::einsum_grad<"bhqd,bhkd->bhqk", 1>() == "bhqk,bhqd->bhkd");
static_assert(xshard::einsum_grad<"ii->i", 0>() == "i->i");  // diagonal: embedded afterwards
static_assert(xshard::einsum_grad<"ij->", 0>() == "->");     // summed: broadcast afterwards
static_assert(xshard::einsum_grad<"ij,jk,kl->il", 1>() == "il,ij,kl->jk");

template <fixed_string Eq, std::size_t I, class... E>
double max_fd_error(const xt::xarray<double>& r, E... ops) {
  const auto g = xshard::einsum_vjp<Eq, I>(r, ops...);
  auto& x = std::get<I>(std::tie(ops...));
  EXPECT_EQ(std::vector<std::size_t>(g.shape().begin(), g.shape().end()),
            std::vector<std::size_t>(x.shape().begin(), x.shape().end()));
  double err = 0;
  const double h = 1e-6;
  auto loss = [&] { return xt::sum(xt::xarray<double>(xshard::einsum<Eq>(ops...)) * r)(); };
  for (std::size_t k = 0; k < x.size(); ++k) {
    const double save = x.data()[k];
    x.data()[k] = save + h;
    const double lp = loss();
    x.data()[k] = save - h;
    const double lm = loss();
    x.data()[k] = save;
    err = std::max(err, std::abs((lp - lm) / (2 * h) - g.data()[k]));
  }
  return err;
}

xt::xarray<double> rnd(std::vector<std::size_t> shape) {
  return shape.empty() ? xt::xarray<double>(0.37) : xt::xarray<double>(xt::random::randn<double>(shape));
}

TEST(EinsumGrad, LinearInputAndWeight) {
  xt::random::seed(1);
  EXPECT_LT((max_fd_error<"...n,mn->...m", 0>(rnd({2, 3, 5}), rnd({2, 3, 4}), rnd({5, 4}))), 1e-7);
  EXPECT_LT((max_fd_error<"...n,mn->...m", 1>(rnd({2, 3, 5}), rnd({2, 3, 4}), rnd({5, 4}))), 1e-7);
}
TEST(EinsumGrad, DiagonalAndTrace) {
  xt::random::seed(2);
  EXPECT_LT((max_fd_error<"ii->i", 0>(rnd({3}), rnd({3, 3}))), 1e-7);
  EXPECT_LT((max_fd_error<"ii", 0>(rnd({}), rnd({3, 3}))), 1e-7);
  EXPECT_LT((max_fd_error<"iij,jk->ik", 0>(rnd({3, 2}), rnd({3, 3, 4}), rnd({4, 2}))), 1e-7);
}
TEST(EinsumGrad, SummedInsideOneOperand) {
  xt::random::seed(3);
  EXPECT_LT((max_fd_error<"ij,j->", 0>(rnd({}), rnd({3, 4}), rnd({4}))), 1e-7);
  EXPECT_LT((max_fd_error<"ij,k->k", 0>(rnd({2}), rnd({3, 4}), rnd({2}))), 1e-7);
}
TEST(EinsumGrad, SizeOneBroadcasting) {
  xt::random::seed(4);
  EXPECT_LT((max_fd_error<"ij,ij->ij", 0>(rnd({3, 4}), rnd({1, 4}), rnd({3, 4}))), 1e-7);
  EXPECT_LT((max_fd_error<"ij,ij->ij", 1>(rnd({3, 4}), rnd({3, 4}), rnd({3, 1}))), 1e-7);
}
TEST(EinsumGrad, Ellipsis) {
  xt::random::seed(5);
  // fewer ellipsis dims than the broadcast: summed over the missing ones
  EXPECT_LT((max_fd_error<"...j,...j->...j", 0>(rnd({2, 3, 4}), rnd({4}), rnd({2, 3, 4}))), 1e-7);
  EXPECT_LT((max_fd_error<"...j,...j->...j", 0>(rnd({2, 3, 4}), rnd({1, 3, 4}), rnd({2, 3, 4}))), 1e-7);
  // ellipsis summed in the output (torch_xla's weight gradient)
  EXPECT_LT((max_fd_error<"...m,...n->mn", 1>(rnd({5, 4}), rnd({2, 3, 5}), rnd({2, 3, 4}))), 1e-7);
  // ellipsis in one operand only, not in the output
  EXPECT_LT((max_fd_error<"...i,i->i", 0>(rnd({4}), rnd({2, 4}), rnd({4}))), 1e-7);
}
TEST(EinsumGrad, ThreeOperandsAndBatched) {
  xt::random::seed(6);
  EXPECT_LT((max_fd_error<"ij,jk,kl->il", 1>(rnd({2, 5}), rnd({2, 3}), rnd({3, 4}), rnd({4, 5}))), 1e-7);
  EXPECT_LT((max_fd_error<"bhqd,bhkd->bhqk", 0>(rnd({2, 2, 3, 4}), rnd({2, 2, 3, 5}), rnd({2, 2, 4, 5}))), 1e-7);
  EXPECT_LT((max_fd_error<"bhqk,bhkd->bhqd", 1>(rnd({2, 2, 3, 5}), rnd({2, 2, 3, 4}), rnd({2, 2, 4, 5}))), 1e-7);
  EXPECT_LT((max_fd_error<"i,j->ij", 1>(rnd({3, 4}), rnd({3}), rnd({4}))), 1e-7);
}
TEST(EinsumGrad, RuntimeEquationText) {
  EXPECT_EQ(xshard::einsum_grad_equation("...n,mn->...m", 1), "...m,...n->mn");
  EXPECT_THROW((void)xshard::einsum_grad_equation("ij,jk->ik", 2), xshard::error);
}

// einsum_vjp_into: where the gradient is one einsum (a GEMM's operands, a
// batched attention's), written into the caller's tensor, einsum_vjp's
// bits; elsewhere (a broadcast operand, a diagonal) false, the tensor
// untouched.
TEST(EinsumGrad, IntoTheCallersTensorIsEinsumVjpWhereItIsOneEinsum) {
  xt::random::seed(8);
  using F2 = xt::xtensor<float, 2>;
  using F4 = xt::xtensor<float, 4>;
  const F2 x = xt::random::randn<float>({64, 96}), w = xt::random::randn<float>({80, 96});
  const F2 g = xt::random::randn<float>({64, 80});
  F2 dx = F2::from_shape({64, 96}), dw = F2::from_shape({80, 96});
  ASSERT_TRUE((xshard::einsum_vjp_into<"...n,mn->...m", 0>(dx, g, x, w)));
  ASSERT_TRUE((xshard::einsum_vjp_into<"...n,mn->...m", 1>(dw, g, x, w)));
  EXPECT_EQ(dx, (xshard::einsum_vjp<"...n,mn->...m", 0>(g, x, w)));
  EXPECT_EQ(dw, (xshard::einsum_vjp<"...n,mn->...m", 1>(g, x, w)));

  const F4 q = xt::random::randn<float>({2, 3, 16, 8}), k = xt::random::randn<float>({2, 3, 12, 8});
  const F4 gs = xt::random::randn<float>({2, 3, 16, 12});
  F4 dq = F4::from_shape({2, 3, 16, 8}), dk = F4::from_shape({2, 3, 12, 8});
  ASSERT_TRUE((xshard::einsum_vjp_into<"bhqd,bhkd->bhqk", 0>(dq, gs, q, k)));
  ASSERT_TRUE((xshard::einsum_vjp_into<"bhqd,bhkd->bhqk", 1>(dk, gs, q, k)));
  EXPECT_EQ(dq, (xshard::einsum_vjp<"bhqd,bhkd->bhqk", 0>(gs, q, k)));
  EXPECT_EQ(dk, (xshard::einsum_vjp<"bhqd,bhkd->bhqk", 1>(gs, q, k)));

  const F2 a1 = xt::random::randn<float>({1, 5}), b4 = xt::random::randn<float>({4, 5});
  const F2 g45 = xt::random::randn<float>({4, 5});
  F2 untouched = xt::ones<float>({1, 5}) * 7.0f;
  EXPECT_FALSE((xshard::einsum_vjp_into<"...n,...n->...n", 0>(untouched, g45, a1, b4)));  // a1 broadcasts
  EXPECT_EQ(untouched, F2(xt::ones<float>({1, 5}) * 7.0f));
  const F2 sq = xt::random::randn<float>({5, 5});
  const xt::xtensor<float, 1> g5 = xt::random::randn<float>({5});
  F2 diag = xt::ones<float>({5, 5}) * 7.0f;
  EXPECT_FALSE((xshard::einsum_vjp_into<"ii->i", 0>(diag, g5, sq)));  // a diagonal: embedded afterwards
  EXPECT_EQ(diag, F2(xt::ones<float>({5, 5}) * 7.0f));
}

TEST(EinsumGrad, OutputGradientOfTheWrongShapeIsAnError) {
  // y = x W^T is [2, 3]; a gradient of [4, 3] or of rank 1 names the dim or rank
  // (it used to index the operand's gradient out of bounds).
  const xt::xarray<double> x = xt::ones<double>({2, 5}), w = xt::ones<double>({3, 5});
  const xt::xarray<double> rows4 = xt::ones<double>({4, 3}), rank1 = xt::ones<double>({3});
  EXPECT_EQ(xshard_test::error_of([&] { (void)xshard::einsum_vjp<"bi,oi->bo", 0>(rows4, x, w); }),
            "xshard: einsum_vjp \"bi,oi->bo\": the output gradient has extent 4 in dim 0, the output 2");
  EXPECT_EQ(xshard_test::error_of([&] { (void)xshard::einsum_vjp<"bi,oi->bo", 1>(rank1, x, w); }),
            "xshard: einsum_vjp \"bi,oi->bo\": the output gradient has rank 1, the output 2");
  const xt::xarray<double> right = xt::ones<double>({2, 3});
  EXPECT_EQ(xshard_test::error_of([&] { (void)xshard::einsum_vjp<"bi,oi->bo", 1>(right, x, w); }), "no error");
}

}  // namespace
