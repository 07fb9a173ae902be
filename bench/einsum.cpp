// bench/einsum.cpp - xshard's einsum beside OpenBLAS and Eigen, in one binary.
//
// Run it through bench/run_einsum.sh (builds the release preset, runs this
// binary with 1 and 2 threads, runs bench/peers.py, writes bench/results/).
// By hand:
//
//   OPENBLAS_CORETYPE=Cooperlake XSHARD_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2
//     build/release/bench/einsum --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// The thread count of every library is $XSHARD_NUM_THREADS (xshard's pool
// reads it once per process): OpenBLAS is set to it with
// openblas_set_num_threads (and warns if $OPENBLAS_NUM_THREADS disagrees),
// Eigen gets a ThreadPoolDevice of that many threads (DefaultDevice, i.e.
// single-threaded, for 1). $OPENBLAS_CORETYPE is read when libopenblas is
// loaded, before main: it must be in the environment (Cooperlake here, see
// ../shared/PERF-NOTES.md); main warns when it is not.
//
// Benchmarks, named <precision>/<case>/<implementation>, all real time:
//
//   f32/<case>/xshard     xshard::einsum_into<"eq">(out, a, b) (no allocation
//                         of the output in the loop)
//   f32/<case>/openblas   cblas_sgemm with the case's M, N, K on the operands'
//                         own memory (no copies):
//                           fwd, bwd_x, bwd_w: one sgemm;
//                           attn_qk, attn_pv:  a loop of 128 sgemm, one per
//                                              (b, h) (batch loop, same M, N, K
//                                              as each xshard batch);
//                           ikj_jkl:           one sgemm M=N=512, K=4096 that
//                                              reads A as i x (k,j) and B as
//                                              (j,k) x l, i.e. the same FLOPs
//                                              but with K's order left as it
//                                              is in memory: the permute of B
//                                              a BLAS user needs is not timed.
//   f32/<case>/eigen      Eigen::Tensor contraction on TensorMaps of the same
//                         memory (row-major); the two batched cases loop over
//                         the 128 (b, h) matrices, each a 2-D contraction on
//                         the device (Eigen's contraction has no batch dims).
//   f32/mlp_layer/...     the six GEMMs of one train_mlp layer (batch 64,
//                         width 128, hidden 512: forward h = x W1^T and
//                         y = a W2 with W2 [hidden, width], backward da,
//                         dW2, dx, dW1), xshard's
//                         einsum_into against six cblas_sgemm calls. A
//                         300-step train_mlp run does 2400 of them: this is
//                         the GEMM floor of its training step.
//   f32/sgemm2048/openblas  square sgemm n=2048: the machine's yardstick
//                         (first benchmark; f32/sgemm2048_again/openblas
//                         repeats it after the f64 cases to show drift).
//   f64/<case>/...        the three GEMM-shaped cases in double: xshard,
//                         dgemm, Eigen.
//   small/<shape>/...     xt::xtensor_fixed products, einsum_into<"ij,jk->ik">
//                         at 4, 8, 16, 32 and a 3-index "ijk,jkl->il" on
//                         8x8x8 operands, beside Eigen::Matrix<float, N, N>
//                         (noalias product) and, for the 3-index one, the
//                         same contraction as a fixed-size row-major 8x64 by
//                         64x8 Eigen::Matrix product and as an
//                         Eigen::TensorFixedSize contraction.
//   small/dynamic_8x8/... the same 8x8 product on xt::xtensor (run-time
//                         shapes: einsum's general path, whose time is its
//                         per-call dispatch) beside Eigen::MatrixXf.
//
// Cases (the einsum issue's six, shapes as there):
//   fwd      ...n,mn->...m    x(8,512,1024) w(1024,1024)        M=4096 N=1024 K=1024
//   bwd_x    ...m,mn->...n    g(8,512,1024) w(1024,1024)        M=4096 N=1024 K=1024
//   bwd_w    ...m,...n->mn    g(8,512,1024) x(8,512,1024)       M=1024 N=1024 K=4096
//   attn_qk  bhqd,bhkd->bhqk  (8,16,256,64) x2                  128 x (256 x 256 x 64)
//   attn_pv  bhqk,bhkd->bhqd  (8,16,256,256), (8,16,256,64)      128 x (256 x 64 x 256)
//   ikj_jkl  ikj,jkl->il      (512,64,64), (64,64,512)          M=512 N=512 K=4096
//
// Counters: `GFLOP/s` (2*M*N*K*batch per call, a rate over real time) on
// every benchmark; `allocs/call` (global operator new calls per iteration,
// counted by tests/support/alloc_counter.hpp's replacement operator new) on
// xshard's.
// At the end a summary table prints xshard's GFLOP/s and its ratio to
// OpenBLAS on the same M, N, K, to OpenBLAS sgemm n=2048 and to Eigen
// (medians when --benchmark_repetitions > 1). Before the benchmarks every
// case's xshard result is checked against OpenBLAS (ikj_jkl: against sgemm
// on a permuted copy of B) or Eigen; a mismatch prints a warning and is
// recorded in the JSON context.
#include <benchmark/benchmark.h>
#include <unistd.h>  // isatty

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>
#include <xshard/xshard.hpp>
#include <xtensor/xfixed.hpp>
#include <xtensor/xtensor.hpp>

#include "../tests/support/alloc_counter.hpp"  // replaces operator new: allocs/call

#if XSHARD_BENCH_HAVE_OPENBLAS
#include <cblas.h>
#endif
#if XSHARD_BENCH_HAVE_EIGEN
#define EIGEN_USE_THREADS
#include <Eigen/Core>
#include <unsupported/Eigen/CXX11/Tensor>
#endif

namespace {

using benchmark::Counter;
using benchmark::State;
namespace alloc_stats = xshard_test::alloc_stats;

std::size_t g_threads = 1;  // $XSHARD_NUM_THREADS, for every library

// ---------------------------------------------------------------------------
// Operands

template <class T, class E>
void fill_random(E& e, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<T> dist(T(-1), T(1));
  for (auto& v : e) v = dist(gen);
}

/// A GEMM view of a case: `batch` products C_b (M x N) = op(A_b) op(B_b),
/// row-major, each operand at a fixed stride per batch.
struct gemm_shape {
  int batch, m, n, k;
  bool trans_a, trans_b;
  int lda, ldb, ldc;
  std::ptrdiff_t stride_a, stride_b, stride_c;
  double flops() const { return 2.0 * batch * m * n * k; }
};

template <class T, std::size_t RA, std::size_t RB, std::size_t RC>
struct problem {
  xt::xtensor<T, RA> a;
  xt::xtensor<T, RB> b;
  xt::xtensor<T, RC> c;
  gemm_shape g;
};

template <class T, std::size_t RA, std::size_t RB, std::size_t RC>
std::unique_ptr<problem<T, RA, RB, RC>> make_problem(const std::array<std::size_t, RA>& sa,
                                                     const std::array<std::size_t, RB>& sb,
                                                     const std::array<std::size_t, RC>& sc, gemm_shape g) {
  auto p = std::make_unique<problem<T, RA, RB, RC>>();
  p->a = xt::xtensor<T, RA>::from_shape(sa);
  p->b = xt::xtensor<T, RB>::from_shape(sb);
  p->c = xt::xtensor<T, RC>::from_shape(sc);
  fill_random<T>(p->a, 1);
  fill_random<T>(p->b, 2);
  std::fill(p->c.begin(), p->c.end(), T(0));
  p->g = g;
  return p;
}

// The six cases. Each accessor builds its operands on first use and keeps
// them (so repetitions and implementations share the same memory).
template <class T>
auto& fwd() {  // ...n,mn->...m
  static auto p = make_problem<T, 3, 2, 3>({8, 512, 1024}, {1024, 1024}, {8, 512, 1024},
                                           {1, 4096, 1024, 1024, false, true, 1024, 1024, 1024, 0, 0, 0});
  return *p;
}
template <class T>
auto& bwd_x() {  // ...m,mn->...n
  static auto p = make_problem<T, 3, 2, 3>({8, 512, 1024}, {1024, 1024}, {8, 512, 1024},
                                           {1, 4096, 1024, 1024, false, false, 1024, 1024, 1024, 0, 0, 0});
  return *p;
}
template <class T>
auto& bwd_w() {  // ...m,...n->mn
  static auto p = make_problem<T, 3, 3, 2>({8, 512, 1024}, {8, 512, 1024}, {1024, 1024},
                                           {1, 1024, 1024, 4096, true, false, 1024, 1024, 1024, 0, 0, 0});
  return *p;
}
auto& attn_qk() {  // bhqd,bhkd->bhqk
  static auto p =
      make_problem<float, 4, 4, 4>({8, 16, 256, 64}, {8, 16, 256, 64}, {8, 16, 256, 256},
                                   {128, 256, 256, 64, false, true, 64, 64, 256, 256 * 64, 256 * 64, 256 * 256});
  return *p;
}
auto& attn_pv() {  // bhqk,bhkd->bhqd
  static auto p =
      make_problem<float, 4, 4, 4>({8, 16, 256, 256}, {8, 16, 256, 64}, {8, 16, 256, 64},
                                   {128, 256, 64, 256, false, false, 256, 64, 64, 256 * 256, 256 * 64, 256 * 64});
  return *p;
}
auto& ikj_jkl() {  // ikj,jkl->il (BLAS: K order as in memory, see the header)
  static auto p = make_problem<float, 3, 3, 2>({512, 64, 64}, {64, 64, 512}, {512, 512},
                                               {1, 512, 512, 4096, false, false, 4096, 512, 512, 0, 0, 0});
  return *p;
}

template <class T>
void xshard_fwd(problem<T, 3, 2, 3>& p) {
  xshard::einsum_into<"...n,mn->...m">(p.c, p.a, p.b);
}
template <class T>
void xshard_bwd_x(problem<T, 3, 2, 3>& p) {
  xshard::einsum_into<"...m,mn->...n">(p.c, p.a, p.b);
}
template <class T>
void xshard_bwd_w(problem<T, 3, 3, 2>& p) {
  xshard::einsum_into<"...m,...n->mn">(p.c, p.a, p.b);
}
void xshard_attn_qk(problem<float, 4, 4, 4>& p) { xshard::einsum_into<"bhqd,bhkd->bhqk">(p.c, p.a, p.b); }
void xshard_attn_pv(problem<float, 4, 4, 4>& p) { xshard::einsum_into<"bhqk,bhkd->bhqd">(p.c, p.a, p.b); }
void xshard_ikj_jkl(problem<float, 3, 3, 2>& p) { xshard::einsum_into<"ikj,jkl->il">(p.c, p.a, p.b); }

/// One train_mlp layer's GEMMs (examples/train_mlp/model.hpp's shapes).
struct mlp_layer_problem {
  static constexpr std::size_t b = 64, d = 128, f = 512;
  xt::xtensor<float, 2> x, w1, w2, a, g, dh;     // inputs
  xt::xtensor<float, 2> h, y, da, dw2, dx, dw1;  // outputs
  double flops() const { return 6 * 2.0 * b * d * f; }
};
mlp_layer_problem& mlp_layer() {
  static auto p = [] {
    using P = mlp_layer_problem;
    auto q = std::make_unique<P>();
    auto make = [](std::size_t r, std::size_t c, unsigned seed) {
      xt::xtensor<float, 2> t = xt::xtensor<float, 2>::from_shape({r, c});
      fill_random<float>(t, seed);
      return t;
    };
    q->x = make(P::b, P::d, 1), q->w1 = make(P::f, P::d, 2), q->w2 = make(P::f, P::d, 3);
    q->a = make(P::b, P::f, 4), q->g = make(P::b, P::d, 5), q->dh = make(P::b, P::f, 6);
    q->h = make(P::b, P::f, 0), q->y = make(P::b, P::d, 0), q->da = make(P::b, P::f, 0);
    q->dw2 = make(P::f, P::d, 0), q->dx = make(P::b, P::d, 0), q->dw1 = make(P::f, P::d, 0);
    return q;
  }();
  return *p;
}
void xshard_mlp_layer(mlp_layer_problem& p) {
  xshard::einsum_into<"...n,mn->...m">(p.h, p.x, p.w1);    // h = x W1^T
  xshard::einsum_into<"...m,mk->...k">(p.y, p.a, p.w2);    // y = a W2 (W2 [f, d], nn/mlp.hpp)
  xshard::einsum_into<"...k,mk->...m">(p.da, p.g, p.w2);   // da = g W2^T
  xshard::einsum_into<"...m,...k->mk">(p.dw2, p.a, p.g);   // dW2 = a^T g
  xshard::einsum_into<"...m,mn->...n">(p.dx, p.dh, p.w1);  // dx = dh W1
  xshard::einsum_into<"...m,...n->mn">(p.dw1, p.dh, p.x);  // dW1 = dh^T x
}

void set_flops(State& state, double flops) {
  state.counters["GFLOP/s"] = Counter(flops * 1e-9, Counter::kIsIterationInvariantRate);
}

/// Times f(p) (a first call outside the loop: pool start-up, packed
/// buffers), with `flops` per call and the operator new calls per call.
template <class Prob, class F>
void bench_calls(State& state, Prob& p, F f, double flops, const void* out) {
  f(p);
  const std::size_t before = alloc_stats::allocations();
  for (auto _ : state) {
    f(p);
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
  }
  const std::size_t allocs = alloc_stats::allocations() - before;
  set_flops(state, flops);
  state.counters["allocs/call"] = Counter(static_cast<double>(allocs), Counter::kAvgIterations);
}

template <class Prob, class F>
void bench_xshard(State& state, Prob& p, F f) {
  bench_calls(state, p, f, p.g.flops(), p.c.data());
}

/// The train_mlp layer's six GEMMs, by xshard or by OpenBLAS.
template <class F>
void bench_mlp_layer(State& state, F f) {
  mlp_layer_problem& p = mlp_layer();
  bench_calls(state, p, f, p.flops(), p.dw1.data());
}

// ---------------------------------------------------------------------------
// OpenBLAS

#if XSHARD_BENCH_HAVE_OPENBLAS
void blas_gemm(const gemm_shape& g, const float* a, const float* b, float* c) {
  for (int i = 0; i < g.batch; ++i)
    cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans, g.m, g.n,
                g.k, 1.0f, a + i * g.stride_a, g.lda, b + i * g.stride_b, g.ldb, 0.0f, c + i * g.stride_c, g.ldc);
}
void blas_gemm(const gemm_shape& g, const double* a, const double* b, double* c) {
  for (int i = 0; i < g.batch; ++i)
    cblas_dgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans, g.m, g.n,
                g.k, 1.0, a + i * g.stride_a, g.lda, b + i * g.stride_b, g.ldb, 0.0, c + i * g.stride_c, g.ldc);
}

template <class Prob>
void bench_blas(State& state, Prob& p) {
  auto* out = p.c.data();
  blas_gemm(p.g, p.a.data(), p.b.data(), out);
  for (auto _ : state) {
    blas_gemm(p.g, p.a.data(), p.b.data(), out);
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
  }
  set_flops(state, p.g.flops());
}

void bench_sgemm2048(State& state) {
  static auto p = make_problem<float, 2, 2, 2>({2048, 2048}, {2048, 2048}, {2048, 2048},
                                               {1, 2048, 2048, 2048, false, false, 2048, 2048, 2048, 0, 0, 0});
  bench_blas(state, *p);
}

void blas_mlp_layer(mlp_layer_problem& p) {
  constexpr int b = mlp_layer_problem::b, d = mlp_layer_problem::d, f = mlp_layer_problem::f;
  constexpr auto N = CblasNoTrans, T = CblasTrans;
  cblas_sgemm(CblasRowMajor, N, T, b, f, d, 1.0f, p.x.data(), d, p.w1.data(), d, 0.0f, p.h.data(), f);
  cblas_sgemm(CblasRowMajor, N, N, b, d, f, 1.0f, p.a.data(), f, p.w2.data(), d, 0.0f, p.y.data(), d);
  cblas_sgemm(CblasRowMajor, N, T, b, f, d, 1.0f, p.g.data(), d, p.w2.data(), d, 0.0f, p.da.data(), f);
  cblas_sgemm(CblasRowMajor, T, N, f, d, b, 1.0f, p.a.data(), f, p.g.data(), d, 0.0f, p.dw2.data(), d);
  cblas_sgemm(CblasRowMajor, N, N, b, d, f, 1.0f, p.dh.data(), f, p.w1.data(), d, 0.0f, p.dx.data(), d);
  cblas_sgemm(CblasRowMajor, T, N, f, d, b, 1.0f, p.dh.data(), f, p.x.data(), d, 0.0f, p.dw1.data(), d);
}
#endif

// ---------------------------------------------------------------------------
// Eigen

#if XSHARD_BENCH_HAVE_EIGEN
using eidx = Eigen::Index;
template <class T, int R>
using emap = Eigen::TensorMap<Eigen::Tensor<T, R, Eigen::RowMajor, eidx>>;
template <class T, int R>
using ecmap = Eigen::TensorMap<const Eigen::Tensor<const T, R, Eigen::RowMajor, eidx>>;
template <int N>
using epairs = Eigen::array<Eigen::IndexPair<eidx>, N>;

Eigen::ThreadPool& eigen_pool() {
  static Eigen::ThreadPool pool(static_cast<int>(g_threads));
  return pool;
}
Eigen::ThreadPoolDevice& eigen_device() {
  static Eigen::ThreadPoolDevice dev(&eigen_pool(), static_cast<int>(g_threads));
  return dev;
}

/// out = a.contract(b, dims), on the pool device or (1 thread) the default one.
template <class Out, class Expr>
void eigen_assign(Out& out, const Expr& e) {
  if (g_threads > 1)
    out.device(eigen_device()) = e;
  else
    out = e;
}

template <class T>
void eigen_fwd(problem<T, 3, 2, 3>& p) {
  ecmap<T, 3> a(p.a.data(), 8, 512, 1024);
  ecmap<T, 2> b(p.b.data(), 1024, 1024);
  emap<T, 3> c(p.c.data(), 8, 512, 1024);
  eigen_assign(c, a.contract(b, epairs<1>{Eigen::IndexPair<eidx>(2, 1)}));
}
template <class T>
void eigen_bwd_x(problem<T, 3, 2, 3>& p) {
  ecmap<T, 3> a(p.a.data(), 8, 512, 1024);
  ecmap<T, 2> b(p.b.data(), 1024, 1024);
  emap<T, 3> c(p.c.data(), 8, 512, 1024);
  eigen_assign(c, a.contract(b, epairs<1>{Eigen::IndexPair<eidx>(2, 0)}));
}
template <class T>
void eigen_bwd_w(problem<T, 3, 3, 2>& p) {
  ecmap<T, 3> a(p.a.data(), 8, 512, 1024);
  ecmap<T, 3> b(p.b.data(), 8, 512, 1024);
  emap<T, 2> c(p.c.data(), 1024, 1024);
  eigen_assign(c, a.contract(b, epairs<2>{Eigen::IndexPair<eidx>(0, 0), Eigen::IndexPair<eidx>(1, 1)}));
}
void eigen_attn_qk(problem<float, 4, 4, 4>& p) {
  for (int i = 0; i < 128; ++i) {
    ecmap<float, 2> a(p.a.data() + i * 256 * 64, 256, 64);
    ecmap<float, 2> b(p.b.data() + i * 256 * 64, 256, 64);
    emap<float, 2> c(p.c.data() + i * 256 * 256, 256, 256);
    eigen_assign(c, a.contract(b, epairs<1>{Eigen::IndexPair<eidx>(1, 1)}));
  }
}
void eigen_attn_pv(problem<float, 4, 4, 4>& p) {
  for (int i = 0; i < 128; ++i) {
    ecmap<float, 2> a(p.a.data() + i * 256 * 256, 256, 256);
    ecmap<float, 2> b(p.b.data() + i * 256 * 64, 256, 64);
    emap<float, 2> c(p.c.data() + i * 256 * 64, 256, 64);
    eigen_assign(c, a.contract(b, epairs<1>{Eigen::IndexPair<eidx>(1, 0)}));
  }
}
void eigen_ikj_jkl(problem<float, 3, 3, 2>& p) {
  ecmap<float, 3> a(p.a.data(), 512, 64, 64);  // i k j
  ecmap<float, 3> b(p.b.data(), 64, 64, 512);  // j k l
  emap<float, 2> c(p.c.data(), 512, 512);
  eigen_assign(c, a.contract(b, epairs<2>{Eigen::IndexPair<eidx>(1, 1), Eigen::IndexPair<eidx>(2, 0)}));
}

template <class Prob, class F>
void bench_eigen(State& state, Prob& p, F f) {
  f(p);
  for (auto _ : state) {
    f(p);
    benchmark::DoNotOptimize(p.c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, p.g.flops());
}
#endif

// ---------------------------------------------------------------------------
// Small fixed-size products

/// einsum_into<Eq>(c, a, b) timed, after one call that warms the path up;
/// counts the allocations per call.
template <xshard::fixed_string Eq, class C, class A, class B>
void time_small_xshard(State& state, C& c, A& a, B& b, double flops) {
  fill_random<float>(a, 3);
  fill_random<float>(b, 4);
  xshard::einsum_into<Eq>(c, a, b);
  const std::size_t before = alloc_stats::allocations();
  for (auto _ : state) {
    benchmark::DoNotOptimize(a.data());
    benchmark::DoNotOptimize(b.data());
    xshard::einsum_into<Eq>(c, a, b);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  const std::size_t allocs = alloc_stats::allocations() - before;
  set_flops(state, flops);
  state.counters["allocs/call"] = Counter(static_cast<double>(allocs), Counter::kAvgIterations);
}

template <std::size_t N>
void bench_small_xshard(State& state) {
  xt::xtensor_fixed<float, xt::xshape<N, N>> a, b, c;
  time_small_xshard<"ij,jk->ik">(state, c, a, b, 2.0 * N * N * N);
}

void bench_small3_xshard(State& state) {
  xt::xtensor_fixed<float, xt::xshape<8, 8, 8>> a, b;
  xt::xtensor_fixed<float, xt::xshape<8, 8>> c;
  time_small_xshard<"ijk,jkl->il">(state, c, a, b, 2.0 * 8 * 8 * 64);
}

/// The general path on a tiny product of run-time shapes (xt::xtensor 8x8):
/// what a call costs besides its arithmetic (binding, extents checks, the
/// GEMM problem's lookup, the driver).
void bench_small_dynamic_xshard(State& state) {
  xt::xtensor<float, 2> a({8, 8}), b({8, 8}), c({8, 8});
  time_small_xshard<"ij,jk->ik">(state, c, a, b, 2.0 * 8 * 8 * 8);
}

#if XSHARD_BENCH_HAVE_EIGEN
/// c.noalias() = a * b timed.
template <class C, class A, class B>
void time_small_eigen(State& state, C& c, const A& a, const B& b, double flops) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(a.data());
    benchmark::DoNotOptimize(b.data());
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, flops);
}

void bench_small_dynamic_eigen(State& state) {  // Eigen::MatrixXf: run-time shapes too
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(8, 8), b = Eigen::MatrixXf::Random(8, 8), c(8, 8);
  time_small_eigen(state, c, a, b, 2.0 * 8 * 8 * 8);
}

template <int N>
void bench_small_eigen(State& state) {
  Eigen::Matrix<float, N, N> a = Eigen::Matrix<float, N, N>::Random();
  Eigen::Matrix<float, N, N> b = Eigen::Matrix<float, N, N>::Random();
  Eigen::Matrix<float, N, N> c;
  time_small_eigen(state, c, a, b, 2.0 * N * N * N);
}

void bench_small3_eigen_matrix(State& state) {  // ijk,jkl->il as (8 x 64) (64 x 8), row-major
  Eigen::Matrix<float, 8, 64, Eigen::RowMajor> a = Eigen::Matrix<float, 8, 64, Eigen::RowMajor>::Random();
  Eigen::Matrix<float, 64, 8, Eigen::RowMajor> b = Eigen::Matrix<float, 64, 8, Eigen::RowMajor>::Random();
  Eigen::Matrix<float, 8, 8, Eigen::RowMajor> c;
  time_small_eigen(state, c, a, b, 2.0 * 8 * 8 * 64);
}

void bench_small3_eigen_tensor(State& state) {
  Eigen::TensorFixedSize<float, Eigen::Sizes<8, 8, 8>, Eigen::RowMajor> a, b;
  Eigen::TensorFixedSize<float, Eigen::Sizes<8, 8>, Eigen::RowMajor> c;
  a.setRandom();
  b.setRandom();
  const epairs<2> dims{Eigen::IndexPair<eidx>(1, 0), Eigen::IndexPair<eidx>(2, 1)};
  for (auto _ : state) {
    benchmark::DoNotOptimize(a.data());
    benchmark::DoNotOptimize(b.data());
    c = a.contract(b, dims);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, 2.0 * 8 * 8 * 64);
}
#endif

// ---------------------------------------------------------------------------
// Check xshard's results before timing anything.

template <class T>
double rel_diff(const T* x, const T* ref, std::size_t n) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    num = std::max(num, std::abs(static_cast<double>(x[i]) - static_cast<double>(ref[i])));
    den = std::max(den, std::abs(static_cast<double>(ref[i])));
  }
  return den > 0 ? num / den : num;
}

template <class Prob, class F, class Ref>
void verify(const char* name, Prob& p, F xs, Ref ref) {
  using T = typename decltype(p.c)::value_type;
  xs(p);
  const std::vector<T> got(p.c.begin(), p.c.end());
  const char* by = ref(p);
  if (by == nullptr) {
    benchmark::AddCustomContext(std::string("verify ") + name, "skipped (no OpenBLAS or Eigen)");
    return;
  }
  const double d = rel_diff(got.data(), p.c.data(), got.size());
  const double tol = std::is_same_v<T, float> ? 1e-4 : 1e-12;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s max|diff|/max|ref| = %.2e vs %s", d <= tol ? "ok" : "MISMATCH", d, by);
  benchmark::AddCustomContext(std::string("verify ") + name, buf);
  if (d > tol) std::fprintf(stderr, "WARNING: xshard %s disagrees with %s: %s\n", name, by, buf);
}

template <class Prob>
const char* reference_gemm([[maybe_unused]] Prob& p, [[maybe_unused]] auto eigen_f) {
#if XSHARD_BENCH_HAVE_OPENBLAS
  blas_gemm(p.g, p.a.data(), p.b.data(), p.c.data());
  return "OpenBLAS";
#elif XSHARD_BENCH_HAVE_EIGEN
  eigen_f(p);
  return "Eigen";
#else
  return nullptr;
#endif
}

const char* reference_ikj_jkl([[maybe_unused]] problem<float, 3, 3, 2>& p) {
#if XSHARD_BENCH_HAVE_OPENBLAS
  // B[j][k][l] -> B'[k][j][l], then sgemm of A (i x (k,j)) by B' ((k,j) x l).
  xt::xtensor<float, 3> bp = xt::xtensor<float, 3>::from_shape({64, 64, 512});
  for (std::size_t j = 0; j < 64; ++j)
    for (std::size_t k = 0; k < 64; ++k)
      for (std::size_t l = 0; l < 512; ++l) bp(k, j, l) = p.b(j, k, l);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 512, 512, 4096, 1.0f, p.a.data(), 4096, bp.data(), 512, 0.0f,
              p.c.data(), 512);
  return "OpenBLAS on a permuted B";
#elif XSHARD_BENCH_HAVE_EIGEN
  eigen_ikj_jkl(p);
  return "Eigen";
#else
  return nullptr;
#endif
}

#if XSHARD_BENCH_HAVE_EIGEN
#define XSHARD_EIGEN_OR_NULL(f) f
#else
#define XSHARD_EIGEN_OR_NULL(f) [](auto&) {}
#endif

void verify_mlp_layer() {
#if XSHARD_BENCH_HAVE_OPENBLAS
  mlp_layer_problem& p = mlp_layer();
  xshard_mlp_layer(p);
  const std::array<xt::xtensor<float, 2>, 6> got{p.h, p.y, p.da, p.dw2, p.dx, p.dw1};
  blas_mlp_layer(p);
  const std::array<const xt::xtensor<float, 2>*, 6> ref{&p.h, &p.y, &p.da, &p.dw2, &p.dx, &p.dw1};
  double d = 0;
  for (std::size_t i = 0; i < got.size(); ++i) d = std::max(d, rel_diff(got[i].data(), ref[i]->data(), got[i].size()));
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s max|diff|/max|ref| = %.2e vs OpenBLAS", d <= 1e-4 ? "ok" : "MISMATCH", d);
  benchmark::AddCustomContext("verify f32/mlp_layer", buf);
  if (d > 1e-4) std::fprintf(stderr, "WARNING: xshard f32/mlp_layer disagrees with OpenBLAS: %s\n", buf);
#else
  benchmark::AddCustomContext("verify f32/mlp_layer", "skipped (no OpenBLAS)");
#endif
}

void verify_all() {
  verify_mlp_layer();
  verify("f32/fwd", fwd<float>(), xshard_fwd<float>,
         [](auto& p) { return reference_gemm(p, XSHARD_EIGEN_OR_NULL(eigen_fwd<float>)); });
  verify("f32/bwd_x", bwd_x<float>(), xshard_bwd_x<float>,
         [](auto& p) { return reference_gemm(p, XSHARD_EIGEN_OR_NULL(eigen_bwd_x<float>)); });
  verify("f32/bwd_w", bwd_w<float>(), xshard_bwd_w<float>,
         [](auto& p) { return reference_gemm(p, XSHARD_EIGEN_OR_NULL(eigen_bwd_w<float>)); });
  verify("f32/attn_qk", attn_qk(), xshard_attn_qk,
         [](auto& p) { return reference_gemm(p, XSHARD_EIGEN_OR_NULL(eigen_attn_qk)); });
  verify("f32/attn_pv", attn_pv(), xshard_attn_pv,
         [](auto& p) { return reference_gemm(p, XSHARD_EIGEN_OR_NULL(eigen_attn_pv)); });
  verify("f32/ikj_jkl", ikj_jkl(), xshard_ikj_jkl, [](auto& p) { return reference_ikj_jkl(p); });
  verify("f64/fwd", fwd<double>(), xshard_fwd<double>,
         [](auto& p) { return reference_gemm(p, XSHARD_EIGEN_OR_NULL(eigen_fwd<double>)); });
  verify("f64/bwd_x", bwd_x<double>(), xshard_bwd_x<double>,
         [](auto& p) { return reference_gemm(p, XSHARD_EIGEN_OR_NULL(eigen_bwd_x<double>)); });
  verify("f64/bwd_w", bwd_w<double>(), xshard_bwd_w<double>,
         [](auto& p) { return reference_gemm(p, XSHARD_EIGEN_OR_NULL(eigen_bwd_w<double>)); });
}

// ---------------------------------------------------------------------------
// Registration

constexpr double kWarmUp = 0.2;  // seconds; also lets OpenBLAS's spinning threads go idle

template <class F>
void reg(const std::string& name, F f) {
  benchmark::RegisterBenchmark(name.c_str(), f)->UseRealTime()->MinWarmUpTime(kWarmUp)->Unit(benchmark::kMillisecond);
}

template <class Prob, class XF, class EF>
void reg_case(const std::string& name, Prob& (*get)(), XF xs, [[maybe_unused]] EF eig) {
  reg(name + "/xshard", [get, xs](State& s) { bench_xshard(s, get(), xs); });
#if XSHARD_BENCH_HAVE_OPENBLAS
  reg(name + "/openblas", [get](State& s) { bench_blas(s, get()); });
#endif
#if XSHARD_BENCH_HAVE_EIGEN
  reg(name + "/eigen", [get, eig](State& s) { bench_eigen(s, get(), eig); });
#endif
}

void register_all() {
#if XSHARD_BENCH_HAVE_EIGEN
#define XSHARD_EIGEN_FN(f) f
#else
#define XSHARD_EIGEN_FN(f) nullptr
#endif
#if XSHARD_BENCH_HAVE_OPENBLAS
  reg("f32/sgemm2048/openblas", bench_sgemm2048);
#endif
  reg_case("f32/fwd", &fwd<float>, xshard_fwd<float>, XSHARD_EIGEN_FN(eigen_fwd<float>));
  reg_case("f32/bwd_x", &bwd_x<float>, xshard_bwd_x<float>, XSHARD_EIGEN_FN(eigen_bwd_x<float>));
  reg_case("f32/bwd_w", &bwd_w<float>, xshard_bwd_w<float>, XSHARD_EIGEN_FN(eigen_bwd_w<float>));
  reg_case("f32/attn_qk", &attn_qk, xshard_attn_qk, XSHARD_EIGEN_FN(eigen_attn_qk));
  reg_case("f32/attn_pv", &attn_pv, xshard_attn_pv, XSHARD_EIGEN_FN(eigen_attn_pv));
  reg_case("f32/ikj_jkl", &ikj_jkl, xshard_ikj_jkl, XSHARD_EIGEN_FN(eigen_ikj_jkl));
  reg("f32/mlp_layer/xshard", [](State& s) { bench_mlp_layer(s, xshard_mlp_layer); });
#if XSHARD_BENCH_HAVE_OPENBLAS
  reg("f32/mlp_layer/openblas", [](State& s) { bench_mlp_layer(s, blas_mlp_layer); });
#endif
  reg_case("f64/fwd", &fwd<double>, xshard_fwd<double>, XSHARD_EIGEN_FN(eigen_fwd<double>));
  reg_case("f64/bwd_x", &bwd_x<double>, xshard_bwd_x<double>, XSHARD_EIGEN_FN(eigen_bwd_x<double>));
  reg_case("f64/bwd_w", &bwd_w<double>, xshard_bwd_w<double>, XSHARD_EIGEN_FN(eigen_bwd_w<double>));
#if XSHARD_BENCH_HAVE_OPENBLAS
  reg("f32/sgemm2048_again/openblas", bench_sgemm2048);  // drift check: the load changes during a run
#endif
#undef XSHARD_EIGEN_FN

  // Small products: nanoseconds, single-threaded for every library.
  auto small = [](const std::string& name, void (*f)(State&)) {
    benchmark::RegisterBenchmark(name.c_str(), f)->UseRealTime()->MinWarmUpTime(0.05)->Unit(benchmark::kNanosecond);
  };
  small("small/4x4/xshard", bench_small_xshard<4>);
  small("small/8x8/xshard", bench_small_xshard<8>);
  small("small/16x16/xshard", bench_small_xshard<16>);
  small("small/32x32/xshard", bench_small_xshard<32>);
  small("small/ijk_jkl_8/xshard", bench_small3_xshard);
  small("small/dynamic_8x8/xshard", bench_small_dynamic_xshard);
#if XSHARD_BENCH_HAVE_EIGEN
  small("small/4x4/eigen", bench_small_eigen<4>);
  small("small/8x8/eigen", bench_small_eigen<8>);
  small("small/16x16/eigen", bench_small_eigen<16>);
  small("small/32x32/eigen", bench_small_eigen<32>);
  small("small/ijk_jkl_8/eigen", bench_small3_eigen_matrix);
  small("small/ijk_jkl_8/eigen_tensor", bench_small3_eigen_tensor);
  small("small/dynamic_8x8/eigen", bench_small_dynamic_eigen);
#endif
}

// ---------------------------------------------------------------------------
// Console reporter that adds a summary of xshard's ratios at the end.

class summary_reporter : public benchmark::ConsoleReporter {
 public:
  explicit summary_reporter(OutputOptions opts) : ConsoleReporter(opts) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      // Keep the median when there are aggregates, else the single run.
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
      const auto it = r.counters.find("GFLOP/s");
      if (it == r.counters.end()) continue;
      gflops_[r.run_name.function_name] = it->second.value;
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::FILE* o = stdout;
    std::fflush(o);
    std::fprintf(o, "\nxshard summary, %zu thread(s), GFLOP/s (medians when repeated)\n", g_threads);
    std::fprintf(o, "%-16s %9s %9s %9s %9s %9s %9s %9s\n", "case", "xshard", "blas", "blas2048", "eigen", "x/blas",
                 "x/2048", "x/eigen");
    const double y = get("f32/sgemm2048/openblas");
    for (const char* c : {"f32/fwd", "f32/bwd_x", "f32/bwd_w", "f32/attn_qk", "f32/attn_pv", "f32/ikj_jkl",
                          "f32/mlp_layer", "f64/fwd", "f64/bwd_x", "f64/bwd_w"}) {
      const std::string s(c);
      const double x = get(s + "/xshard"), b = get(s + "/openblas"), e = get(s + "/eigen");
      const bool f32 = s.starts_with("f32");
      std::fprintf(o, "%-16s %9.1f %9.1f %9.1f %9.1f %9.2f %9.2f %9.2f\n", c, x, b, f32 ? y : NAN, e, x / b,
                   f32 ? x / y : NAN, x / e);
    }
    for (const char* c :
         {"small/4x4", "small/8x8", "small/16x16", "small/32x32", "small/ijk_jkl_8", "small/dynamic_8x8"}) {
      const std::string s(c);
      const double x = get(s + "/xshard"), e = get(s + "/eigen");
      std::fprintf(o, "%-16s %9.1f %9s %9s %9.1f %9s %9s %9.2f\n", c, x, "-", "-", e, "-", "-", x / e);
    }
    std::fflush(o);
  }

 private:
  double get(const std::string& name) const {
    const auto it = gflops_.find(name);
    return it == gflops_.end() ? NAN : it->second;
  }
  std::map<std::string, double> gflops_;
};

void describe_setup() {
  benchmark::AddCustomContext("xshard_threads", std::to_string(g_threads));
  benchmark::AddCustomContext("compiler", __VERSION__);
#ifdef __AVX512F__
  benchmark::AddCustomContext("tu_isa", "AVX-512 (compiled with -march=native or -mavx512f)");
#elif defined(__AVX2__)
  benchmark::AddCustomContext("tu_isa", "AVX2");
#else
  benchmark::AddCustomContext("tu_isa", "baseline x86-64 (SSE2); xshard dispatches at run time");
#endif
  // The kernels xshard's run-time dispatch picked (XSHARD_ISA caps them).
  constexpr const char* isa_names[] = {"generic", "avx2", "avx512"};
  benchmark::AddCustomContext("xshard_kernels", isa_names[static_cast<int>(xshard::active_isa())]);
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
#if XSHARD_BENCH_HAVE_OPENBLAS
  if (coretype == nullptr || *coretype == '\0')
    std::fprintf(stderr,
                 "WARNING: OPENBLAS_CORETYPE is not set. It is read when libopenblas loads (before main), so "
                 "setting it here is too late; run with OPENBLAS_CORETYPE=Cooperlake on an AVX-512 CPU, Haswell on "
                 "an AVX2 one (bench/run_einsum.sh picks it).\n");
  const char* env_threads = std::getenv("OPENBLAS_NUM_THREADS");
  if (env_threads != nullptr && std::atoi(env_threads) != static_cast<int>(g_threads))
    std::fprintf(stderr, "WARNING: OPENBLAS_NUM_THREADS=%s but XSHARD_NUM_THREADS gives %zu; using %zu for both\n",
                 env_threads, g_threads, g_threads);
  openblas_set_num_threads(static_cast<int>(g_threads));
  benchmark::AddCustomContext("openblas_corename", openblas_get_corename());
  benchmark::AddCustomContext("openblas_config", openblas_get_config());
  benchmark::AddCustomContext("openblas_threads", std::to_string(openblas_get_num_threads()));
  benchmark::AddCustomContext("openblas_coretype_env", coretype ? coretype : "(unset)");
  std::fprintf(stderr, "OpenBLAS: %s, core %s, %d thread(s)\n", openblas_get_config(), openblas_get_corename(),
               openblas_get_num_threads());
#else
  (void)coretype;
  benchmark::AddCustomContext("openblas", "not built in");
#endif
#if XSHARD_BENCH_HAVE_EIGEN
  benchmark::AddCustomContext("eigen_version", std::to_string(EIGEN_WORLD_VERSION) + "." +
                                                   std::to_string(EIGEN_MAJOR_VERSION) + "." +
                                                   std::to_string(EIGEN_MINOR_VERSION));
  benchmark::AddCustomContext("eigen_simd", Eigen::SimdInstructionSetsInUse());
  benchmark::AddCustomContext("eigen_device", g_threads > 1 ? "ThreadPoolDevice" : "DefaultDevice");
  std::fprintf(stderr, "Eigen: %s, %s with %zu thread(s)\n", Eigen::SimdInstructionSetsInUse(),
               g_threads > 1 ? "ThreadPoolDevice" : "DefaultDevice", g_threads);
#else
  benchmark::AddCustomContext("eigen", "not built in");
#endif
}

}  // namespace

/// --benchmark_color as the library's own console reporter reads it (a
/// reporter passed to RunSpecifiedBenchmarks gets no flags): auto = a
/// terminal on stdout. Counters always go in columns.
benchmark::ConsoleReporter::OutputOptions console_options(int argc, char** argv) {
  bool color = isatty(fileno(stdout)) != 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a(argv[i]);
    if (a.starts_with("--benchmark_color=")) {
      const std::string_view v = a.substr(a.find('=') + 1);
      color = v == "true" || v == "yes" || v == "1" || (v == "auto" && isatty(fileno(stdout)) != 0);
    }
  }
  return color ? benchmark::ConsoleReporter::OO_ColorTabular : benchmark::ConsoleReporter::OO_Tabular;
}

int main(int argc, char** argv) {
  g_threads = xshard::default_thread_count();
  const auto console = console_options(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  describe_setup();
  std::fprintf(stderr, "xshard: %zu thread(s); checking every case against a reference...\n", g_threads);
  verify_all();
  register_all();
  summary_reporter reporter(console);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
