// The blocked GEMM path across its block and tile boundaries: shapes that
// cross KC (384), MC (144), NC (1024), MR and NR edges, in each operand
// layout the driver treats differently (A read in place, A packed because its
// row stride is a multiple of 4 KiB, A with unit M stride, B transposed, C
// transposed so tiles are scattered, batched, few rows times W^T run as
// C^T), against a naive double-precision loop, and bit-identical for 1, 2 and
// 3 threads; the offset tables each thread keeps, across more shapes than it
// keeps.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>
#include <xshard/core/thread_pool.hpp>
#include <xshard/einsum/einsum.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

namespace {

/// C[b, i, j] = sum_k A(b, i, k) B(b, k, j) in double, through accessors.
/// Each operand element is read through its accessor once, into a plain
/// array, and the loops run on those (an accessor call per multiply-add
/// made this reference most of the test's time under the sanitizers).
template <class FA, class FB>
std::vector<double> naive(std::size_t nb, std::size_t m, std::size_t n, std::size_t k, FA a, FB b) {
  std::vector<double> av(nb * m * k), bv(nb * k * n), c(nb * m * n, 0.0);
  for (std::size_t bi = 0; bi < nb; ++bi)
    for (std::size_t p = 0; p < k; ++p) {
      for (std::size_t i = 0; i < m; ++i) av[(bi * m + i) * k + p] = a(bi, i, p);
      for (std::size_t j = 0; j < n; ++j) bv[(bi * k + p) * n + j] = b(bi, p, j);
    }
  for (std::size_t bi = 0; bi < nb; ++bi)
    for (std::size_t i = 0; i < m; ++i) {
      double* const row = c.data() + (bi * m + i) * n;
      for (std::size_t p = 0; p < k; ++p) {
        const double x = av[(bi * m + i) * k + p];
        const double* const brow = bv.data() + (bi * k + p) * n;
        for (std::size_t j = 0; j < n; ++j) row[j] += x * brow[j];
      }
    }
  return c;
}

/// Checks `got(b, i, j)` against the reference with a K-scaled tolerance.
template <class G>
void expect_close(const std::vector<double>& want, std::size_t nb, std::size_t m, std::size_t n, std::size_t k, G got,
                  const std::string& what) {
  const double tol = 2e-6 * static_cast<double>(k);
  std::size_t bad = 0;
  for (std::size_t bi = 0; bi < nb; ++bi)
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        const double w = want[(bi * m + i) * n + j], g = got(bi, i, j);
        if (!(std::abs(w - g) <= tol * (1.0 + std::abs(w))) && bad++ < 5)
          ADD_FAILURE() << what << " at (" << bi << "," << i << "," << j << "): " << g << " vs " << w;
      }
  EXPECT_EQ(bad, 0u) << what;
}

/// Runs f() with 1, 2 and 3 threads and checks the results are identical.
template <class F>
auto same_for_thread_counts(F f) {
  const std::size_t before = xshard::num_threads();
  xshard::set_num_threads(1);
  auto first = f();
  for (std::size_t t : {2, 3}) {
    xshard::set_num_threads(t);
    const auto again = f();
    EXPECT_TRUE(again == first) << "result differs with " << t << " threads";
  }
  xshard::set_num_threads(before);
  return first;
}

// Sizes: M crosses MC = 144 and ends in a partial MR tile; K crosses KC = 384
// twice; N ends in a partial NR tile.
constexpr std::size_t M = 151, N = 45, K = 800;

TEST(EinsumBlocking, RowsReadInPlace) {  // A row stride 800 floats: read in place
  // The last rows of M: 7 (a 9-row kernel over a window of A that starts 2
  // rows before them, in rows already done), 6 and 3 (a 6- and a 3-row
  // kernel), 0; M = 4 and 5 (a 6-row window would start before row 0:
  // packed, zero-padded), 2 and 1 (the same with a 3-row window).
  for (std::size_t m : {M, std::size_t{150}, std::size_t{147}, std::size_t{144}, std::size_t{5}, std::size_t{4},
                        std::size_t{2}, std::size_t{1}}) {
    xt::random::seed(1);
    const xt::xtensor<float, 2> a = xt::random::randn<float>({m, K});
    const xt::xtensor<float, 2> b = xt::random::randn<float>({K, N});
    const auto c = same_for_thread_counts([&] { return xt::xtensor<float, 2>(xshard::einsum<"ik,kj->ij">(a, b)); });
    const auto want = naive(
        1, m, N, K, [&](std::size_t, std::size_t i, std::size_t p) { return double(a(i, p)); },
        [&](std::size_t, std::size_t p, std::size_t j) { return double(b(p, j)); });
    expect_close(
        want, 1, m, N, K, [&](std::size_t, std::size_t i, std::size_t j) { return double(c(i, j)); },
        "ik,kj with M = " + std::to_string(m));
  }
}

// Every row count's tiles (detail::row_tiles): on a 6-row kernel (AVX2, the
// portable one) a last tile of 1 or 2 rows joins the one before it as 4 + 3
// or 4 + 4 rows, and 4 rows run a 4-row kernel; with A read in place and
// packed (A's rows along M: "ki,kj"), M around MR, MC = 144 and 2 MC, K
// crossing KC, against the naive loop and the same for 1, 2 and 3 threads;
// both layouts give the same bits (the same sums in the same order).
TEST(EinsumBlocking, EveryRowCountsTiles) {
  constexpr std::size_t n = 37;
  std::vector<std::pair<std::size_t, std::size_t>> cases;  // (M, K)
  for (std::size_t m = 1; m <= 20; ++m) cases.emplace_back(m, 70);
  for (std::size_t m : {25, 26, 31, 32, 64, 128, 145, 146, 148}) cases.emplace_back(m, 70);
  for (std::size_t m : {32, 146, 290}) cases.emplace_back(m, 390);  // K crosses KC
  for (const auto& [m, k] : cases) {
    xt::random::seed(static_cast<unsigned>(m));
    const xt::xtensor<float, 2> a = xt::random::randn<float>({m, k});
    const xt::xtensor<float, 2> at = xt::transpose(a);  // [k, m]: M has unit stride, A is packed
    const xt::xtensor<float, 2> b = xt::random::randn<float>({k, n});
    const auto want = naive(
        1, m, n, k, [&](std::size_t, std::size_t i, std::size_t p) { return double(a(i, p)); },
        [&](std::size_t, std::size_t p, std::size_t j) { return double(b(p, j)); });
    const auto in_place =
        same_for_thread_counts([&] { return xt::xtensor<float, 2>(xshard::einsum<"ik,kj->ij">(a, b)); });
    const auto packed =
        same_for_thread_counts([&] { return xt::xtensor<float, 2>(xshard::einsum<"ki,kj->ij">(at, b)); });
    expect_close(
        want, 1, m, n, k, [&](std::size_t, std::size_t i, std::size_t j) { return double(in_place(i, j)); },
        "ik,kj with M = " + std::to_string(m));
    expect_close(
        want, 1, m, n, k, [&](std::size_t, std::size_t i, std::size_t j) { return double(packed(i, j)); },
        "ki,kj with M = " + std::to_string(m));
    EXPECT_TRUE(in_place == packed) << "M = " << m << ": the same sums in the same order";
  }
}

// A is a column slice of a 1024-wide tensor: its rows are 4 KiB apart, so
// A is packed, each MR-row panel transposed from rows contiguous along K
// (on x86, eight rows by eight k in registers; K = 803 leaves a k tail of 3
// in the last KC block, M = 151 partial row tiles). N = 347 makes B's block
// (KC x N) larger than half of L2: the macro-kernel then holds each B
// micro-panel while A's micro-panels go by (the AVX2 kernel's order; the
// AVX-512 kernel's panel is too large for it), over A blocks of
// blocking::mc_held_b = 48 rows (151 = 3 x 48 + 7). Against the naive loop, the
// same for 1, 2 and 3 threads, and bit-identical to a contiguous copy of the
// slice (A read in place: the same sums in the same order).
TEST(EinsumBlocking, RowsPackedWhenStrideIsMultipleOf4KiB) {
  for (const auto& [n, k] :
       {std::pair<std::size_t, std::size_t>{N, K}, std::pair<std::size_t, std::size_t>{347, 803}}) {
    xt::random::seed(2);
    const xt::xtensor<float, 2> base = xt::random::randn<float>({M, std::size_t{1024}});
    const auto a = xt::view(base, xt::all(), xt::range(3, 3 + static_cast<long>(k)));
    const xt::xtensor<float, 2> a_copy = a;
    const xt::xtensor<float, 2> b = xt::random::randn<float>({k, n});
    const auto c = same_for_thread_counts([&] { return xt::xtensor<float, 2>(xshard::einsum<"ik,kj->ij">(a, b)); });
    const auto want = naive(
        1, M, n, k, [&](std::size_t, std::size_t i, std::size_t p) { return double(a(i, p)); },
        [&](std::size_t, std::size_t p, std::size_t j) { return double(b(p, j)); });
    const std::string shape = " (N = " + std::to_string(n) + ", K = " + std::to_string(k) + ")";
    expect_close(
        want, 1, M, n, k, [&](std::size_t, std::size_t i, std::size_t j) { return double(c(i, j)); },
        "ik,kj on a 4 KiB row stride" + shape);
    const xt::xtensor<float, 2> in_place = xshard::einsum<"ik,kj->ij">(a_copy, b);
    EXPECT_TRUE(c == in_place) << "packed and in-place A differ" << shape;
  }
}

// Few rows of C (<= the kernel's b_in_place_rows: detail::direct_b_max_rows,
// or 24 with AVX2): B's rows are read in place, full-width panels straight
// from the operand and the last, narrower one packed. The arithmetic is the
// packed path's: the same rows of a product with many rows (B packed) are
// bit-identical. 13 and 24 rows read B in place with every kernel.
TEST(EinsumBlocking, BRowsReadInPlaceForFewRows) {
  static_assert(xshard::detail::direct_b_max_rows < M);
  xt::random::seed(6);
  const xt::xtensor<float, 2> a = xt::random::randn<float>({M, K});
  const xt::xtensor<float, 2> wide = xt::random::randn<float>({K, std::size_t{77}});
  const auto b = xt::view(wide, xt::all(), xt::range(5, 5 + static_cast<long>(N)));  // row stride 77
  const auto packed = xt::xtensor<float, 2>(xshard::einsum<"ik,kj->ij">(a, b));
  for (std::size_t m :
       {std::size_t{64}, std::size_t{37}, xshard::detail::direct_b_max_rows, std::size_t{24}, std::size_t{13}}) {
    const auto a_rows = xt::view(a, xt::range(0, static_cast<long>(m)), xt::all());
    const auto c =
        same_for_thread_counts([&] { return xt::xtensor<float, 2>(xshard::einsum<"ik,kj->ij">(a_rows, b)); });
    const auto want = naive(
        1, m, N, K, [&](std::size_t, std::size_t i, std::size_t p) { return double(a(i, p)); },
        [&](std::size_t, std::size_t p, std::size_t j) { return double(b(p, j)); });
    expect_close(
        want, 1, m, N, K, [&](std::size_t, std::size_t i, std::size_t j) { return double(c(i, j)); },
        "ik,kj with B in place, M = " + std::to_string(m));
    EXPECT_TRUE(c == xt::view(packed, xt::range(0, static_cast<long>(m)), xt::all())) << "M = " << m;
  }
}

// The thread grid counts B's packing only where a share packs it
// (detail::gemm_thread_grid): a split of M whose shares have at most
// direct_b_max_rows rows reads B in place. The costs, from the rule (6-row
// kernel, 16 columns, NC 1024, A packed, a packed element weighing 16
// multiply-adds), for a weight gradient M 128 x N 512 x K 64 on 2 threads:
// multiply-adds, one read in place 4), for a weight gradient M 128 x N 512
// x K 64 on 2 threads:
//   M split: 66 rows x 512 x 64 + 16 (64 x 66 of A) + 4 (64 x 512 of B)
//                                                                  = 2 361 344
//   N split: 132 x 256 x 64 + 16 (64 x 256 of B + 64 x 132 of A)    = 2 560 000
//   M split, B packed: 66 x 512 x 64 + 16 (64 x 512 + 64 x 66)      = 2 754 560
// and M 256 (4 threads): M in 4 shares of 66 rows 2 361 344, M x N 2 x 2
// 2 560 000, N in 4 (258 rows, B packed) 2 508 800, and M in 4 with B
// packed 2 754 560. Row splits of 258 or more rows pack B either way.
TEST(EinsumBlocking, ThreadGridCountsBReadInPlace) {
  using A = std::array<std::size_t, 4>;
  const auto grid = [](std::size_t m, std::size_t n, std::size_t threads, bool b_in_place) {
    return xshard::detail::gemm_thread_grid(1, m, n, 64, threads, 6, 16, 1024, true, b_in_place);
  };
  EXPECT_EQ(grid(128, 512, 2, true), (A{1, 2, 1, 1}));
  EXPECT_EQ(grid(128, 512, 2, false), (A{1, 1, 2, 1}));
  EXPECT_EQ(grid(256, 512, 4, true), (A{1, 4, 1, 1}));
  EXPECT_EQ(grid(256, 512, 4, false), (A{1, 1, 4, 1}));
  EXPECT_EQ(grid(512, 128, 2, true), (A{1, 2, 1, 1}));
  EXPECT_EQ(grid(512, 128, 2, false), (A{1, 2, 1, 1}));
  // That product (A = dy^T packed, B = g read in place by 66-row shares):
  // the naive loop's values, the same bits at 1, 2 and 3 threads.
  xt::random::seed(8);
  const xt::xtensor<float, 2> dy = xt::random::randn<float>({std::size_t{64}, std::size_t{128}});
  const xt::xtensor<float, 2> g = xt::random::randn<float>({std::size_t{64}, std::size_t{512}});
  const auto c = same_for_thread_counts([&] { return xt::xtensor<float, 2>(xshard::einsum<"bm,bn->mn">(dy, g)); });
  const auto want = naive(
      1, 128, 512, 64, [&](std::size_t, std::size_t i, std::size_t p) { return double(dy(p, i)); },
      [&](std::size_t, std::size_t p, std::size_t j) { return double(g(p, j)); });
  expect_close(
      want, 1, 128, 512, 64, [&](std::size_t, std::size_t i, std::size_t j) { return double(c(i, j)); },
      "bm,bn->mn, M 128 x N 512 x K 64");
}

// A linear layer's forward, x W^T, on few rows of x (<= detail::
// direct_b_max_rows): W^T would be packed again at every call, so the driver
// runs C^T = W x^T (detail::runs_transposed), W's rows read in place and
// C^T's tiles stored a column of C at a time, the bias then along C^T's
// rows. Checked across the tile edges (C^T's N = 50 rows are no multiple of
// MR, its m columns none of NR but 32; K = 400 crosses KC) against the naive
// loop, and bit for bit against the same rows of a product of many rows (run
// as it is): each element is summed over k in the same order either way.
TEST(EinsumBlocking, FewRowsTimesWTransposedRunAsCTransposed) {
  constexpr std::size_t n = 50, k = 400, many = 151;
  static_assert(xshard::detail::direct_b_max_rows < many);
  xt::random::seed(8);
  const xt::xtensor<float, 2> x = xt::random::randn<float>({many, k});
  const xt::xtensor<float, 2> w = xt::random::randn<float>({n, k});
  const xt::xtensor<float, 1> bias = xt::random::randn<float>({n});
  const auto all_rows = xt::xtensor<float, 2>(xshard::einsum<"...k,nk->...n">(x, w));
  const auto all_rows_biased = xt::xtensor<float, 2>(xshard::einsum_bias<"...k,nk->...n">(bias, x, w));
  for (std::size_t m :
       {std::size_t{1}, std::size_t{5}, std::size_t{32}, std::size_t{37}, xshard::detail::direct_b_max_rows}) {
    const std::string what = std::to_string(m) + " rows";
    const auto rows = xt::view(x, xt::range(0, static_cast<long>(m)), xt::all());
    const auto c =
        same_for_thread_counts([&] { return xt::xtensor<float, 2>(xshard::einsum<"...k,nk->...n">(rows, w)); });
    const auto cb = same_for_thread_counts(
        [&] { return xt::xtensor<float, 2>(xshard::einsum_bias<"...k,nk->...n">(bias, rows, w)); });
    auto want = naive(
        1, m, n, k, [&](std::size_t, std::size_t i, std::size_t p) { return double(x(i, p)); },
        [&](std::size_t, std::size_t p, std::size_t j) { return double(w(j, p)); });
    expect_close(
        want, 1, m, n, k, [&](std::size_t, std::size_t i, std::size_t j) { return double(c(i, j)); }, what);
    for (std::size_t e = 0; e < want.size(); ++e) want[e] += double(bias(e % n));
    expect_close(
        want, 1, m, n, k, [&](std::size_t, std::size_t i, std::size_t j) { return double(cb(i, j)); },
        what + " + bias");
    EXPECT_TRUE(c == xt::view(all_rows, xt::range(0, static_cast<long>(m)), xt::all())) << what;
    EXPECT_TRUE(cb == xt::view(all_rows_biased, xt::range(0, static_cast<long>(m)), xt::all())) << what << " + bias";
  }
}

// The transposed store of the x86 kernels (detail::store_tile_columns_avx2)
// for every tile of both kernels (R rows of NR = 16 or 32 columns; the
// AVX-512 kernel's tiles too, on any AVX2 CPU: the store is AVX2): each
// column's R values land contiguously at their column's offset, as
// (C + tile) + row_bias[i], against the scalar loop's bits; no element
// around a column is touched.
TEST(EinsumBlocking, TransposedTileStoreGivesTheScalarBits) {
#if XSHARD_GEMM_X86
  if (xshard::detail::cpu_isa() == xshard::simd_isa::generic) GTEST_SKIP() << "the CPU has no AVX2";
  auto check = [&]<int R, int NR>() {
    constexpr std::ptrdiff_t ld = R + 5;  // column j at j * ld + 2, gaps between columns
    xt::random::seed(static_cast<unsigned>(R * NR));
    const xt::xtensor<float, 1> tile = xt::random::randn<float>({std::size_t{R * NR}});
    const xt::xtensor<float, 1> old = xt::random::randn<float>({std::size_t{NR * ld + 4}});
    const xt::xtensor<float, 1> bias = xt::random::randn<float>({std::size_t{R}});
    std::array<std::ptrdiff_t, NR> col{};
    for (int j = 0; j < NR; ++j) col[static_cast<std::size_t>(j)] = j * ld + 2;
    for (const bool add : {false, true})
      for (const bool with_bias : {false, true}) {
        xt::xtensor<float, 1> got = old, want = old;
        ASSERT_TRUE(xshard::detail::store_tile_columns_avx2<NR>(R, tile.data(), got.data(), col.data(), add,
                                                                with_bias ? bias.data() : nullptr));
        for (int j = 0; j < NR; ++j)
          for (int i = 0; i < R; ++i) {
            float& d = want(static_cast<std::size_t>(col[static_cast<std::size_t>(j)] + i));
            float v = add ? d + tile(static_cast<std::size_t>(i * NR + j)) : tile(static_cast<std::size_t>(i * NR + j));
            if (with_bias) v += bias(static_cast<std::size_t>(i));
            d = v;
          }
        EXPECT_TRUE(got == want) << R << " x " << NR << (add ? ", add" : "") << (with_bias ? ", row bias" : "");
      }
  };
  check.operator()<4, 16>();
  check.operator()<6, 16>();
  check.operator()<4, 32>();
  check.operator()<8, 32>();
  check.operator()<12, 32>();
  EXPECT_FALSE(xshard::detail::store_tile_columns_avx2<16>(3, nullptr, nullptr, nullptr, false, nullptr));
#else
  GTEST_SKIP() << "no x86-64 kernels in this build";
#endif
}

// K's blocks (detail::gemm_k_blocks): as few as KC = 384 allows, of one
// size, a whole number of 64-byte lines, but the last; a function of K
// alone.
TEST(EinsumBlocking, KBlocksAreEqualAndAFunctionOfKAlone) {
  using xshard::detail::gemm_k_blocks;
  if constexpr (xshard::detail::blocking<float>::kc == 384) {
    const auto is = [](xshard::detail::k_blocks kb, std::size_t count, std::size_t size) {
      return kb.count == count && kb.size == size;
    };
    EXPECT_EQ(gemm_k_blocks<float>(0).count, 0u);
    EXPECT_TRUE(is(gemm_k_blocks<float>(1), 1, 16));
    EXPECT_TRUE(is(gemm_k_blocks<float>(64), 1, 64));
    EXPECT_TRUE(is(gemm_k_blocks<float>(384), 1, 384));
    EXPECT_TRUE(is(gemm_k_blocks<float>(385), 2, 208));  // 193 up to 13 lines; 208 + 177
    EXPECT_TRUE(is(gemm_k_blocks<float>(512), 2, 256));  // not 384 + 128
    EXPECT_TRUE(is(gemm_k_blocks<float>(768), 2, 384));
    EXPECT_TRUE(is(gemm_k_blocks<float>(800), 3, 272));   // 272 + 272 + 256
    EXPECT_TRUE(is(gemm_k_blocks<double>(512), 2, 256));  // lines of 8 doubles
    EXPECT_TRUE(is(gemm_k_blocks<double>(1000), 3, 336));
  }
}

// Split-K (detail::gemm_thread_grid's fourth entry, gemm_run_split_k): a
// product with a small C and a K of a few blocks, one block per thread.
// The costs (6-row kernel, 16 columns), for the second product of an MLP
// block on a training step's 64 rows, a [64, 512] x W2 [512, 128] with A
// and B read in place, K in two blocks of 256, on 2 threads:
//   M split: 36 rows x 128 x 512 + 16 (512 x 128 of B: two K blocks pack
//            it) + 4 (512 x 36 of A)                              = 3 481 600
//   N split: 66 x 64 x 512 + 16 (512 x 64 of B) + 4 (512 x 66 of A) = 2 822 144
//   split-K: 66 x 128 x 256 + 4 (256 x 128 of B + 256 x 66 of A)
//            + 2 (64 x 128 partial)                                = 2 377 728
// The forward's first product run as C^T = W1 x^T (512 rows of W1 read in
// place, 64 columns of x^T packed, K 128): the rows split (258 x 64 x 128
// + 16 (128 x 64) + 4 (128 x 258) = 2 376 704) costs less than the columns
// (516 x 32 x 128 + 16 (128 x 32) + 4 (128 x 516) = 2 443 264): each
// thread reads its own half of W1's rows, the half it later updates.
TEST(EinsumBlocking, ThreadGridSplitsKForASmallC) {
  using A = std::array<std::size_t, 4>;
  using xshard::detail::gemm_thread_grid;
  const xshard::detail::k_blocks two{2, 256}, three{3, 272};
  EXPECT_EQ(gemm_thread_grid(1, 64, 128, 512, 2, 6, 16, 1024, false, true, two), (A{1, 1, 1, 2}));
  // With AVX2's limit (24 rows) every share of that product packs B: M
  // split 3 481 600 as above, N split 2 822 144, split-K 66 x 128 x 256 + 16
  // (256 x 128) + 4 (256 x 66) + 2 (64 x 128) = 2 770 944: still split-K.
  EXPECT_EQ(gemm_thread_grid(1, 64, 128, 512, 2, 6, 16, 1024, false, true, two, 24), (A{1, 1, 1, 2}));
  EXPECT_EQ(gemm_thread_grid(1, 512, 64, 128, 2, 6, 16, 1024, false, false), (A{1, 2, 1, 1}));
  EXPECT_EQ(gemm_thread_grid(1, 512, 64, 128, 2, 6, 16, 1024, false, false, {1, 128}), (A{1, 2, 1, 1}));
  // Not split-K: more K blocks than threads, batches, or a C of more than
  // gemm_split_k_max elements.
  EXPECT_EQ(gemm_thread_grid(1, 64, 128, 800, 2, 6, 16, 1024, false, true, three)[3], 1u);
  EXPECT_EQ(gemm_thread_grid(2, 64, 128, 512, 2, 6, 16, 1024, false, true, two)[3], 1u);
  EXPECT_EQ(gemm_thread_grid(1, 256, 128, 512, 2, 6, 16, 1024, false, true, two)[3], 1u);
}

// Split-K's results: the naive loop's values and the same bits at 1, 2 and
// 3 threads (two and three K blocks, C as it is and run as C^T with the
// bias along its rows, C's rows a stride apart), and the bias added after
// the sum, bit for bit as a separate +.
TEST(EinsumBlocking, SplitKGivesTheOneThreadBits) {
  xt::random::seed(9);
  constexpr std::size_t m = 64, n = 128;
  for (std::size_t k : {std::size_t{512}, std::size_t{800}, std::size_t{400}}) {
    const std::string shape = " with K = " + std::to_string(k);
    const xt::xtensor<float, 2> a = xt::random::randn<float>({m, k});
    const xt::xtensor<float, 2> w = xt::random::randn<float>({k, n});  // [hidden, out]: read in place
    const xt::xtensor<float, 2> wt = xt::transpose(w);                 // [out, hidden]: run as C^T
    const xt::xtensor<float, 1> bias = xt::random::randn<float>({n});
    const auto want = naive(
        1, m, n, k, [&](std::size_t, std::size_t i, std::size_t p) { return double(a(i, p)); },
        [&](std::size_t, std::size_t p, std::size_t j) { return double(w(p, j)); });
    const auto check = [&](const auto& c, const std::string& what) {
      expect_close(
          want, 1, m, n, k, [&](std::size_t, std::size_t i, std::size_t j) { return double(c(i, j)); }, what + shape);
    };
    const auto c = same_for_thread_counts([&] { return xt::xtensor<float, 2>(xshard::einsum<"...m,mk->...k">(a, w)); });
    check(c, "...m,mk->...k");
    const auto ct =
        same_for_thread_counts([&] { return xt::xtensor<float, 2>(xshard::einsum<"...m,km->...k">(a, wt)); });
    check(ct, "...m,km->...k");
    EXPECT_TRUE(c == ct) << shape;
    const auto cb =
        same_for_thread_counts([&] { return xt::xtensor<float, 2>(xshard::einsum_bias<"...m,mk->...k">(bias, a, w)); });
    EXPECT_TRUE((cb == xt::xtensor<float, 2>(c + bias))) << shape;
    const auto cbt = same_for_thread_counts(
        [&] { return xt::xtensor<float, 2>(xshard::einsum_bias<"...m,km->...k">(bias, a, wt)); });
    EXPECT_TRUE((cbt == xt::xtensor<float, 2>(c + bias))) << shape;
    // Into C's columns [3, 131) of rows 140 apart.
    const auto strided = same_for_thread_counts([&] {
      xt::xtensor<float, 2> wide = xt::zeros<float>({m, n + 12});
      auto view = xt::view(wide, xt::all(), xt::range(3, 3 + static_cast<long>(n)));
      xshard::einsum_into<"ik,kj->ij">(view, a, w);
      return wide;
    });
    EXPECT_TRUE((xt::view(strided, xt::all(), xt::range(3, 3 + static_cast<long>(n))) == c)) << shape;
    EXPECT_TRUE(xt::all(xt::equal(xt::view(strided, xt::all(), xt::range(0, 3)), 0.0f))) << shape;
  }
}

TEST(EinsumBlocking, TransposedOperandsAndOutput) {
  xt::random::seed(3);
  // The second shape packs B's columns (unit K stride) with full panels on
  // both x86 kernels (NR 16 and 32) and a K block of 11 (eight k through the
  // register transposes, then a tail of three).
  for (const auto [m, n, k] : {std::array<std::size_t, 3>{M, N, K}, std::array<std::size_t, 3>{20, 70, 395}}) {
    const std::string shape =
        " (M, N, K) = (" + std::to_string(m) + ", " + std::to_string(n) + ", " + std::to_string(k) + ")";
    const xt::xtensor<float, 2> at = xt::random::randn<float>({k, m});  // A with unit M stride
    const xt::xtensor<float, 2> bt = xt::random::randn<float>({n, k});  // B with unit K stride
    const auto want = naive(
        1, m, n, k, [&](std::size_t, std::size_t i, std::size_t p) { return double(at(p, i)); },
        [&](std::size_t, std::size_t p, std::size_t j) { return double(bt(j, p)); });
    const auto c1 = same_for_thread_counts([&] { return xt::xtensor<float, 2>(xshard::einsum<"ki,jk->ij">(at, bt)); });
    expect_close(
        want, 1, m, n, k, [&](std::size_t, std::size_t i, std::size_t j) { return double(c1(i, j)); }, "ki,jk" + shape);
    // Output transposed: C's N label is not contiguous, tiles are scattered.
    const auto c2 = same_for_thread_counts([&] { return xt::xtensor<float, 2>(xshard::einsum<"ki,jk->ji">(at, bt)); });
    expect_close(
        want, 1, m, n, k, [&](std::size_t, std::size_t i, std::size_t j) { return double(c2(j, i)); },
        "ki,jk->ji" + shape);
  }
}

TEST(EinsumBlocking, WideNCrossesNcAndBatchesSplit) {
  xt::random::seed(4);
  constexpr std::size_t B = 3, m = 29, n = 1061, k = 50;
  const xt::xtensor<double, 3> a = xt::random::randn<double>({B, m, k});
  const xt::xtensor<double, 3> b = xt::random::randn<double>({B, k, n});
  const auto c = same_for_thread_counts([&] { return xt::xtensor<double, 3>(xshard::einsum<"bik,bkj->bij">(a, b)); });
  const auto want = naive(
      B, m, n, k, [&](std::size_t bi, std::size_t i, std::size_t p) { return a(bi, i, p); },
      [&](std::size_t bi, std::size_t p, std::size_t j) { return b(bi, p, j); });
  expect_close(
      want, B, m, n, k, [&](std::size_t bi, std::size_t i, std::size_t j) { return c(bi, i, j); }, "bik,bkj (double)");
}

TEST(EinsumBlocking, IntoAccumulatesNothingFromTheOldOutput) {  // C = AB overwrites across KC blocks
  xt::random::seed(5);
  const xt::xtensor<float, 2> a = xt::random::randn<float>({M, K});
  const xt::xtensor<float, 2> b = xt::random::randn<float>({K, N});
  xt::xtensor<float, 2> c = xt::xtensor<float, 2>::from_shape({M, N});
  c.fill(1e30f);
  xshard::einsum_into<"ik,kj->ij">(c, a, b);
  const auto want = naive(
      1, M, N, K, [&](std::size_t, std::size_t i, std::size_t p) { return double(a(i, p)); },
      [&](std::size_t, std::size_t p, std::size_t j) { return double(b(p, j)); });
  expect_close(
      want, 1, M, N, K, [&](std::size_t, std::size_t i, std::size_t j) { return double(c(i, j)); },
      "einsum_into over a filled output");
}

TEST(EinsumBlocking, KeptOffsetTablesFollowShapesAndLayouts) {
  // Each thread keeps the offset tables of its last 8 contractions. Twelve
  // shapes in turn, twice (every table evicted and refilled), and the same
  // shape read through a transposed view (same extents, other strides: its
  // own tables), all against the naive loop.
  struct dims {
    std::size_t m, n, k;
  };
  std::vector<dims> cases;
  for (std::size_t i = 0; i < 12; ++i)
    cases.push_back({3 + 5 * i, 40 - 3 * i, 7 + 5 * i});  // K = 17: a 16-k block and a tail
  for (int round = 0; round < 2; ++round)
    for (const dims& d : cases) {
      xt::random::seed(static_cast<unsigned>(10 * round + d.m));
      const xt::xtensor<float, 2> a = xt::random::randn<float>({d.m, d.k});
      const xt::xtensor<float, 2> bt = xt::random::randn<float>({d.n, d.k});  // B transposed
      const xt::xtensor<float, 2> b = xt::transpose(bt);
      const xt::xtensor<float, 2> c1 = xshard::einsum<"ik,kj->ij">(a, b);
      const xt::xtensor<float, 2> c2 = xshard::einsum<"ik,kj->ij">(a, xt::transpose(bt));
      const auto want = naive(
          1, d.m, d.n, d.k, [&](std::size_t, std::size_t i, std::size_t p) { return double(a(i, p)); },
          [&](std::size_t, std::size_t p, std::size_t j) { return double(bt(j, p)); });
      const std::string what = "round " + std::to_string(round) + ", M = " + std::to_string(d.m);
      expect_close(
          want, 1, d.m, d.n, d.k, [&](std::size_t, std::size_t i, std::size_t j) { return double(c1(i, j)); }, what);
      expect_close(
          want, 1, d.m, d.n, d.k, [&](std::size_t, std::size_t i, std::size_t j) { return double(c2(i, j)); },
          what + ", B a transposed view");
    }
}

// einsum_bias: the bias added in the GEMM's epilogue (as the last K block
// stores C), across the tile edges (N = 45 ends in a partial panel, K = 800
// crosses KC twice, so only the last K block may add it), in the layouts the
// driver treats differently, against the naive loop plus the bias, and bit
// for bit equal to einsum then a separate + (the same order); and where
// the result's last dim is not the GEMM's N (a batch label, a single
// operand), the bias written first. Run under XSHARD_ISA=avx2 and generic
// too (isa.*).
TEST(EinsumBlocking, BiasInTheEpilogue) {
  xt::random::seed(7);
  const xt::xtensor<float, 2> x = xt::random::randn<float>({M, K});
  const xt::xtensor<float, 2> w = xt::random::randn<float>({N, K});  // a linear layer's weight [out, in]
  const xt::xtensor<float, 2> stack = xt::random::randn<float>({std::size_t{3}, N});
  const auto bias = xt::view(stack, 1, xt::all());  // a row of a parameter stack, read in place
  const auto want = naive(
      1, M, N, K, [&](std::size_t, std::size_t i, std::size_t p) { return double(x(i, p)); },
      [&](std::size_t, std::size_t p, std::size_t j) { return double(w(j, p)); });
  // The reference plus bias[j] in every row of every batch.
  auto plus_bias = [](std::vector<double> c, std::size_t n, auto bias_at) {
    for (std::size_t e = 0; e < c.size(); ++e) c[e] += double(bias_at(e % n));
    return c;
  };
  const auto c =
      same_for_thread_counts([&] { return xt::xtensor<float, 2>(xshard::einsum_bias<"...n,mn->...m">(bias, x, w)); });
  expect_close(
      plus_bias(want, N, [&](std::size_t j) { return bias(j); }), 1, M, N, K,
      [&](std::size_t, std::size_t i, std::size_t j) { return double(c(i, j)); }, "...n,mn->...m + bias");
  EXPECT_TRUE((c == xt::xtensor<float, 2>(xshard::einsum<"...n,mn->...m">(x, w) + bias)));
  // A training step's rows (64) and a B read in place (few rows).
  const xt::xtensor<float, 2> wt = xt::transpose(w);  // [in, out]: "...n,nm->...m" reads its rows in place
  for (std::size_t m : {std::size_t{64}, std::size_t{7}}) {
    const auto xm = xt::view(x, xt::range(0, static_cast<long>(m)), xt::all());
    const auto want_m =
        plus_bias(naive(
                      1, m, N, K, [&](std::size_t, std::size_t i, std::size_t p) { return double(x(i, p)); },
                      [&](std::size_t, std::size_t p, std::size_t j) { return double(w(j, p)); }),
                  N, [&](std::size_t j) { return bias(j); });
    const auto cm = same_for_thread_counts(
        [&] { return xt::xtensor<float, 2>(xshard::einsum_bias<"...n,mn->...m">(bias, xm, w)); });
    const auto cm_t = same_for_thread_counts(
        [&] { return xt::xtensor<float, 2>(xshard::einsum_bias<"...n,nm->...m">(bias, xm, wt)); });
    expect_close(
        want_m, 1, m, N, K, [&](std::size_t, std::size_t i, std::size_t j) { return double(cm(i, j)); },
        std::to_string(m) + " rows + bias");
    expect_close(
        want_m, 1, m, N, K, [&](std::size_t, std::size_t i, std::size_t j) { return double(cm_t(i, j)); },
        std::to_string(m) + " rows, B in place, + bias");
    EXPECT_TRUE((cm == xt::xtensor<float, 2>(xshard::einsum<"...n,mn->...m">(xm, w) + bias))) << m;
    EXPECT_TRUE((cm_t == xt::xtensor<float, 2>(xshard::einsum<"...n,nm->...m">(xm, wt) + bias))) << m;
  }
  // K = 0: the result is the bias in every row.
  const xt::xtensor<float, 2> x0 = xt::zeros<float>({std::size_t{5}, std::size_t{0}});
  const xt::xtensor<float, 2> w0 = xt::zeros<float>({N, std::size_t{0}});
  const auto c0 = xt::xtensor<float, 2>(xshard::einsum_bias<"...n,mn->...m">(bias, x0, w0));
  for (std::size_t i = 0; i < 5; ++i)
    for (std::size_t j = 0; j < N; ++j) EXPECT_EQ(c0(i, j), bias(j)) << i << "," << j;
  // Batched, double, the result's last dim a GEMM N of a batch of products.
  const xt::xtensor<double, 3> a3 = xt::random::randn<double>({2, 29, 50});
  const xt::xtensor<double, 3> b3 = xt::random::randn<double>({2, 50, 37});
  const xt::xtensor<double, 1> bias3 = xt::random::randn<double>({37});
  const auto c3 = xshard::einsum_bias<"bik,bkj->bij">(bias3, a3, b3);
  const auto want3 = naive(
      2, 29, 37, 50, [&](std::size_t bi, std::size_t i, std::size_t p) { return a3(bi, i, p); },
      [&](std::size_t bi, std::size_t p, std::size_t j) { return b3(bi, p, j); });
  expect_close(
      plus_bias(want3, 37, [&](std::size_t j) { return bias3(j); }), 2, 29, 37, 50,
      [&](std::size_t bi, std::size_t i, std::size_t j) { return c3(bi, i, j); }, "bik,bkj->bij + bias (double)");
}

TEST(EinsumBlocking, BiasWhereTheLastDimIsNotN) {
  xt::random::seed(8);
  // The last label is in both operands (a batch label of the GEMM).
  const xt::xtensor<float, 2> a = xt::random::randn<float>({20, 33});
  const xt::xtensor<float, 2> b = xt::random::randn<float>({33, 20});
  const xt::xtensor<float, 1> bias = xt::random::randn<float>({20});
  const xt::xtensor<float, 1> c = xshard::einsum_bias<"ik,ki->i">(bias, a, b);
  for (std::size_t i = 0; i < 20; ++i) {
    double want = bias(i);
    for (std::size_t k = 0; k < 33; ++k) want += double(a(i, k)) * double(b(k, i));
    EXPECT_NEAR(c(i), want, 1e-4 * (1 + std::abs(want))) << i;
  }
  // One operand (a reduction): the column sums plus the bias.
  const xt::xtensor<float, 1> bias33 = xt::random::randn<float>({33});
  const xt::xtensor<float, 1> s = xshard::einsum_bias<"ij->j">(bias33, a);
  for (std::size_t j = 0; j < 33; ++j) {
    double want = bias33(j);
    for (std::size_t i = 0; i < 20; ++i) want += double(a(i, j));
    EXPECT_NEAR(s(j), want, 1e-4 * (1 + std::abs(want))) << j;
  }
  // A transposed result: the last label is the GEMM's M.
  const xt::xtensor<float, 2> x = xt::random::randn<float>({17, 40});
  const xt::xtensor<float, 2> w = xt::random::randn<float>({23, 40});
  const xt::xtensor<float, 1> bias17 = xt::random::randn<float>({17});
  const xt::xtensor<float, 2> t = xshard::einsum_bias<"bn,mn->mb">(bias17, x, w);
  for (std::size_t m = 0; m < 23; ++m)
    for (std::size_t bi = 0; bi < 17; ++bi) {
      double want = bias17(bi);
      for (std::size_t k = 0; k < 40; ++k) want += double(x(bi, k)) * double(w(m, k));
      EXPECT_NEAR(t(m, bi), want, 1e-4 * (1 + std::abs(want))) << m << "," << bi;
    }
}

TEST(EinsumBlocking, BiasOfTheWrongLengthNamesBothShapes) {
  const xt::xtensor<float, 2> x = xt::ones<float>({4, 3});
  const xt::xtensor<float, 2> w = xt::ones<float>({6, 3});
  const xt::xtensor<float, 1> bias = xt::ones<float>({5});
  try {
    (void)xshard::einsum_bias<"...n,mn->...m">(bias, x, w);
    ADD_FAILURE() << "no error";
  } catch (const xshard::error& e) {
    EXPECT_NE(std::string(e.what()).find("a bias of shape [5] for a result of shape [4,6]"), std::string::npos)
        << e.what();
  }
}

}  // namespace
