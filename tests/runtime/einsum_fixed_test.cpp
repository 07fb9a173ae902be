// The fixed path of the typed face (einsum/fixed.hpp): einsum<"...">(...) and
// einsum_into<"...">(out, ...) on xt::xtensor_fixed operands, planned at
// compile time. Checked against naive loops (matrix products) or the run-time
// face einsum("...", xt::xarray...) (the general path), for every shape
// class the plan handles (vector chunks and their remainders, merged dims,
// diagonals, broadcasting, extent 0, ellipsis); bit for bit against the
// run-time face where the header promises it; and einsum_into's allocations
// (none), errors and overlap check.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>
#include <xshard/xshard.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xfixed.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>

#include "../support/alloc_counter.hpp"  // replaces operator new: einsum_into's allocations
#include "../support/expect_error.hpp"

namespace {

namespace alloc_stats = xshard_test::alloc_stats;
using ::testing::HasSubstr;

template <class T, std::size_t... N>
using fixed = xt::xtensor_fixed<T, xt::xshape<N...>>;

/// Every element uniform in [-1, 1).
template <class X>
void fill(X& x, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  for (auto& v : x) v = static_cast<typename X::value_type>(value(rng));
}
template <class X>
X random(unsigned seed) {
  X x;
  fill(x, seed);
  return x;
}

/// Tolerance for sums of `terms` products of values in [-1, 1].
template <class T>
double tolerance(std::size_t terms) {
  return 8.0 * static_cast<double>(std::numeric_limits<T>::epsilon()) *
         static_cast<double>(std::max<std::size_t>(terms, 1));
}

/// Same shape, every element within tol.
template <class A, class B>
::testing::AssertionResult close(const A& got, const B& want, double tol) {
  if (got.dimension() != want.dimension()) return ::testing::AssertionFailure() << "ranks differ";
  for (std::size_t d = 0; d < got.dimension(); ++d)
    if (got.shape()[d] != want.shape()[d]) return ::testing::AssertionFailure() << "extent of dim " << d << " differs";
  auto w = want.begin();
  std::size_t i = 0;
  for (auto g = got.begin(); g != got.end(); ++g, ++w, ++i)
    if (!(std::abs(static_cast<double>(*g) - static_cast<double>(*w)) <= tol))
      return ::testing::AssertionFailure() << "element " << i << ": got " << *g << ", want " << *w;
  return ::testing::AssertionSuccess();
}

/// Same shape and the same bits in every element.
template <class A, class B>
::testing::AssertionResult bit_identical(const A& got, const B& want) {
  if (got.dimension() != want.dimension()) return ::testing::AssertionFailure() << "ranks differ";
  for (std::size_t d = 0; d < got.dimension(); ++d)
    if (got.shape()[d] != want.shape()[d]) return ::testing::AssertionFailure() << "extent of dim " << d << " differs";
  auto w = want.begin();
  std::size_t i = 0;
  for (auto g = got.begin(); g != got.end(); ++g, ++w, ++i) {
    const auto x = *g, y = *w;
    if (std::memcmp(&x, &y, sizeof x) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": fixed " << x << ", run-time " << y;
  }
  return ::testing::AssertionSuccess();
}

/// Naive C[i, k] = sum_j A[i, j] B[j, k], summed in double.
template <class C, class A, class B>
C naive_matmul(const A& a, const B& b) {
  C c;
  for (std::size_t i = 0; i < c.shape()[0]; ++i)
    for (std::size_t k = 0; k < c.shape()[1]; ++k) {
      double s = 0;
      for (std::size_t j = 0; j < a.shape()[1]; ++j) s += static_cast<double>(a(i, j)) * static_cast<double>(b(j, k));
      c(i, k) = static_cast<typename C::value_type>(s);
    }
  return c;
}

// ---------------------------------------------------------------------------
// Matrix products against naive loops.

/// (M x K) (K x N) through einsum_into and einsum, both against naive loops.
template <class T, std::size_t M, std::size_t K, std::size_t N>
void check_matmul() {
  SCOPED_TRACE(testing::Message() << M << "x" << K << " by " << K << "x" << N
                                  << (sizeof(T) == 4 ? " float" : " double"));
  const auto a = random<fixed<T, M, K>>(1);
  const auto b = random<fixed<T, K, N>>(2);
  const auto want = naive_matmul<fixed<T, M, N>>(a, b);
  fixed<T, M, N> c;
  c.fill(std::numeric_limits<T>::quiet_NaN());
  xshard::einsum_into<"ij,jk->ik">(c, a, b);
  EXPECT_TRUE(close(c, want, tolerance<T>(K)));
  const auto r = xshard::einsum<"ij,jk->ik">(a, b);
  static_assert(std::is_same_v<decltype(r), const xt::xtensor<T, 2>>);
  EXPECT_TRUE(close(r, want, tolerance<T>(K)));
}

template <class T>
void check_square_matmuls() {
  check_matmul<T, 1, 1, 1>();
  check_matmul<T, 2, 2, 2>();
  check_matmul<T, 3, 3, 3>();
  check_matmul<T, 4, 4, 4>();
  check_matmul<T, 5, 5, 5>();
  check_matmul<T, 7, 7, 7>();
  check_matmul<T, 8, 8, 8>();
  check_matmul<T, 16, 16, 16>();
  check_matmul<T, 17, 17, 17>();
  check_matmul<T, 32, 32, 32>();
}

TEST(EinsumFixedMatmul, SquareFloat) { check_square_matmuls<float>(); }
TEST(EinsumFixedMatmul, SquareDouble) { check_square_matmuls<double>(); }

// Row lengths that exercise every chunk of the vector loop: 12 = 8 + 4,
// 31 = 16 + 8 + 4 + 3, 40 = 32 + 8, 48 = 32 + 16, 33 = 32 + 1; rows that
// leave a partial block (9, 13).
template <class T>
void check_rectangular_matmuls() {
  check_matmul<T, 4, 9, 13>();
  check_matmul<T, 2, 3, 12>();
  check_matmul<T, 2, 6, 31>();
  check_matmul<T, 3, 40, 24>();
  check_matmul<T, 9, 3, 48>();
  check_matmul<T, 13, 5, 33>();
  check_matmul<T, 11, 2, 40>();
  check_matmul<T, 6, 1, 1>();
}

TEST(EinsumFixedMatmul, RectangularFloat) { check_rectangular_matmuls<float>(); }
TEST(EinsumFixedMatmul, RectangularDouble) { check_rectangular_matmuls<double>(); }

/// C[i, l] = sum_jk A[i, j, k] B[j, k, l], naive.
template <class T>
void check_three_index() {
  const auto a = random<fixed<T, 8, 8, 8>>(3);
  const auto b = random<fixed<T, 8, 8, 8>>(4);
  fixed<T, 8, 8> want;
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t l = 0; l < 8; ++l) {
      double s = 0;
      for (std::size_t j = 0; j < 8; ++j)
        for (std::size_t k = 0; k < 8; ++k) s += static_cast<double>(a(i, j, k)) * static_cast<double>(b(j, k, l));
      want(i, l) = static_cast<T>(s);
    }
  fixed<T, 8, 8> c;
  xshard::einsum_into<"ijk,jkl->il">(c, a, b);
  EXPECT_TRUE(close(c, want, tolerance<T>(64)));
  EXPECT_TRUE(close(xshard::einsum<"ijk,jkl->il">(a, b), want, tolerance<T>(64)));
  // K in the other order in B: j and k cannot be merged.
  fixed<T, 8, 8, 8> bt;
  for (std::size_t j = 0; j < 8; ++j)
    for (std::size_t k = 0; k < 8; ++k)
      for (std::size_t l = 0; l < 8; ++l) bt(k, j, l) = b(j, k, l);
  fixed<T, 8, 8> c2;
  xshard::einsum_into<"ijk,kjl->il">(c2, a, bt);
  EXPECT_TRUE(close(c2, want, tolerance<T>(64)));
}

TEST(EinsumFixedMatmul, ThreeIndexFloat) { check_three_index<float>(); }
TEST(EinsumFixedMatmul, ThreeIndexDouble) { check_three_index<double>(); }

template <class T>
void check_transposes() {
  const auto a = random<fixed<T, 5, 6>>(5);  // ji: j = 5, i = 6
  const auto b = random<fixed<T, 5, 7>>(6);  // jk
  fixed<T, 6, 5> at;
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t j = 0; j < 5; ++j) at(i, j) = a(j, i);
  const auto want = naive_matmul<fixed<T, 6, 7>>(at, b);
  fixed<T, 6, 7> c;
  xshard::einsum_into<"ji,jk->ik">(c, a, b);
  EXPECT_TRUE(close(c, want, tolerance<T>(5)));
  // B transposed: ij,kj->ik
  fixed<T, 7, 5> bt;
  for (std::size_t j = 0; j < 5; ++j)
    for (std::size_t k = 0; k < 7; ++k) bt(k, j) = b(j, k);
  fixed<T, 6, 7> c2;
  xshard::einsum_into<"ij,kj->ik">(c2, at, bt);
  EXPECT_TRUE(close(c2, want, tolerance<T>(5)));
  // both, and the output transposed
  fixed<T, 7, 6> c3;
  xshard::einsum_into<"ji,kj->ki">(c3, a, bt);
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t k = 0; k < 7; ++k) EXPECT_NEAR(c3(k, i), want(i, k), tolerance<T>(5)) << i << "," << k;
  // matrix times vector (the operands are swapped inside)
  const auto v = random<fixed<T, 5>>(7);
  const auto mv = xshard::einsum<"ij,j->i">(at, v);
  ASSERT_EQ(mv.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) {
    double s = 0;
    for (std::size_t j = 0; j < 5; ++j) s += static_cast<double>(at(i, j)) * static_cast<double>(v(j));
    EXPECT_NEAR(mv(i), s, tolerance<T>(5)) << i;
  }
}

TEST(EinsumFixedMatmul, TransposesFloat) { check_transposes<float>(); }
TEST(EinsumFixedMatmul, TransposesDouble) { check_transposes<double>(); }

template <class T>
void check_batched() {
  const auto a = random<fixed<T, 3, 4, 5>>(8);
  const auto b = random<fixed<T, 3, 5, 9>>(9);
  fixed<T, 3, 4, 9> c;
  xshard::einsum_into<"bij,bjk->bik">(c, a, b);
  for (std::size_t n = 0; n < 3; ++n)
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t k = 0; k < 9; ++k) {
        double s = 0;
        for (std::size_t j = 0; j < 5; ++j) s += static_cast<double>(a(n, i, j)) * static_cast<double>(b(n, j, k));
        EXPECT_NEAR(c(n, i, k), s, tolerance<T>(5)) << n << "," << i << "," << k;
      }
}

TEST(EinsumFixedMatmul, BatchedFloat) { check_batched<float>(); }
TEST(EinsumFixedMatmul, BatchedDouble) { check_batched<double>(); }

// ---------------------------------------------------------------------------
// Other equations against the run-time face on xt::xarray copies.

/// einsum<Eq>(ops...) and, through einsum_into, into `Out`, against
/// einsum(Eq, xarray(ops)...).
template <xshard::fixed_string Eq, class Out, class... X>
void check_against_runtime(std::size_t terms, const X&... ops) {
  using T = typename Out::value_type;
  SCOPED_TRACE(std::string(Eq.view()) + (sizeof(T) == 4 ? " float" : " double"));
  const xt::xarray<T> want = xshard::einsum(Eq.view(), xt::xarray<T>(ops)...);
  Out out;
  std::fill(out.begin(), out.end(), std::numeric_limits<T>::quiet_NaN());
  xshard::einsum_into<Eq>(out, ops...);
  EXPECT_TRUE(close(out, want, tolerance<T>(terms)));
  EXPECT_TRUE(close(xshard::einsum<Eq>(ops...), want, tolerance<T>(terms)));
}

template <class T>
void check_single_operand() {
  const auto sq = random<fixed<T, 5, 5>>(10);
  const auto m = random<fixed<T, 3, 40>>(11);
  check_against_runtime<"ii->i", fixed<T, 5>>(1, sq);
  check_against_runtime<"ii->", fixed<T>>(5, sq);
  check_against_runtime<"ij->", fixed<T>>(120, m);
  check_against_runtime<"ij->i", fixed<T, 3>>(40, m);
  check_against_runtime<"ij->j", fixed<T, 40>>(3, m);
  check_against_runtime<"ij->ji", fixed<T, 40, 3>>(1, m);
  check_against_runtime<"ij->ij", fixed<T, 3, 40>>(1, m);
  // by hand: trace of [[1, 2], [3, 4]] is 5, its diagonal {1, 4}
  const fixed<T, 2, 2> h = {{1, 2}, {3, 4}};
  EXPECT_EQ(xshard::einsum<"ii->">(h)(), T(5));
  fixed<T, 2> d;
  xshard::einsum_into<"ii->i">(d, h);
  EXPECT_EQ(d(0), T(1));
  EXPECT_EQ(d(1), T(4));
}

TEST(EinsumFixedEquations, SingleOperandFloat) { check_single_operand<float>(); }
TEST(EinsumFixedEquations, SingleOperandDouble) { check_single_operand<double>(); }

template <class T>
void check_two_operands() {
  const auto sq = random<fixed<T, 4, 4>>(12);
  const auto m = random<fixed<T, 4, 6>>(13);
  const auto u = random<fixed<T, 5>>(14);
  const auto v = random<fixed<T, 7>>(15);
  // diagonal of one operand times another: C[j] = sum_i A[i, i] B[i, j]
  check_against_runtime<"ii,ij->j", fixed<T, 6>>(4, sq, m);
  // outer product (no summed label)
  check_against_runtime<"i,j->ij", fixed<T, 5, 7>>(1, u, v);
  // Hadamard and a full contraction to a scalar
  const auto m2 = random<fixed<T, 4, 6>>(16);
  check_against_runtime<"ij,ij->ij", fixed<T, 4, 6>>(1, m, m2);
  check_against_runtime<"ij,ij->", fixed<T>>(24, m, m2);
  // a label summed inside one operand only
  check_against_runtime<"ij,k->k", fixed<T, 5>>(24, m, u);
}

TEST(EinsumFixedEquations, TwoOperandsFloat) { check_two_operands<float>(); }
TEST(EinsumFixedEquations, TwoOperandsDouble) { check_two_operands<double>(); }

template <class T>
void check_broadcasting() {
  // a size-1 label against a larger one: stride 0
  const auto col = random<fixed<T, 4, 1>>(17);
  const auto row = random<fixed<T, 1, 5>>(18);
  check_against_runtime<"ij,ij->ij", fixed<T, 4, 5>>(1, col, row);
  // j has extent 1 in A and 3 in B: C[i, k] = A[i, 0] * sum_j B[j, k]
  const auto a = random<fixed<T, 2, 1>>(19);
  const auto b = random<fixed<T, 3, 4>>(20);
  fixed<T, 2, 4> c;
  xshard::einsum_into<"ij,jk->ik">(c, a, b);
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t k = 0; k < 4; ++k) {
      double s = 0;
      for (std::size_t j = 0; j < 3; ++j) s += static_cast<double>(a(i, 0)) * static_cast<double>(b(j, k));
      EXPECT_NEAR(c(i, k), s, tolerance<T>(3)) << i << "," << k;
    }
  // ellipsis dims, broadcast from size 1 and from absent
  const auto e1 = random<fixed<T, 2, 3, 4>>(21);
  const auto e2 = random<fixed<T, 4, 5>>(22);
  check_against_runtime<"...ij,...jk->...ik", fixed<T, 2, 3, 5>>(4, e1, e2);
  const auto e3 = random<fixed<T, 2, 1, 3, 4>>(23);
  const auto e4 = random<fixed<T, 6, 4, 5>>(24);
  check_against_runtime<"...ij,...jk->...ik", fixed<T, 2, 6, 3, 5>>(4, e3, e4);
  check_against_runtime<"...ii->...i", fixed<T, 2, 3>>(1, random<fixed<T, 2, 3, 3>>(25));
}

TEST(EinsumFixedEquations, BroadcastingFloat) { check_broadcasting<float>(); }
TEST(EinsumFixedEquations, BroadcastingDouble) { check_broadcasting<double>(); }

template <class T>
void check_extent_zero() {
  // an empty output: nothing to write
  const fixed<T, 0, 3> a0;
  const auto b = random<fixed<T, 3, 4>>(26);
  fixed<T, 0, 4> c0;
  xshard::einsum_into<"ij,jk->ik">(c0, a0, b);
  const auto r0 = xshard::einsum<"ij,jk->ik">(a0, b);
  EXPECT_EQ(r0.shape()[0], 0u);
  EXPECT_EQ(r0.shape()[1], 4u);
  // an empty sum: zeros
  const fixed<T, 2, 0> a;
  const fixed<T, 0, 3> b0;
  fixed<T, 2, 3> c;
  c.fill(std::numeric_limits<T>::quiet_NaN());
  xshard::einsum_into<"ij,jk->ik">(c, a, b0);
  for (T x : c) EXPECT_EQ(x, T(0));
  for (T x : xshard::einsum<"ij,jk->ik">(a, b0)) EXPECT_EQ(x, T(0));
  fixed<T> s;
  s() = std::numeric_limits<T>::quiet_NaN();
  xshard::einsum_into<"ij->">(s, a);
  EXPECT_EQ(s(), T(0));
}

TEST(EinsumFixedEquations, ExtentZeroFloat) { check_extent_zero<float>(); }
TEST(EinsumFixedEquations, ExtentZeroDouble) { check_extent_zero<double>(); }

TEST(EinsumFixedEquations, OtherLayoutsAndLargeShapesTakeTheGeneralPath) {
  // column-major static operands: read through their strides
  xt::xtensor_fixed<double, xt::xshape<3, 4>, xt::layout_type::column_major> a;
  fill(a, 27);
  const auto b = random<fixed<double, 4, 2>>(28);
  const auto c = xshard::einsum<"ij,jk->ik">(a, b);
  EXPECT_TRUE(close(c, naive_matmul<fixed<double, 3, 2>>(a, b), tolerance<double>(4)));
  // 128^3 multiply-adds: above fixed_max_madds
  auto big_a = std::make_unique<fixed<float, 128, 128>>();
  auto big_b = std::make_unique<fixed<float, 128, 128>>();
  auto big_c = std::make_unique<fixed<float, 128, 128>>();
  fill(*big_a, 29);
  fill(*big_b, 30);
  xshard::einsum_into<"ij,jk->ik">(*big_c, *big_a, *big_b);
  const auto want = naive_matmul<fixed<float, 128, 128>>(*big_a, *big_b);
  EXPECT_TRUE(close(*big_c, want, tolerance<float>(128)));
}

// ---------------------------------------------------------------------------
// The run-time face gives the same bits (same multiply-add order; fused
// exactly when the general kernel fuses).

template <xshard::fixed_string Eq, class X0, class... X>
::testing::AssertionResult same_bits_as_runtime(const X0& op0, const X&... ops) {
  using T = typename X0::value_type;
  return bit_identical(xshard::einsum<Eq>(op0, ops...),
                       xshard::einsum(Eq.view(), xt::xarray<T>(op0), xt::xarray<T>(ops)...));
}

template <class T>
void check_bits() {
  EXPECT_TRUE((same_bits_as_runtime<"ij,jk->ik">(random<fixed<T, 8, 8>>(31), random<fixed<T, 8, 8>>(32))));
  EXPECT_TRUE((same_bits_as_runtime<"ij,jk->ik">(random<fixed<T, 17, 17>>(33), random<fixed<T, 17, 17>>(34))));
  EXPECT_TRUE((same_bits_as_runtime<"ij,jk->ik">(random<fixed<T, 13, 5>>(35), random<fixed<T, 5, 33>>(36))));
  EXPECT_TRUE((same_bits_as_runtime<"ijk,jkl->il">(random<fixed<T, 8, 8, 8>>(37), random<fixed<T, 8, 8, 8>>(38))));
  EXPECT_TRUE((same_bits_as_runtime<"bij,bjk->bik">(random<fixed<T, 3, 4, 5>>(39), random<fixed<T, 3, 5, 9>>(40))));
  EXPECT_TRUE((same_bits_as_runtime<"ij,kj->ik">(random<fixed<T, 6, 5>>(41), random<fixed<T, 7, 5>>(42))));
  EXPECT_TRUE((same_bits_as_runtime<"ij->i">(random<fixed<T, 3, 40>>(43))));
  EXPECT_TRUE((same_bits_as_runtime<"ij->">(random<fixed<T, 8, 9>>(44))));
  EXPECT_TRUE((same_bits_as_runtime<"ij->j">(random<fixed<T, 6, 10>>(45))));
  EXPECT_TRUE((same_bits_as_runtime<"ii->">(random<fixed<T, 7, 7>>(46))));
}

TEST(EinsumFixedAgreement, SameBitsAsRuntimeFaceFloat) { check_bits<float>(); }
TEST(EinsumFixedAgreement, SameBitsAsRuntimeFaceDouble) { check_bits<double>(); }

// ---------------------------------------------------------------------------
// einsum_into: allocations, errors, overlap.

/// Allocations made by einsum_into<Eq>(out, ops...) (after a first call),
/// by the counter `count` (every thread's, or this thread's).
template <xshard::fixed_string Eq, class Out, class... X>
std::size_t counted_allocations_of(std::size_t (*count)(), Out& out, const X&... ops) {
  xshard::einsum_into<Eq>(out, ops...);
  const std::size_t before = count();
  xshard::einsum_into<Eq>(out, ops...);
  return count() - before;
}
template <xshard::fixed_string Eq, class Out, class... X>
std::size_t allocations_of(Out& out, const X&... ops) {
  return counted_allocations_of<Eq>(&alloc_stats::allocations, out, ops...);
}
template <xshard::fixed_string Eq, class Out, class... X>
std::size_t thread_allocations_of(Out& out, const X&... ops) {
  return counted_allocations_of<Eq>(&alloc_stats::thread_allocations, out, ops...);
}

template <class T>
void check_no_allocation() {
  {
    const auto a = random<fixed<T, 4, 4>>(1);
    const auto b = random<fixed<T, 4, 4>>(2);
    fixed<T, 4, 4> c;
    EXPECT_EQ((allocations_of<"ij,jk->ik">(c, a, b)), 0u) << "4x4";
  }
  {
    const auto a = random<fixed<T, 8, 8>>(1);
    const auto b = random<fixed<T, 8, 8>>(2);
    fixed<T, 8, 8> c;
    EXPECT_EQ((allocations_of<"ij,jk->ik">(c, a, b)), 0u) << "8x8";
  }
  {
    const auto a = random<fixed<T, 16, 16>>(1);
    const auto b = random<fixed<T, 16, 16>>(2);
    fixed<T, 16, 16> c;
    EXPECT_EQ((allocations_of<"ij,jk->ik">(c, a, b)), 0u) << "16x16";
  }
  {
    const auto a = random<fixed<T, 32, 32>>(1);
    const auto b = random<fixed<T, 32, 32>>(2);
    fixed<T, 32, 32> c;
    EXPECT_EQ((allocations_of<"ij,jk->ik">(c, a, b)), 0u) << "32x32";
  }
  {
    const auto a = random<fixed<T, 8, 8, 8>>(1);
    const auto b = random<fixed<T, 8, 8, 8>>(2);
    fixed<T, 8, 8> c;
    EXPECT_EQ((allocations_of<"ijk,jkl->il">(c, a, b)), 0u) << "ijk,jkl->il";
  }
  {
    const auto a = random<fixed<T, 3, 4, 5>>(1);
    const auto b = random<fixed<T, 3, 5, 9>>(2);
    fixed<T, 3, 4, 9> c;
    EXPECT_EQ((allocations_of<"bij,bjk->bik">(c, a, b)), 0u) << "bij,bjk->bik";
  }
  {
    const auto a = random<fixed<T, 5, 5>>(1);
    fixed<T> s;
    fixed<T, 5> d;
    EXPECT_EQ((allocations_of<"ii->">(s, a)), 0u) << "ii->";
    EXPECT_EQ((allocations_of<"ii->i">(d, a)), 0u) << "ii->i";
  }
  // einsum<Eq> allocates its result and nothing else
  const auto a = random<fixed<T, 8, 8>>(1);
  const auto b = random<fixed<T, 8, 8>>(2);
  const std::size_t before = alloc_stats::allocations();
  const auto r = xshard::einsum<"ij,jk->ik">(a, b);
  EXPECT_EQ(alloc_stats::allocations() - before, 1u);
  EXPECT_EQ(r.size(), 64u);
}

TEST(EinsumFixedInto, NoAllocationFloat) { check_no_allocation<float>(); }
TEST(EinsumFixedInto, NoAllocationDouble) { check_no_allocation<double>(); }

/// The same for tensors whose shapes are known at run time (xt::xtensor,
/// xt::xarray): the engine's operand lists are bounded and its offset tables
/// are reused from call to call on a thread, so after a first call of a shape
/// einsum_into allocates nothing. Shapes below the GEMM's threading
/// threshold, so each call runs on this thread alone; counted on this thread
/// (the first call starts the thread pool, whose workers may still be
/// starting up, and under the sanitizers every malloc in the process counts).
template <class T>
void check_dynamic_no_allocation() {
  auto rnd = [](std::vector<std::size_t> shape, unsigned seed) {
    xt::xarray<T> a = xt::xarray<T>::from_shape(shape);
    std::mt19937 gen(seed);
    std::uniform_real_distribution<T> dist(T(-1), T(1));
    for (auto& v : a) v = dist(gen);
    return a;
  };
  const xt::xtensor<T, 2> x = rnd({16, 32}, 1), w = rnd({24, 32}, 2), g = rnd({16, 24}, 3);
  xt::xtensor<T, 2> h = xt::zeros<T>({16, 24}), dw = xt::zeros<T>({24, 32}), dx = xt::zeros<T>({16, 32});
  EXPECT_EQ((thread_allocations_of<"...n,mn->...m">(h, x, w)), 0u) << "x W^T";
  EXPECT_EQ((thread_allocations_of<"...m,...n->mn">(dw, g, x)), 0u) << "g^T x";
  EXPECT_EQ((thread_allocations_of<"...m,mn->...n">(dx, g, w)), 0u) << "g W";
  const xt::xtensor<T, 3> a = rnd({3, 4, 5}, 4), b = rnd({3, 5, 6}, 5);
  xt::xtensor<T, 3> c = xt::zeros<T>({3, 4, 6});
  EXPECT_EQ((thread_allocations_of<"bij,bjk->bik">(c, a, b)), 0u) << "bij,bjk->bik";
  const xt::xarray<T> sq = rnd({7, 7}, 6);
  xt::xarray<T> diag = xt::zeros<T>({7}), rows = xt::zeros<T>({7});
  EXPECT_EQ((thread_allocations_of<"ii->i">(diag, sq)), 0u) << "ii->i";
  EXPECT_EQ((thread_allocations_of<"ij->i">(rows, sq)), 0u) << "ij->i";
  // The results are the sums they name (a naive loop).
  for (std::size_t i = 0; i < 16; ++i)
    for (std::size_t m = 0; m < 24; ++m) {
      T ref = 0;
      for (std::size_t n = 0; n < 32; ++n) ref += x(i, n) * w(m, n);
      EXPECT_NEAR(h(i, m), ref, 1e-4) << i << "," << m;
    }
  for (std::size_t i = 0; i < 7; ++i) {
    T ref = 0;
    for (std::size_t j = 0; j < 7; ++j) ref += sq(i, j);
    EXPECT_NEAR(rows(i), ref, 1e-5);
    EXPECT_EQ(diag(i), sq(i, i));
  }
}

TEST(EinsumInto, DynamicShapesAllocateNothingAfterTheFirstCallFloat) { check_dynamic_no_allocation<float>(); }
TEST(EinsumInto, DynamicShapesAllocateNothingAfterTheFirstCallDouble) { check_dynamic_no_allocation<double>(); }

TEST(EinsumVjp, AllocatesOnlyTheGradient) {
  // A layer's backward: each operand's gradient of "bi,oi->bo" is one
  // allocation, its result; the checks and bookkeeping around the GEMM use
  // bounded lists. Values against the plain einsum of the grad equations.
  const xt::xtensor<float, 2> x = xt::random::randn<float>({6, 5}), w = xt::random::randn<float>({7, 5});
  const xt::xtensor<float, 2> gy = xt::random::randn<float>({6, 7});
  auto count = [&](auto f) {
    (void)f();  // the first call of a shape fills this thread's tables
    const std::size_t before = alloc_stats::thread_allocations();
    const auto r = f();
    return std::make_pair(alloc_stats::thread_allocations() - before, r);
  };
  const auto [n0, dx] = count([&] { return xshard::einsum_vjp<"bi,oi->bo", 0>(gy, x, w); });
  const auto [n1, dw] = count([&] { return xshard::einsum_vjp<"bi,oi->bo", 1>(gy, x, w); });
  EXPECT_EQ(n0, 1u);
  EXPECT_EQ(n1, 1u);
  EXPECT_EQ(dx, (xshard::einsum<"bo,oi->bi">(gy, w)));
  EXPECT_EQ(dw, (xshard::einsum<"bo,bi->oi">(gy, x)));
}

TEST(EinsumFixedInto, OutputOverlappingAnOperandIsRefused) {
  auto a = random<fixed<double, 3, 3>>(47);
  const auto b = random<fixed<double, 3, 3>>(48);
  EXPECT_XSHARD_ERROR((xshard::einsum_into<"ij->ji">(a, a)), "einsum output overlaps an operand");
  EXPECT_THROW((xshard::einsum_into<"ij,jk->ik">(a, b, a)), xshard::error);
  EXPECT_THROW((xshard::einsum_into<"ij,jk->ik">(a, a, b)), xshard::error);
  // distinct tensors are fine
  fixed<double, 3, 3> c;
  EXPECT_NO_THROW((xshard::einsum_into<"ij,jk->ik">(c, a, b)));
}

TEST(EinsumFixedInto, WrongShapeIsTheGeneralPathsError) {
  const auto a = random<fixed<float, 2, 3>>(49);
  const auto b = random<fixed<float, 3, 5>>(50);
  fixed<float, 2, 4> out;
  EXPECT_XSHARD_ERROR((xshard::einsum_into<"ij,jk->ik">(out, a, b)),
                      "einsum output has shape [2,4] but \"ij,jk->ik\" gives [2,5]");
}

TEST(EinsumFixedInto, OverwritesAndKeepsStorage) {
  const auto a = random<fixed<float, 4, 4>>(51);
  const auto b = random<fixed<float, 4, 4>>(52);
  fixed<float, 4, 4> c;
  c.fill(123.f);
  const float* data = c.data();
  xshard::einsum_into<"ij,jk->ik">(c, a, b);
  EXPECT_EQ(c.data(), data);
  EXPECT_TRUE(close(c, naive_matmul<fixed<float, 4, 4>>(a, b), tolerance<float>(4)));
  // a non-static output of the right shape takes the general path
  xt::xtensor<float, 2> d = xt::xtensor<float, 2>::from_shape({4, 4});
  xshard::einsum_into<"ij,jk->ik">(d, a, b);
  EXPECT_TRUE(bit_identical(d, c));
}

}  // namespace
