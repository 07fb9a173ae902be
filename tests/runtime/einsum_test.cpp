// Run-time einsum (xshard::einsum("...", ops...)): hand-checked tables for
// every semantic of PyTorch's torch.einsum, the contract's cases, strided
// operands (views, column-major), shapes of the result, and every run-time
// error with the words its message must carry.
//
// Every expected value below is worked out by hand (small integers, so float
// and double results are exact); each case says how.
// The typed face (einsum<"...">, einsum_into, result types) is in
// einsum_typed_test.cpp; random equations against a reference in
// einsum_random_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>
#include <xshard/xshard.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xfixed.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "../support/expect_error.hpp"

namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using X = xt::xarray<double>;

std::string text(const auto& a) {
  std::ostringstream s;
  s << "shape [";
  for (std::size_t d = 0; d < a.dimension(); ++d) s << (d ? "," : "") << a.shape()[d];
  s << "] values {";
  bool first = true;
  for (auto v : a) {
    s << (first ? "" : ", ") << v;
    first = false;
  }
  s << '}';
  return s.str();
}

/// Shape and values equal (exactly: the tables use small integers).
template <class A, class B>
::testing::AssertionResult same(const A& got, const B& want) {
  bool ok = got.dimension() == want.dimension();
  for (std::size_t d = 0; ok && d < got.dimension(); ++d) ok = got.shape()[d] == want.shape()[d];
  if (ok) {
    auto w = want.begin();
    for (auto g = got.begin(); ok && g != got.end(); ++g, ++w) ok = static_cast<double>(*g) == static_cast<double>(*w);
  }
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << text(got) << "\n   want " << text(want);
}

/// The table entry in double and in float.
template <class... Ops>
void expect_table(std::string_view eq, const X& want, const Ops&... ops) {
  SCOPED_TRACE(std::string("equation \"") + std::string(eq) + "\"");
  EXPECT_TRUE(same(xshard::einsum(eq, ops...), want)) << "double";
  EXPECT_TRUE(same(xshard::einsum(eq, xt::xarray<float>(xt::cast<float>(ops))...), want)) << "float";
}

/// Values in row-major order with a shape (for literals braces cannot spell
/// unambiguously, such as a column [[1], [2]]).
X shaped(std::vector<std::size_t> shape, std::vector<double> values) {
  X r = X::from_shape(shape);
  std::copy(values.begin(), values.end(), r.begin());
  return r;
}

X arange(std::size_t n, std::vector<std::size_t> shape) {
  return xt::reshape_view(xt::arange<double>(static_cast<double>(n)), shape);
}

// A = [[1,2,3],[4,5,6]]; B = [[1,0],[0,1],[1,1]]; A2 = [[1,2],[3,4]]
const X A = {{1, 2, 3}, {4, 5, 6}};
const X B = {{1, 0}, {0, 1}, {1, 1}};
const X A2 = {{1, 2}, {3, 4}};

TEST(EinsumTable, MatrixProductExplicitImplicitAndWhitespace) {
  // row 0: [1+3, 2+3]; row 1: [4+6, 5+6]
  const X AB = {{4, 5}, {10, 11}};
  expect_table("ij,jk->ik", AB, A, B);
  expect_table("ij,jk", AB, A, B);                                    // implicit: i, k appear once -> "ik"
  expect_table(" i j , j k -> i k ", AB, A, B);                       // spaces ignored
  expect_table("ij,\tjk\n->ik\r", AB, A, B);                          // tabs, newlines too
  expect_table("ji,kj->ik", AB, xt::transpose(A), xt::transpose(B));  // same, labels permuted
  expect_table("ij,jk->ki", xt::transpose(AB), A, B);
}

TEST(EinsumTable, ImplicitOutputIsSortedUppercaseFirst) {
  const X At = {{1, 4}, {2, 5}, {3, 6}};
  expect_table("ij->ji", At, A);
  expect_table("ji", At, A);  // implicit output "ij": the transpose
  expect_table("ba", At, A);  // "ab"
  expect_table("ab", A, A);
  expect_table("aB", At, A);  // "Ba": A-Z before a-z
  expect_table("Ba", A, A);
  expect_table("Zz", A, A);
  expect_table("zZ", At, A);
  // j labels operand 0 ({1,2}), i operand 1 ({3,4,5}); output "ij": R[i][j] = op1[i] * op0[j]
  expect_table("j,i", X{{3, 6}, {4, 8}, {5, 10}}, X{1, 2}, X{3, 4, 5});
  // 'I' and 'i' are different letters: "iI,Ii" is trace(A B) = trace([[4,5],[10,11]]) = 15
  expect_table("iI,Ii", X(15.0), A, B);
}

TEST(EinsumTable, Diagonals) {
  expect_table("ii->i", X{1, 4}, A2);
  expect_table("ii->", X(5.0), A2);  // trace
  expect_table("ii", X(5.0), A2);    // implicit: i used twice -> summed
  // T[i][i][j] of arange(12) as (2,2,3): i=0 -> 0,1,2; i=1 -> 9,10,11
  const X T = arange(12, {2, 2, 3});
  expect_table("iij->ij", X{{0, 1, 2}, {9, 10, 11}}, T);
  expect_table("iij->j", X{9, 11, 13}, T);
  expect_table("iij", X{9, 11, 13}, T);
  expect_table("iii->i", X{0, 7}, arange(8, {2, 2, 2}));  // 4i+2i+i = 7i
  // U[j][i][i] of arange(12) as (3,2,2) = 4j + 3i
  expect_table("jii->ij", X{{0, 4, 8}, {3, 7, 11}}, arange(12, {3, 2, 2}));
  expect_table("iji->ji", X{{0, 5}, {2, 7}}, arange(8, {2, 2, 2}));  // 4i + 2j + i
  // with another operand: diag(A2) * v
  expect_table("ii,i->i", X{10, 80}, A2, X{10, 20});
  // sum_i A2[i][j] * D[i][i], D = [[2,9],[9,3]]: [1*2+3*3, 2*2+4*3]
  expect_table("ij,ii->j", X{11, 16}, A2, X{{2, 9}, {9, 3}});
  // a letter repeated in both operands: sum_i A2[i][i] * D[i][i] = 1*2 + 4*3
  expect_table("ii,ii->", X(14.0), A2, X{{2, 9}, {9, 3}});
  // extent-0 diagonal
  expect_table("ii->i", X::from_shape({0}), X::from_shape({0, 0}));
}

TEST(EinsumTable, EllipsisBroadcastsRightAligned) {
  // (2,1) with (3): ellipsis dims (2,1) and (3) broadcast to (2,3)
  const X col = shaped({2, 1}, {1, 2});
  const X row = {10, 20, 30};
  const X outer = {{10, 20, 30}, {20, 40, 60}};
  expect_table("...,...->...", outer, col, row);
  expect_table("...,...", outer, col, row);  // implicit output "..."
  // batched matmul, ellipsis (2,1) against (3): R[b][c] = (b+1) * Y[c]
  X x = X::from_shape({2, 1, 2, 2});
  xt::view(x, 0, 0) = X{{1, 0}, {0, 1}};
  xt::view(x, 1, 0) = X{{2, 0}, {0, 2}};
  const X y = {{{1, 2}, {3, 4}}, {{0, 1}, {1, 0}}, {{1, 1}, {1, 1}}};
  const X r = {{{{1, 2}, {3, 4}}, {{0, 1}, {1, 0}}, {{1, 1}, {1, 1}}},
               {{{2, 4}, {6, 8}}, {{0, 2}, {2, 0}}, {{2, 2}, {2, 2}}}};
  expect_table("...ij,...jk->...ik", r, x, y);
  expect_table("...ij,...jk", r, x, y);
  // ellipsis of rank 0 in both: a plain matmul
  expect_table("...ij,...jk->...ik", X{{4, 5}, {10, 11}}, A, B);
  // ellipsis in the middle and at the end
  expect_table("i...->...i", X{{1, 4}, {2, 5}, {3, 6}}, A);
  expect_table("...i,i->...", X{6, 15}, A, X{1, 1, 1});
  // i...j: dims (i, e, j) of arange(12) as (2,3,2) = 6i + 2e + j; "i...j->...ij" moves e first
  expect_table("i...j->...ij", xt::transpose(arange(12, {2, 3, 2}), {1, 0, 2}), arange(12, {2, 3, 2}));
  // ellipsis dims of different ranks per operand, the shorter one right-aligned:
  // x (2,3) as "...", y (3) as "...": R[a][b] = x[a][b] * y[b]
  expect_table("...,...->...", X{{1, 4, 9}, {4, 10, 18}}, A, X{1, 2, 3});
}

TEST(EinsumTable, EllipsisAbsentFromOutputIsSummed) {
  // torch_xla's weight gradient '...m,...n->mn' (numpy rejects it):
  // R[m][n] = sum_b x[b][m] y[b][n] = x^T y, x = [[1,2],[3,4]], y = [[1,0,1],[0,1,1]]
  expect_table("...m,...n->mn", X{{1, 3, 4}, {2, 4, 6}}, A2, X{{1, 0, 1}, {0, 1, 1}});
  // different ellipsis ranks: x (2,2,2) = arange, y (2,3); sum_a x[a][b][m] = 4 + 4b + 2m,
  // R[m][n] = sum_b (4 + 4b + 2m) y[b][n]: m=0 -> 4, 8, 12; m=1 -> 6, 10, 16
  expect_table("...m,...n->mn", X{{4, 8, 12}, {6, 10, 16}}, arange(8, {2, 2, 2}), X{{1, 0, 1}, {0, 1, 1}});
  expect_table("...->", X(21.0), A);
  expect_table("...i->i", X{5, 7, 9}, A);
  expect_table("...ij->ij", X{{4, 6}, {8, 10}}, arange(8, {2, 2, 2}));
  expect_table("...->...", A, A);
  // torch_xla's bias gradient '...m->m'
  expect_table("...m->m", X{5, 7, 9}, A);
}

TEST(EinsumTable, IndicesSummedInsideOneOperand) {
  // k only in operand 1: sum_k A2[j][k] = [3, 7]; then A2 @ [3, 7] = [1*3+2*7, 3*3+4*7]
  expect_table("ij,jk->i", X{17, 37}, A2, A2);
  expect_table("ij->", X(10.0), A2);
  expect_table("ij->i", X{3, 7}, A2);
  expect_table("ij->j", X{4, 6}, A2);
  expect_table("i,j->i", X{12, 24}, X{1, 2}, X{3, 4, 5});  // [1,2] * (3+4+5)
  expect_table("i,j->", X(36.0), X{1, 2}, X{3, 4, 5});
}

TEST(EinsumTable, OuterProducts) {
  expect_table("i,j->ij", X{{3, 4, 5}, {6, 8, 10}}, X{1, 2}, X{3, 4, 5});
  expect_table("i,j", X{{3, 4, 5}, {6, 8, 10}}, X{1, 2}, X{3, 4, 5});
  expect_table("i,j->ji", X{{3, 6}, {4, 8}, {5, 10}}, X{1, 2}, X{3, 4, 5});
  expect_table("ij,k->ijk", X{{{1, 10}, {2, 20}}, {{3, 30}, {4, 40}}}, A2, X{1, 10});
  expect_table("ij,k->kji", X{{{1, 3}, {2, 4}}, {{10, 30}, {20, 40}}}, A2, X{1, 10});
}

TEST(EinsumTable, ScalarsAndRankZeroOperands) {
  expect_table("i,i->", X(32.0), X{1, 2, 3}, X{4, 5, 6});
  expect_table("i,i", X(32.0), X{1, 2, 3}, X{4, 5, 6});
  expect_table("ij,ij->", X(30.0), A2, A2);
  expect_table(",->", X(12.0), X(3.0), X(4.0));
  expect_table(",", X(12.0), X(3.0), X(4.0));
  expect_table(",i->i", X{3, 6}, X(3.0), X{1, 2});
  expect_table("i,->i", X{3, 6}, X{1, 2}, X(3.0));
  expect_table("->", X(7.0), X(7.0));
  expect_table("", X(7.0), X(7.0));
  expect_table("...->", X(7.0), X(7.0));
  // empty sums are 0
  expect_table("i,i->", X(0.0), X::from_shape({0}), X::from_shape({0}));
  expect_table("ij->i", X{0, 0}, X::from_shape({2, 0}));
  expect_table("ij,jk->ik", X{{0, 0, 0}, {0, 0, 0}}, X::from_shape({2, 0}), X::from_shape({0, 3}));
}

TEST(EinsumTable, SizeOneBroadcastingOfLetters) {
  // (2,1) * (1,3)
  expect_table("ij,ij->ij", X{{10, 20, 30}, {20, 40, 60}}, shaped({2, 1}, {1, 2}), shaped({1, 3}, {10, 20, 30}));
  // j: 1 in A, 3 in B -> A[i][0] * sum_j B[j][k] = [[2*9, 2*12], [3*9, 3*12]]
  expect_table("ij,jk->ik", X{{18, 24}, {27, 36}}, shaped({2, 1}, {2, 3}), X{{1, 2}, {3, 4}, {5, 6}});
  expect_table("i,i->", X(12.0), X{2}, X{1, 2, 3});
  expect_table("i,i->i", X{2, 4, 6}, X{2}, X{1, 2, 3});
  expect_table("i,i->i", X{2, 4, 6}, X{1, 2, 3}, X{2});
  // a size-1 diagonal broadcast against 3
  expect_table("ii,i->i", X{5, 10, 15}, shaped({1, 1}, {5}), X{1, 2, 3});
  // a size-1 dim that no other operand widens stays 1
  expect_table("ij,jk->ik", shaped({1, 1}, {4}), shaped({1, 2}, {1, 1}), shaped({2, 1}, {2, 2}));
  // 0 against 0
  expect_table("i,i->i", X::from_shape({0}), X::from_shape({0}), X::from_shape({0}));
  expect_table("i,i->i", X::from_shape({0}), X::from_shape({0}), X{2});
}

// A size-1 dim broadcasts against extent 0 to 0 (PyTorch's broadcasting),
// whichever operand comes first. Each case runs in a child process, so a
// crash (reading the empty operand) fails only that case.
template <class... Ops>
void expect_in_child(std::string_view eq, const X& want, const Ops&... ops) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(
      {
        const auto r = same(xshard::einsum(eq, ops...), want);
        if (!r) std::fprintf(stderr, "%s\n", r.message());
        std::exit(r ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "")
      << "equation \"" << eq << '"';
}

TEST(EinsumTable, SizeOneAgainstZero) {
  const X one = {5}, empty = X::from_shape({0});
  expect_in_child("i,i->i", empty, empty, one);  // 0 first
  expect_in_child("i,i->i", empty, one, empty);  // 1 first
  expect_in_child("i,i->", X(0.0), one, empty);
  expect_in_child("ij,jk->ik", X(xt::zeros<double>({2, 3})), shaped({2, 1}, {1, 2}), X::from_shape({0, 3}));
  expect_in_child("ij,ij->ij", X::from_shape({0, 2}), shaped({1, 2}, {1, 2}), X::from_shape({0, 2}));
  expect_in_child("...,...->...", empty, one, empty);
  expect_in_child("i,i,i->i", empty, one, one, empty);
}

TEST(EinsumTable, ThreeAndMoreOperands) {
  const X I = {{1, 0}, {0, 1}};
  const X P = {{0, 1}, {1, 0}};
  expect_table("ij,jk,kl->il", X{{2, 1}, {4, 3}}, A2, I, P);  // A2 with columns swapped
  expect_table("ij,jk,kl", X{{2, 1}, {4, 3}}, A2, I, P);
  expect_table("i,i,i->", X(63.0), X{1, 2}, X{3, 4}, X{5, 6});  // 15 + 48
  expect_table("i,j,k->ijk", X{{{1, 100}, {10, 1000}}, {{2, 200}, {20, 2000}}}, X{1, 2}, X{1, 10}, X{1, 100});
  // [[2,1],[4,3]] @ [[1,2],[3,4]] = [[5,8],[13,20]]
  expect_table("ab,bc,cd,de->ae", X{{5, 8}, {13, 20}}, A2, I, P, A2);
  // b in all three and in the output: b0 (1+2)*1, b1 (3*2+4*2)*10
  expect_table("bi,bi,b->b", X{3, 140}, A2, X{{1, 1}, {2, 2}}, X{1, 10});
  // ellipsis and broadcasting: R[b] = sum_i x[b][i] * 1 * w[i]
  expect_table("...i,...i,i->...", X{8, 18}, A2, X{1, 1}, X{2, 3});
  // five operands, a scalar among them: 2 * (1*3 + 2*4) * 10
  expect_table("i,,i,j,j->", X(220.0), X{1, 2}, X(2.0), X{3, 4}, X{1, 1}, X{4, 6});
}

// ---------------------------------------------------------------------------
// The contract (../shared/contract/einsum.cpp), through the run-time face.

TEST(EinsumContract, LinearForwardAndWeightGradient) {
  xt::xtensor<float, 3> x = xt::ones<float>({2, 3, 4});
  xt::xtensor<float, 2> w = xt::ones<float>({5, 4});
  xt::xtensor<float, 3> y = xshard::einsum<"...n,mn->...m">(x, w);
  xt::xarray<float> y2 = xshard::einsum("...n,mn->...m", x, w);
  xt::xtensor<float, 2> dw = xshard::einsum<"...m,...n->mn">(y, x);
  EXPECT_EQ(y.shape()[2], 5u);
  EXPECT_EQ(y(1, 2, 4), 4.f);
  EXPECT_EQ(y2(1, 2, 4), 4.f);
  EXPECT_EQ(dw(0, 0), 24.f);  // sum over 2*3 rows of 4 * 1
  EXPECT_EQ(dw.shape()[0], 5u);
  EXPECT_EQ(dw.shape()[1], 4u);
  xt::xarray<float> dw2 = xshard::einsum("...m,...n->mn", y, x);
  EXPECT_TRUE(same(dw2, dw));
  // backward of the input and of the bias
  xt::xarray<float> dx = xshard::einsum("...m,mn->...n", y, w);
  EXPECT_TRUE(same(dx, xt::xarray<float>(20.f * xt::ones<float>({2, 3, 4}))));
  EXPECT_TRUE(same(xshard::einsum("...m->m", y), xt::xarray<float>{24, 24, 24, 24, 24}));
}

// ---------------------------------------------------------------------------
// Strided operands are read in place, whatever their layout.

TEST(EinsumOperands, ViewsTransposesAndLayouts) {
  const X M = arange(12, {3, 4});  // M[r][c] = 4r + c
  // rows 0, 2 and columns 3, 1 (a negative step): [[3, 1], [11, 9]]
  auto v = xt::view(M, xt::range(0, 3, 2), xt::range(3, xt::placeholders::_, -2));
  expect_table("ij->ij", X{{3, 1}, {11, 9}}, v);
  expect_table("ij,jk->ik", X{{4, 2}, {20, 18}}, v, X{{1, 0}, {1, 2}});  // [3+1, 2], [11+9, 18]
  expect_table("ii->i", X{3, 9}, v);
  // an integer index: row 1 = [4, 5, 6, 7]
  expect_table("i,i->", X(22.0), xt::view(M, 1, xt::all()), X{1, 1, 1, 1});
  // transposed view, and a transpose of a view
  expect_table("ij->ij", xt::transpose(M), xt::transpose(M));
  expect_table("ij->i", X{12, 15, 18, 21}, xt::transpose(M));
  expect_table("ij->ji", X{{3, 1}, {11, 9}}, xt::transpose(v));
  // column-major storage
  xt::xarray<double, xt::layout_type::column_major> C = {{1, 2}, {3, 4}};
  expect_table("ij,jk->ik", X{{7, 10}, {15, 22}}, C, C);
  // xtensor and xtensor_fixed operands through the run-time face
  const xt::xtensor<double, 2> T2 = A2;
  const xt::xtensor_fixed<double, xt::xshape<2, 2>> F2 = A2;
  expect_table("ij,jk->ik", X{{7, 10}, {15, 22}}, T2, F2);
  // expressions are evaluated once: (M + 1) sums to 66 + 12
  EXPECT_TRUE(same(xshard::einsum("ij->", M + 1.0), X(78.0)));
  EXPECT_TRUE(same(xshard::einsum("ij->j", xt::broadcast(X{1, 2}, {3, 2})), X{3, 6}));
}

TEST(EinsumOperands, ResultShapes) {
  auto shape_of = [](const auto& r) { return std::vector<std::size_t>(r.shape().begin(), r.shape().end()); };
  using S = std::vector<std::size_t>;
  const X a = X::from_shape({2, 3, 4}), b = X::from_shape({5, 4}), s = X(1.0);
  EXPECT_EQ(shape_of(xshard::einsum("...n,mn->...m", a, b)), (S{2, 3, 5}));
  EXPECT_EQ(shape_of(xshard::einsum("...m,...n->mn", a, X::from_shape({3, 7}))), (S{4, 7}));
  EXPECT_EQ(shape_of(xshard::einsum("ijk->kji", a)), (S{4, 3, 2}));
  EXPECT_EQ(shape_of(xshard::einsum("ijk", a)), (S{2, 3, 4}));
  EXPECT_EQ(shape_of(xshard::einsum("kji", a)), (S{4, 3, 2}));
  EXPECT_EQ(shape_of(xshard::einsum("ijk->", a)), S{});
  EXPECT_EQ(shape_of(xshard::einsum("...", a)), (S{2, 3, 4}));
  EXPECT_EQ(shape_of(xshard::einsum("i...,j...->...ij", X::from_shape({2, 1, 3}), X::from_shape({5, 4, 1}))),
            (S{4, 3, 2, 5}));
  EXPECT_EQ(shape_of(xshard::einsum(",->", s, s)), S{});
  EXPECT_EQ(shape_of(xshard::einsum("ij,jk->ik", X::from_shape({0, 3}), X::from_shape({3, 2}))), (S{0, 2}));
  EXPECT_EQ(shape_of(xshard::einsum("ij,ij->ij", X::from_shape({4, 1}), X::from_shape({1, 6}))), (S{4, 6}));
  EXPECT_EQ(shape_of(xshard::einsum("ij,ij->ij", X::from_shape({1, 1}), X::from_shape({1, 6}))), (S{1, 6}));
}

// ---------------------------------------------------------------------------
// Run-time errors: xshard::error (an std::invalid_argument) whose message
// names the column and character, the letter and both extents, the operand
// and both ranks, and quotes the equation.

template <class... Ops>
std::string error_of(std::string_view eq, const Ops&... ops) {
  try {
    (void)xshard::einsum(eq, ops...);
  } catch (const xshard::error& e) {
    const std::invalid_argument& base = e;  // the documented base class
    return base.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no error";
}

TEST(EinsumErrors, Syntax) {
  const X a = X::from_shape({2, 3}), b = X::from_shape({3, 4});
  EXPECT_THAT(error_of("ij,j1->ik", a, b), AllOf(HasSubstr("unexpected '1' at column 5"), HasSubstr("\"ij,j1->ik\"")));
  EXPECT_THAT(error_of("ij;jk->ik", a, b), HasSubstr("unexpected ';' at column 3"));
  EXPECT_THAT(error_of("ij,jk->i_k", a, b), HasSubstr("unexpected '_' at column 9"));
  EXPECT_THAT(error_of("ij,jk-ik", a, b), HasSubstr("unexpected '-' at column 6"));
  EXPECT_THAT(error_of("ij,jk>ik", a, b), HasSubstr("unexpected '>' at column 6"));
  EXPECT_THAT(error_of("ij,jk->ik->ik", a, b), HasSubstr("unexpected '-' at column 10"));
  EXPECT_THAT(error_of("ij,jk->i,k", a, b), HasSubstr("unexpected ',' at column 9"));
  EXPECT_THAT(error_of("i.j,jk->ik", a, b),
              AllOf(HasSubstr("'.' at column 2 is not part of an ellipsis"), HasSubstr("\"i.j,jk->ik\"")));
  EXPECT_THAT(error_of("ij..,jk->ik", a, b), HasSubstr("'.' at column 3 is not part of an ellipsis"));
  EXPECT_THAT(error_of("...i...,i->i", a, b), HasSubstr("second ellipsis in one term at column 5"));
}

TEST(EinsumErrors, Output) {
  const X a = X::from_shape({2, 3}), b = X::from_shape({3, 4});
  EXPECT_THAT(error_of("ij,jk->ix", a, b),
              AllOf(HasSubstr("output subscript 'x' at column 9 appears in no input"), HasSubstr("\"ij,jk->ix\"")));
  EXPECT_THAT(error_of("ij,jk->iI", a, b), HasSubstr("output subscript 'I' at column 9 appears in no input"));
  EXPECT_THAT(error_of("ij,jk->ii", a, b), HasSubstr("output subscript 'i' at column 8 appears more than once"));
  EXPECT_THAT(error_of("ij,jk->kik", a, b), HasSubstr("output subscript 'k' at column 8 appears more than once"));
  EXPECT_THAT(error_of("ij,jk->...ik", a, b), HasSubstr("ellipsis in the output at column 8 but in no input"));
}

TEST(EinsumErrors, OperandCount) {
  const X a = X::from_shape({2, 3}), b = X::from_shape({3, 4});
  EXPECT_THAT(
      error_of("ij,jk->ik", a, b, b),
      AllOf(HasSubstr("the equation has 2 input subscripts but 3 operands were given"), HasSubstr("\"ij,jk->ik\"")));
  EXPECT_THAT(error_of("ij,jk->ik", a), HasSubstr("the equation has 2 input subscripts but 1 operands were given"));
  const X v = X::from_shape({1});
  // 17 terms: more than the 16 operands an equation may have
  EXPECT_THAT(error_of("i,i,i,i,i,i,i,i,i,i,i,i,i,i,i,i,i", v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v),
              HasSubstr("17 terms or subscripts (at most 16)"));
  // 16 operands are fine
  EXPECT_TRUE(same(xshard::einsum("i,i,i,i,i,i,i,i,i,i,i,i,i,i,i,i", X{2}, X{2}, X{2}, X{2}, X{2}, X{2}, X{2}, X{2},
                                  X{2}, X{2}, X{2}, X{2}, X{2}, X{2}, X{2}, X{2}),
                   X(65536.0)));
}

TEST(EinsumErrors, Rank) {
  const X a = X::from_shape({2, 3}), b3 = X::from_shape({3, 4, 5});
  EXPECT_THAT(error_of("ij,jk->ik", a, b3),
              AllOf(HasSubstr("operand 1 has rank 3 but its subscripts name 2 dims"), HasSubstr("\"ij,jk->ik\"")));
  EXPECT_THAT(error_of("ijk,jk->i", a, a), HasSubstr("operand 0 has rank 2 but its subscripts name 3 dims"));
  EXPECT_THAT(error_of("...ijk->i", a), HasSubstr("operand 0 has rank 2 but its subscripts name 3 dims"));
  EXPECT_THAT(error_of("ii->i", X::from_shape({2})), HasSubstr("operand 0 has rank 1 but its subscripts name 2 dims"));
  // 25 letters in one term; a rank-25 operand under an ellipsis
  EXPECT_THAT(error_of("abcdefghijklmnopqrstuvwxy", a), HasSubstr("25 terms or subscripts (at most 24)"));
}

// An operand of rank 25 (above max_einsum_rank = 24) must be refused, not
// cut to 24 dims. Shape (1 x 24, 2) holding [1, 10]: "...->" sums to 11.
TEST(EinsumErrors, OperandRankAboveCapacityIsRefused) {
  std::vector<std::size_t> shape(25, 1);
  shape[24] = 2;
  X x = X::from_shape(shape);
  x.flat(0) = 1;
  x.flat(1) = 10;
  EXPECT_THAT(error_of("...->", x), HasSubstr("25 terms or subscripts (at most 24)"));
  EXPECT_THAT(error_of("...", x), HasSubstr("25 terms or subscripts (at most 24)"));
  EXPECT_THAT(error_of("...i->i", x), HasSubstr("25 terms or subscripts (at most 24)"));
}

TEST(EinsumErrors, Extents) {
  EXPECT_THAT(error_of("ij,jk->ik", X::from_shape({2, 3}), X::from_shape({4, 5})),
              AllOf(HasSubstr("subscript 'j' has extents 3 and 4"), HasSubstr("\"ij,jk->ik\"")));
  EXPECT_THAT(error_of("i,i,i->i", X::from_shape({1}), X::from_shape({3}), X::from_shape({2})),
              HasSubstr("subscript 'i' has extents 3 and 2"));
  EXPECT_THAT(error_of("Ij,jI->", X::from_shape({2, 3}), X::from_shape({3, 0})),
              HasSubstr("subscript 'I' has extents 2 and 0"));
  EXPECT_THAT(error_of("...i,...i->...", X::from_shape({2, 3}), X::from_shape({4, 3})),
              AllOf(HasSubstr("ellipsis dims do not broadcast: extents 2 and 4"), HasSubstr("\"...i,...i->...\"")));
  EXPECT_THAT(error_of("ii->i", X::from_shape({2, 3})),
              AllOf(HasSubstr("subscript 'i' is repeated in operand 0 with different extents 2 and 3"),
                    HasSubstr("\"ii->i\"")));
  EXPECT_THAT(error_of("j,iji->j", X::from_shape({3}), X::from_shape({2, 3, 4})),
              HasSubstr("subscript 'i' is repeated in operand 1 with different extents 2 and 4"));
}

TEST(EinsumErrors, TypedFaceChecksDynamicExtentsAtRunTime) {
  const X a = X::from_shape({2, 3}), b = X::from_shape({4, 5});
  EXPECT_XSHARD_ERROR(((void)xshard::einsum<"ij,jk->ik">(a, b)), "subscript 'j' has extents 3 and 4");
  EXPECT_XSHARD_ERROR(((void)xshard::einsum<"ij,jk->ik">(a, X::from_shape({3, 4, 5}))),
                      "operand 1 has rank 3 but its subscripts name 2 dims");
}

// Operands of static ranks (xt::xtensor) are bound to the equation at
// compile time, run-time ranks (xt::xarray) at each call: the same labels,
// extents checks, results and errors either way.
TEST(EinsumErrors, StaticRanksBindAtCompileTimeWithTheSameResultsAndErrors) {
  using T2 = xt::xtensor<double, 2>;
  using T3 = xt::xtensor<double, 3>;
  static_assert(xshard::detail::static_bound<"...n,mn->...m", T3, T2>() != nullptr);
  static_assert(xshard::detail::static_bound<"...n,mn->...m", X, T2>() == nullptr);
  constexpr const xshard::einsum_binding* bound = xshard::detail::static_bound<"...ij,jk->...ik", T3, T2>();
  static_assert(bound->ellipsis_dims == 1 && bound->output_labels.size() == 3);
  const T3 x = arange(24, {2, 3, 4});
  const T2 w = arange(20, {4, 5});
  const X want = xshard::einsum<"...ij,jk->...ik">(X(x), X(w));  // bound at run time
  const T3 got = xshard::einsum<"...ij,jk->...ik">(x, w);        // bound at compile time
  ASSERT_EQ(X(got).shape(), want.shape());
  EXPECT_TRUE(xt::all(xt::equal(X(got), want)));
  // A broadcast ellipsis (extent 1 against 2) and a summed one.
  const T3 one = arange(12, {1, 3, 4});
  EXPECT_TRUE(xt::all(
      xt::equal(X(xshard::einsum<"...ij,...ij->...i">(x, one)), xshard::einsum<"...ij,...ij->...i">(X(x), X(one)))));
  EXPECT_TRUE(xt::all(xt::equal(X(xshard::einsum<"...ij->j">(x)), xshard::einsum<"...ij->j">(X(x)))));
  // The extents check names the same subscript and extents.
  EXPECT_XSHARD_ERROR(((void)xshard::einsum<"...ij,jk->...ik">(x, T2::from_shape({5, 5}))),
                      "subscript 'j' has extents 4 and 5");
  EXPECT_XSHARD_ERROR(((void)xshard::einsum<"...ij,jk->...ik">(X(x), X(T2::from_shape({5, 5})))),
                      "subscript 'j' has extents 4 and 5");
}

// parse_einsum's diagnostics carry the code, column and character.
TEST(EinsumErrors, ParseDiagnostics) {
  using xshard::errc;
  using xshard::parse_einsum;
  struct row {
    const char* eq;
    errc code;
    int column;
    char ch;
  };
  const row rows[] = {
      {"ij,jk->ik", errc::ok, 0, 0},
      {"ij,j1->ik", errc::einsum_syntax, 5, '1'},
      {"i.j", errc::einsum_ellipsis, 2, '.'},
      {"...i...", errc::einsum_two_ellipses, 5, '.'},
      {"ij->ix", errc::einsum_output_unknown, 6, 'x'},
      {"ij->jj", errc::einsum_output_twice, 5, 'j'},
      {"ij->...", errc::einsum_output_ellipsis, 5, 0},
  };
  for (const row& r : rows) {
    const auto p = parse_einsum(r.eq);
    EXPECT_EQ(p.diag.code, r.code) << r.eq;
    EXPECT_EQ(p.diag.column, r.column) << r.eq;
    EXPECT_EQ(p.diag.ch, r.ch) << r.eq;
  }
  EXPECT_EQ(parse_einsum("abcdefghijklmnopqrstuvwxy").diag.code, errc::einsum_too_many);
  EXPECT_EQ(parse_einsum("a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a").diag.code, errc::einsum_too_many);
  EXPECT_TRUE(parse_einsum("a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a").ok());
  EXPECT_THROW((void)parse_einsum("ij,j1").get("ij,j1"), xshard::error);
  // The implicit output, read back.
  EXPECT_EQ(xshard::einsum_text(parse_einsum("...ij,...jk").value).str(), "...ij,...jk->...ik");
  EXPECT_EQ(xshard::einsum_text(parse_einsum("cBa,A").value).str(), "cBa,A->ABac");
}

}  // namespace
