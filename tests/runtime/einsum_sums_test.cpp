// The sums of einsum/sums.hpp (einsum's reductions, the typed path's
// contiguous sums, the thread mesh's all-reduce): every vector kernel the CPU
// has against a scalar loop written from the order the header documents (two
// accumulators of L lanes over blocks of 2 L, their lanes in order, then the
// rest in order), bit for bit, for floats and doubles at lengths that hit
// each part; the dispatched functions at the width XSHARD_ISA leaves (CTest
// also runs this file as isa.avx2.* and isa.generic.*); and einsum's
// reduction path going through them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>
#include <xshard/xshard.hpp>
#include <xtensor/xarray.hpp>

namespace {

/// Values of mixed signs and magnitudes, so that the order of the adds
/// changes the rounding.
template <class T>
std::vector<T> values(std::size_t n, unsigned seed) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto k = static_cast<double>((i * 7919 + seed * 104729) % 1009);
    v[i] = static_cast<T>((k - 504.0) * 0.37 + 1.0 / (static_cast<double>(i % 97) + 1.0) * 1e3);
  }
  return v;
}

/// The documented order at width L, as scalar code.
template <class T>
T reference_sum(const T* a, std::size_t n, std::size_t lanes) {
  T s = T(0);
  std::size_t k = 0;
  if (n >= 2 * lanes) {
    std::vector<T> acc0(lanes, T(0)), acc1(lanes, T(0));
    for (; k + 2 * lanes <= n; k += 2 * lanes)
      for (std::size_t l = 0; l < lanes; ++l) {
        acc0[l] += a[k + l];
        acc1[l] += a[k + lanes + l];
      }
    for (std::size_t l = 0; l < lanes; ++l) s += acc0[l] + acc1[l];
  }
  for (; k < n; ++k) s += a[k];
  return s;
}

/// The lanes of one vector at the ISA the dispatched functions use now.
template <class T>
std::size_t active_lanes() {
  switch (xshard::active_isa()) {
    case xshard::simd_isa::avx512:
      return 64 / sizeof(T);
    case xshard::simd_isa::avx2:
      return 32 / sizeof(T);
    case xshard::simd_isa::generic:
      break;
  }
  return xsimd::batch<T>::size;
}

const std::vector<std::size_t> lengths = {0, 1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 1003};

template <class T>
struct kernel_set {
  const char* name;
  std::size_t lanes;
  T (*sum_run)(const T*, std::size_t);
  void (*add_elements)(T*, const T*, const T*, std::size_t);
};

template <class T>
std::vector<kernel_set<T>> kernels() {
  std::vector<kernel_set<T>> k;
#if XSHARD_X86_KERNELS
  namespace x86 = xshard::detail::x86;
  const xshard::simd_isa cpu = xshard::detail::cpu_isa();
  if (cpu == xshard::simd_isa::avx512)
    k.push_back({"avx512", 64 / sizeof(T), static_cast<T (*)(const T*, std::size_t)>(&x86::avx512::sum_run),
                 static_cast<void (*)(T*, const T*, const T*, std::size_t)>(&x86::avx512::add_elements)});
  if (cpu != xshard::simd_isa::generic)
    k.push_back({"avx2", 32 / sizeof(T), static_cast<T (*)(const T*, std::size_t)>(&x86::avx2::sum_run),
                 static_cast<void (*)(T*, const T*, const T*, std::size_t)>(&x86::avx2::add_elements)});
#endif
  return k;
}

template <class T>
void check_kernels() {
  const std::vector<kernel_set<T>> ks = kernels<T>();
  if (ks.empty()) GTEST_SKIP() << "no x86 kernels on this CPU or build";
  const std::vector<T> a = values<T>(1003, 1), b = values<T>(1003, 2);
  for (const kernel_set<T>& k : ks)
    for (std::size_t n : lengths) {
      SCOPED_TRACE(std::string(k.name) + " n " + std::to_string(n));
      EXPECT_EQ(k.sum_run(a.data(), n), reference_sum(a.data(), n, k.lanes));
      std::vector<T> want(n), got(n, T(-1));
      for (std::size_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
      k.add_elements(got.data(), a.data(), b.data(), n);
      EXPECT_EQ(got, want);
      std::vector<T> in_place(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n));
      k.add_elements(in_place.data(), in_place.data(), b.data(), n);  // out is the first input
      EXPECT_EQ(in_place, want);
      in_place.assign(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
      k.add_elements(in_place.data(), a.data(), in_place.data(), n);  // out is the second input
      EXPECT_EQ(in_place, want);
    }
}

TEST(EinsumSums, KernelsFollowTheDocumentedOrderFloat) { check_kernels<float>(); }
TEST(EinsumSums, KernelsFollowTheDocumentedOrderDouble) { check_kernels<double>(); }

// The reference is a sum: within rounding of the sum in long double.
TEST(EinsumSums, ReferenceIsTheSum) {
  const std::vector<float> a = values<float>(1003, 3);
  long double exact = 0;
  double magnitude = 0;
  for (float x : a) {
    exact += x;
    magnitude += std::abs(static_cast<double>(x));
  }
  for (std::size_t lanes : {4, 8, 16})
    EXPECT_NEAR(static_cast<double>(reference_sum(a.data(), a.size(), lanes)), static_cast<double>(exact),
                magnitude * 1003 * 6e-8);
}

template <class T>
void check_dispatch() {
  const std::size_t lanes = active_lanes<T>();
  const std::vector<T> a = values<T>(1003, 4), b = values<T>(1003, 5);
  for (std::size_t n : lengths) {
    SCOPED_TRACE("isa " + std::string(xshard::to_string(xshard::active_isa())) + " n " + std::to_string(n));
    EXPECT_EQ(xshard::detail::sum_run(a.data(), n), reference_sum(a.data(), n, lanes));
    std::vector<T> want(n), got(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
    xshard::detail::add_elements(got.data(), a.data(), b.data(), n);
    EXPECT_EQ(got, want);
  }
}

TEST(EinsumSums, DispatchedAtTheActiveWidthFloat) { check_dispatch<float>(); }
TEST(EinsumSums, DispatchedAtTheActiveWidthDouble) { check_dispatch<double>(); }

// einsum's reduction path: a row sum over a contiguous run is sum_run at the
// active width; a column sum is in row order, one add per element.
template <class T>
void check_einsum_reductions() {
  const std::size_t rows = 5, cols = 100, lanes = active_lanes<T>();
  const std::vector<T> v = values<T>(rows * cols, 6);
  xt::xarray<T> a = xt::zeros<T>({rows, cols});
  std::copy(v.begin(), v.end(), a.begin());
  const xt::xarray<T> by_row = xshard::einsum("ij->i", a);
  for (std::size_t i = 0; i < rows; ++i) {
    SCOPED_TRACE("row " + std::to_string(i));
    EXPECT_EQ(by_row(i), reference_sum(v.data() + i * cols, cols, lanes));
  }
  const xt::xarray<T> by_col = xshard::einsum("ij->j", a);
  for (std::size_t j = 0; j < cols; ++j) {
    T want = T(0);
    for (std::size_t i = 0; i < rows; ++i) want += v[i * cols + j];
    EXPECT_EQ(by_col(j), want) << "column " << j;
  }
}

TEST(EinsumSums, EinsumReductionsUseThemFloat) { check_einsum_reductions<float>(); }
TEST(EinsumSums, EinsumReductionsUseThemDouble) { check_einsum_reductions<double>(); }

}  // namespace
