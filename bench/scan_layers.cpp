// bench/scan_layers.cpp - scan_layers (scan/scan_layers.hpp) on a homogeneous
// stack: the run-time loop's overhead against a hand-written loop, and the
// peak memory of scan_layers_vjp under each remat policy (scan/remat.hpp).
//
//   build/release/bench/scan_layers --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//   build/release/bench/scan_layers --benchmark_filter='^overhead/'   # or '^memory/'
//
// overhead/<layer>/w<width>/t<threads>/<loop>: 64 identical layers on a
// (64, width) input, forward only, xshard::set_num_threads(<threads>) (1 and
// 2), real time. <layer> is linear (linear_layer<float>) or tanh_linear
// (tanh_linear_layer<float>); width 256 (per-layer overhead shows) and 1024.
// <loop>:
//   hand_loop       x = l.forward(ps[i], x).first over a std::vector of
//                   per-layer params (no copies)
//   hand_loop_copy  the same loop on layer_params<L>(stacked, i): a copy of
//                   layer i's params out of the stack per layer (what
//                   scan_layers hands a layer whose forward takes `params`)
//   scan_layers     xshard::scan_layers(l, stacked, x)
// So hand_loop_copy / hand_loop is what the parameter copies cost (they
// also bring the weights into cache, so it can come out below 1), and
// scan_layers / hand_loop the overhead asked about. Counter: GFLOP/s (the
// einsums' 2 * batch * width^2 per layer). Before timing, each case checks
// that scan_layers and the hand loop give the same bits.
//
// overhead_paired/<layer>/w<width>/t<threads>: the same three loops in one
// benchmark, interleaved (rotating order, 40 rounds at width 256, 12 at
// 1024), each timed on its own in real time and in process CPU time.
// Counters: the medians (hand_ms, hand_copy_ms, scan_ms and the *_cpu_ms
// twins) and their ratios (scan/hand, copy/hand, scan/copy, and cpu_*).
// Use these ratios on a loaded machine: separate benchmarks run minutes
// apart under different load.
//
// The summary at the end prints three tables of the ratios: overhead/ (real
// time; medians when --benchmark_repetitions > 1), overhead_paired/ in real
// time, and in CPU time; then the memory tables.
//
// memory/<layer>/<policy>/depth:<n>: one call (Iterations(1)) of
// scan_layers_vjp(l, stacked, x, gy, policy) on a (2048, 128) input, 1
// thread, for depth 8, 16, 32, 64 and the three policies. <layer> is
// tanh_linear (residuals: its input and output) or mlp_block (below:
// residuals its input and the 4x wider hidden activations). The global
// operator new is replaced (tests/support/alloc_counter.hpp) to track live
// bytes; a one-layer call first warms the per-thread packing buffers.
// Counters, all MiB except depth:
//   peak_MiB             peak live bytes during the call, above those live before it
//   peak_per_layer_MiB   peak_MiB / depth
//   input_MiB            one layer's input (the activation), X
//   residuals_MiB        one layer's residuals, R
//   saved_per_layer_MiB  what the policy keeps per layer, S (remat_forward's
//                        remat_saved): R for save_all, X for recompute, X plus
//                        the einsum outputs for dots_saveable (which falls back
//                        to save_all for a layer without forward_saving_dots,
//                        as mlp_block)
//   model_MiB            depth * S, plus one layer's R when the backward has to
//                        rebuild it (recompute, dots_saveable): recompute's
//                        peak should be about depth * X + R, save_all's
//                        depth * R
//   grads_MiB            the stacked parameter gradients the call returns
//                        (depth * params); they are live at the end, and their
//                        per-layer copies with them while they are stacked
// All sizes are measured with the same counter (a copy of the input, one
// layer's forward residuals, one remat_forward's saved state), not computed.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
#include <xshard/core/thread_pool.hpp>
#include <xshard/einsum/einsum.hpp>
#include <xshard/einsum/grad.hpp>
#include <xshard/nn/layer.hpp>
#include <xshard/nn/linear.hpp>
#include <xshard/scan/remat.hpp>
#include <xshard/scan/scan_layers.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>

#include "../tests/support/alloc_counter.hpp"  // replaces operator new: live and peak bytes

namespace {

namespace alloc_stats = xshard_test::alloc_stats;

// The counter sees xtensor's buffers only if they come from operator new.
static_assert(std::is_same_v<xt::xtensor<float, 2>::storage_type::allocator_type, std::allocator<float>>,
              "memory/ counters need xtensor's default std::allocator (XTENSOR_USE_XSIMD is set?)");

/// x -> tanh(x W1^T + b1) W2^T + b2 + x: a residual MLP block whose hidden
/// activations are 4x wider than its input, and kept for the backward, so
/// its residuals are 5x its input.
template <class T>
struct mlp_block {
  using params = std::tuple<xt::xtensor<T, 2>, xt::xtensor<T, 1>, xt::xtensor<T, 2>, xt::xtensor<T, 1>>;
  // w1 [4d, d], b1 [4d], w2 [d, 4d], b2 [d]
  using input = xt::xtensor<T, 2>;
  using output = xt::xtensor<T, 2>;
  struct residuals {
    input x;
    xt::xtensor<T, 2> a;  // tanh(x W1^T + b1), [batch, 4d]
  };
  static constexpr std::array<std::string_view, 4> param_names{"w1", "b1", "w2", "b2"};

  std::pair<output, residuals> forward(const params& p, const input& x) const {
    xt::xtensor<T, 2> h = xshard::einsum<"...n,mn->...m">(x, std::get<0>(p));
    h += std::get<1>(p);
    xt::xtensor<T, 2> a = xt::tanh(h);
    output y = xshard::einsum<"...n,mn->...m">(a, std::get<2>(p));
    y += std::get<3>(p);
    y += x;
    return {std::move(y), residuals{x, std::move(a)}};
  }
  std::pair<params, input> vjp(const params& p, const residuals& r, const output& gy) const {
    xt::xtensor<T, 2> dw2 = xshard::einsum_vjp<"...n,mn->...m", 1>(gy, r.a, std::get<2>(p));
    xt::xtensor<T, 1> db2 = xshard::broadcast_vjp<"...m", "m">(gy);
    const xt::xtensor<T, 2> ga = xshard::einsum_vjp<"...n,mn->...m", 0>(gy, r.a, std::get<2>(p));
    const xt::xtensor<T, 2> gh = ga * (T(1) - r.a * r.a);
    xt::xtensor<T, 2> dw1 = xshard::einsum_vjp<"...n,mn->...m", 1>(gh, r.x, std::get<0>(p));
    xt::xtensor<T, 1> db1 = xshard::broadcast_vjp<"...m", "m">(gh);
    input dx = xshard::einsum_vjp<"...n,mn->...m", 0>(gh, r.x, std::get<0>(p));
    dx += gy;
    return {params{std::move(dw1), std::move(db1), std::move(dw2), std::move(db2)}, std::move(dx)};
  }
};
static_assert(xshard::stackable_layer<mlp_block<float>>);

template <std::size_t R>
xt::xtensor<float, R> random_tensor(const std::array<std::size_t, R>& shape, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-scale, scale);
  auto t = xt::xtensor<float, R>::from_shape(shape);
  for (auto& v : t) v = u(rng);
  return t;
}

/// Random parameters of one layer of width d; weights uniform with variance
/// 1/fan_in (the activations keep their scale through 64 layers).
template <class L>
typename L::params random_params(std::size_t d, std::mt19937& rng) {
  const auto bound = [](std::size_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); };
  if constexpr (std::is_same_v<L, mlp_block<float>>) {
    return {random_tensor<2>({4 * d, d}, bound(d), rng), random_tensor<1>({4 * d}, 0.1f, rng),
            random_tensor<2>({d, 4 * d}, 0.5f * bound(4 * d), rng), random_tensor<1>({d}, 0.1f, rng)};
  } else {
    return {random_tensor<2>({d, d}, bound(d), rng), random_tensor<1>({d}, 0.1f, rng)};
  }
}

template <class L>
constexpr std::string_view layer_name() {
  if constexpr (std::is_same_v<L, xshard::linear_layer<float>>)
    return "linear";
  else if constexpr (std::is_same_v<L, xshard::tanh_linear_layer<float>>)
    return "tanh_linear";
  else
    return "mlp_block";
}

void use_threads(std::size_t n) {
  if (xshard::num_threads() != n) xshard::set_num_threads(n);
}

constexpr double mib = 1024.0 * 1024.0;

// ---------------------------------------------------------------------------
// overhead/: the run-time loop against a hand-written one.

constexpr std::size_t overhead_depth = 64, overhead_batch = 64;
constexpr std::array<std::size_t, 2> overhead_widths{256, 1024};

enum class loop_kind { hand_loop, hand_loop_copy, scan_layers };
constexpr std::array<loop_kind, 3> loop_kinds{loop_kind::hand_loop, loop_kind::hand_loop_copy, loop_kind::scan_layers};

constexpr std::string_view loop_name(loop_kind k) {
  switch (k) {
    case loop_kind::hand_loop:
      return "hand_loop";
    case loop_kind::hand_loop_copy:
      return "hand_loop_copy";
    case loop_kind::scan_layers:
      return "scan_layers";
  }
  return "?";
}

template <class L>
struct stack_case {
  std::size_t width = 0;
  std::vector<typename L::params> layers;
  xshard::stacked_params<L> stacked;
  typename L::input x;
  bool same_bits = false;
};

/// The case for `width`, built once and kept until another width is asked
/// for (one at a time: width 1024 is 2 x 256 MiB of parameters).
template <class L>
const stack_case<L>& overhead_case(std::size_t width) {
  static std::unique_ptr<stack_case<L>> c;
  if (c && c->width == width) return *c;
  c.reset();
  auto n = std::make_unique<stack_case<L>>();
  n->width = width;
  std::mt19937 rng(static_cast<unsigned>(width));
  for (std::size_t i = 0; i < overhead_depth; ++i) n->layers.push_back(random_params<L>(width, rng));
  n->stacked = xshard::stack_params<L>(n->layers);
  n->x = random_tensor<2>({overhead_batch, width}, 1.0f, rng);
  const L l{};
  typename L::input h = n->x;
  for (const auto& p : n->layers) h = l.forward(p, h).first;
  const typename L::output s = xshard::scan_layers(l, n->stacked, n->x);
  n->same_bits = s.shape() == h.shape() && std::equal(s.begin(), s.end(), h.begin(), [](float a, float b) {
                   return std::memcmp(&a, &b, sizeof a) == 0;
                 });
  c = std::move(n);
  return *c;
}

/// One forward through the case's 64 layers with loop `kind`.
template <class L>
typename L::output run_loop(const stack_case<L>& c, loop_kind kind) {
  const L l{};
  typename L::input x = c.x;
  switch (kind) {
    case loop_kind::hand_loop:
      for (std::size_t i = 0; i < c.layers.size(); ++i) x = l.forward(c.layers[i], x).first;
      break;
    case loop_kind::hand_loop_copy:
      for (std::size_t i = 0; i < c.layers.size(); ++i) x = l.forward(xshard::layer_params<L>(c.stacked, i), x).first;
      break;
    case loop_kind::scan_layers:
      x = xshard::scan_layers(l, c.stacked, std::move(x));
      break;
  }
  return x;
}

double gflop_per_call(std::size_t width) {
  return 2.0 * overhead_batch * static_cast<double>(width * width) * overhead_depth * 1e-9;
}

template <class L>
void bm_overhead(benchmark::State& state, loop_kind kind, std::size_t width, std::size_t threads) {
  use_threads(threads);
  const stack_case<L>& c = overhead_case<L>(width);
  if (!c.same_bits) {
    state.SkipWithError("scan_layers and the hand loop disagree");
    return;
  }
  for (auto _ : state) {
    const auto y = run_loop(c, kind);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(gflop_per_call(width), benchmark::Counter::kIsIterationInvariantRate);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// The three loops interleaved: each iteration runs all three, in an order
/// that rotates from one iteration to the next, each timed on its own (real
/// time, steady_clock, and the process's CPU time, std::clock); the counters
/// are the medians and their ratios. Load that comes and goes then hits the
/// three alike, which separate benchmarks, run one after the other, cannot
/// promise; CPU time also leaves out the time the process waits for a core.
template <class L>
void bm_overhead_paired(benchmark::State& state, std::size_t width, std::size_t threads) {
  use_threads(threads);
  const stack_case<L>& c = overhead_case<L>(width);
  if (!c.same_bits) {
    state.SkipWithError("scan_layers and the hand loop disagree");
    return;
  }
  constexpr std::size_t n = loop_kinds.size();
  std::array<std::vector<double>, n> real_ms, cpu_ms;
  std::size_t round = 0;
  for (auto _ : state) {
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t k = (round + j) % n;
      const std::clock_t c0 = std::clock();
      const auto t0 = std::chrono::steady_clock::now();
      const auto y = run_loop(c, loop_kinds[k]);
      benchmark::DoNotOptimize(y.data());
      benchmark::ClobberMemory();
      real_ms[k].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      cpu_ms[k].push_back(1e3 * static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
    }
    ++round;
  }
  const double hand = median(real_ms[0]), copy = median(real_ms[1]), scan = median(real_ms[2]);
  const double hand_cpu = median(cpu_ms[0]), copy_cpu = median(cpu_ms[1]), scan_cpu = median(cpu_ms[2]);
  state.counters["hand_ms"] = hand;
  state.counters["hand_copy_ms"] = copy;
  state.counters["scan_ms"] = scan;
  state.counters["scan/hand"] = scan / hand;
  state.counters["copy/hand"] = copy / hand;
  state.counters["scan/copy"] = scan / copy;
  state.counters["hand_cpu_ms"] = hand_cpu;
  state.counters["hand_copy_cpu_ms"] = copy_cpu;
  state.counters["scan_cpu_ms"] = scan_cpu;
  state.counters["cpu_scan/hand"] = scan_cpu / hand_cpu;
  state.counters["cpu_copy/hand"] = copy_cpu / hand_cpu;
  state.counters["cpu_scan/copy"] = scan_cpu / copy_cpu;
}

/// "<group>/<layer>/w<width>/t<threads>"
std::string case_name(std::string_view group, std::string_view layer, std::size_t width, std::size_t threads) {
  return std::string(group) + "/" + std::string(layer) + "/w" + std::to_string(width) + "/t" + std::to_string(threads);
}

template <class L>
void register_overhead() {
  for (std::size_t width : overhead_widths)
    for (std::size_t threads : {std::size_t{1}, std::size_t{2}}) {
      const std::string name = case_name("overhead", layer_name<L>(), width, threads);
      for (loop_kind k : loop_kinds)
        benchmark::RegisterBenchmark((name + "/" + std::string(loop_name(k))).c_str(), bm_overhead<L>, k, width,
                                     threads)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
    }
}

template <class L>
void register_overhead_paired() {
  for (std::size_t width : overhead_widths)
    for (std::size_t threads : {std::size_t{1}, std::size_t{2}})
      benchmark::RegisterBenchmark(case_name("overhead_paired", layer_name<L>(), width, threads).c_str(),
                                   bm_overhead_paired<L>, width, threads)
          ->Iterations(width <= 256 ? 40 : 12)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
}

// ---------------------------------------------------------------------------
// memory/: peak live bytes of scan_layers_vjp per policy and depth.

constexpr std::size_t memory_tokens = 2048, memory_width = 128;
constexpr std::array<std::size_t, 4> memory_depths{8, 16, 32, 64};
/// Heap bytes held by what f() returns (measured: live bytes while it is
/// alive, less those before).
template <class F>
std::size_t held_bytes(F&& f) {
  const std::size_t before = alloc_stats::live_bytes();
  const auto kept = f();
  benchmark::DoNotOptimize(&kept);
  return alloc_stats::live_bytes() - before;
}

template <class L>
void bm_memory(benchmark::State& state, xshard::remat policy, std::size_t depth) {
  use_threads(1);
  const L l{};
  std::mt19937 rng(static_cast<unsigned>(depth));
  std::vector<typename L::params> layers;
  for (std::size_t i = 0; i < depth; ++i) layers.push_back(random_params<L>(memory_width, rng));
  const auto stacked = xshard::stack_params<L>(layers);
  const auto x = random_tensor<2>({memory_tokens, memory_width}, 1.0f, rng);
  const auto gy = random_tensor<2>({memory_tokens, memory_width}, 1.0f, rng);
  {  // warm-up on one layer: the per-thread GEMM packing buffers
    const auto one = xshard::stack_params<L>({layers[0]});
    auto r = xshard::scan_layers_vjp(l, one, x, gy, policy);
    benchmark::DoNotOptimize(r.second.data());
  }
  layers.clear();
  const auto p0 = xshard::layer_params<L>(stacked, 0);
  const std::size_t input = held_bytes([&] { return typename L::input(x); });
  const std::size_t residuals = held_bytes([&] { return l.forward(p0, x).second; });
  const std::size_t saved = held_bytes([&] { return xshard::remat_forward(l, p0, x, policy).second; });
  const std::size_t params = held_bytes([&] { return xshard::layer_params<L>(stacked, 0); });
  const bool rebuilds = xshard::effective_policy<L>(policy) != xshard::remat::save_all;
  const std::size_t model = depth * saved + (rebuilds ? residuals : 0);

  std::size_t peak = 0;
  for (auto _ : state) {
    const std::size_t before = alloc_stats::live_bytes();
    alloc_stats::reset_peak();
    {
      auto r = xshard::scan_layers_vjp(l, stacked, x, gy, policy);
      benchmark::DoNotOptimize(r.second.data());
    }
    peak = std::max(peak, alloc_stats::peak_bytes() - before);
  }
  const auto d = static_cast<double>(depth);
  state.counters["depth"] = d;
  state.counters["peak_MiB"] = static_cast<double>(peak) / mib;
  state.counters["peak_per_layer_MiB"] = static_cast<double>(peak) / mib / d;
  state.counters["input_MiB"] = static_cast<double>(input) / mib;
  state.counters["residuals_MiB"] = static_cast<double>(residuals) / mib;
  state.counters["saved_per_layer_MiB"] = static_cast<double>(saved) / mib;
  state.counters["model_MiB"] = static_cast<double>(model) / mib;
  state.counters["grads_MiB"] = d * static_cast<double>(params) / mib;
}

template <class L>
void register_memory() {
  for (xshard::remat policy : xshard::remat_policies)
    for (std::size_t depth : memory_depths)
      benchmark::RegisterBenchmark(("memory/" + std::string(layer_name<L>()) + "/" +
                                    std::string(xshard::remat_name(policy)) + "/depth:" + std::to_string(depth))
                                       .c_str(),
                                   bm_memory<L>, policy, depth)
          ->Iterations(1)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
}

// ---------------------------------------------------------------------------
// The summary: ratios of the overhead loops, the memory table.

class summary : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
      const std::string name = r.run_name.function_name;
      // A median replaces the single runs seen before it.
      if (r.run_type == Run::RT_Aggregate || !medians_.count(name)) {
        time_ms_[name] = r.GetAdjustedRealTime() * to_ms(r.time_unit);
        for (const auto& [k, c] : r.counters) counters_[name][k] = c.value;
      }
      if (r.run_type == Run::RT_Aggregate) medians_[name] = true;
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    print_overhead();
    print_memory();
  }

 private:
  static double to_ms(benchmark::TimeUnit u) {
    switch (u) {
      case benchmark::kNanosecond:
        return 1e-6;
      case benchmark::kMicrosecond:
        return 1e-3;
      case benchmark::kMillisecond:
        return 1.0;
      case benchmark::kSecond:
        return 1e3;
    }
    return 1.0;
  }

  const double* time_of(const std::string& name) const {
    const auto it = time_ms_.find(name);
    return it == time_ms_.end() ? nullptr : &it->second;
  }
  const double* counter_of(const std::string& name, const std::string& key) const {
    const auto it = counters_.find(name);
    if (it == counters_.end()) return nullptr;
    const auto jt = it->second.find(key);
    return jt == it->second.end() ? nullptr : &jt->second;
  }

  /// One table per group: overhead/ (separate benchmarks: their real
  /// times) and overhead_paired/ (interleaved: its median counters).
  void print_overhead() const {
    for (const int table : {0, 1, 2}) {  // separate runs; paired, real time; paired, CPU time
      const bool paired = table > 0;
      bool header = false;
      for (std::string_view layer : {"linear", "tanh_linear"})
        for (std::size_t width : overhead_widths)
          for (std::size_t threads : {std::size_t{1}, std::size_t{2}}) {
            const double *hand, *copy, *scan;
            if (paired) {
              const std::string name = case_name("overhead_paired", layer, width, threads);
              const std::string cpu = table == 2 ? "_cpu" : "";
              hand = counter_of(name, "hand" + cpu + "_ms");
              copy = counter_of(name, "hand_copy" + cpu + "_ms");
              scan = counter_of(name, "scan" + cpu + "_ms");
            } else {
              const std::string p = case_name("overhead", layer, width, threads) + "/";
              hand = time_of(p + "hand_loop");
              copy = time_of(p + "hand_loop_copy");
              scan = time_of(p + "scan_layers");
            }
            if (!hand || !copy || !scan) continue;
            if (!header) {
              static constexpr const char* titles[] = {
                  "overhead/: separate runs, real time", "overhead_paired/: interleaved, per-loop medians, real time",
                  "overhead_paired/: interleaved, per-loop medians, process CPU time"};
              std::printf(
                  "\nscan_layers overhead, %s (%zu layers, batch %zu, ms%s)\n"
                  "%-12s %5s %3s %10s %10s %10s %10s %10s %10s\n",
                  titles[table], overhead_depth, overhead_batch, medians_.empty() ? "" : "; medians of repetitions",
                  "layer", "width", "thr", "hand", "hand_copy", "scan", "scan/hand", "copy/hand", "scan/copy");
              header = true;
            }
            std::printf("%-12s %5zu %3zu %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f%s\n", std::string(layer).c_str(),
                        width, threads, *hand, *copy, *scan, *scan / *hand, *copy / *hand, *scan / *copy,
                        *scan / *hand > 1.03 ? "  (scan > 3% over hand)" : "");
          }
    }
  }

  void print_memory() const {
    for (std::string_view layer : {"tanh_linear", "mlp_block"}) {
      bool header = false;
      for (std::size_t depth : memory_depths) {
        std::string row;
        bool any = false;
        for (xshard::remat policy : xshard::remat_policies) {
          const std::string name = "memory/" + std::string(layer) + "/" + std::string(xshard::remat_name(policy)) +
                                   "/depth:" + std::to_string(depth);
          const double* peak = counter_of(name, "peak_MiB");
          const double* model = counter_of(name, "model_MiB");
          char cell[64];
          if (peak && model) {
            std::snprintf(cell, sizeof cell, " %9.1f (%7.1f)", *peak, *model);
            any = true;
            if (!header) {
              std::printf(
                  "\n%s memory: peak MiB above the bytes live before scan_layers_vjp (model: depth x saved + R)\n"
                  "  input X = %.3f MiB, residuals R = %.3f MiB, params %.3f MiB per layer\n"
                  "%6s %19s %19s %19s %10s\n",
                  std::string(layer).c_str(), *counter_of(name, "input_MiB"), *counter_of(name, "residuals_MiB"),
                  *counter_of(name, "grads_MiB") / static_cast<double>(depth), "depth", "save_all", "recompute",
                  "dots_saveable", "grads");
              header = true;
            }
          } else {
            std::snprintf(cell, sizeof cell, " %19s", "-");
          }
          row += cell;
        }
        if (!any) continue;
        const double* grads = nullptr;
        for (xshard::remat policy : xshard::remat_policies)
          if (!grads)
            grads = counter_of("memory/" + std::string(layer) + "/" + std::string(xshard::remat_name(policy)) +
                                   "/depth:" + std::to_string(depth),
                               "grads_MiB");
        std::printf("%6zu%s %10.1f\n", depth, row.c_str(), grads ? *grads : 0.0);
      }
    }
  }

  std::map<std::string, double> time_ms_;
  std::map<std::string, std::map<std::string, double>> counters_;
  std::map<std::string, bool> medians_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_overhead<xshard::linear_layer<float>>();
  register_overhead<xshard::tanh_linear_layer<float>>();
  register_overhead_paired<xshard::linear_layer<float>>();
  register_overhead_paired<xshard::tanh_linear_layer<float>>();
  register_memory<xshard::tanh_linear_layer<float>>();
  register_memory<mlp_block<float>>();
  summary reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
