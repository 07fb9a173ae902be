// Results do not depend on the thread count: every output element is summed
// over k in the same order whichever thread computes it.
#include <gtest/gtest.h>

#include <xshard/core/thread_pool.hpp>
#include <xshard/einsum/einsum.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xrandom.hpp>

namespace {

TEST(EinsumThreads, BitIdenticalForOneTwoAndThreeThreads) {
  xt::random::seed(11);
  const xt::xtensor<float, 3> x = xt::random::randn<float>({4, 96, 300});
  const xt::xtensor<float, 2> w = xt::random::randn<float>({200, 300});
  const xt::xtensor<float, 4> q = xt::random::randn<float>({2, 3, 64, 40});
  const xt::xtensor<float, 4> k = xt::random::randn<float>({2, 3, 72, 40});
  // 31 products: split by batch over every thread (balanced shares of whole products).
  const xt::xtensor<float, 3> qb = xt::random::randn<float>({31, 64, 40});
  const xt::xtensor<float, 3> kb = xt::random::randn<float>({31, 72, 40});
  const std::size_t before = xshard::num_threads();
  std::vector<xt::xarray<float>> linear, attention, batched, reduce;
  for (std::size_t threads : {1, 2, 3}) {
    xshard::set_num_threads(threads);
    ASSERT_EQ(xshard::num_threads(), threads);
    linear.emplace_back(xshard::einsum<"...n,mn->...m">(x, w));
    attention.emplace_back(xshard::einsum<"bhqd,bhkd->bhqk">(q, k));
    batched.emplace_back(xshard::einsum<"bqd,bkd->bqk">(qb, kb));
    reduce.emplace_back(xshard::einsum<"bsn->n">(x));
  }
  xshard::set_num_threads(before);
  for (std::size_t i = 1; i < linear.size(); ++i) {
    EXPECT_EQ(linear[i], linear[0]) << "threads " << i + 1;  // exact equality, not a tolerance
    EXPECT_EQ(attention[i], attention[0]) << "threads " << i + 1;
    EXPECT_EQ(batched[i], batched[0]) << "threads " << i + 1;
    EXPECT_EQ(reduce[i], reduce[0]) << "threads " << i + 1;
  }
}

TEST(EinsumThreads, BadThreadCountIsAnError) { EXPECT_THROW(xshard::set_num_threads(0), xshard::error); }

}  // namespace
