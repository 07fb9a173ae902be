// The thread backend: every collective on every axis subset of several meshes
// (tests/spmd/collective_cases.hpp), the mismatch errors, the counters, what
// happens when a body throws, and naming axis sets.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <xshard/core/workspace.hpp>
#include <xshard/mesh/mesh.hpp>
#include <xshard/spmd/thread_mesh.hpp>
#include <xshard/trace/trace.hpp>

#include "../spmd/collective_cases.hpp"
#include "../support/alloc_counter.hpp"  // replaces operator new: counts the collectives' allocations
#include "../support/expect_error.hpp"
#include "../support/scoped_env.hpp"

namespace {

using xshard::axis_set;
using xshard::collective_kind;
using xshard::reduce_op;

// Worker counts: one device per thread (no fibers), all devices as fibers
// of one thread, and blocks of devices per thread (fibers whose groups span
// threads; 3 workers split 4 or 8 devices unevenly). The three-axis meshes,
// whose cases take longest under the sanitizers, run the first and the last.
template <class M>
void expect_all_cases() {
  for (std::int64_t workers : {M::size(), std::int64_t{1}, std::int64_t{2}, std::int64_t{3}}) {
    if (workers > M::size()) continue;
    if (M::axes.size() > 2 && workers != M::size() && workers != 3) continue;
    SCOPED_TRACE("workers " + std::to_string(workers));
    xshard::thread_mesh<M> devices(workers);
    EXPECT_EQ(devices.workers(), workers);
    const std::vector<std::string> failures = xshard_test::run_collective_cases(devices);
    for (const std::string& f : failures) ADD_FAILURE() << f;
    // The workers are reused: a second run sees the same results.
    EXPECT_TRUE(xshard_test::run_collective_cases(devices).empty());
  }
}

TEST(SpmdThreadCollectives, Line4) { expect_all_cases<xshard::mesh<"x=4">>(); }
TEST(SpmdThreadCollectives, Line8) { expect_all_cases<xshard::mesh<"x=8">>(); }
TEST(SpmdThreadCollectives, Grid1x4) { expect_all_cases<xshard::mesh<"x=1, y=4">>(); }
TEST(SpmdThreadCollectives, Grid2x2) { expect_all_cases<xshard::mesh<"x=2, y=2">>(); }
TEST(SpmdThreadCollectives, Grid2x2ExplicitIds) { expect_all_cases<xshard::mesh<"x=2, y=2", 3, 2, 1, 0>>(); }
TEST(SpmdThreadCollectives, Cube2x2x2) { expect_all_cases<xshard::mesh<"x=2, y=2, z=2">>(); }
TEST(SpmdThreadCollectives, Cube2x2x2ExplicitIds) {
  expect_all_cases<xshard::mesh<"x=2, y=2, z=2", 5, 7, 1, 0, 2, 6, 4, 3>>();
}

// Counters by hand: collective_bytes_sent's formulas on a group of 4.
TEST(SpmdThreadCounters, BytesSentByHand) {
  using M = xshard::mesh<"x=4">;
  xshard::thread_mesh<M> devices;
  std::vector<xshard::collective_counters> seen(4);
  devices.run([&](auto& dev) {
    std::vector<float> f(1000, 1.0f), f4(4, 1.0f), f4out(4);
    std::vector<double> d(10), dout(40);
    std::vector<int> i8(8), i2(2), i8out(8);
    dev.all_reduce(f, reduce_op::sum, 1);                         // 2 * 3 * 4000 / 4 = 6000
    dev.all_gather(d, dout, 1);                                   // 3 * 80 = 240
    dev.reduce_scatter(i8, i2, reduce_op::max, 1);                // 3 * 32 / 4 = 24
    dev.all_to_all(i8, i8out, 1);                                 // 24
    dev.permute(f4, f4out, 1, {{0, 1}, {1, 2}, {2, 3}, {3, 0}});  // 16 each
    dev.permute(f4, f4out, 1, {{2, 0}});                          // 16 on rank 2, a call on all
    dev.barrier(1);                                               // not counted
    dev.all_reduce(f, reduce_op::sum, 0);                         // a group of one: not counted
    seen[static_cast<std::size_t>(dev.position())] = dev.counters();
  });
  for (std::size_t p = 0; p < 4; ++p) {
    const auto& c = seen[p];
    EXPECT_EQ(c.calls_of(collective_kind::all_reduce), 1);
    EXPECT_EQ(c.bytes_of(collective_kind::all_reduce), 6000);
    EXPECT_EQ(c.bytes_of(collective_kind::all_gather), 240);
    EXPECT_EQ(c.bytes_of(collective_kind::reduce_scatter), 24);
    EXPECT_EQ(c.bytes_of(collective_kind::all_to_all), 24);
    EXPECT_EQ(c.calls_of(collective_kind::permute), 2);
    EXPECT_EQ(c.bytes_of(collective_kind::permute), p == 2 ? 32 : 16);
    EXPECT_EQ(c.total_calls(), 6);
  }
  // Counters survive between runs until reset.
  EXPECT_EQ(devices.at(3).counters().total_calls(), 6);
  devices.at(3).reset_counters();
  EXPECT_EQ(devices.at(3).counters().total_calls(), 0);
}

// A body that throws on one device: the others do not hang, they see who
// failed, run() rethrows the original exception, and the mesh works again.
class SpmdThreadFailureWorkers : public ::testing::TestWithParam<std::int64_t> {};

TEST_P(SpmdThreadFailureWorkers, ThrowingBodyReleasesTheOthers) {
  using M = xshard::mesh<"x=2, y=2", 3, 2, 1, 0>;
  xshard::thread_mesh<M> devices(GetParam());
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::vector<std::string> seen(4);
    try {
      devices.run([&](auto& dev) {
        const auto p = static_cast<std::size_t>(dev.position());
        std::vector<int> v(64, 1);
        if (dev.position() == 1) {
          if (attempt == 1) dev.all_reduce(v, reduce_op::sum, 0b11);  // fail after a collective
          throw std::runtime_error("boom");
        }
        try {
          if (attempt == 1) dev.all_reduce(v, reduce_op::sum, 0b11);
          // Positions 2 and 3 talk among themselves (their row does not hold
          // position 1; position 0's does), then everyone needs position 1.
          for (int k = 0; k < 50; ++k) dev.all_reduce(v, reduce_op::sum, 0b10);
          for (int k = 0; k < 3; ++k) dev.all_reduce(v, reduce_op::max, 0b11);
          dev.barrier(0b11);
          seen[p] = "no error";
        } catch (const xshard::error& e) {
          seen[p] = e.what();
          throw;
        }
      });
      ADD_FAILURE() << "run() did not throw";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "boom");
    } catch (const std::exception& e) {
      ADD_FAILURE() << "run() threw " << e.what() << " instead of the body's exception";
    }
    for (std::size_t p : {0, 2, 3}) EXPECT_EQ(seen[p], "xshard: device 2 failed: boom") << "position " << p;
  }
  // The next run works.
  std::vector<std::vector<int>> out(4);
  devices.run([&](auto& dev) {
    std::vector<int> v(5, static_cast<int>(dev.position()));
    dev.all_reduce(v, reduce_op::sum, dev.axes("x, y"));
    out[static_cast<std::size_t>(dev.position())] = v;
  });
  for (const auto& v : out) EXPECT_EQ(v, std::vector<int>(5, 6));
}

TEST_P(SpmdThreadFailureWorkers, NonStandardExceptionIsRethrown) {
  xshard::thread_mesh<xshard::mesh<"x=2">> devices(std::min<std::int64_t>(GetParam(), 2));
  std::string seen;
  auto body = [&](auto& dev) {
    if (dev.position() == 0) throw 42;
    try {
      dev.barrier(1);
    } catch (const xshard::error& e) {
      seen = e.what();
    }
  };
  EXPECT_THROW(devices.run(body), int);
  EXPECT_EQ(seen, "xshard: device 0 failed: unknown exception");
}

// A device that returns without joining a collective its peers are in.
TEST_P(SpmdThreadFailureWorkers, PeerReturnedWithoutJoining) {
  xshard::thread_mesh<xshard::mesh<"x=2, y=2", 3, 2, 1, 0>> devices(GetParam());
  EXPECT_EQ(xshard_test::error_of([&] {
              devices.run([&](auto& dev) {
                if (dev.position() == 0) return;
                std::vector<float> v(3);
                dev.all_reduce(v, reduce_op::sum, 0b11);
              });
            }),
            "xshard: all-reduce over {x, y}: device 3 returned from its body without joining it");
}

TEST_P(SpmdThreadFailureWorkers, NestedRunIsAnError) {
  xshard::thread_mesh<xshard::mesh<"x=2">> devices(std::min<std::int64_t>(GetParam(), 2));
  std::atomic<int> errors{0};
  devices.run([&](auto&) {
    try {
      devices.run([](auto&) {});
    } catch (const xshard::error& e) {
      if (std::string(e.what()).find("inside one of its own device bodies") != std::string::npos) ++errors;
    }
  });
  EXPECT_EQ(errors.load(), 2);
}

// 4: a thread per device; 1: every device a fiber of one thread; 2: two
// fibers per thread.
INSTANTIATE_TEST_SUITE_P(Workers, SpmdThreadFailureWorkers, ::testing::Values(4, 1, 2));

TEST(SpmdThreadFailure, BadAxisSet) {
  xshard::thread_mesh<xshard::mesh<"x=2">> devices;
  std::atomic<int> errors{0};
  devices.run([&](auto& dev) {
    std::vector<int> v(2);
    try {
      dev.all_reduce(v, reduce_op::sum, 0b10);
    } catch (const xshard::error& e) {
      if (std::string(e.what()) == "xshard: all-reduce over axis set 2: the mesh has no axis 1 (its axes are {x})")
        ++errors;
    }
  });
  EXPECT_EQ(errors.load(), 2);
}

// all_reduce_many refuses parts that overlap (each would be reduced twice),
// on every member, whatever the group's size.
TEST(SpmdThreadFailure, AllReduceManyPartsOverlap) {
  xshard::thread_mesh<xshard::mesh<"x=2, y=2">> devices;
  std::atomic<int> errors{0};
  devices.run([&](auto& dev) {
    std::vector<float> v(8);
    const std::span<float> parts[] = {std::span<float>(v).first(5), std::span<float>(v).last(4)};
    for (axis_set axes : {axis_set{0}, axis_set{0b01}}) {
      try {
        dev.all_reduce_many(std::span<const std::span<float>>(parts), reduce_op::sum, axes);
      } catch (const xshard::error& e) {
        // The first member whose call is wrong: the group's rank 0 (over
        // {x}: the device of this one's column in row 0).
        const std::string where = axes == 0 ? "{}" : "{x}";
        const int first = axes == 0 ? dev.id() : dev.id() % 2;
        if (std::string(e.what()) ==
            "xshard: all-reduce over " + where + ": device " + std::to_string(first) + "'s parts overlap")
          ++errors;
      }
    }
  });
  EXPECT_EQ(errors.load(), 8);  // both calls on each of the 4 devices
}

// The float sums of all-reduce and reduce-scatter go through reduce_to:
// whatever XSHARD_ISA picks, the portable loop's bits (the kernels
// themselves: einsum_sums_test).
TEST(SpmdThreadReduce, FloatSumMatchesTheLoop) {
  std::vector<float> a(1003), b(1003);
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>((i * 7919 % 1009)) * 0.37f - 150.0f;
    b[i] = 1.0f / static_cast<float>(i % 97 + 1) + 1e-7f * static_cast<float>(i);
  }
  std::vector<float> got(a.size()), want(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) want[i] = a[i] + b[i];
  xshard::detail::reduce_to(got.data(), a.data(), b.data(), a.size(), reduce_op::sum);
  EXPECT_EQ(got, want);
}

// A run's collectives allocate nothing once their groups have met and the
// staging slots have grown: the same calls again (small inputs staged, large
// ones reduced in place, gathers, scatters, barriers) on one device per
// thread, on fibers of one thread, and on fibers of two threads.
TEST(SpmdThreadCollectives, SteadyStateAllocatesNothing) {
  using M = xshard::mesh<"x=2, y=2">;
  for (std::int64_t workers : {std::int64_t{4}, std::int64_t{1}, std::int64_t{2}}) {
    SCOPED_TRACE("workers " + std::to_string(workers));
    xshard::thread_mesh<M> devices(workers);
    std::atomic<std::size_t> allocations{0};
    std::atomic<int> wrong{0};
    devices.run([&](auto& dev) {
      std::vector<float> small(64), large(40000), gathered(2 * 64), scattered(32);
      std::vector<std::int64_t> counts(4);
      const auto round = [&] {
        std::fill(small.begin(), small.end(), 1.0f);
        std::fill(large.begin(), large.end(), 2.0f);
        dev.all_reduce(small, reduce_op::sum, dev.axes("x"));
        dev.all_reduce(large, reduce_op::sum, dev.axes("x, y"));
        dev.all_gather(std::span<const float>(small.data(), 64), gathered, dev.axes("y"));
        dev.reduce_scatter(std::span<const float>(small.data(), 64), scattered, reduce_op::sum, dev.axes("y"));
        std::fill(counts.begin(), counts.end(), std::int64_t{1});
        dev.all_reduce(counts, reduce_op::max, dev.axes("x"));
        dev.barrier(dev.axes("x, y"));
        // small: 2 after x; gathered: two copies of it; scattered: 4 (two 2s).
        if (small[0] != 2.0f || large[39999] != 8.0f || gathered[127] != 2.0f || scattered[31] != 4.0f ||
            counts[3] != 1)
          ++wrong;
      };
      for (int i = 0; i < 3; ++i) round();  // every group met, every slot grown
      dev.barrier(dev.axes("x, y"));
      const std::size_t before = xshard_test::alloc_stats::allocations();
      dev.barrier(dev.axes("x, y"));
      for (int i = 0; i < 20; ++i) round();
      dev.barrier(dev.axes("x, y"));
      const std::size_t after = xshard_test::alloc_stats::allocations();
      allocations += after - before;
    });
    EXPECT_EQ(wrong.load(), 0);
    // Each device read the process-wide count around the same span: any
    // allocation on any device during it shows on all four.
    EXPECT_EQ(allocations.load(), 0u);
  }
}

// Worker threads: the constructor's count, checked, and the default.
TEST(SpmdThreadWorkers, CountIsChecked) {
  using M = xshard::mesh<"x=2, y=2">;
  EXPECT_EQ(xshard_test::error_of([] { xshard::thread_mesh<M> d(0); }),
            "xshard: a thread_mesh of 4 devices needs 1 to 4 worker threads, got 0");
  EXPECT_EQ(xshard_test::error_of([] { xshard::thread_mesh<M> d(5); }),
            "xshard: a thread_mesh of 4 devices needs 1 to 4 worker threads, got 5");
}

TEST(SpmdThreadWorkers, DefaultReadsTheVariable) {
  const xshard_test::scoped_env restore("XSHARD_MESH_THREADS");
  setenv("XSHARD_MESH_THREADS", "3", 1);
  EXPECT_EQ(xshard::default_mesh_threads(8), 3);
  EXPECT_EQ(xshard::default_mesh_threads(2), 2);  // never more threads than devices
  EXPECT_EQ((xshard::thread_mesh<xshard::mesh<"x=8">>().workers()), 3);
  for (const char* bad : {"0", "-1", "two", "3x", ""}) {
    setenv("XSHARD_MESH_THREADS", bad, 1);
    EXPECT_EQ(xshard_test::error_of([] { (void)xshard::default_mesh_threads(4); }),
              std::string("xshard: XSHARD_MESH_THREADS must be a positive integer, got \"") + bad + "\"");
  }
  unsetenv("XSHARD_MESH_THREADS");
  const unsigned hw = std::thread::hardware_concurrency();
  const std::int64_t expected = std::min<std::int64_t>(hw ? static_cast<std::int64_t>(hw) : 1, 64);
  EXPECT_EQ(xshard::default_mesh_threads(64), expected);
  EXPECT_EQ(xshard::default_mesh_threads(1), 1);
}

// Devices that share a thread as fibers keep their own trace: each one's
// scopes belong to it and nest around its own collectives, although the
// thread switched to the other devices inside them.
TEST(SpmdThreadWorkers, FibersKeepTheirOwnTraceScopes) {
  using M = xshard::mesh<"x=4", 3, 1, 2, 0>;
  xshard::thread_mesh<M> devices(1);
  auto& tracer = xshard::tracer::instance();
  tracer.stop();
  tracer.clear();
  tracer.start();
  devices.run([](auto& dev) {
    xshard::trace_me outer("outer", {{"position", dev.position()}});
    for (int k = 0; k < 3; ++k) {
      xshard::trace_me step("step", {{"k", k}});
      std::vector<float> v(16, 1.0f);
      dev.all_reduce(v, reduce_op::sum, 1);  // every device waits here for the others
    }
  });
  tracer.stop();
  const auto events = tracer.events();
  tracer.clear();
  ASSERT_EQ(events.size(), 4u * 7u);  // per device: outer, 3 steps, 3 all-reduces
  for (int id : {3, 1, 2, 0}) {
    std::vector<const xshard::trace_event*> mine;
    for (const auto& e : events)
      if (e.device == id) mine.push_back(&e);
    ASSERT_EQ(mine.size(), 7u) << "device " << id;
    const xshard::trace_event& outer = *mine[0];
    EXPECT_EQ(outer.name, "outer");  // sorted by ts, longer first: the parent leads
    // Then step, its all-reduce, step, ...: each inside the one before it
    // was opened in, on the device's one track.
    for (std::size_t k = 1; k < 7; ++k) {
      const xshard::trace_event& e = *mine[k];
      const xshard::trace_event& parent = k % 2 == 1 ? outer : *mine[k - 1];
      EXPECT_EQ(e.name, k % 2 == 1 ? "step" : "all-reduce") << "device " << id << " event " << k;
      EXPECT_GE(e.ts_ns, parent.ts_ns);
      EXPECT_LE(e.ts_ns + e.dur_ns, parent.ts_ns + parent.dur_ns);
      EXPECT_EQ(e.tid, outer.tid);
    }
  }
  // Four devices, four tracks, although they ran on one thread.
  std::vector<std::uint32_t> tids;
  for (const auto& e : events)
    if (std::find(tids.begin(), tids.end(), e.tid) == tids.end()) tids.push_back(e.tid);
  EXPECT_EQ(tids.size(), 4u);
}

TEST(SpmdThreadWorkers, FibersKeepTheirOwnWorkspaces) {
  using M = xshard::mesh<"x=4">;
  xshard::thread_mesh<M> devices(1);  // four fibers on one thread
  std::vector<xshard::workspace> spaces(4);
  std::atomic<int> wrong{0};
  devices.run([&](auto& dev) {
    const auto p = static_cast<std::size_t>(dev.position());
    const xshard::workspace::scope use(spaces[p]);
    for (int k = 0; k < 3; ++k) {
      std::vector<float> v(16, 1.0f);
      dev.all_reduce(v, reduce_op::sum, 1);  // the other fibers run (and open their scopes) meanwhile
      if (xshard::workspace::current() != &spaces[p]) ++wrong;
      auto t = xshard::detail::fresh_tensor<float, 1>(std::array<std::size_t, 1>{8});
      xshard::detail::recycle(std::move(t));
    }
  });
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(xshard::workspace::current(), nullptr);
  for (const auto& w : spaces) {
    EXPECT_EQ(w.stats().allocations, 1u);  // each device's buffer went back to its own workspace
    EXPECT_EQ(w.stats().reuses, 2u);
  }
}

// Naming axis sets, at compile time and at run time.
using Grid = xshard::mesh<"data=4, model=2">;
static_assert(xshard::thread_mesh<Grid>::axes("model") == 0b10);
static_assert(xshard::thread_mesh<Grid>::axes("data, model") == 0b11);
static_assert(xshard::thread_mesh<Grid>::axes(" {model,data} ") == 0b11);
static_assert(xshard::thread_mesh<Grid>::axes("") == 0);
static_assert(xshard::thread_device<Grid>::axes("data") == 0b01);
static_assert(xshard::parse_axis_set(xshard::mesh<"4, 2">::axes, "1") == 0b10);
static_assert(xshard::thread_mesh<Grid>::size() == 8);

TEST(SpmdAxisSet, Text) {
  EXPECT_EQ(xshard::axis_set_text(Grid::axes, 0b11).str(), "{data, model}");
  EXPECT_EQ(xshard::axis_set_text(Grid::axes, 0).str(), "{}");
  EXPECT_EQ(xshard::axis_set_text(xshard::mesh<"4, 2">::axes, 0b10).str(), "{1}");
  for (axis_set s = 0; s < 4; ++s)
    EXPECT_EQ(xshard::parse_axis_set(Grid::axes, xshard::axis_set_text(Grid::axes, s).view()), s);
}

TEST(SpmdAxisSet, Errors) {
  auto message = [](const char* names) {
    try {
      (void)xshard::thread_mesh<Grid>::axes(names);
    } catch (const xshard::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("data, pipe"),
            "xshard: unknown axis name 'pipe' in axis set \"data, pipe\"; the mesh's axes are data, model");
  EXPECT_EQ(message("model,model"), "xshard: axis 'model' appears more than once in axis set \"model,model\"");
  EXPECT_EQ(message("data,,model"),
            "xshard: malformed axis set \"data,,model\": unexpected ',' at column 6 (expected \"name, name, ...\")");
  EXPECT_EQ(message("0"), "xshard: unknown axis name '0' in axis set \"0\"; the mesh's axes are data, model");
}

}  // namespace
