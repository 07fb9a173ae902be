// Composite ops (xshard.gelu, softmax, layer_norm, rms_norm and their
// backwards): the fused kernel against the decomposition, both against
// hand-checked values (rms_norm: a double-precision loop) and finite
// differences, and the policy and registry that choose between them.
//
// Tolerance, kernel vs decomposition. Both evaluate the same formula, but
// xsimd's erf/tanh/exp and glibc's round differently (a few ulp), and
// reductions add in a different order. Elementwise ops:
//   |kernel - decomposition| <= tol * (|decomposition| + |operand|)
// with tol = 1e-6 (float, ~8 ulp) and 1e-13 (double), and operand = x for
// gelu, grad for gelu_backward. A plain relative bound cannot hold: where the
// formula cancels (1 + erf(x/sqrt 2) for x << 0, 1 - tanh^2 for large |x|)
// both sides carry the same absolute rounding, one ulp of the operand, on a
// result far smaller than it. Row reductions (softmax, layer_norm, rms_norm):
//   |kernel - decomposition| <= tol_row * (|decomposition| + row scale)
// with tol_row = 1e-5 (float) and 1e-12 (double): a sum of n terms rounds at
// up to ~n eps / 2 in the worst case, and rows here reach 1003 elements.
// NaN must meet NaN; infinities must be equal. Results below the smallest
// normal number may differ by that much: xsimd's exp flushes subnormal
// results to zero where glibc returns them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>
#include <xshard/ops/composite.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xmanipulation.hpp>  // xt::transpose
#include <xtensor/xview.hpp>

#include "../support/expect_error.hpp"

namespace {

using xshard::composite_mode;
using xshard::gelu_approximate;

template <class T>
constexpr T elementwise_tol = std::is_same_v<T, float> ? T(1e-6) : T(1e-13);
template <class T>
constexpr T row_tol = std::is_same_v<T, float> ? T(1e-5) : T(1e-12);

template <class T, class S>
xt::xtensor<T, std::tuple_size_v<S>> random_tensor(const S& shape, double scale, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, scale);
  auto t = xt::xtensor<T, std::tuple_size_v<S>>::from_shape(shape);
  for (auto& v : t) v = static_cast<T>(nd(rng));
  return t;
}

/// Checks |k - d| <= tol * (|d| + scale_i) element by element.
template <class K, class D, class Scale>
void expect_close(const K& k, const D& d, double tol, Scale scale, const std::string& what) {
  ASSERT_EQ(k.size(), d.size()) << what;
  ASSERT_TRUE(std::equal(k.shape().begin(), k.shape().end(), d.shape().begin())) << what;
  int failures = 0;
  for (std::size_t i = 0; i < k.size() && failures < 5; ++i) {
    const double kv = k.data()[i], dv = d.data()[i];
    if (std::isnan(dv) || std::isinf(dv)) {
      if (std::isnan(dv) ? !std::isnan(kv) : kv != dv) {
        ADD_FAILURE() << what << " at " << i << ": kernel " << kv << ", decomposition " << dv;
        ++failures;
      }
      continue;
    }
    using value_type = typename K::value_type;
    const double bound = tol * (std::abs(dv) + scale(i)) + double(std::numeric_limits<value_type>::min());
    if (!(std::abs(kv - dv) <= bound)) {
      ADD_FAILURE() << what << " at " << i << ": kernel " << kv << ", decomposition " << dv << ", bound " << bound;
      ++failures;
    }
  }
}

const std::vector<std::size_t> odd_sizes{0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 1000, 1003};
const std::vector<double> magnitudes{1e-3, 1.0, 4.0, 30.0, 1e3};

template <class T>
class CompositeTyped : public ::testing::Test {};
using real_types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CompositeTyped, real_types);

// ---- gelu -------------------------------------------------------------------

TEST(CompositeGelu, HandCheckedValues) {
  // erf form: x/2 (1 + erf(x / sqrt 2)); tanh form: x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))).
  const xt::xtensor<double, 1> x{1.0, -1.0, 0.0, 2.0};
  const xt::xtensor<double, 1> none{0.8413447460685429, -0.15865525393145707, 0.0, 1.9544997361036416};
  const xt::xtensor<double, 1> tanh{0.8411919906082768, -0.15880800939172324, 0.0, 1.954597694087775};
  for (composite_mode m : {composite_mode::kernel, composite_mode::decompose}) {
    const auto yn = xshard::gelu(x, gelu_approximate::none, m);
    const auto yt = xshard::gelu(x, gelu_approximate::tanh, m);
    const xt::xtensor<float, 1> xf = xt::cast<float>(x);
    const auto yf = xshard::gelu(xf, gelu_approximate::none, m);
    for (std::size_t i = 0; i < x.size(); ++i) {
      EXPECT_NEAR(yn(i), none(i), 1e-15) << xshard::to_string(m) << " x=" << x(i);
      EXPECT_NEAR(yt(i), tanh(i), 1e-15) << xshard::to_string(m) << " x=" << x(i);
      EXPECT_NEAR(yf(i), none(i), 2e-7) << xshard::to_string(m) << " x=" << x(i);
    }
  }
  // The attribute as torch spells it.
  EXPECT_NEAR(xshard::gelu(x, "tanh")(0), 0.8411919906082768, 1e-15);
  EXPECT_NEAR(xshard::gelu(x, "none")(0), 0.8413447460685429, 1e-15);
}

TEST(CompositeGelu, UnknownApproximateIsAnErrorNamingIt) {
  const xt::xtensor<float, 1> x{1.0f};
  EXPECT_XSHARD_ERROR((void)xshard::gelu(x, "erf"), "'erf'");
}

TYPED_TEST(CompositeTyped, GeluKernelMatchesDecomposition) {
  using T = TypeParam;
  unsigned seed = 1;
  for (gelu_approximate a : {gelu_approximate::none, gelu_approximate::tanh})
    for (double mag : magnitudes)
      for (std::size_t n : odd_sizes) {
        const auto x = random_tensor<T>(std::array<std::size_t, 1>{n}, mag, seed++);
        const auto g = random_tensor<T>(std::array<std::size_t, 1>{n}, 1.0, seed++);
        const std::string what =
            std::string(xshard::to_string(a)) + " n=" + std::to_string(n) + " magnitude=" + std::to_string(mag);
        expect_close(
            xshard::gelu(x, a, composite_mode::kernel), xshard::gelu(x, a, composite_mode::decompose),
            elementwise_tol<T>, [&](std::size_t i) { return std::abs(double(x(i))); }, "gelu " + what);
        expect_close(
            xshard::gelu_backward(g, x, a, composite_mode::kernel),
            xshard::gelu_backward(g, x, a, composite_mode::decompose), elementwise_tol<T>,
            [&](std::size_t i) { return std::abs(double(g(i))); }, "gelu_backward " + what);
        // From the forward's output (the kernel's, as a graph's backward holds it).
        expect_close(
            xshard::gelu_backward_from_output(g, x, xshard::gelu(x, a, composite_mode::kernel), a),
            xshard::gelu_backward(g, x, a, composite_mode::decompose), elementwise_tol<T>,
            [&](std::size_t i) { return std::abs(double(g(i))); }, "gelu_backward_from_output " + what);
      }
}

TYPED_TEST(CompositeTyped, GeluNonFiniteValues) {
  using T = TypeParam;
  constexpr T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  // Nine values: the tenth lane of a batch is a tail in every width.
  const xt::xtensor<T, 1> x{nan, inf, -inf, T(0), T(1), nan, T(-1), inf, T(2)};
  const xt::xtensor<T, 1> g = xt::ones<T>({9});
  for (gelu_approximate a : {gelu_approximate::none, gelu_approximate::tanh}) {
    const auto k = xshard::gelu(x, a, composite_mode::kernel);
    const auto d = xshard::gelu(x, a, composite_mode::decompose);
    for (const auto* y : {&k, &d}) {
      EXPECT_TRUE(std::isnan((*y)(0)));
      EXPECT_EQ((*y)(1), inf);
      EXPECT_TRUE(std::isnan((*y)(2)));  // -inf * (1 + -1), as the formula (and torch's) gives
      EXPECT_TRUE(std::isnan((*y)(5)));
      EXPECT_EQ((*y)(7), inf);
    }
    expect_close(
        k, d, elementwise_tol<T>, [&](std::size_t i) { return std::abs(double(x(i))); }, "gelu non-finite");
    expect_close(
        xshard::gelu_backward(g, x, a, composite_mode::kernel),
        xshard::gelu_backward(g, x, a, composite_mode::decompose), elementwise_tol<T>, [](std::size_t) { return 1.0; },
        "gelu_backward non-finite");
    EXPECT_TRUE(std::isnan(xshard::gelu_backward(g, x, a, composite_mode::kernel)(0)));
    const auto o = xshard::gelu_backward_from_output(g, x, k, a);
    expect_close(
        o, xshard::gelu_backward(g, x, a, composite_mode::decompose), elementwise_tol<T>,
        [](std::size_t) { return 1.0; }, "gelu_backward_from_output non-finite");
    EXPECT_EQ(o(3), T(0.5));  // x = 0: y / x would be 0 / 0
  }
}

// The run-time dispatched x86 kernels (ops/arch/x86.hpp), each one
// the CPU has, against the decomposition: sizes around every vector width,
// every magnitude, and the non-finite values; AVX2 and AVX-512 agree.
/// n floats of the given magnitude for the x86 gelu kernels' tests, with
/// non-finite lanes inside a vector and in the tail when n >= 9.
xt::xtensor<float, 1> gelu_test_input(std::size_t n, double mag, unsigned seed) {
  auto x = random_tensor<float>(std::array<std::size_t, 1>{n}, mag, seed);
  if (n >= 9) {
    x(1) = std::numeric_limits<float>::infinity();
    x(2) = -std::numeric_limits<float>::infinity();
    x(n - 2) = std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}

TEST(CompositeGelu, EveryX86KernelTheCpuRunsMatchesTheDecomposition) {
#if XSHARD_X86_KERNELS
  const xshard::simd_isa cpu = xshard::detail::cpu_isa();
  unsigned seed = 100;
  for (double mag : magnitudes)
    for (std::size_t n : odd_sizes) {
      const auto x = gelu_test_input(n, mag, seed++);
      const auto g = random_tensor<float>(std::array<std::size_t, 1>{n}, 1.0, seed++);
      const auto want = xshard::gelu(x, gelu_approximate::none, composite_mode::decompose);
      const auto dwant = xshard::gelu_backward(g, x, gelu_approximate::none, composite_mode::decompose);
      const std::string what = "n=" + std::to_string(n) + " magnitude=" + std::to_string(mag);
      xt::xtensor<float, 1> y512 = xt::zeros<float>({n}), d512 = xt::zeros<float>({n});
      xt::xtensor<float, 1> o512 = xt::zeros<float>({n});  // gelu_backward_from_output
      if (cpu == xshard::simd_isa::avx512) {
        xshard::detail::x86::avx512::gelu(x.data(), y512.data(), n);
        xshard::detail::x86::avx512::gelu_backward(g.data(), x.data(), d512.data(), n);
        xshard::detail::x86::avx512::gelu_backward_from_output(g.data(), x.data(), want.data(), o512.data(), n);
        expect_close(
            o512, dwant, elementwise_tol<float>, [&](std::size_t i) { return std::abs(double(g(i))); },
            "avx512 gelu_backward_from_output " + what);
        expect_close(
            y512, want, elementwise_tol<float>, [&](std::size_t i) { return std::abs(double(x(i))); },
            "avx512 gelu " + what);
        expect_close(
            d512, dwant, elementwise_tol<float>, [&](std::size_t i) { return std::abs(double(g(i))); },
            "avx512 gelu_backward " + what);
      }
      if (cpu != xshard::simd_isa::generic) {
        xt::xtensor<float, 1> y = xt::zeros<float>({n}), d = xt::zeros<float>({n}), o = xt::zeros<float>({n});
        xshard::detail::x86::avx2::gelu(x.data(), y.data(), n);
        xshard::detail::x86::avx2::gelu_backward(g.data(), x.data(), d.data(), n);
        xshard::detail::x86::avx2::gelu_backward_from_output(g.data(), x.data(), want.data(), o.data(), n);
        expect_close(
            o, dwant, elementwise_tol<float>, [&](std::size_t i) { return std::abs(double(g(i))); },
            "avx2 gelu_backward_from_output " + what);
        expect_close(
            y, want, elementwise_tol<float>, [&](std::size_t i) { return std::abs(double(x(i))); },
            "avx2 gelu " + what);
        expect_close(
            d, dwant, elementwise_tol<float>, [&](std::size_t i) { return std::abs(double(g(i))); },
            "avx2 gelu_backward " + what);
        if (cpu == xshard::simd_isa::avx512) {  // one algorithm: the same bits
          for (std::size_t i = 0; i < n; ++i) {
            if (!std::isnan(y(i))) {
              EXPECT_EQ(y(i), y512(i)) << what << " at " << i;
            }
            if (!std::isnan(d(i))) {
              EXPECT_EQ(d(i), d512(i)) << what << " at " << i;
            }
            if (!std::isnan(o(i))) {
              EXPECT_EQ(o(i), o512(i)) << what << " at " << i;
            }
          }
        }
      }
    }
#else
  GTEST_SKIP() << "no x86-64 kernels in this build";
#endif
}

// The graph's bias adds (graph/ops.hpp: a row op a vector) on each x86 row
// kernel the CPU can run: +, -, *, / are correctly rounded per element, so
// the kernels give the scalar loop's bits, tails and non-finite lanes included.
TEST(CompositeBiasRows, EveryX86KernelTheCpuRunsGivesTheScalarBits) {
#if XSHARD_X86_KERNELS
  const xshard::simd_isa cpu = xshard::detail::cpu_isa();
  if (cpu == xshard::simd_isa::generic) GTEST_SKIP() << "the CPU has neither AVX2 nor AVX-512";
  unsigned seed = 1200;
  for (std::size_t n : odd_sizes) {
    auto x = random_tensor<float>(std::array<std::size_t, 1>{n}, 3.0, seed++);
    auto b = random_tensor<float>(std::array<std::size_t, 1>{n}, 2.0, seed++);
    if (n >= 3) {
      x(0) = std::numeric_limits<float>::infinity();
      b(n - 1) = 0.0f;  // x / 0 in the tail
      x(n / 2) = std::numeric_limits<float>::quiet_NaN();
    }
    for (int op = 0; op < 4; ++op) {
      std::vector<float> want(n);
      for (std::size_t j = 0; j < n; ++j)
        want[j] = op == 0 ? x(j) + b(j) : op == 1 ? x(j) - b(j) : op == 2 ? x(j) * b(j) : x(j) / b(j);
      for (xshard::simd_isa isa : {xshard::simd_isa::avx2, xshard::simd_isa::avx512}) {
        if (static_cast<int>(isa) > static_cast<int>(cpu)) continue;
        std::vector<float> got(n + 1, -7.0f);  // one past the row: must stay untouched
        if (isa == xshard::simd_isa::avx512)
          xshard::detail::x86::avx512::binary_row(op, x.data(), b.data(), got.data(), n);
        else
          xshard::detail::x86::avx2::binary_row(op, x.data(), b.data(), got.data(), n);
        for (std::size_t j = 0; j < n; ++j)
          EXPECT_TRUE(std::memcmp(&got[j], &want[j], sizeof(float)) == 0 || (std::isnan(got[j]) && std::isnan(want[j])))
              << "op " << op << " isa " << static_cast<int>(isa) << " n=" << n << " at " << j << ": " << got[j]
              << " vs " << want[j];
        EXPECT_EQ(got[n], -7.0f) << "op " << op << " n=" << n << ": wrote past the row";
      }
    }
  }
#else
  GTEST_SKIP() << "no x86-64 kernels in this build";
#endif
}

// XSHARD_ISA caps the CPU's instruction set; a word it does not know is an
// error naming it.
TEST(CompositeIsa, EnvironmentVariableCapsTheCpusInstructionSet) {
  using xshard::simd_isa;
  using xshard::detail::capped_isa;
  EXPECT_EQ(capped_isa(simd_isa::avx512, nullptr), simd_isa::avx512);
  EXPECT_EQ(capped_isa(simd_isa::avx512, "avx2"), simd_isa::avx2);
  EXPECT_EQ(capped_isa(simd_isa::avx512, "generic"), simd_isa::generic);
  EXPECT_EQ(capped_isa(simd_isa::avx2, "avx512"), simd_isa::avx2);  // not more than the CPU has
  EXPECT_EQ(capped_isa(simd_isa::generic, "avx2"), simd_isa::generic);
  EXPECT_EQ(xshard_test::error_of([] { (void)capped_isa(simd_isa::avx2, "sse9"); }),
            "xshard: XSHARD_ISA='sse9' is not one of avx512, avx2, generic");
  EXPECT_EQ(xshard::active_isa(), capped_isa(xshard::detail::cpu_isa(), std::getenv("XSHARD_ISA")));
}

// Float erf (ops/erf_float.hpp), the rational function every gelu kernel
// evaluates: against erf in double over every 1021st float in [0, 4.5] (and
// the negatives, which must be the exact mirror), within the 3.9e-7 the
// header states; each x86 kernel the CPU runs gives the bits of the same
// order evaluated with std::fma one float at a time; +-inf gives +-1, NaN
// stays NaN.
float erf_float_reference(float u) {
  using E = xshard::detail::erf_float;
  // The vector max and min: the second operand when either is NaN.
  const auto max = [](float a, float b) { return a > b ? a : b; };
  const auto min = [](float a, float b) { return a < b ? a : b; };
  const float x = min(E::clamp, max(-E::clamp, u));
  const float s = x * x;
  float p = std::fma(E::p6, s, E::p5);
  for (float c : {E::p4, E::p3, E::p2, E::p1, E::p0}) p = std::fma(p, s, c);
  float q = std::fma(E::q4, s, E::q3);
  for (float c : {E::q2, E::q1, 1.0f}) q = std::fma(q, s, c);
  return max(-1.0f, min(1.0f, (x * p) / q));
}

TEST(CompositeGelu, FloatErfIsWithinItsBoundAndEveryKernelRoundsAlike) {
  std::vector<float> u;
  const std::uint32_t last = 0x40900000u;  // 4.5f
  for (std::uint32_t bits = 0; bits <= last; bits += 1021) {
    float v;
    std::memcpy(&v, &bits, sizeof v);
    u.push_back(v);
    u.push_back(-v);
  }
  const std::size_t swept = u.size();
  for (float v : {4.0f, 3.9f, 1e-30f, 1e-44f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    u.push_back(v);
  const std::size_t n = u.size();
  std::vector<float> want(n);
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i) {
    want[i] = erf_float_reference(u[i]);
    if (std::isfinite(u[i])) worst = std::max(worst, std::abs(double(want[i]) - std::erf(double(u[i]))));
  }
  EXPECT_LE(worst, 3.9e-7);
  for (std::size_t i = 0; i < swept; i += 2) ASSERT_EQ(want[i + 1], -want[i]) << "erf(-u) at u = " << u[i];
  EXPECT_EQ(want[n - 3], 1.0f);
  EXPECT_EQ(want[n - 2], -1.0f);
  EXPECT_TRUE(std::isnan(want[n - 1]));
  const auto same_bits = [&](const std::vector<float>& got, const std::string& what) {
    int failures = 0;
    for (std::size_t i = 0; i < n && failures < 5; ++i)
      if (!(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])))) {
        ADD_FAILURE() << what << " erf(" << u[i] << ") = " << got[i] << ", the order evaluated gives " << want[i];
        ++failures;
      }
  };
#if XSHARD_X86_KERNELS
  const xshard::simd_isa cpu = xshard::detail::cpu_isa();
  std::vector<float> got(n);
  if (cpu == xshard::simd_isa::avx512) {
    xshard::detail::x86::avx512::erf(u.data(), got.data(), n);
    same_bits(got, "avx512");
  }
  if (cpu != xshard::simd_isa::generic) {
    xshard::detail::x86::avx2::erf(u.data(), got.data(), n);
    same_bits(got, "avx2");
  }
#endif
  // The portable kernel (xsimd on the compiled architecture; without FMA
  // instructions its multiply-adds round twice): within the same bound.
  using B = xshard::detail::batch_t<float>;
  std::vector<float> portable(n);
  std::size_t i = 0;
  for (; i + B::size <= n; i += B::size)
    xshard::detail::erf_batch<float>(B::load_unaligned(u.data() + i)).store_unaligned(portable.data() + i);
  for (; i < n; ++i) portable[i] = xshard::detail::erf_batch<float>(B(u[i])).get(0);
  double portable_worst = 0;
  for (std::size_t k = 0; k < n; ++k)
    if (std::isfinite(u[k]))
      portable_worst = std::max(portable_worst, std::abs(double(portable[k]) - std::erf(double(u[k]))));
  EXPECT_LE(portable_worst, 3.9e-7);
  EXPECT_EQ(portable[n - 3], 1.0f);
  EXPECT_TRUE(std::isnan(portable[n - 1]));
}

// The x86 kernels' tanh (gelu's tanh form): xsimd 8.1's float tanh. Against
// tanh in double, this sweep's worst relative error is 1.38e-7 (about one
// ulp) for the kernels and for xsimd::tanh alike; the bound is 2e-7. The
// AVX-512 and AVX2 kernels evaluate it in one order, so their bits agree.
TEST(CompositeGelu, FloatTanhIsWithinItsBoundAndEveryKernelRoundsAlike) {
#if XSHARD_X86_KERNELS
  const xshard::simd_isa cpu = xshard::detail::cpu_isa();
  if (cpu == xshard::simd_isa::generic) GTEST_SKIP() << "the CPU has neither AVX2 nor AVX-512";
  std::vector<float> u;
  for (std::uint32_t bits = 0; bits <= 0x41300000u; bits += 997) {  // 0 .. 11
    float v;
    std::memcpy(&v, &bits, sizeof v);
    u.push_back(v);
    u.push_back(-v);
  }
  const std::size_t swept = u.size();
  for (float v : {0.625f, 0.62499994f, 44.0f, 45.0f, 1e30f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    u.push_back(v);
  const std::size_t n = u.size();
  std::vector<float> y2(n), y512(n);
  xshard::detail::x86::avx2::tanh(u.data(), y2.data(), n);
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(u[i])) continue;
    const double t = std::tanh(double(u[i]));
    worst = std::max(worst, std::abs(double(y2[i]) - t) / std::max(std::abs(t), 1e-30));
  }
  EXPECT_LE(worst, 2e-7);
  for (std::size_t i = 0; i < swept; i += 2) {
    if (u[i] != 0) {
      ASSERT_EQ(y2[i + 1], -y2[i]) << "tanh(-u) at u = " << u[i];
    }
  }
  EXPECT_EQ(y2[n - 4], 1.0f);  // 1e30: exp's argument capped, no overflow
  EXPECT_EQ(y2[n - 3], 1.0f);
  EXPECT_EQ(y2[n - 2], -1.0f);
  EXPECT_TRUE(std::isnan(y2[n - 1]));
  if (cpu == xshard::simd_isa::avx512) {
    xshard::detail::x86::avx512::tanh(u.data(), y512.data(), n);
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_TRUE(y512[i] == y2[i] || (std::isnan(y512[i]) && std::isnan(y2[i]))) << "tanh(" << u[i] << ")";
  }
  // The portable kernel's xsimd::tanh (its multiply-adds round twice
  // without FMA instructions): within the same bound.
  using B = xshard::detail::batch_t<float>;
  for (std::size_t i = 0; i + B::size <= swept; i += B::size) {
    const B p = xsimd::tanh(B::load_unaligned(u.data() + i));
    for (std::size_t l = 0; l < B::size; ++l) {
      const double t = std::tanh(double(u[i + l]));
      ASSERT_LE(std::abs(double(p.get(l)) - t), 2e-7 * std::max(std::abs(t), 1e-30))
          << "xsimd tanh(" << u[i + l] << ")";
    }
  }
#else
  GTEST_SKIP() << "no x86-64 kernels in this build";
#endif
}

TEST(CompositeGelu, EveryX86KernelTheCpuRunsMatchesTheDecompositionTanhForm) {
#if XSHARD_X86_KERNELS
  const xshard::simd_isa cpu = xshard::detail::cpu_isa();
  if (cpu == xshard::simd_isa::generic) GTEST_SKIP() << "the CPU has neither AVX2 nor AVX-512";
  unsigned seed = 700;
  for (double mag : magnitudes)
    for (std::size_t n : odd_sizes) {
      const auto x = gelu_test_input(n, mag, seed++);
      const auto g = random_tensor<float>(std::array<std::size_t, 1>{n}, 1.0, seed++);
      const auto want = xshard::gelu(x, gelu_approximate::tanh, composite_mode::decompose);
      const auto dwant = xshard::gelu_backward(g, x, gelu_approximate::tanh, composite_mode::decompose);
      const std::string what = "n=" + std::to_string(n) + " magnitude=" + std::to_string(mag);
      xt::xtensor<float, 1> y2 = xt::zeros<float>({n}), d2 = xt::zeros<float>({n});
      xshard::detail::x86::avx2::gelu_tanh(x.data(), y2.data(), n);
      xshard::detail::x86::avx2::gelu_tanh_backward(g.data(), x.data(), d2.data(), n);
      // The derivative's 1 - t^2 cancels where |x| is large: one ulp of t
      // there is the absolute error, on the scale of g and of x's slope.
      const auto dscale = [&](std::size_t i) {
        const double v = std::abs(double(x(i)));
        return std::abs(double(g(i))) * (1 + v * (0.8 + 0.11 * v * v));
      };
      expect_close(
          y2, want, elementwise_tol<float>, [&](std::size_t i) { return std::abs(double(x(i))); },
          "avx2 gelu tanh " + what);
      expect_close(d2, dwant, elementwise_tol<float>, dscale, "avx2 gelu_backward tanh " + what);
      if (cpu == xshard::simd_isa::avx512) {
        xt::xtensor<float, 1> y512 = xt::zeros<float>({n}), d512 = xt::zeros<float>({n});
        xshard::detail::x86::avx512::gelu_tanh(x.data(), y512.data(), n);
        xshard::detail::x86::avx512::gelu_tanh_backward(g.data(), x.data(), d512.data(), n);
        for (std::size_t i = 0; i < n; ++i) {  // one algorithm: the same bits
          if (!std::isnan(y2(i))) {
            EXPECT_EQ(y2(i), y512(i)) << what << " at " << i;
          }
          if (!std::isnan(d2(i))) {
            EXPECT_EQ(d2(i), d512(i)) << what << " at " << i;
          }
        }
      }
      // The public entries run the active ISA's kernel.
      const auto y = xshard::gelu(x, gelu_approximate::tanh, composite_mode::kernel);
      const auto d = xshard::gelu_backward(g, x, gelu_approximate::tanh, composite_mode::kernel);
      expect_close(
          y, want, elementwise_tol<float>, [&](std::size_t i) { return std::abs(double(x(i))); },
          "kernel gelu tanh " + what);
      expect_close(d, dwant, elementwise_tol<float>, dscale, "kernel gelu_backward tanh " + what);
    }
#else
  GTEST_SKIP() << "no x86-64 kernels in this build";
#endif
}

TEST(CompositeGelu, BackwardMatchesFiniteDifferences) {
  const auto x = random_tensor<double>(std::array<std::size_t, 2>{3, 37}, 2.0, 11);
  const auto g = random_tensor<double>(std::array<std::size_t, 2>{3, 37}, 1.0, 12);
  const double h = 1e-6;
  for (gelu_approximate a : {gelu_approximate::none, gelu_approximate::tanh})
    for (composite_mode m : {composite_mode::kernel, composite_mode::decompose}) {
      const auto dx = xshard::gelu_backward(g, x, a, m);
      const xt::xtensor<double, 2> fd =
          g * (xshard::gelu(xt::xtensor<double, 2>(x + h), a, m) - xshard::gelu(xt::xtensor<double, 2>(x - h), a, m)) /
          (2 * h);
      for (std::size_t i = 0; i < x.size(); ++i)
        EXPECT_NEAR(dx.data()[i], fd.data()[i], 1e-8 * (1 + std::abs(fd.data()[i])))
            << xshard::to_string(a) << ' ' << xshard::to_string(m) << " at " << i;
    }
}

TEST(CompositeGelu, AnyRankXarrayAndNonContiguousInput) {
  const auto x3 = random_tensor<float>(std::array<std::size_t, 3>{2, 3, 5}, 1.0, 3);
  const auto y3 = xshard::gelu(x3);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(y3)>, xt::xtensor<float, 3>>);
  const xt::xarray<float> xa = x3;
  const auto ya = xshard::gelu(xa);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(ya)>, xt::xarray<float>>);
  EXPECT_EQ(ya, xt::xarray<float>(y3));
  // A transposed view is evaluated to a contiguous temporary first.
  const auto yt = xshard::gelu(xt::transpose(x3));
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(yt)>, xt::xtensor<float, 3>>);
  EXPECT_EQ(yt, (xt::xtensor<float, 3>(xt::transpose(y3))));
  // Rank 0.
  const xt::xtensor<double, 0> s(1.0);
  EXPECT_NEAR(xshard::gelu(s)(), 0.8413447460685429, 1e-15);
  // Mismatched grad.
  EXPECT_THROW((void)xshard::gelu_backward(xt::xtensor<float, 1>::from_shape({4}), x3), xshard::error);
}

// gelu_backward_from_output: hand-checked values (gelu'(x) = Phi(x) + x phi(x):
// 1.0833154705876864 at 1, -0.08331547058768629 at -1, 1/2 at 0), inputs
// so small that y = gelu(x) would lose bits below the normal range (1/2
// exactly), the tanh form and the decomposition as gelu_backward, and a y of
// the wrong shape named.
TEST(CompositeGelu, BackwardFromTheOutput) {
  const xt::xtensor<double, 1> x{1.0, -1.0, 0.0, 2.0, -3.0};
  const xt::xtensor<double, 1> want{1.0833154705876864, -0.08331547058768629, 0.5, 1.085231801078197,
                                    -0.011945647204183918},
      g = xt::ones<double>({5});
  const auto d = xshard::gelu_backward_from_output(g, x, xshard::gelu(x));
  const xt::xtensor<float, 1> xf = xt::cast<float>(x), gf = xt::ones<float>({5});
  const auto f = xshard::gelu_backward_from_output(gf, xf, xshard::gelu(xf));
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(d(i), want(i), 1e-14) << "x=" << x(i);
    EXPECT_NEAR(f(i), want(i), 3e-7) << "x=" << x(i);
  }
  // Tiny and subnormal x: gelu'(x) rounds to 1/2 (y / x would not).
  const xt::xtensor<float, 1> tiny{1e-31f, -1e-31f, 1e-40f, -1e-40f, 1.4e-45f, 3e-38f, -3e-38f};
  const auto t =
      xshard::gelu_backward_from_output(xt::xtensor<float, 1>(xt::ones<float>({7})), tiny, xshard::gelu(tiny));
  for (std::size_t i = 0; i < tiny.size(); ++i) EXPECT_EQ(t(i), 0.5f) << "x=" << tiny(i);
  // The tanh form and the decomposition do not read y: gelu_backward's bits.
  const auto wrong_y = xt::xtensor<double, 1>(xt::zeros<double>({5}));
  EXPECT_EQ(xshard::gelu_backward_from_output(g, x, wrong_y, gelu_approximate::tanh),
            xshard::gelu_backward(g, x, gelu_approximate::tanh));
  {
    xshard::scoped_composite_mode forced("gelu_backward", composite_mode::decompose);
    EXPECT_EQ(xshard::gelu_backward_from_output(g, x, wrong_y),
              xshard::gelu_backward(g, x, gelu_approximate::none, composite_mode::decompose));
  }
  EXPECT_XSHARD_ERROR((void)xshard::gelu_backward_from_output(g, x, xt::xtensor<double, 1>(xt::zeros<double>({4}))),
                      "gelu_backward_from_output: y has shape [4]");
}

// ---- softmax ----------------------------------------------------------------

template <class T, std::size_t N>
double row_scale_max(const xt::xtensor<T, N>& y) {
  double m = 0;
  for (auto v : y)
    if (std::isfinite(double(v))) m = std::max(m, std::abs(double(v)));
  return m;
}

TYPED_TEST(CompositeTyped, SoftmaxKernelMatchesDecomposition) {
  using T = TypeParam;
  unsigned seed = 100;
  const std::vector<std::array<std::size_t, 3>> shapes{{1, 1, 1}, {2, 3, 1},  {2, 3, 17},   {1, 4, 1003},
                                                       {3, 7, 5}, {2, 33, 9}, {1, 1000, 3}, {4, 2, 0}};
  for (double mag : magnitudes)
    for (const auto& shape : shapes)
      for (std::ptrdiff_t dim : {-1, 0, 1, 2}) {
        const auto x = random_tensor<T>(shape, mag, seed++);
        const auto g = random_tensor<T>(shape, 1.0, seed++);
        const std::string what = "shape " + xshard::detail::shape_text(shape) + " dim " + std::to_string(dim) +
                                 " magnitude " + std::to_string(mag);
        const auto k = xshard::softmax(x, dim, composite_mode::kernel);
        const auto d = xshard::softmax(x, dim, composite_mode::decompose);
        expect_close(
            k, d, row_tol<T>, [](std::size_t) { return 0.0; }, "softmax " + what);
        const auto bk = xshard::softmax_backward(g, d, dim, composite_mode::kernel);
        const auto bd = xshard::softmax_backward(g, d, dim, composite_mode::decompose);
        const double scale = row_scale_max(bd) + 1;
        expect_close(
            bk, bd, row_tol<T>, [&](std::size_t) { return scale; }, "softmax_backward " + what);
      }
}

// The run-time dispatched x86 softmax rows (ops/arch/x86.hpp), each one the
// CPU has, against the decomposition: row lengths around every vector
// width, every magnitude, and rows holding inf, -inf or NaN.
TEST(CompositeSoftmax, EveryX86KernelTheCpuRunsMatchesTheDecomposition) {
#if XSHARD_X86_KERNELS
  const xshard::simd_isa cpu = xshard::detail::cpu_isa();
  if (cpu == xshard::simd_isa::generic) GTEST_SKIP() << "the CPU has neither AVX2 nor AVX-512";
  unsigned seed = 300;
  for (double mag : magnitudes)
    for (std::size_t k : odd_sizes) {
      if (k == 0) continue;
      auto x = random_tensor<float>(std::array<std::size_t, 2>{4, k}, mag, seed++);
      const auto g = random_tensor<float>(std::array<std::size_t, 2>{4, k}, 1.0, seed++);
      x(1, k / 2) = std::numeric_limits<float>::infinity();   // row 1: NaN where inf - inf
      x(2, k - 1) = -std::numeric_limits<float>::infinity();  // row 2: a zero probability
      x(3, 0) = std::numeric_limits<float>::quiet_NaN();      // row 3: NaN
      const auto want = xshard::softmax(x, -1, composite_mode::decompose);
      const auto dwant = xshard::softmax_backward(g, want, -1, composite_mode::decompose);
      const double scale = row_scale_max(dwant) + 1;
      const std::string what = "k=" + std::to_string(k) + " magnitude=" + std::to_string(mag);
      for (xshard::simd_isa isa : {xshard::simd_isa::avx2, xshard::simd_isa::avx512}) {
        if (static_cast<int>(isa) > static_cast<int>(cpu)) continue;
        xt::xtensor<float, 2> y = xt::zeros<float>({std::size_t(4), k}), d = xt::zeros<float>({std::size_t(4), k});
        for (std::size_t r = 0; r < 4; ++r) {
          if (isa == xshard::simd_isa::avx512) {
            xshard::detail::x86::avx512::softmax_row(&x(r, 0), &y(r, 0), k);
            xshard::detail::x86::avx512::softmax_backward_row(&g(r, 0), &want(r, 0), &d(r, 0), k);
          } else {
            xshard::detail::x86::avx2::softmax_row(&x(r, 0), &y(r, 0), k);
            xshard::detail::x86::avx2::softmax_backward_row(&g(r, 0), &want(r, 0), &d(r, 0), k);
          }
        }
        const std::string name(xshard::to_string(isa));
        expect_close(
            y, want, row_tol<float>, [](std::size_t) { return 0.0; }, name + " softmax " + what);
        expect_close(
            d, dwant, row_tol<float>, [&](std::size_t) { return scale; }, name + " softmax_backward " + what);
      }
    }
#else
  GTEST_SKIP() << "no x86-64 kernels in this build";
#endif
}

// Softmax along a dim that is not the last (shape (2, k, in), dim 1): the
// column kernels, a vector of columns at a time in blocks of 256 columns
// (in = 300: a second, partial block). Each column is summed in its own lane
// in the same order at every width, so AVX-512 and AVX2 agree bit for bit.
TEST(CompositeSoftmax, EveryX86ColumnKernelTheCpuRunsMatchesTheDecomposition) {
#if XSHARD_X86_KERNELS
  const xshard::simd_isa cpu = xshard::detail::cpu_isa();
  if (cpu == xshard::simd_isa::generic) GTEST_SKIP() << "the CPU has neither AVX2 nor AVX-512";
  unsigned seed = 900;
  for (double mag : {1.0, 30.0})
    for (std::size_t k : {1, 2, 5, 17, 64})
      for (std::size_t in : {2, 3, 7, 8, 9, 16, 17, 33, 300}) {
        auto x = random_tensor<float>(std::array<std::size_t, 3>{2, k, in}, mag, seed++);
        const auto g = random_tensor<float>(std::array<std::size_t, 3>{2, k, in}, 1.0, seed++);
        x(1, k / 2, 1) = std::numeric_limits<float>::infinity();    // column 1 of block 1: NaN where inf - inf
        x(1, k - 1, 0) = -std::numeric_limits<float>::infinity();   // a zero probability
        x(0, 0, in - 1) = std::numeric_limits<float>::quiet_NaN();  // the last (padded) column: NaN
        const auto want = xshard::softmax(x, 1, composite_mode::decompose);
        const auto dwant = xshard::softmax_backward(g, want, 1, composite_mode::decompose);
        const double scale = row_scale_max(dwant) + 1;
        const std::string what =
            "k=" + std::to_string(k) + " in=" + std::to_string(in) + " magnitude=" + std::to_string(mag);
        xt::xtensor<float, 3> y2 = xt::zeros<float>(x.shape()), d2 = xt::zeros<float>(x.shape());
        for (std::size_t o = 0; o < 2; ++o) {
          xshard::detail::x86::avx2::softmax_columns(&x(o, 0, 0), &y2(o, 0, 0), k, in, in);
          xshard::detail::x86::avx2::softmax_backward_columns(&g(o, 0, 0), &want(o, 0, 0), &d2(o, 0, 0), k, in, in);
        }
        expect_close(
            y2, want, row_tol<float>, [](std::size_t) { return 0.0; }, "avx2 softmax columns " + what);
        expect_close(
            d2, dwant, row_tol<float>, [&](std::size_t) { return scale; }, "avx2 softmax_backward columns " + what);
        if (cpu == xshard::simd_isa::avx512) {
          xt::xtensor<float, 3> y512 = xt::zeros<float>(x.shape()), d512 = xt::zeros<float>(x.shape());
          for (std::size_t o = 0; o < 2; ++o) {
            xshard::detail::x86::avx512::softmax_columns(&x(o, 0, 0), &y512(o, 0, 0), k, in, in);
            xshard::detail::x86::avx512::softmax_backward_columns(&g(o, 0, 0), &want(o, 0, 0), &d512(o, 0, 0), k, in,
                                                                  in);
          }
          for (std::size_t i = 0; i < x.size(); ++i) {
            const float a = y2.data()[i], b = y512.data()[i], da = d2.data()[i], db = d512.data()[i];
            EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << what << " softmax at " << i;
            EXPECT_TRUE(da == db || (std::isnan(da) && std::isnan(db))) << what << " softmax_backward at " << i;
          }
        }
        // The public entries, on the active ISA's column kernel.
        expect_close(
            xshard::softmax(x, 1, composite_mode::kernel), want, row_tol<float>, [](std::size_t) { return 0.0; },
            "kernel softmax columns " + what);
        expect_close(
            xshard::softmax_backward(g, want, 1, composite_mode::kernel), dwant, row_tol<float>,
            [&](std::size_t) { return scale; }, "kernel softmax_backward columns " + what);
      }
#else
  GTEST_SKIP() << "no x86-64 kernels in this build";
#endif
}

// Softmax along a strided dim is split over the pool by blocks of columns
// (so one slab, a matrix over dim 0, uses every thread): each column is
// computed alone, so every thread count gives the same bits, and the result
// is the decomposition's.
TYPED_TEST(CompositeTyped, SoftmaxAlongAStridedDimGivesTheSameBitsOnOneThreadAndOnThePool) {
  using T = TypeParam;
  unsigned seed = 950;
  const auto check = [&](const auto& shape, std::ptrdiff_t dim) {
    const auto x = random_tensor<T>(shape, 4.0, seed++);
    const auto g = random_tensor<T>(shape, 1.0, seed++);
    std::string what = "dim " + std::to_string(dim) + " of shape";
    for (std::size_t e : shape) what += " " + std::to_string(e);
    const auto want = xshard::softmax(x, dim, composite_mode::decompose);
    const auto dwant = xshard::softmax_backward(g, want, dim, composite_mode::decompose);
    const auto y = xshard::softmax(x, dim, composite_mode::kernel);
    const auto dx = xshard::softmax_backward(g, want, dim, composite_mode::kernel);
    const xshard::scoped_thread_limit one(1);
    const auto y1 = xshard::softmax(x, dim, composite_mode::kernel);
    const auto dx1 = xshard::softmax_backward(g, want, dim, composite_mode::kernel);
    ASSERT_EQ(y.shape(), want.shape()) << what;
    const double scale = row_scale_max(dwant) + 1;
    for (std::size_t i = 0; i < y.size(); ++i) {
      ASSERT_EQ(y.data()[i], y1.data()[i]) << what << ": softmax at " << i;
      ASSERT_EQ(dx.data()[i], dx1.data()[i]) << what << ": softmax_backward at " << i;
      ASSERT_NEAR(y.data()[i], want.data()[i], row_tol<T>) << what << ": softmax at " << i;
      ASSERT_NEAR(dx.data()[i], dwant.data()[i], row_tol<T> * scale) << what << ": softmax_backward at " << i;
    }
  };
  // Each shape has at least 64 x 256 elements per block of columns, so its
  // blocks are split over two threads (rows_per_grain).
  check(std::array<std::size_t, 2>{64, 600}, 0);     // one slab, three blocks of columns (the last of 88)
  check(std::array<std::size_t, 3>{3, 64, 300}, 1);  // three slabs of two blocks
  check(std::array<std::size_t, 3>{2, 64, 257}, 1);  // a block of one column
}

TYPED_TEST(CompositeTyped, SoftmaxRowsSumToOneAndLargeInputsStayFinite) {
  using T = TypeParam;
  for (composite_mode m : {composite_mode::kernel, composite_mode::decompose}) {
    const auto x = random_tensor<T>(std::array<std::size_t, 2>{6, 37}, 5.0, 7);
    const auto y = xshard::softmax(x, -1, m);
    for (std::size_t r = 0; r < 6; ++r) {
      double s = 0;
      for (std::size_t j = 0; j < 37; ++j) {
        EXPECT_GE(y(r, j), T(0));
        s += y(r, j);
      }
      EXPECT_NEAR(s, 1.0, 37 * double(std::numeric_limits<T>::epsilon())) << xshard::to_string(m);
    }
    // 1000 would overflow exp; subtracting the max keeps it exact.
    const xt::xtensor<T, 2> big{{T(1000), T(1000)}, {T(1000), T(-1000)}};
    const auto yb = xshard::softmax(big, -1, m);
    EXPECT_EQ(yb(0, 0), T(0.5));
    EXPECT_EQ(yb(0, 1), T(0.5));
    EXPECT_EQ(yb(1, 0), T(1));
    EXPECT_EQ(yb(1, 1), T(0));
    // -inf entries get 0; a row with NaN or +inf is NaN (as torch).
    constexpr T inf = std::numeric_limits<T>::infinity();
    const xt::xtensor<T, 2> nf{{T(0), -inf, T(0), T(1), T(2)},
                               {T(0), std::numeric_limits<T>::quiet_NaN(), T(1), T(2), T(3)},
                               {T(0), inf, T(1), T(2), T(3)}};
    const auto yn = xshard::softmax(nf, -1, m);
    EXPECT_EQ(yn(0, 1), T(0));
    EXPECT_TRUE(std::isfinite(yn(0, 4)));
    for (std::size_t j = 0; j < 5; ++j) EXPECT_TRUE(std::isnan(yn(1, j))) << j;
    EXPECT_TRUE(std::isnan(yn(2, 1)));
  }
}

TEST(CompositeSoftmax, BackwardMatchesFiniteDifferences) {
  // loss = sum(w * softmax(x, dim)); its gradient is softmax_backward(w, y).
  const std::array<std::size_t, 3> shape{2, 5, 7};
  const auto x = random_tensor<double>(shape, 2.0, 21);
  const auto w = random_tensor<double>(shape, 1.0, 22);
  const double h = 1e-6;
  for (std::ptrdiff_t dim : {-1, 1, 0})
    for (composite_mode m : {composite_mode::kernel, composite_mode::decompose}) {
      const auto dx = xshard::softmax_backward(w, xshard::softmax(x, dim, m), dim, m);
      for (std::size_t i = 0; i < x.size(); ++i) {
        auto xp = x, xm = x;
        xp.data()[i] += h;
        xm.data()[i] -= h;
        const double fd =
            (xt::sum(w * xshard::softmax(xp, dim, m))() - xt::sum(w * xshard::softmax(xm, dim, m))()) / (2 * h);
        EXPECT_NEAR(dx.data()[i], fd, 1e-8) << "dim " << dim << ' ' << xshard::to_string(m) << " at " << i;
      }
    }
}

TEST(CompositeSoftmax, BadDimAndShapeAreErrors) {
  const xt::xtensor<float, 2> x = xt::zeros<float>({2, 3});
  EXPECT_XSHARD_ERROR((void)xshard::softmax(x, 2), "dim 2 is out of range for a tensor of rank 2");
  EXPECT_THROW((void)xshard::softmax(x, -3), xshard::error);
  EXPECT_THROW((void)xshard::softmax(xt::xarray<float>(1.0f)), xshard::error);  // rank 0
  EXPECT_THROW((void)xshard::softmax_backward(xt::xtensor<float, 2>::from_shape({3, 2}), x), xshard::error);
}

// ---- layer_norm -------------------------------------------------------------

TYPED_TEST(CompositeTyped, LayerNormKernelMatchesDecomposition) {
  using T = TypeParam;
  unsigned seed = 300;
  for (double mag : magnitudes)
    for (std::size_t n : odd_sizes) {
      if (n == 0) continue;
      for (bool affine : {false, true}) {
        const std::array<std::size_t, 3> shape{2, 3, n};
        auto x = random_tensor<T>(shape, mag, seed++);
        x += T(mag);  // rows away from zero: the variance must come from deviations
        const auto w = random_tensor<T>(std::array<std::size_t, 1>{n}, 1.0, seed++);
        const auto b = random_tensor<T>(std::array<std::size_t, 1>{n}, 1.0, seed++);
        const auto g = random_tensor<T>(shape, 1.0, seed++);
        const std::string what =
            "n=" + std::to_string(n) + " magnitude=" + std::to_string(mag) + (affine ? " affine" : "");
        const auto k = affine ? xshard::layer_norm(x, w, b, 1e-5, composite_mode::kernel)
                              : xshard::layer_norm(x, 1e-5, composite_mode::kernel);
        const auto d = affine ? xshard::layer_norm(x, w, b, 1e-5, composite_mode::decompose)
                              : xshard::layer_norm(x, 1e-5, composite_mode::decompose);
        const double out_scale = row_scale_max(d.output) + 1;
        expect_close(
            k.output, d.output, row_tol<T>, [&](std::size_t) { return out_scale; }, "layer_norm output " + what);
        expect_close(
            k.mean, d.mean, row_tol<T>, [&](std::size_t) { return mag; }, "layer_norm mean " + what);
        expect_close(
            k.rstd, d.rstd, row_tol<T>, [](std::size_t) { return 0.0; }, "layer_norm rstd " + what);
        const auto bk = affine ? xshard::layer_norm_backward(g, x, d.mean, d.rstd, w, composite_mode::kernel)
                               : xshard::layer_norm_backward(g, x, d.mean, d.rstd, composite_mode::kernel);
        const auto bd = affine ? xshard::layer_norm_backward(g, x, d.mean, d.rstd, w, composite_mode::decompose)
                               : xshard::layer_norm_backward(g, x, d.mean, d.rstd, composite_mode::decompose);
        // dx = rstd (g' - mean(g') - ...) cancels terms of size rstd |g'|
        // (to 0 exactly when n = 1), and a rounded dx is off relative to
        // them, not to the result (a kernel may also fuse g w - mean(g') into
        // one FMA, as GCC does at -O3).
        const double in_scale = (row_scale_max(bd.input) + 1) * (1 + 1 / double(d.rstd(0, 0, 0))) +
                                double(d.rstd(0, 0, 0)) * row_scale_max(g) * (affine ? row_scale_max(w) : 1.0);
        expect_close(
            bk.input, bd.input, row_tol<T>, [&](std::size_t) { return in_scale; }, "layer_norm dx " + what);
        const double p_scale = row_scale_max(bd.weight) + row_scale_max(bd.bias) + 1;
        expect_close(
            bk.weight, bd.weight, row_tol<T>, [&](std::size_t) { return p_scale; }, "layer_norm dweight " + what);
        expect_close(
            bk.bias, bd.bias, row_tol<T>, [&](std::size_t) { return p_scale; }, "layer_norm dbias " + what);
      }
    }
}

TYPED_TEST(CompositeTyped, LayerNormRowsHaveMeanZeroVarianceOne) {
  using T = TypeParam;
  const std::size_t n = 257;
  auto x = random_tensor<T>(std::array<std::size_t, 2>{5, n}, 3.0, 41);
  x += T(100);
  const double tol = std::is_same_v<T, float> ? 1e-4 : 1e-10;
  for (composite_mode m : {composite_mode::kernel, composite_mode::decompose}) {
    const auto r = xshard::layer_norm(x, 0.0, m);
    EXPECT_EQ(r.mean.shape(), (std::array<std::size_t, 2>{5, 1}));
    EXPECT_EQ(r.rstd.shape(), (std::array<std::size_t, 2>{5, 1}));
    for (std::size_t i = 0; i < 5; ++i) {
      double s = 0, s2 = 0, xs = 0;
      for (std::size_t j = 0; j < n; ++j) {
        s += r.output(i, j);
        s2 += double(r.output(i, j)) * r.output(i, j);
        xs += x(i, j);
      }
      EXPECT_NEAR(s / n, 0.0, tol) << xshard::to_string(m);
      EXPECT_NEAR(s2 / n, 1.0, tol) << xshard::to_string(m);
      EXPECT_NEAR(r.mean(i, 0), xs / n, 100 * tol) << xshard::to_string(m);
    }
  }
}

TEST(CompositeLayerNorm, BackwardMatchesFiniteDifferences) {
  // loss = sum(c * layer_norm(x, w, b)); gradients w.r.t. x, w and b.
  const std::array<std::size_t, 3> shape{2, 3, 9};
  const auto x = random_tensor<double>(shape, 2.0, 51);
  const auto c = random_tensor<double>(shape, 1.0, 52);
  const auto w = random_tensor<double>(std::array<std::size_t, 1>{9}, 1.0, 53);
  const auto b = random_tensor<double>(std::array<std::size_t, 1>{9}, 1.0, 54);
  const double h = 1e-6, eps = 1e-5;
  for (composite_mode m : {composite_mode::kernel, composite_mode::decompose}) {
    auto loss = [&](const auto& xx, const auto& ww, const auto& bb) {
      return xt::sum(c * xshard::layer_norm(xx, ww, bb, eps, m).output)();
    };
    const auto fwd = xshard::layer_norm(x, w, b, eps, m);
    const auto grads = xshard::layer_norm_backward(c, x, fwd.mean, fwd.rstd, w, m);
    for (std::size_t i = 0; i < x.size(); ++i) {
      auto xp = x, xm = x;
      xp.data()[i] += h;
      xm.data()[i] -= h;
      EXPECT_NEAR(grads.input.data()[i], (loss(xp, w, b) - loss(xm, w, b)) / (2 * h), 1e-7)
          << xshard::to_string(m) << " dx " << i;
    }
    for (std::size_t j = 0; j < 9; ++j) {
      auto wp = w, wm = w, bp = b, bm = b;
      wp(j) += h;
      wm(j) -= h;
      bp(j) += h;
      bm(j) -= h;
      EXPECT_NEAR(grads.weight(j), (loss(x, wp, b) - loss(x, wm, b)) / (2 * h), 1e-7) << "dweight " << j;
      EXPECT_NEAR(grads.bias(j), (loss(x, w, bp) - loss(x, w, bm)) / (2 * h), 1e-7) << "dbias " << j;
    }
    // Without a weight, dx is the weight-free formula.
    const auto plain = xshard::layer_norm(x, eps, m);
    const auto g0 = xshard::layer_norm_backward(c, x, plain.mean, plain.rstd, m);
    auto plain_loss = [&](const auto& xx) { return xt::sum(c * xshard::layer_norm(xx, eps, m).output)(); };
    for (std::size_t i = 0; i < x.size(); i += 5) {
      auto xp = x, xm = x;
      xp.data()[i] += h;
      xm.data()[i] -= h;
      EXPECT_NEAR(g0.input.data()[i], (plain_loss(xp) - plain_loss(xm)) / (2 * h), 1e-7) << "no weight dx " << i;
    }
  }
}

TEST(CompositeLayerNorm, ShapeErrorsNameTheOperand) {
  const xt::xtensor<float, 2> x = xt::ones<float>({2, 4});
  const xt::xtensor<float, 1> w = xt::ones<float>({5});
  const xt::xtensor<float, 1> b = xt::zeros<float>({4});
  EXPECT_XSHARD_ERROR((void)xshard::layer_norm(x, w, b), "weight has shape [5] but the last dim of x has extent 4");
  const auto r = xshard::layer_norm(x);
  EXPECT_XSHARD_ERROR((void)xshard::layer_norm_backward(x, x, xt::xtensor<float, 1>::from_shape({2}), r.rstd),
                      "mean has shape [2]");
  // xarray in, xarray out; saved stats keep the rank.
  const auto ra = xshard::layer_norm(xt::xarray<double>(xt::ones<double>({3, 2, 4})));
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(ra.output)>, xt::xarray<double>>);
  EXPECT_EQ(ra.mean.shape(), (std::vector<std::size_t>{3, 2, 1}));
}

// ---- rms_norm ---------------------------------------------------------------

// Each x86 row kernel the CPU can run (AVX-512 and AVX2 + FMA, called
// directly, whatever XSHARD_ISA says) against the decomposition in double:
// with and without weight and bias, rows away from zero, every tail length.
TEST(CompositeLayerNorm, EveryX86KernelTheCpuRunsMatchesTheDoubleDecomposition) {
#if XSHARD_X86_KERNELS
  const xshard::simd_isa cpu = xshard::detail::cpu_isa();
  if (cpu == xshard::simd_isa::generic) GTEST_SKIP() << "the CPU has neither AVX2 nor AVX-512";
  unsigned seed = 1100;
  for (double mag : magnitudes)
    for (std::size_t n : odd_sizes) {
      if (n == 0) continue;
      for (bool affine : {false, true}) {
        const std::size_t rows = 3;
        const std::array<std::size_t, 2> shape{rows, n};
        xt::xtensor<float, 2> x = random_tensor<float>(shape, mag, seed++);
        x += float(mag);  // the variance must come from the deviations
        const auto w = random_tensor<float>(std::array<std::size_t, 1>{n}, 1.0, seed++);
        const auto b = random_tensor<float>(std::array<std::size_t, 1>{n}, 1.0, seed++);
        const auto g = random_tensor<float>(shape, 1.0, seed++);
        const xt::xtensor<double, 2> xd = xt::cast<double>(x), gd = xt::cast<double>(g);
        const xt::xtensor<double, 1> wd = xt::cast<double>(w), bd = xt::cast<double>(b);
        const auto want = affine ? xshard::layer_norm(xd, wd, bd, 1e-5, composite_mode::decompose)
                                 : xshard::layer_norm(xd, 1e-5, composite_mode::decompose);
        const auto dwant =
            affine ? xshard::layer_norm_backward(gd, xd, want.mean, want.rstd, wd, composite_mode::decompose)
                   : xshard::layer_norm_backward(gd, xd, want.mean, want.rstd, composite_mode::decompose);
        const double out_scale = row_scale_max(want.output) + 1;
        const double in_scale = (row_scale_max(dwant.input) + 1) * (1 + 1 / want.rstd(0, 0)) +
                                want.rstd(0, 0) * row_scale_max(g) * (affine ? row_scale_max(w) : 1.0);  // as above
        const double p_scale = row_scale_max(dwant.weight) + row_scale_max(dwant.bias) + 1;
        const float* wp = affine ? w.data() : nullptr;
        const float* bp = affine ? b.data() : nullptr;
        auto check = [&](auto forward, auto backward, const std::string& isa) {
          xt::xtensor<float, 2> y = xt::zeros<float>(shape), dx = xt::zeros<float>(shape);
          xt::xtensor<float, 2> mean = xt::zeros<float>({rows, std::size_t{1}}), rstd = mean;
          xt::xtensor<float, 1> dw = xt::zeros<float>({n}), db = xt::zeros<float>({n});
          for (std::size_t r = 0; r < rows; ++r)
            forward(&x(r, 0), &y(r, 0), n, wp, bp, 1e-5f, &mean(r, 0), &rstd(r, 0));
          for (std::size_t r = 0; r < rows; ++r)
            backward(&g(r, 0), &x(r, 0), mean(r, 0), rstd(r, 0), wp, &dx(r, 0), dw.data(), db.data(), n);
          const std::string what =
              isa + " n=" + std::to_string(n) + " magnitude=" + std::to_string(mag) + (affine ? " affine" : "");
          expect_close(
              y, want.output, row_tol<float>, [&](std::size_t) { return out_scale; }, "layer_norm output " + what);
          expect_close(
              mean, want.mean, row_tol<float>, [&](std::size_t) { return mag; }, "layer_norm mean " + what);
          expect_close(
              rstd, want.rstd, row_tol<float>, [](std::size_t) { return 0.0; }, "layer_norm rstd " + what);
          expect_close(
              dx, dwant.input, row_tol<float>, [&](std::size_t) { return in_scale; }, "layer_norm dx " + what);
          expect_close(
              dw, dwant.weight, row_tol<float>, [&](std::size_t) { return p_scale; }, "layer_norm dweight " + what);
          expect_close(
              db, dwant.bias, row_tol<float>, [&](std::size_t) { return p_scale; }, "layer_norm dbias " + what);
        };
        if (cpu == xshard::simd_isa::avx512)
          check(xshard::detail::x86::avx512::layer_norm_row, xshard::detail::x86::avx512::layer_norm_backward_row,
                "avx512");
        check(xshard::detail::x86::avx2::layer_norm_row, xshard::detail::x86::avx2::layer_norm_backward_row, "avx2");
      }
    }
#else
  GTEST_SKIP() << "no x86-64 kernels in this build";
#endif
}

/// rms_norm and its backward in double, a row at a time, as the header's
/// formulas read. dx_scale is what a rounded dx can be off by, relative:
/// rstd * (|g| + |y| * mean(|g * y|)) (the row sum of g * y rounds relative
/// to the sum of its terms' magnitudes, not to its value, which cancels).
struct rms_reference {
  std::vector<double> y, rstd, dx, dx_scale;
};
template <class X, class G, class S>
rms_reference rms_norm_reference(const X& x, const G& g, const S& rstd_in, double eps) {
  const std::size_t n = x.shape()[x.dimension() - 1];
  const std::size_t rows = n == 0 ? 0 : x.size() / n;
  rms_reference ref{std::vector<double>(x.size()), std::vector<double>(rows), std::vector<double>(x.size()),
                    std::vector<double>(x.size())};
  for (std::size_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (std::size_t j = 0; j < n; ++j) ss += double(x.data()[r * n + j]) * double(x.data()[r * n + j]);
    ref.rstd[r] = 1 / std::sqrt(ss / double(n) + eps);
    for (std::size_t j = 0; j < n; ++j) ref.y[r * n + j] = double(x.data()[r * n + j]) * ref.rstd[r];
    // The backward from the rstd it is given.
    const double s = rstd_in.data()[r];
    double gy = 0, gy_abs = 0;
    for (std::size_t j = 0; j < n; ++j) {
      const double t = double(g.data()[r * n + j]) * double(x.data()[r * n + j]) * s;
      gy += t;
      gy_abs += std::abs(t);
    }
    const double b = gy / double(n), b_abs = gy_abs / double(n);
    for (std::size_t j = 0; j < n; ++j) {
      const double gj = g.data()[r * n + j], yj = double(x.data()[r * n + j]) * s;
      ref.dx[r * n + j] = s * (gj - yj * b);
      ref.dx_scale[r * n + j] = s * (std::abs(gj) + std::abs(yj) * b_abs);
    }
  }
  return ref;
}

template <class R>
void expect_near_reference(const R& got, const std::vector<double>& ref, double tol, auto scale,
                           const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int failures = 0;
  for (std::size_t i = 0; i < ref.size() && failures < 5; ++i) {
    const double bound = tol * (std::abs(ref[i]) + scale(i));
    if (!(std::abs(double(got.data()[i]) - ref[i]) <= bound)) {
      ADD_FAILURE() << what << " at " << i << ": got " << double(got.data()[i]) << ", reference " << ref[i]
                    << ", bound " << bound;
      ++failures;
    }
  }
}

// Both modes against the double loop, on rows of every length around the
// batch widths (n = 1, tails of 1..L-1, 1003) and magnitudes where eps
// matters (1e-3: mean(x^2) ~ eps) or not.
TYPED_TEST(CompositeTyped, RmsNormBothModesMatchADoubleReference) {
  using T = TypeParam;
  unsigned seed = 700;
  for (double mag : magnitudes)
    for (std::size_t n : odd_sizes) {
      if (n == 0) continue;
      const std::array<std::size_t, 3> shape{2, 3, n};
      const auto x = random_tensor<T>(shape, mag, seed++);
      const auto g = random_tensor<T>(shape, 1.0, seed++);
      for (composite_mode m : {composite_mode::kernel, composite_mode::decompose}) {
        const std::string what =
            std::string(xshard::to_string(m)) + " n=" + std::to_string(n) + " magnitude=" + std::to_string(mag);
        const auto r = xshard::rms_norm(x, 1e-6, m);
        static_assert(std::is_same_v<decltype(r), const xshard::rms_norm_result<xt::xtensor<T, 3>>>);
        EXPECT_EQ(r.output.shape(), shape) << what;
        EXPECT_EQ(r.rstd.shape(), (std::array<std::size_t, 3>{2, 3, 1})) << what;
        const auto ref = rms_norm_reference(x, g, r.rstd, 1e-6);
        expect_near_reference(
            r.output, ref.y, row_tol<T>, [](std::size_t) { return 0.0; }, "rms_norm output " + what);
        expect_near_reference(
            r.rstd, ref.rstd, row_tol<T>, [](std::size_t) { return 0.0; }, "rms_norm rstd " + what);
        const auto dx = xshard::rms_norm_backward(g, x, r.rstd, m);
        static_assert(std::is_same_v<decltype(dx), const xt::xtensor<T, 3>>);
        expect_near_reference(
            dx, ref.dx, row_tol<T>, [&](std::size_t i) { return ref.dx_scale[i]; }, "rms_norm_backward " + what);
      }
    }
}

TYPED_TEST(CompositeTyped, RmsNormKernelMatchesDecomposition) {
  using T = TypeParam;
  unsigned seed = 800;
  for (double mag : magnitudes)
    for (std::size_t n : odd_sizes) {
      if (n == 0) continue;
      const std::array<std::size_t, 2> shape{5, n};
      const auto x = random_tensor<T>(shape, mag, seed++);
      const auto g = random_tensor<T>(shape, 1.0, seed++);
      const std::string what = "n=" + std::to_string(n) + " magnitude=" + std::to_string(mag);
      const auto k = xshard::rms_norm(x, 1e-6, composite_mode::kernel);
      const auto d = xshard::rms_norm(x, 1e-6, composite_mode::decompose);
      expect_close(
          k.output, d.output, row_tol<T>, [](std::size_t) { return 0.0; }, "rms_norm output " + what);
      expect_close(
          k.rstd, d.rstd, row_tol<T>, [](std::size_t) { return 0.0; }, "rms_norm rstd " + what);
      const auto bk = xshard::rms_norm_backward(g, x, d.rstd, composite_mode::kernel);
      const auto bd = xshard::rms_norm_backward(g, x, d.rstd, composite_mode::decompose);
      const auto ref = rms_norm_reference(x, g, d.rstd, 1e-6);
      expect_close(
          bk, bd, row_tol<T>, [&](std::size_t i) { return ref.dx_scale[i]; }, "rms_norm dx " + what);
    }
}

// The rms_norm row kernels of ops/arch/x86.hpp, each ISA the CPU has,
// against the double reference: sizes around every vector width, every
// magnitude.
TEST(CompositeRmsNorm, EveryX86KernelTheCpuRunsMatchesTheReference) {
#if XSHARD_X86_KERNELS
  const xshard::simd_isa cpu = xshard::detail::cpu_isa();
  unsigned seed = 900;
  for (double mag : magnitudes)
    for (std::size_t n : odd_sizes) {
      if (n == 0) continue;
      const std::array<std::size_t, 2> shape{3, n};
      const auto x = random_tensor<float>(shape, mag, seed++);
      const auto g = random_tensor<float>(shape, 1.0, seed++);
      auto check = [&](auto forward, auto backward, const std::string& isa) {
        xt::xtensor<float, 2> y = xt::zeros<float>(shape), dx = xt::zeros<float>(shape);
        xt::xtensor<float, 2> rstd = xt::zeros<float>({std::size_t{3}, std::size_t{1}});
        for (std::size_t r = 0; r < 3; ++r) rstd(r, 0) = forward(x.data() + r * n, y.data() + r * n, n, 1e-6f);
        for (std::size_t r = 0; r < 3; ++r)
          backward(g.data() + r * n, x.data() + r * n, rstd(r, 0), dx.data() + r * n, n);
        const auto ref = rms_norm_reference(x, g, rstd, 1e-6);
        const std::string what = isa + " n=" + std::to_string(n) + " magnitude=" + std::to_string(mag);
        expect_near_reference(
            y, ref.y, row_tol<float>, [](std::size_t) { return 0.0; }, "rms_norm output " + what);
        expect_near_reference(
            rstd, ref.rstd, row_tol<float>, [](std::size_t) { return 0.0; }, "rms_norm rstd " + what);
        expect_near_reference(
            dx, ref.dx, row_tol<float>, [&](std::size_t i) { return ref.dx_scale[i]; }, "rms_norm_backward " + what);
      };
      if (cpu == xshard::simd_isa::avx512)
        check(xshard::detail::x86::avx512::rms_norm_row, xshard::detail::x86::avx512::rms_norm_backward_row, "avx512");
      if (cpu != xshard::simd_isa::generic)
        check(xshard::detail::x86::avx2::rms_norm_row, xshard::detail::x86::avx2::rms_norm_backward_row, "avx2");
    }
#else
  GTEST_SKIP() << "no x86-64 kernels in this build";
#endif
}

TYPED_TEST(CompositeTyped, RmsNormEmptyRowsAndRankOne) {
  using T = TypeParam;
  for (composite_mode m : {composite_mode::kernel, composite_mode::decompose}) {
    // rows = 0: empty results of the right shapes.
    const xt::xtensor<T, 3> no_rows = xt::xtensor<T, 3>::from_shape({0, 3, 5});
    const auto r0 = xshard::rms_norm(no_rows, 1e-6, m);
    EXPECT_EQ(r0.output.shape(), (std::array<std::size_t, 3>{0, 3, 5}));
    EXPECT_EQ(r0.rstd.shape(), (std::array<std::size_t, 3>{0, 3, 1}));
    EXPECT_EQ(xshard::rms_norm_backward(no_rows, no_rows, r0.rstd, m).shape(), no_rows.shape());
    // n = 0: a row has no mean square, rstd is NaN (as layer_norm's stats).
    const xt::xtensor<T, 2> empty_rows = xt::xtensor<T, 2>::from_shape({2, 0});
    const auto rn = xshard::rms_norm(empty_rows, 1e-6, m);
    EXPECT_EQ(rn.rstd.shape(), (std::array<std::size_t, 2>{2, 1}));
    EXPECT_TRUE(std::isnan(rn.rstd(0, 0)) && std::isnan(rn.rstd(1, 0)));
    EXPECT_EQ(xshard::rms_norm_backward(empty_rows, empty_rows, rn.rstd, m).size(), 0u);
    // n = 1: y = x / sqrt(x^2 + eps), dx = g eps / (x^2 + eps)^(3/2).
    const xt::xtensor<T, 2> one{{T(3)}, {T(-0.5)}};
    const xt::xtensor<T, 2> g{{T(1)}, {T(2)}};
    const double eps = 0.25;
    const auto r1 = xshard::rms_norm(one, eps, m);
    const auto d1 = xshard::rms_norm_backward(g, one, r1.rstd, m);
    const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-15;
    for (std::size_t i = 0; i < 2; ++i) {
      const double xi = one(i, 0), q = xi * xi + eps;
      EXPECT_NEAR(r1.output(i, 0), xi / std::sqrt(q), tol) << xshard::to_string(m);
      EXPECT_NEAR(d1(i, 0), double(g(i, 0)) * eps / (q * std::sqrt(q)), tol) << xshard::to_string(m);
    }
    // Rank 1: one row.
    const xt::xtensor<T, 1> v{T(1), T(2), T(2)};  // mean square 3
    const auto rv = xshard::rms_norm(v, 0.0, m);
    EXPECT_EQ(rv.rstd.shape(), (std::array<std::size_t, 1>{1}));
    EXPECT_NEAR(rv.output(1), 2 / std::sqrt(3.0), tol);
  }
}

TEST(CompositeRmsNorm, BackwardMatchesFiniteDifferences) {
  // loss = sum(c * rms_norm(x)); its gradient is rms_norm_backward(c, x, rstd).
  const std::array<std::size_t, 3> shape{2, 3, 11};
  const auto x = random_tensor<double>(shape, 2.0, 71);
  const auto c = random_tensor<double>(shape, 1.0, 72);
  const double h = 1e-5;
  for (double eps : {1e-6, 0.5})
    for (composite_mode m : {composite_mode::kernel, composite_mode::decompose}) {
      auto loss = [&](const xt::xtensor<double, 3>& xx) { return xt::sum(c * xshard::rms_norm(xx, eps, m).output)(); };
      const auto dx = xshard::rms_norm_backward(c, x, xshard::rms_norm(x, eps, m).rstd, m);
      std::vector<double> fd(x.size());
      double fd_max = 0, err_max = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        auto xp = x, xm = x;
        xp.data()[i] += h;
        xm.data()[i] -= h;
        fd[i] = (loss(xp) - loss(xm)) / (2 * h);
        fd_max = std::max(fd_max, std::abs(fd[i]));
        err_max = std::max(err_max, std::abs(dx.data()[i] - fd[i]));
      }
      ASSERT_GT(fd_max, 0.0);
      EXPECT_LT(err_max / fd_max, 1e-6) << "eps " << eps << ' ' << xshard::to_string(m);
      for (std::size_t i = 0; i < x.size(); ++i)
        EXPECT_NEAR(dx.data()[i], fd[i], 1e-6 * std::abs(fd[i]) + 1e-9 * fd_max)
            << "eps " << eps << ' ' << xshard::to_string(m) << " at " << i;
    }
}

TEST(CompositeRmsNorm, PolicyChoosesByName) {
  // Rows long enough that kernel and decomposition differ in the last bit
  // (different summation orders); then the policy-driven call must return
  // exactly the one the policy names.
  const auto x = random_tensor<float>(std::array<std::size_t, 2>{16, 1003}, 3.0, 81);
  const auto g = random_tensor<float>(std::array<std::size_t, 2>{16, 1003}, 1.0, 82);
  const auto k = xshard::rms_norm(x, 1e-6, composite_mode::kernel);
  const auto d = xshard::rms_norm(x, 1e-6, composite_mode::decompose);
  ASSERT_NE(k.output, d.output) << "kernel and decomposition agree bit for bit on every input; pick other data";
  const auto bk = xshard::rms_norm_backward(g, x, d.rstd, composite_mode::kernel);
  const auto bd = xshard::rms_norm_backward(g, x, d.rstd, composite_mode::decompose);
  ASSERT_NE(bk, bd);
  const auto parsed = xshard::parse_composite_policy("rms_norm:decompose, xshard.rms_norm_backward:kernel");
  ASSERT_EQ(parsed.size(), 2u);
  EXPECT_EQ(parsed[0].ids, std::vector{xshard::composite_id::rms_norm});
  EXPECT_EQ(parsed[0].mode, composite_mode::decompose);
  EXPECT_EQ(parsed[1].ids, std::vector{xshard::composite_id::rms_norm_backward});
  {
    xshard::scoped_composite_mode keep("rms_norm", composite_mode::kernel);  // restores what code set before
    xshard::scoped_composite_mode keep_backward("rms_norm_backward", composite_mode::kernel);
    xshard::composite_policy::apply("rms_norm:decompose");
    EXPECT_EQ(xshard::composite_policy::get("rms_norm"), composite_mode::decompose);
    EXPECT_EQ(xshard::composite_policy::get("xshard.rms_norm"), composite_mode::decompose);
    EXPECT_EQ(xshard::rms_norm(x).output, d.output);         // default eps 1e-6
    EXPECT_EQ(xshard::rms_norm_backward(g, x, d.rstd), bk);  // the backward follows its own name
    xshard::composite_policy::apply("rms_norm:kernel, rms_norm_backward:decompose");
    EXPECT_EQ(xshard::rms_norm(x, 1e-6).output, k.output);
    EXPECT_EQ(xshard::rms_norm(x, 1e-6).rstd, k.rstd);
    EXPECT_EQ(xshard::rms_norm_backward(g, x, d.rstd), bd);
  }
}

TEST(CompositeRmsNorm, ErrorsNameTheOperand) {
  const xt::xtensor<float, 2> x = xt::ones<float>({2, 4});
  const auto r = xshard::rms_norm(x);
  const std::string g = xshard_test::error_of([&] {
    (void)xshard::rms_norm_backward(xt::xtensor<float, 2>::from_shape({2, 5}), x, r.rstd);
  });
  EXPECT_NE(g.find("xshard: rms_norm_backward: grad_y has shape [2,5] but x has shape [2,4]"), std::string::npos) << g;
  const std::string s =
      xshard_test::error_of([&] { (void)xshard::rms_norm_backward(x, x, xt::xtensor<float, 1>::from_shape({2})); });
  EXPECT_NE(
      s.find("xshard: rms_norm_backward: rstd has shape [2] but x's shape with the last extent 1 has shape [2,1]"),
      std::string::npos)
      << s;
  const std::string s2 = xshard_test::error_of([&] {
    (void)xshard::rms_norm_backward(x, x, xt::xtensor<float, 2>::from_shape({2, 4}));
  });
  EXPECT_NE(s2.find("rstd has shape [2,4]"), std::string::npos) << s2;
  const std::string rank0 = xshard_test::error_of([] { (void)xshard::rms_norm(xt::xarray<double>(1.0)); });
  EXPECT_NE(rank0.find("xshard: rms_norm: x has rank 0; it normalises over the last dim"), std::string::npos) << rank0;
  const std::string rank0b = xshard_test::error_of([] {
    const xt::xarray<double> s0(1.0);
    (void)xshard::rms_norm_backward(s0, s0, s0);
  });
  EXPECT_NE(rank0b.find("xshard: rms_norm_backward: x has rank 0"), std::string::npos) << rank0b;
  // xarray in, xarray out; rstd keeps the rank. A transposed view is made contiguous first.
  const auto ra = xshard::rms_norm(xt::xarray<double>(xt::ones<double>({3, 2, 4})));
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(ra.output)>, xt::xarray<double>>);
  EXPECT_EQ(ra.rstd.shape(), (std::vector<std::size_t>{3, 2, 1}));
  const auto x3 = random_tensor<float>(std::array<std::size_t, 3>{2, 3, 5}, 1.0, 91);
  const auto rt = xshard::rms_norm(xt::transpose(x3), 1e-6, composite_mode::kernel);
  EXPECT_EQ(rt.output, xshard::rms_norm(xt::xtensor<float, 3>(xt::transpose(x3)), 1e-6, composite_mode::kernel).output);
}

// ---- policy and registry ----------------------------------------------------

TEST(CompositePolicy, ParsesTheEnvironmentFormat) {
  const auto s =
      xshard::parse_composite_policy("gelu:kernel, softmax:decompose,,xshard.layer_norm_backward:decompose ");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].ids, std::vector{xshard::composite_id::gelu});
  EXPECT_EQ(s[0].mode, composite_mode::kernel);
  EXPECT_EQ(s[1].ids, std::vector{xshard::composite_id::softmax});
  EXPECT_EQ(s[1].mode, composite_mode::decompose);
  EXPECT_EQ(s[2].ids, std::vector{xshard::composite_id::layer_norm_backward});
  EXPECT_TRUE(xshard::parse_composite_policy("").empty());
  const auto all = xshard::parse_composite_policy("all:decompose");
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].ids.size(), xshard::composite_count);
}

TEST(CompositePolicy, ParseErrorsNameTheOffender) {
  const std::string op =
      xshard_test::error_of([] { (void)xshard::parse_composite_policy("gelu:kernel,gleu:decompose"); });
  EXPECT_NE(op.find("XSHARD_COMPOSITES: unknown composite 'gleu' in \"gleu:decompose\""), std::string::npos) << op;
  EXPECT_NE(op.find("known: gelu, gelu_backward, softmax"), std::string::npos) << op;
  const std::string mode = xshard_test::error_of([] { (void)xshard::parse_composite_policy("softmax:fast"); });
  EXPECT_NE(mode.find("unknown mode 'fast' for composite 'softmax'"), std::string::npos) << mode;
  EXPECT_NE(mode.find("(modes: kernel, decompose)"), std::string::npos) << mode;
  const std::string entry = xshard_test::error_of([] { (void)xshard::parse_composite_policy("gelu"); });
  EXPECT_NE(entry.find("entry \"gelu\" is not \"op:mode\""), std::string::npos) << entry;
  const std::string set =
      xshard_test::error_of([] { xshard::composite_policy::set("softmx", composite_mode::kernel); });
  EXPECT_NE(set.find("unknown composite 'softmx'"), std::string::npos) << set;
  EXPECT_THROW(xshard::composite_policy::apply("gelu:slow"), xshard::error);
}

TEST(CompositePolicy, SetScopedAndReset) {
  if (std::getenv("XSHARD_COMPOSITES")) GTEST_SKIP() << "XSHARD_COMPOSITES is set";
  using xshard::composite_id;
  using xshard::composite_policy;
  composite_policy::reset();
  EXPECT_EQ(composite_policy::get(composite_id::gelu), xshard::default_composite_mode);
  EXPECT_EQ(composite_policy::source(composite_id::gelu), xshard::composite_source::default_);
  EXPECT_EQ(xshard::default_composite_mode, composite_mode::kernel);
  composite_policy::set("gelu", composite_mode::decompose);
  EXPECT_EQ(composite_policy::get("gelu"), composite_mode::decompose);
  EXPECT_EQ(composite_policy::get("xshard.gelu"), composite_mode::decompose);
  EXPECT_EQ(composite_policy::source(composite_id::gelu), xshard::composite_source::code);
  // The backward follows its own name.
  EXPECT_EQ(composite_policy::get("gelu_backward"), composite_mode::kernel);
  {
    xshard::scoped_composite_mode k("gelu", composite_mode::kernel);
    EXPECT_EQ(composite_policy::get("gelu"), composite_mode::kernel);
    {
      xshard::scoped_composite_mode d("all", composite_mode::decompose);
      for (const auto& c : xshard::composite_registry)
        EXPECT_EQ(composite_policy::get(c.id), composite_mode::decompose);
    }
    EXPECT_EQ(composite_policy::get("gelu"), composite_mode::kernel);
    EXPECT_EQ(composite_policy::get("softmax"), composite_mode::kernel);
  }
  EXPECT_EQ(composite_policy::get("gelu"), composite_mode::decompose);
  composite_policy::apply("softmax:decompose, gelu:kernel");
  EXPECT_EQ(composite_policy::get("softmax"), composite_mode::decompose);
  EXPECT_EQ(composite_policy::get("gelu"), composite_mode::kernel);
  composite_policy::reset("softmax");
  EXPECT_EQ(composite_policy::source(composite_id::softmax), xshard::composite_source::default_);
  composite_policy::reset();
  EXPECT_EQ(composite_policy::source(composite_id::gelu), xshard::composite_source::default_);
  EXPECT_THROW((void)composite_policy::get("all"), xshard::error);
}

TEST(CompositePolicy, CallsRunWhatThePolicyChooses) {
  // Find inputs where kernel and decomposition differ in the last bit, then
  // check which one the policy-driven call returns.
  const auto x = random_tensor<float>(std::array<std::size_t, 1>{4096}, 3.0, 61);
  const auto g = random_tensor<float>(std::array<std::size_t, 1>{4096}, 1.0, 62);
  const auto k = xshard::gelu(x, gelu_approximate::none, composite_mode::kernel);
  const auto d = xshard::gelu(x, gelu_approximate::none, composite_mode::decompose);
  ASSERT_NE(k, d) << "kernel and decomposition agree bit for bit on every input; pick other data";
  const auto bk = xshard::gelu_backward(g, x, gelu_approximate::none, composite_mode::kernel);
  const auto bd = xshard::gelu_backward(g, x, gelu_approximate::none, composite_mode::decompose);
  ASSERT_NE(bk, bd);
  {
    xshard::scoped_composite_mode s("gelu", composite_mode::decompose);
    EXPECT_EQ(xshard::gelu(x), d);
    EXPECT_EQ(xshard::gelu_backward(g, x), bk);  // gelu_backward still runs its kernel
  }
  {
    xshard::scoped_composite_mode s("gelu", composite_mode::kernel);
    xshard::scoped_composite_mode b("gelu_backward", composite_mode::decompose);
    EXPECT_EQ(xshard::gelu(x), k);
    EXPECT_EQ(xshard::gelu_backward(g, x), bd);
  }
}

TEST(CompositeRegistry, ListsEveryCompositeWithVersionAttributesAndMode) {
  if (std::getenv("XSHARD_COMPOSITES")) GTEST_SKIP() << "XSHARD_COMPOSITES is set";
  xshard::composite_policy::reset();
  xshard::scoped_composite_mode s("softmax", composite_mode::decompose);
  const auto list = xshard::composites();
  std::vector<std::string> names;
  for (const auto& c : list) names.emplace_back(c.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"xshard.gelu", "xshard.gelu_backward", "xshard.softmax",
                                      "xshard.softmax_backward", "xshard.layer_norm", "xshard.layer_norm_backward",
                                      "xshard.rms_norm", "xshard.rms_norm_backward"}));
  for (const auto& c : list) EXPECT_EQ(c.version, 1) << c.name;
  ASSERT_EQ(list[0].attributes.size(), 1u);
  EXPECT_EQ(list[0].attributes[0].name, "approximate");
  EXPECT_EQ(list[2].attributes[0].name, "dim");
  EXPECT_EQ(list[4].attributes[0].name, "eps");
  ASSERT_EQ(list[6].attributes.size(), 1u);
  EXPECT_EQ(list[6].attributes[0].name, "eps");
  EXPECT_EQ(list[6].attributes[0].default_value, "1e-06");
  EXPECT_TRUE(list[7].attributes.empty());
  EXPECT_EQ(list[2].mode, composite_mode::decompose);
  EXPECT_EQ(list[3].mode, composite_mode::kernel);
  std::ostringstream os;
  os << list;
  EXPECT_NE(
      os.str().find("xshard.gelu v1 {approximate = \"none\"|\"tanh\" (default \"none\")} mode=kernel (default)\n"),
      std::string::npos)
      << os.str();
  EXPECT_NE(os.str().find("xshard.softmax v1 {dim = int (default -1)} mode=decompose (code)\n"), std::string::npos)
      << os.str();
  EXPECT_NE(os.str().find("xshard.rms_norm v1 {eps = float (default 1e-06)} mode=kernel (default)\n"),
            std::string::npos)
      << os.str();
  EXPECT_NE(os.str().find("xshard.rms_norm_backward v1 {} mode=kernel (default)\n"), std::string::npos) << os.str();
  EXPECT_EQ(xshard::find_composite("xshard.layer_norm"), xshard::composite_id::layer_norm);
  EXPECT_EQ(xshard::find_composite("rms_norm"), xshard::composite_id::rms_norm);
  EXPECT_EQ(xshard::find_composite("xshard.rms_norm_backward"), xshard::composite_id::rms_norm_backward);
  EXPECT_EQ(xshard::find_composite("group_norm"), std::nullopt);
}

}  // namespace
