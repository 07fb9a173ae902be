// Everything works inside a scanned body: xshard::scan runs inside the SPMD
// body of every device of a thread mesh (data=2 x model=2), and each step
// uses one feature, checked against a single-device reference computed here
// with plain xtensor:
//   - fused composite kernels (gelu and gelu_backward, the policy forced to
//     the kernel), with one "xshard.gelu" trace event per step per device;
//   - sharding constraints (constrain<> to another layout and back), with
//     the collectives each device ran = length x the compile-time plans';
//   - manual regions that call the device's all_reduce;
//   - user trace_me scopes, nested inside scan's "scan/step" events, per
//     device, and in the Chrome JSON;
//   - a structured carry: std::tuple of a sharded tensor and a scalar loss.
#include <gtest/gtest.h>
#include <unistd.h>  // getpid: a per-process file name

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>  // a temporary file for the Chrome JSON
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>
#include <xshard/ops/gelu.hpp>
#include <xshard/ops/layer_norm.hpp>
#include <xshard/ops/rms_norm.hpp>
#include <xshard/ops/softmax.hpp>
#include <xshard/scan/scan.hpp>
#include <xshard/spmd/einsum.hpp>
#include <xshard/spmd/sharded.hpp>
#include <xshard/spmd/thread_mesh.hpp>
#include <xshard/trace/trace.hpp>
#include <xtensor/xbuilder.hpp>  // xt::arange
#include <xtensor/xmath.hpp>     // xt::erf, xt::exp, xt::abs
#include <xtensor/xrandom.hpp>
#include <xtensor/xreducer.hpp>  // xt::sum, xt::amax
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "../support/expect_error.hpp"

namespace {

using M = xshard::mesh<"data=2, model=2">;  // device ids 0..3 = positions
using xshard::collective_kind;
using xshard::spec;

/// Failures recorded by the devices (collected, reported on the test thread).
struct failures {
  std::mutex mu;
  std::vector<std::string> list;
  void add(std::string s) {
    std::lock_guard lock(mu);
    list.push_back(std::move(s));
  }
  void report() {
    for (const auto& s : list) ADD_FAILURE() << s;
  }
};

std::string str(std::integral auto v) { return std::to_string(v); }
std::string str(double v) {
  std::ostringstream os;
  os << v;  // 1.2e-07, not std::to_string's 0.000000
  return os.str();
}

/// The largest |a - b| / (1 + |b|) over all elements (same shapes).
template <class A, class B>
double max_rel_error(const A& a, const B& b) {
  const xt::xtensor<double, std::tuple_size_v<std::remove_cvref_t<decltype(a.shape())>>> ad = xt::cast<double>(a);
  const auto err = xt::abs(ad - b) / (1.0 + xt::abs(b));
  return xt::amax(err)();
}

// ---- trace helpers -----------------------------------------------------------

const xshard::trace_value* find_arg(const xshard::trace_event& e, const std::string& key) {
  for (const auto& a : e.args)
    if (a.key == key) return &a.value;
  return nullptr;
}

std::int64_t int_arg(const xshard::trace_event& e, const std::string& key) {
  const xshard::trace_value* v = find_arg(e, key);
  return v && std::holds_alternative<std::int64_t>(*v) ? std::get<std::int64_t>(*v) : -1;
}

std::string string_arg(const xshard::trace_event& e, const std::string& key) {
  const xshard::trace_value* v = find_arg(e, key);
  return v && std::holds_alternative<std::string>(*v) ? std::get<std::string>(*v) : std::string("<missing>");
}

/// The t of the "scan/step" event on e's device and thread whose [ts, ts +
/// dur] contains e's, or -1 if there is none.
std::int64_t enclosing_step(const std::vector<xshard::trace_event>& events, const xshard::trace_event& e) {
  for (const auto& s : events)
    if (s.name == "scan/step" && s.device == e.device && s.tid == e.tid && s.ts_ns <= e.ts_ns &&
        e.ts_ns + e.dur_ns <= s.ts_ns + s.dur_ns)
      return int_arg(s, "t");
  return -1;
}

/// Checks that the recorded events hold, on every device, exactly one
/// event `name` inside each of the `length` "scan/step" events (t = 0 ..
/// length - 1), each with string arg `arg` = `value` (if `arg` is not empty).
void expect_one_per_step(const std::vector<xshard::trace_event>& events, const std::string& name, std::int64_t length,
                         const std::string& arg, const std::string& value) {
  // (device, t) -> how many `name` events, and how many steps.
  std::map<std::pair<int, std::int64_t>, int> named, steps;
  for (const auto& e : events) {
    if (e.name == "scan/step") ++steps[{e.device, int_arg(e, "t")}];
    if (e.name != name) continue;
    ++named[{e.device, enclosing_step(events, e)}];
    if (!arg.empty()) {
      EXPECT_EQ(string_arg(e, arg), value) << name << " on device " << e.device;
    }
  }
  for (int d = 0; d < static_cast<int>(M::size()); ++d)
    for (std::int64_t t = 0; t < length; ++t) {
      EXPECT_EQ((steps[{d, t}]), 1) << "scan/step t=" << t << " on device " << d;
      EXPECT_EQ((named[{d, t}]), 1) << name << " inside scan/step t=" << t << " on device " << d;
    }
  // Nothing outside a step, nothing on a device that does not exist.
  std::size_t total = 0;
  for (const auto& [key, n] : named) total += static_cast<std::size_t>(n);
  EXPECT_EQ(total, static_cast<std::size_t>(M::size() * length)) << name;
}

// ---- a. fused composite kernels inside scan ----------------------------------------

// Single-device reference in double, the decomposition's formulas:
//   pre = c + x_t,  y = pre/2 (1 + erf(pre / sqrt 2)),
//   d = g_t (1/2 (1 + erf(pre / sqrt 2)) + pre exp(-pre^2 / 2) / sqrt(2 pi)),
//   c' = y - d / 4,  ys_t = d.
struct gelu_reference {
  xt::xtensor<double, 2> carry;
  xt::xtensor<double, 3> ys;
};
gelu_reference gelu_scan_reference(const xt::xtensor<float, 2>& c0, const xt::xtensor<float, 3>& xs,
                                   const xt::xtensor<float, 3>& gs) {
  const double sqrt1_2 = 0.70710678118654752440, inv_sqrt_2pi = 0.39894228040143267794;
  gelu_reference r{xt::cast<double>(c0), xt::zeros<double>(xs.shape())};
  for (std::size_t t = 0; t < xs.shape()[0]; ++t) {
    const xt::xtensor<double, 2> pre = r.carry + xt::cast<double>(xt::view(xs, t));
    const xt::xtensor<double, 2> g = xt::cast<double>(xt::view(gs, t));
    const xt::xtensor<double, 2> cdf = 0.5 * (1.0 + xt::erf(pre * sqrt1_2));
    const xt::xtensor<double, 2> y = pre * cdf;
    const xt::xtensor<double, 2> d = g * (cdf + pre * xt::exp(-0.5 * pre * pre) * inv_sqrt_2pi);
    xt::view(r.ys, t) = d;
    r.carry = y - 0.25 * d;
  }
  return r;
}

TEST(ScanInside, FusedCompositeKernelsPerStepPerDevice) {
  constexpr std::size_t length = 3, b = 4, n = 6;
  using Act = spec<"data, model">;          // the carry [b, n]
  using Steps = spec<"None, data, model">;  // xs, gs [length, b, n]: each step's block on its device
  xt::random::seed(11);
  const xt::xtensor<float, 2> c0 = xt::random::rand<float>({b, n}, -2.f, 2.f);
  const xt::xtensor<float, 3> xs = xt::random::rand<float>({length, b, n}, -1.f, 1.f);
  const xt::xtensor<float, 3> gs = xt::random::rand<float>({length, b, n}, -1.f, 1.f);
  const gelu_reference ref = gelu_scan_reference(c0, xs, gs);
  // Relative error (|a - b| / (1 + |b|)) of the float results against the
  // double reference over 3 dependent steps: measured ~1.3e-7 for both modes
  // (a few float ulps); 1e-6 leaves room for another SIMD arch.
  constexpr double tolerance = 1e-6;

  xshard::thread_mesh<M> mesh;
  auto& tr = xshard::tracer::instance();
  for (const xshard::composite_mode mode : {xshard::composite_mode::kernel, xshard::composite_mode::decompose}) {
    // The policy is process-wide (atomics): set it on this thread before the
    // run, which the device threads then see. A scoped_composite_mode per
    // device thread would race on its save/restore, so it is not used there.
    const xshard::scoped_composite_mode forced("gelu", mode);
    const xshard::scoped_composite_mode forced_backward("gelu_backward", mode);
    failures f;
    tr.clear();
    tr.start();
    mesh.run([&](auto& dev) {
      const auto c = xshard::distribute<Act>(dev, c0);
      const auto x_blocks = xshard::distribute<Steps>(dev, xs);
      const auto g_blocks = xshard::distribute<Steps>(dev, gs);
      const auto shape = c.global_shape();
      dev.reset_counters();
      auto [last, ds] = xshard::scan(
          [&](const auto& carry, const auto& step) {
            const auto& [x, g] = step;  // this device's blocks of x_t and g_t
            const xt::xtensor<float, 2> pre = carry.local() + x;
            const xt::xtensor<float, 2> y = xshard::gelu(pre);              // policy: "gelu"
            const xt::xtensor<float, 2> d = xshard::gelu_backward(g, pre);  // policy: "gelu_backward"
            auto next = xshard::from_local<Act>(dev, shape, xt::xtensor<float, 2>(y - 0.25f * d));
            return std::pair{std::move(next), d};
          },
          c, std::tuple{x_blocks.local(), g_blocks.local()});
      static_assert(std::is_same_v<decltype(last), std::remove_const_t<decltype(c)>>);
      if (dev.counters().total_calls() != 0) f.add("elementwise composites ran collectives");
      // ys: this device's blocks, stacked per step.
      const auto sl = c.slices();
      const xt::xtensor<double, 3> ds_ref =
          xt::view(ref.ys, xt::all(), xt::range(sl[0].start, sl[0].end), xt::range(sl[1].start, sl[1].end));
      const double e_ys = max_rel_error(ds, ds_ref);
      const double e_carry = max_rel_error(xshard::gather(last), ref.carry);
      if (!(e_ys <= tolerance) || !(e_carry <= tolerance))
        f.add(std::string(to_string(mode)) + ": device " + str(dev.id()) + ": gelu_backward error " + str(e_ys) +
              ", carry error " + str(e_carry) + " > " + str(tolerance));
    });
    tr.stop();
    f.report();
    const auto events = tr.events();
    // One event per composite call, inside its step, per device, with the
    // mode the policy forced and the registry's version.
    const std::string m(to_string(mode));
    expect_one_per_step(events, "xshard.gelu", length, "mode", m);
    expect_one_per_step(events, "xshard.gelu_backward", length, "mode", m);
    for (const auto& e : events)
      if (e.name == "xshard.gelu" || e.name == "xshard.gelu_backward") {
        EXPECT_EQ(int_arg(e, "version"), 1) << e.name;
      }
  }
  tr.clear();
}

// Every composite entry (policy or explicit mode, with or without the
// affine parameters) records exactly one event named by its registry entry,
// with the mode it ran and the registry's version.
TEST(ScanInside, EveryCompositeCallIsOneTraceEventInsideItsStep) {
  using xshard::composite_mode;
  xt::random::seed(16);
  const xt::xtensor<double, 2> x = xt::random::rand<double>({3, 5}, -1.0, 1.0);
  const xt::xtensor<double, 1> w = xt::ones<double>({5}), bias = xt::zeros<double>({5});
  const xshard::scoped_composite_mode policy("all", composite_mode::decompose);  // what the policy entries run
  auto& tr = xshard::tracer::instance();
  tr.clear();
  tr.start();
  // Step t calls each composite once through its policy entry (t = 0) or
  // with mode kernel (t = 1); layer_norm's weighted forms in both.
  (void)xshard::scan(
      [&](int carry, std::int64_t t) {
        if (t == 0) {
          (void)xshard::gelu(x);
          (void)xshard::gelu_backward(x, x);
          const auto y = xshard::softmax(x);
          (void)xshard::softmax_backward(x, y);
          const auto ln = xshard::layer_norm(x, w, bias);
          (void)xshard::layer_norm_backward(x, x, ln.mean, ln.rstd, w);
          const auto rms = xshard::rms_norm(x);
          (void)xshard::rms_norm_backward(x, x, rms.rstd);
        } else {
          (void)xshard::gelu(x, xshard::gelu_approximate::tanh, composite_mode::kernel);
          (void)xshard::gelu_backward(x, x, xshard::gelu_approximate::tanh, composite_mode::kernel);
          const auto y = xshard::softmax(x, -1, composite_mode::kernel);
          (void)xshard::softmax_backward(x, y, -1, composite_mode::kernel);
          const auto ln = xshard::layer_norm(x, 1e-5, composite_mode::kernel);
          (void)xshard::layer_norm_backward(x, x, ln.mean, ln.rstd, composite_mode::kernel);
          const auto rms = xshard::rms_norm(x, 1e-6, composite_mode::kernel);
          (void)xshard::rms_norm_backward(x, x, rms.rstd, composite_mode::kernel);
        }
        return std::pair{carry, xshard::none};
      },
      0, xt::xtensor<std::int64_t, 1>{0, 1});
  tr.stop();
  const auto events = tr.events();
  tr.clear();
  std::map<std::pair<std::string, std::int64_t>, int> seen;  // (name, step) -> events
  for (const auto& e : events) {
    if (e.name == "scan/step") continue;
    const std::int64_t t = enclosing_step(events, e);
    ++seen[{e.name, t}];
    EXPECT_EQ(string_arg(e, "mode"), t == 0 ? "decompose" : "kernel") << e.name << " in step " << t;
    const auto id = xshard::find_composite(e.name);
    ASSERT_TRUE(id.has_value()) << "unexpected event " << e.name;
    EXPECT_EQ(xshard::descriptor(*id).name, e.name);
    EXPECT_EQ(int_arg(e, "version"), xshard::descriptor(*id).version) << e.name;
  }
  for (const auto& d : xshard::composite_registry)
    for (std::int64_t t = 0; t < 2; ++t) EXPECT_EQ((seen[{std::string(d.name), t}]), 1) << d.name << " in step " << t;
  EXPECT_EQ(seen.size(), 2 * xshard::composite_count);
}

// ---- b. sharding constraints inside scan -----------------------------------------

using Rows = spec<"data, None">;     // the carry x [b, n]
using ColPar = spec<"model, None">;  // W [m, n], output features on model
using Hid = spec<"data, model">;     // h = x W^T
using Swapped = spec<"model, data">;
using CX = xshard::sharded<float, 2, M, Rows>;
using CW = xshard::sharded<float, 2, M, ColPar>;
using CH = xshard::sharded<float, 2, M, Hid>;
using CS = xshard::sharded<float, 2, M, Swapped>;

// Per step: h = einsum(x, W) (column-parallel: no traffic), constrain h to
// "model, data", then back to the carry's "data, None".
constexpr auto matmul_plan = xshard::einsum_plan_of<"bn,mn->bm", CX, CW>();
static_assert(matmul_plan.collective_count() == 0 && matmul_plan.result == CH::resolved);
constexpr auto to_swapped = xshard::redistribute_plan<CH, Swapped>();
constexpr auto to_rows = xshard::redistribute_plan<CS, Rows>();
constexpr std::int64_t collectives_per_step = static_cast<std::int64_t>(
    matmul_plan.collective_count() + to_swapped.collective_count() + to_rows.collective_count());

constexpr std::array<std::int64_t, xshard::collective_kind_count> calls_per_step() {
  std::array<std::int64_t, xshard::collective_kind_count> c{};
  for (const xshard::redist_plan* p : {&to_swapped, &to_rows})
    for (const xshard::redist_step& s : p->steps)
      if (xshard::is_collective(s.kind)) ++c[static_cast<std::size_t>(xshard::collective_of(s.kind))];
  return c;
}
// What the rule table chooses (layout.hpp): "data, model" -> "model, data"
// is an all-gather over data, an all-to-all over model and a local slice;
// "model, data" -> "data, None" an all-gather over model and an all-to-all
// over data. So 2 all-gathers and 2 all-to-alls per step.
static_assert(to_swapped.collective_count() == 2 && to_rows.collective_count() == 2 && collectives_per_step == 4);
static_assert(calls_per_step() == std::array<std::int64_t, xshard::collective_kind_count>{2, 0, 0, 2, 0});
static_assert(static_cast<int>(collective_kind::all_gather) == 0 && static_cast<int>(collective_kind::all_to_all) == 3);

TEST(ScanInside, ShardingConstraintsRunThePlannedCollectivesEveryStep) {
  constexpr std::size_t length = 3, b = 4, n = 6;
  xt::random::seed(12);
  // Small integers: every product and sum below is exact in float, so the
  // sharded result must equal the reference exactly.
  const xt::xtensor<float, 2> x0 = xt::random::randint<int>({b, n}, -3, 4);
  const xt::xtensor<float, 2> w = xt::random::randint<int>({n, n}, -2, 3);
  xt::xtensor<float, 2> ref = x0;  // x_{t+1}[i, j] = sum_k x_t[i, k] w[j, k]
  for (std::size_t t = 0; t < length; ++t) {
    xt::xtensor<float, 2> next = xt::zeros<float>({b, n});
    for (std::size_t i = 0; i < b; ++i)
      for (std::size_t j = 0; j < n; ++j)
        for (std::size_t k = 0; k < n; ++k) next(i, j) += ref(i, k) * w(j, k);
    ref = next;
  }
  const std::array<std::int64_t, 2> h_shape{b, n};
  const auto expected = calls_per_step();
  std::int64_t bytes_per_step = 0;
  for (const xshard::redist_plan* p : {&to_swapped, &to_rows})
    bytes_per_step += xshard::plan_bytes_sent(*p, M::mesh_shape(), h_shape, sizeof(float));

  xshard::thread_mesh<M> mesh;
  failures f;
  mesh.run([&](auto& dev) {
    const auto x = xshard::distribute<Rows>(dev, x0);
    const auto ws = xshard::distribute<ColPar>(dev, w);
    dev.reset_counters();
    auto [last, ys] = xshard::scan(
        [&](const CX& carry, xshard::none_t) {
          const auto h = xshard::einsum<"bn,mn->bm">(carry, ws);
          static_assert(std::is_same_v<std::remove_const_t<decltype(h)>, CH>);
          const auto swapped = xshard::constrain<Swapped>(h);
          return std::pair{xshard::constrain<Rows>(swapped), xshard::none};
        },
        x, xshard::none, {.length = length});
    const xshard::collective_counters c = dev.counters();  // before gather's own collectives
    for (std::size_t k = 0; k < xshard::collective_kind_count; ++k)
      if (c.calls[k] != static_cast<std::int64_t>(length) * expected[k])
        f.add("device " + str(dev.id()) + ": " + std::string(xshard::collective_name(static_cast<collective_kind>(k))) +
              " calls " + str(c.calls[k]) + ", the plans promise " +
              str(static_cast<std::int64_t>(length) * expected[k]));
    if (c.total_calls() != static_cast<std::int64_t>(length) * collectives_per_step)
      f.add("device " + str(dev.id()) + ": " + str(c.total_calls()) + " collectives in all");
    std::int64_t bytes = 0;
    for (std::int64_t v : c.bytes) bytes += v;
    if (bytes != static_cast<std::int64_t>(length) * bytes_per_step)
      f.add("device " + str(dev.id()) + ": sent " + str(bytes) + " bytes, the plans promise " +
            str(static_cast<std::int64_t>(length) * bytes_per_step));
    static_assert(std::is_same_v<decltype(ys), xshard::none_t>);
    if (xshard::gather(last) != ref) f.add("device " + str(dev.id()) + ": the scanned result differs");
  });
  f.report();
}

// ---- c. manual collectives inside scan -------------------------------------------

TEST(ScanInside, ManualRegionAllReducesEveryStep) {
  constexpr std::size_t length = 4, b = 4, n = 8;
  using Act = spec<"data, model">;
  using Steps = spec<"None, data, model">;
  xt::random::seed(13);
  // Integers, means over n = 8 columns: every value is a multiple of 8^-t
  // well inside float's 24 bits, so the results are exact.
  const xt::xtensor<float, 2> c0 = xt::random::randint<int>({b, n}, -5, 6);
  const xt::xtensor<float, 3> xs = xt::random::randint<int>({length, b, n}, -3, 4);
  // Reference: s_t = row sums of c_t; c_{t+1} = c_t - s_t / n + x_t.
  xt::xtensor<float, 2> c_ref = c0;
  xt::xtensor<float, 3> s_ref = xt::zeros<float>({length, b, std::size_t{1}});
  for (std::size_t t = 0; t < length; ++t) {
    for (std::size_t i = 0; i < b; ++i) {
      float s = 0;
      for (std::size_t j = 0; j < n; ++j) s += c_ref(i, j);
      s_ref(t, i, 0) = s;
    }
    for (std::size_t i = 0; i < b; ++i)
      for (std::size_t j = 0; j < n; ++j) c_ref(i, j) += xs(t, i, j) - s_ref(t, i, 0) / float(n);
  }

  xshard::thread_mesh<M> mesh;
  failures f;
  mesh.run([&](auto& dev) {
    const auto c = xshard::distribute<Act>(dev, c0);
    const auto x_blocks = xshard::distribute<Steps>(dev, xs);
    const auto shape = c.global_shape();
    constexpr xshard::axis_set model = std::remove_cvref_t<decltype(dev)>::axes("model");
    dev.reset_counters();
    auto [last, sums] = xshard::scan(
        [&](const auto& carry, const xt::xtensor<float, 2>& x) {
          xt::xtensor<float, 2> s;  // this device's rows' sums over all n columns
          auto next = xshard::manual<Act>(
              shape,
              [&](const xt::xtensor<float, 2>& block) {
                s = xt::sum(block, {1}, xt::keep_dims | xt::evaluation_strategy::immediate);
                dev.all_reduce(std::span<float>(s.data(), s.size()), xshard::reduce_op::sum, model);
                return xt::xtensor<float, 2>(block - s / float(n) + x);
              },
              carry);
          return std::pair{std::move(next), s};
        },
        c, x_blocks.local());
    const xshard::collective_counters cnt = dev.counters();
    const std::int64_t rows = static_cast<std::int64_t>(c.local().shape()[0]);
    if (cnt.calls_of(collective_kind::all_reduce) != static_cast<std::int64_t>(length) ||
        cnt.total_calls() != static_cast<std::int64_t>(length))
      f.add("device " + str(dev.id()) + ": " + str(cnt.total_calls()) + " collectives, expected " + str(length) +
            " all-reduces");
    if (cnt.bytes_of(collective_kind::all_reduce) !=
        static_cast<std::int64_t>(length) *
            xshard::collective_bytes_sent(collective_kind::all_reduce, 2, rows * std::int64_t{sizeof(float)}))
      f.add("device " + str(dev.id()) + ": all-reduce bytes " + str(cnt.bytes_of(collective_kind::all_reduce)));
    // ys: [length, rows of this device, 1], the all-reduced sums of each step.
    const auto sl = c.slices();
    const xt::xtensor<float, 3> s_mine = xt::view(s_ref, xt::all(), xt::range(sl[0].start, sl[0].end), xt::all());
    if (sums != s_mine) f.add("device " + str(dev.id()) + ": the all-reduced row sums differ");
    if (xshard::gather(last) != c_ref) f.add("device " + str(dev.id()) + ": the scanned result differs");
  });
  f.report();
}

// ---- d. trace annotations inside scan --------------------------------------------

/// Counts of '{' '}' '[' ']' outside JSON strings balance, and never go negative.
bool brackets_balance(const std::string& text) {
  int braces = 0, brackets = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      if (ch == '\\')
        ++i;
      else if (ch == '"')
        in_string = false;
      continue;
    }
    if (ch == '"') in_string = true;
    braces += ch == '{' ? 1 : ch == '}' ? -1 : 0;
    brackets += ch == '[' ? 1 : ch == ']' ? -1 : 0;
    if (braces < 0 || brackets < 0) return false;
  }
  return braces == 0 && brackets == 0 && !in_string;
}

TEST(ScanInside, UserTraceScopesNestInsideScanSteps) {
  constexpr std::int64_t length = 5;
  using Act = spec<"data, model">;
  xt::random::seed(14);
  const xt::xtensor<float, 2> c0 = xt::random::randint<int>({4, 6}, -5, 6);
  const xt::xtensor<std::int64_t, 1> ts = xt::arange<std::int64_t>(length);  // scalar steps: t itself
  xt::xtensor<float, 2> ref = c0;                                            // c_{t+1} = 2 c_t + t
  for (std::int64_t t = 0; t < length; ++t) ref = 2.f * ref + float(t);

  xshard::thread_mesh<M> mesh;
  auto& tr = xshard::tracer::instance();
  failures f;
  tr.clear();
  tr.start();
  mesh.run([&](auto& dev) {
    const auto c = xshard::distribute<Act>(dev, c0);
    const auto shape = c.global_shape();
    auto [last, seen] = xshard::scan(
        [&](const auto& carry, std::int64_t t) {
          const xshard::trace_me body("body", {{"t", t}});
          auto next = xshard::from_local<Act>(dev, shape, xt::xtensor<float, 2>(2.f * carry.local() + float(t)));
          return std::pair{std::move(next), t};
        },
        c, ts);
    if (seen != ts) f.add("device " + str(dev.id()) + ": the steps' t differ");
    if (xshard::gather(last) != ref) f.add("device " + str(dev.id()) + ": the scanned result differs");
  });
  tr.stop();
  f.report();

  const auto events = tr.events();
  expect_one_per_step(events, "body", length, "", "");
  // Each "body" is inside the step of its own t, on its own device (pid).
  std::map<int, std::vector<std::int64_t>> body_ts;  // per device, in time order
  for (const auto& e : events) {
    if (e.name != "body") continue;
    EXPECT_EQ(enclosing_step(events, e), int_arg(e, "t")) << "device " << e.device;
    body_ts[e.device].push_back(int_arg(e, "t"));
  }
  ASSERT_EQ(body_ts.size(), static_cast<std::size_t>(M::size()));
  for (const auto& [device, list] : body_ts) {
    EXPECT_GE(device, 0);
    EXPECT_LT(device, static_cast<int>(M::size()));
    EXPECT_EQ(list, (std::vector<std::int64_t>{0, 1, 2, 3, 4})) << "device " << device;  // events() sorts by ts
  }

  // The Chrome JSON: one "body" event per step per device with its pid and t.
  const std::filesystem::path path =
      std::filesystem::path(::testing::TempDir()) / ("xshard_scan_inside_" + std::to_string(::getpid()) + ".json");
  tr.write_chrome_json(path.string());
  std::ifstream file(path);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  file.close();
  std::filesystem::remove(path);
  EXPECT_TRUE(text.starts_with("{\"traceEvents\":[")) << text.substr(0, 64);
  EXPECT_TRUE(brackets_balance(text));
  std::map<std::pair<int, std::int64_t>, int> lines;  // (pid, t) -> "body" lines
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"name\":\"body\"") == std::string::npos) continue;
    for (int d = 0; d < static_cast<int>(M::size()); ++d)
      for (std::int64_t t = 0; t < length; ++t)
        if (line.find("\"pid\":" + std::to_string(d) + ",") != std::string::npos &&
            line.find("\"args\":{\"t\":" + std::to_string(t) + "}") != std::string::npos)
          ++lines[{d, t}];
  }
  for (int d = 0; d < static_cast<int>(M::size()); ++d) {
    EXPECT_NE(text.find("\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(d)), std::string::npos);
    for (std::int64_t t = 0; t < length; ++t) EXPECT_EQ((lines[{d, t}]), 1) << "device " << d << " t=" << t;
  }
  EXPECT_NE(text.find("\"name\":\"scan/step\""), std::string::npos);
  tr.clear();
}

// ---- a structured carry: (sharded tensor, scalar loss) ---------------------------

TEST(ScanInside, TupleCarryOfShardedTensorAndScalarLoss) {
  constexpr std::size_t length = 3, b = 4, n = 6;
  using Act = spec<"data, model">;
  using Steps = spec<"None, data, model">;
  xt::random::seed(15);
  // Integers halved each step: all values are multiples of 2^-3 below 2^6,
  // their squares and sums multiples of 2^-6 below 2^17: exact in float.
  const xt::xtensor<float, 2> w0 = xt::random::randint<int>({b, n}, -6, 7);
  const xt::xtensor<float, 3> targets = xt::random::randint<int>({length, b, n}, -6, 7);
  // Reference: g = w - target_t; w' = w - g / 2; loss' = loss + sum(g^2).
  xt::xtensor<float, 2> w_ref = w0;
  float loss_ref = 0;
  xt::xtensor<float, 1> step_ref = xt::zeros<float>({length});
  for (std::size_t t = 0; t < length; ++t) {
    const xt::xtensor<float, 2> g = w_ref - xt::view(targets, t);
    step_ref(t) = xt::sum(g * g)();
    loss_ref += step_ref(t);
    w_ref = w_ref - 0.5f * g;
  }

  xshard::thread_mesh<M> mesh;
  failures f;
  mesh.run([&](auto& dev) {
    const auto w = xshard::distribute<Act>(dev, w0);
    const auto target_blocks = xshard::distribute<Steps>(dev, targets);
    const auto shape = w.global_shape();
    using W = std::remove_const_t<decltype(w)>;
    constexpr xshard::axis_set all = std::remove_cvref_t<decltype(dev)>::axes("data, model");
    dev.reset_counters();
    auto [last, per_step] = xshard::scan(
        [&](const std::tuple<W, float>& carry, const xt::xtensor<float, 2>& target) {
          const auto& [wt, loss] = carry;
          const xt::xtensor<float, 2> g = wt.local() - target;
          float sq = xt::sum(g * g)();
          dev.all_reduce(std::span<float>(&sq, 1), xshard::reduce_op::sum, all);
          W next = xshard::from_local<Act>(dev, shape, xt::xtensor<float, 2>(wt.local() - 0.5f * g));
          return std::pair{std::tuple<W, float>{std::move(next), loss + sq}, sq};
        },
        std::tuple<W, float>{w, 0.f}, target_blocks.local());
    if (dev.counters().calls_of(collective_kind::all_reduce) != static_cast<std::int64_t>(length) ||
        dev.counters().total_calls() != static_cast<std::int64_t>(length))
      f.add("device " + str(dev.id()) + ": expected one all-reduce per step and nothing else");
    const auto& [w_last, loss] = last;
    if (loss != loss_ref) f.add("device " + str(dev.id()) + ": loss " + str(loss) + ", expected " + str(loss_ref));
    if (per_step != step_ref) f.add("device " + str(dev.id()) + ": per-step losses differ");
    if (xshard::gather(w_last) != w_ref) f.add("device " + str(dev.id()) + ": the scanned tensor differs");
  });
  f.report();
}

}  // namespace

namespace {

// A sharded carry is checked like a plain one: a step that changes its
// global shape is an xshard::error naming the step (raised on every device,
// rethrown by run()).
TEST(ScanInside, ShardedCarryShapeChangeIsAnError) {
  xshard::thread_mesh<M> mesh;
  const xt::xtensor<float, 2> small = xt::zeros<float>({4, 4}), big = xt::zeros<float>({6, 4});
  const xt::xtensor<float, 1> xs = xt::zeros<float>({3});
  EXPECT_XSHARD_ERROR(mesh.run([&](auto& dev) {
    auto init = xshard::distribute<spec<"data, None">>(dev, small);
    (void)xshard::scan(
        [&](const auto& c, float) {
          auto next = xshard::distribute<spec<"data, None">>(dev, big);
          return std::pair{c.global_shape()[0] == 4 ? next : c, 0.0f};
        },
        init, xs);
  }),
                      "changed shape at step 0: [4,4] -> [6,4]");
}

}  // namespace
