// The thread pool (every index once per call, no task outside its call,
// errors, nesting, concurrent callers, sleeping and spinning workers),
// parallel_ranges' cover, and the composites, AdamW and SGD it splits:
// bit-identical for 1, 2 and 3 threads.
// The graph's copies, element-wise operations and gain gradients it splits: equal to a
// naive loop bit for bit at 1, 2 and 3 threads.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>
#include <xshard/core/thread_pool.hpp>
#include <xshard/core/workspace.hpp>
#include <xshard/graph/ops.hpp>
#include <xshard/ops/gelu.hpp>
#include <xshard/ops/layer_norm.hpp>
#include <xshard/ops/rms_norm.hpp>
#include <xshard/ops/softmax.hpp>
#include <xshard/optim/optimizer.hpp>
#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "../support/alloc_counter.hpp"  // replaces operator new: parallel_for's allocations

namespace {

// Runs `calls` parallel_for calls of sizes 1..37 and checks each index of
// each call ran exactly once.
void expect_each_index_once(xshard::thread_pool& pool, int calls, int seed) {
  std::vector<std::atomic<int>> hits(37);
  for (int c = 0; c < calls; ++c) {
    const std::size_t n = static_cast<std::size_t>((c * 7 + seed) % 37 + 1);
    for (auto& h : hits) h.store(0);
    pool.parallel_for(n, [&](std::size_t i) { hits[i].fetch_add(1); });
    for (std::size_t i = 0; i < hits.size(); ++i)
      ASSERT_EQ(hits[i].load(), i < n ? 1 : 0) << "call " << c << ", n " << n;
  }
}

TEST(ThreadPool, EveryIndexRunsExactlyOncePerCall) {
  for (std::size_t threads : {1, 2, 3, 5}) {
    xshard::thread_pool pool(threads);
    ASSERT_EQ(pool.size(), threads);
    expect_each_index_once(pool, 2000, 3);
  }
}

TEST(ThreadPool, IdleWorkersSleepAndWakeForTheNextCall) {
  xshard::thread_pool pool(3);
  for (int round = 0; round < 4; ++round) {
    expect_each_index_once(pool, 5, round);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // past the workers' spin: they sleep
  }
}

TEST(ThreadPool, FirstExceptionIsRethrownAndThePoolStaysUsable) {
  xshard::thread_pool pool(3);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.parallel_for(50,
                                 [&](std::size_t i) {
                                   ran.fetch_add(1);
                                   if (i % 10 == 3) throw std::runtime_error("task failed");
                                 }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 50);  // the other tasks still ran
  expect_each_index_once(pool, 100, 1);
}

TEST(ThreadPool, NestedCallsRunSeriallyOnTheCallingThread) {
  xshard::thread_pool pool(3);
  std::vector<std::atomic<int>> hits(8 * 8);
  pool.parallel_for(8, [&](std::size_t i) {
    const auto outer = std::this_thread::get_id();
    pool.parallel_for(8, [&](std::size_t j) {
      EXPECT_EQ(std::this_thread::get_id(), outer);
      hits[i * 8 + j].fetch_add(1);
    });
  });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPool, ParallelForAllocatesNothing) {
  // A task body that captures more references than std::function keeps
  // without allocating (two pointers in libstdc++): parallel_for takes it by
  // reference, so a call allocates nothing.
  xshard::thread_pool pool(3);
  std::vector<std::atomic<int>> hits(16);
  int a = 1, b = 2, c = 3, d = 4;
  auto body = [&](std::size_t i) { hits[i].fetch_add(a + b + c + d - 9); };
  static_assert(sizeof(body) > 2 * sizeof(void*));
  pool.parallel_for(16, body);
  // Counted on the calling thread, where a std::function would be made
  // (under the sanitizers every malloc in the process counts, the workers'
  // runtime's included).
  const std::size_t before = xshard_test::alloc_stats::thread_allocations();
  for (int call = 0; call < 20; ++call) pool.parallel_for(16, body);
  EXPECT_EQ(xshard_test::alloc_stats::thread_allocations() - before, 0u);
  for (const auto& h : hits) EXPECT_EQ(h.load(), 21);
}

TEST(ThreadPool, NoTaskRunsOutsideItsCall) {
  // Five threads on fewer cores: workers join calls late, some after the
  // call closed, and some wake from sleep (the pauses past their spin).
  // None may run a task of a call that has returned, or take an index of
  // the next call with the last one's job.
  xshard::thread_pool pool(5);
  std::atomic<int> current{-1}, stray{0};
  for (int c = 0; c < 5000; ++c) {
    const std::size_t n = static_cast<std::size_t>(c % 6 + 1);
    std::vector<std::atomic<int>> hits(n);
    current.store(c);
    pool.parallel_for(n, [&, c](std::size_t i) {
      if (current.load() != c) stray.fetch_add(1);
      hits[i].fetch_add(1);
    });
    current.store(-1);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "call " << c << ", index " << i;
    if (c % 1000 == 999) std::this_thread::sleep_for(std::chrono::microseconds(400));
  }
  EXPECT_EQ(stray.load(), 0);
}

TEST(ThreadPool, ConcurrentCallersAreServedOneCallAtATime) {
  xshard::thread_pool pool(3);
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t) callers.emplace_back([&pool, t] { expect_each_index_once(pool, 300, t); });
  for (auto& c : callers) c.join();
}

// The ranges of `s` over n items: in order, covering [0, n) once, each
// boundary a multiple of `unit` (or n).
void expect_ranges_cover(const xshard::balanced_shares& s, std::size_t n, std::size_t unit) {
  std::size_t at = 0;
  for (std::size_t i = 0; i < s.tasks; ++i) {
    const auto [lo, hi] = s.range(n, i, unit);
    ASSERT_EQ(lo, at) << "task " << i << " of " << s.tasks << ", n " << n << ", unit " << unit;
    ASSERT_LE(lo, hi);
    ASSERT_TRUE(hi == n || hi % unit == 0) << hi;
    at = hi;
  }
  EXPECT_EQ(at, n);
}

TEST(BalancedShares, CoverEveryItemOnceOnUnitBoundaries) {
  for (std::size_t tasks : {1, 2, 3, 5, 64})
    for (std::size_t n : {0, 1, 5, 16, 100, 533, 1061})
      for (std::size_t unit : {1, 6, 16}) expect_ranges_cover(xshard::balanced_shares::equal(tasks), n, unit);
  // Unequal cuts, as measured speeds give them: each share within one unit
  // of its fraction of the items.
  xshard::balanced_shares s = xshard::balanced_shares::equal(3);
  s.cut[1] = 0.2;
  s.cut[2] = 0.9;
  for (std::size_t n : {7, 512, 1061})
    for (std::size_t unit : {1, 6, 16}) {
      expect_ranges_cover(s, n, unit);
      for (std::size_t i = 0; i < 3; ++i) {
        const auto [lo, hi] = s.range(n, i, unit);
        EXPECT_NEAR(static_cast<double>(hi - lo), s.fraction(i) * static_cast<double>(n), 1.0 * unit)
            << "task " << i << ", n " << n << ", unit " << unit;
      }
    }
  const auto half = xshard::balanced_shares::equal(2).range(512, 0, 6);  // 86 tiles of 6 (the last 2 rows short)
  EXPECT_EQ(half.second, 258u);
}

TEST(Rebalance, MovesTowardTheMeasuredSpeedsAndKeepsTheMeanOne) {
  // Thread 1 runs at half thread 0's speed. One call with equal shares:
  // work per second 5000 and 2500 (mean 3750), so the speeds move 1/16 of
  // the way toward 4/3 and 2/3.
  std::array<double, 2> speed{1.0, 1.0};
  xshard::detail::balanced_timing m;
  m.tasks = 2;
  m.fraction = {0.5, 0.5};
  m.seconds = {1e-4, 2e-4};
  m.runner = {0, 1};
  xshard::detail::rebalance(speed, m);
  EXPECT_NEAR(speed[0], 1.0 + (4.0 / 3 - 1) / 16, 1e-12);
  EXPECT_NEAR(speed[1], 1.0 + (2.0 / 3 - 1) / 16, 1e-12);
  // Calls split by the speeds, each task's time its share over its
  // thread's true speed: the shares settle at 2/3 and 1/3, the threads
  // finishing together.
  for (int call = 0; call < 400; ++call) {
    m.fraction = {speed[0] / (speed[0] + speed[1]), speed[1] / (speed[0] + speed[1])};
    m.seconds = {m.fraction[0] * 1e-4 / 1.0, m.fraction[1] * 1e-4 / 0.5};
    xshard::detail::rebalance(speed, m);
  }
  EXPECT_NEAR(speed[0] / (speed[0] + speed[1]), 2.0 / 3, 1e-6);
  EXPECT_NEAR(speed[0] + speed[1], 2.0, 1e-9);
  // A task run by the other thread (its own had not joined yet) counts for
  // the thread that ran it.
  std::array<double, 2> both_on_0{1.0, 1.0};
  m.fraction = {0.5, 0.5};
  m.seconds = {1e-4, 1e-4};
  m.runner = {0, 0};
  xshard::detail::rebalance(both_on_0, m);
  EXPECT_NEAR(both_on_0[0], 1.0, 1e-12);
  EXPECT_NEAR(both_on_0[1], 1.0, 1e-12);
  // Too short to measure (under 5 us): no change.
  std::array<double, 2> short_call{1.2, 0.8};
  m.runner = {0, 1};
  m.seconds = {1e-6, 9e-6};
  xshard::detail::rebalance(short_call, m);
  EXPECT_EQ(short_call[0], 1.2);
  EXPECT_EQ(short_call[1], 0.8);
  // A thread ten times slower: its speed stops at 1/2 (and the other's at 2).
  std::array<double, 2> far{1.0, 1.0};
  for (int call = 0; call < 2000; ++call) {
    m.fraction = {far[0] / (far[0] + far[1]), far[1] / (far[0] + far[1])};
    m.seconds = {m.fraction[0] * 1e-4, m.fraction[1] * 1e-3};
    xshard::detail::rebalance(far, m);
  }
  EXPECT_GE(far[1], 0.5);
  EXPECT_LE(far[0], 2.0);
  EXPECT_NEAR(far[1], 0.5, 1e-3);
}

TEST(ThreadPool, BalancedCallsRunEveryTaskOnceBetweenOtherCalls) {
  // Balanced calls (one task per thread, task i on thread i unless a
  // thread is late) interleaved with plain ones on a pool with more threads
  // than cores: every task of every call runs once, inside its call, and
  // the shares stay cuts of [0, 1) within the speeds' bounds.
  for (std::size_t threads : {2, 3, 5}) {
    xshard::thread_pool pool(threads);
    std::atomic<int> current{-1}, stray{0};
    std::vector<std::atomic<int>> hits(64);
    for (int c = 0; c < 3000; ++c) {
      current.store(c);
      const bool balanced = c % 3 != 2;
      const xshard::balanced_shares s = pool.shares(balanced ? threads : 2);
      ASSERT_EQ(s.tasks, balanced ? threads : 2);
      for (std::size_t i = 0; i < s.tasks; ++i) {
        ASSERT_LE(s.cut[i], s.cut[i + 1]);
        ASSERT_GE(s.fraction(i), 0.5 / 2.0 / static_cast<double>(s.tasks) - 1e-12);
      }
      const std::size_t n = balanced ? s.tasks : static_cast<std::size_t>(c % 7 + 1);
      for (auto& h : hits) h.store(0);
      const auto body = [&, c](std::size_t i) {
        if (current.load() != c) stray.fetch_add(1);
        // Task 0 does more work than the others: the caller is the slow one.
        volatile double x = 0;
        for (int k = 0; k < (i == 0 ? 2000 : 200); ++k) x = x + 1;
        hits[i].fetch_add(1);
      };
      if (balanced)
        pool.parallel_for_balanced(s, body);
      else
        pool.parallel_for(n, body);
      current.store(-1);
      for (std::size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), i < n ? 1 : 0) << "call " << c;
      if (c % 1000 == 999) std::this_thread::sleep_for(std::chrono::microseconds(400));
    }
    EXPECT_EQ(stray.load(), 0);
  }
}

TEST(ThreadPool, BalancedCallRethrowsAndNestsSerially) {
  xshard::thread_pool pool(2);
  const xshard::balanced_shares s = pool.shares(2);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.parallel_for_balanced(s,
                                          [&](std::size_t i) {
                                            ran.fetch_add(1);
                                            if (i == 1) throw std::runtime_error("task failed");
                                          }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 2);
  std::vector<std::atomic<int>> hits(4);
  pool.parallel_for_balanced(s, [&](std::size_t i) {
    const auto outer = std::this_thread::get_id();
    pool.parallel_for_balanced(s, [&](std::size_t j) {
      EXPECT_EQ(std::this_thread::get_id(), outer);
      hits[i * 2 + j].fetch_add(1);
    });
  });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
  // Allocates nothing on the calling thread.
  const std::size_t before = xshard_test::alloc_stats::thread_allocations();
  for (int call = 0; call < 20; ++call) pool.parallel_for_balanced(pool.shares(2), [&](std::size_t) {});
  EXPECT_EQ(xshard_test::alloc_stats::thread_allocations() - before, 0u);
}

TEST(ParallelRanges, CoverEveryItemOnceOnUnitBoundaries) {
  const std::size_t before = xshard::num_threads();
  for (std::size_t threads : {1, 2, 3}) {
    xshard::set_num_threads(threads);
    for (std::size_t pieces : {1, 4}) {
      for (std::size_t n : {0u, 1u, 15u, 16u, 100u, 1000u, 4099u}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> ranges{0};
        xshard::parallel_ranges(
            n, 10,
            [&](std::size_t lo, std::size_t hi) {
              ranges.fetch_add(1);
              EXPECT_LT(lo, hi);
              EXPECT_EQ(lo % 16, 0u) << "n " << n;
              EXPECT_TRUE(hi % 16 == 0 || hi == n) << "n " << n;
              for (std::size_t i = lo; i < hi; ++i) hits[i].fetch_add(1);
            },
            16, pieces);
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[i].load(), 1) << "n " << n << ", item " << i << ", pieces " << pieces;
        // `pieces` ranges per thread at most, and a single range below the grain
        const std::size_t split = std::min(threads, n / 10);
        EXPECT_LE(ranges.load(), static_cast<int>(split > 1 ? split * pieces : 1)) << "n " << n;
      }
    }
  }
  xshard::set_num_threads(before);
}

// Each composite and the AdamW update at 1, 2 and 3 threads, on sizes above
// the split grain: the outputs must be equal bit for bit.
template <class F>
void expect_same_for_every_thread_count(F run) {
  const std::size_t before = xshard::num_threads();
  xshard::set_num_threads(1);
  const auto one = run();
  for (std::size_t threads : {2, 3}) {
    xshard::set_num_threads(threads);
    const auto many = run();
    ASSERT_EQ(many.size(), one.size());
    for (std::size_t i = 0; i < one.size(); ++i)
      EXPECT_EQ(many[i], one[i]) << "output " << i << ", threads " << threads;
  }
  xshard::set_num_threads(before);
}

TEST(ParallelComposites, BitIdenticalForOneTwoAndThreeThreads) {
  xt::random::seed(5);
  const xt::xtensor<float, 2> x = xt::random::randn<float>({300, 517});  // rows and a tail off the SIMD width
  const xt::xtensor<float, 2> g = xt::random::randn<float>({300, 517});
  const xt::xtensor<float, 3> x3 = xt::random::randn<float>({40, 97, 33});  // softmax over a middle dim
  using T2 = xt::xtensor<float, 2>;
  using T3 = xt::xtensor<float, 3>;
  expect_same_for_every_thread_count([&] {
    return std::vector<T2>{xshard::gelu(x), xshard::gelu_backward(g, x), xshard::gelu(x, "tanh")};
  });
  expect_same_for_every_thread_count([&] {
    const T2 y = xshard::softmax(x, -1);
    return std::vector<T2>{y, xshard::softmax_backward(g, y, -1)};
  });
  expect_same_for_every_thread_count([&] {
    const T3 y = xshard::softmax(x3, 1);
    return std::vector<T3>{y, xshard::softmax_backward(x3, y, 1)};
  });
  expect_same_for_every_thread_count([&] {
    auto r = xshard::rms_norm(x);
    return std::vector<T2>{r.output, r.rstd, xshard::rms_norm_backward(g, x, r.rstd)};
  });
  expect_same_for_every_thread_count([&] {
    auto r = xshard::layer_norm(x);
    return std::vector<T2>{r.output, r.mean, r.rstd};
  });
  expect_same_for_every_thread_count([&] {
    const xshard::adamw rule{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1};
    std::vector<float> p(x.begin(), x.end()), m(p.size(), 0.0f), v(p.size(), 0.0f);
    for (std::int64_t t = 1; t <= 3; ++t) {
      float* s[] = {m.data(), v.data()};
      rule.update(p.data(), g.data(), 0.5f, s, p.size(), t);
    }
    return std::vector<std::vector<float>>{p, m, v};
  });
  expect_same_for_every_thread_count([&] {
    std::vector<std::vector<float>> out;
    for (const xshard::sgd rule : {xshard::sgd{.lr = 0.1}, xshard::sgd{.lr = 0.1, .momentum = 0.9, .nesterov = true}}) {
      std::vector<float> p(x.begin(), x.end()), b(p.size(), 0.0f);
      for (int t = 0; t < 3; ++t) {
        float* s[] = {b.data()};
        rule.update(p.data(), g.data(), 0.5f, s, p.size(), t + 1);
      }
      out.push_back(p);
      out.push_back(b);
    }
    return out;
  });
}

// SGD splits its elements over the pool: each element's update is the
// formula's, checked one by one.
TEST(ParallelComposites, SgdUpdatesEveryElementByTheFormula) {
  const std::size_t before = xshard::num_threads();
  xshard::set_num_threads(3);
  const std::size_t n = 70001;  // several grains and a tail
  std::vector<float> p(n), g(n);
  for (std::size_t i = 0; i < n; ++i) {
    p[i] = static_cast<float>(i % 97) * 0.01f;
    g[i] = static_cast<float>(i % 13) - 6.0f;
  }
  std::vector<float> q = p;
  const xshard::sgd rule{.lr = 0.1, .weight_decay = 0.01};
  float* const* no_state = nullptr;
  rule.update(q.data(), g.data(), 0.5f, no_state, n, 1);
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_FLOAT_EQ(q[i], p[i] - 0.1f * (g[i] * 0.5f + 0.01f * p[i])) << "element " << i;
  xshard::set_num_threads(before);
}

// An optimizer updates all its tensors in one parallel region (and
// layer_updates all of a layer's): each task takes its share of every
// tensor (three tensors of 20001, 7 and 30011 elements, one region of three
// grains; the 7 fall to the last task), and every element still gets the
// plain loop's update with its own tensor's gradient and state, for 1, 2
// and 3 threads.
TEST(ParallelComposites, OneRegionOverSeveralTensorsIsEachTensorsUpdate) {
  using V = xt::xtensor<float, 1>;
  using Params = std::tuple<V, V, V>;
  auto make = [](std::size_t n, double seed) {
    V x = V::from_shape({n});
    for (std::size_t i = 0; i < n; ++i) x(i) = static_cast<float>(std::sin(seed + 0.37 * static_cast<double>(i)));
    return x;
  };
  const Params start{make(20001, 1), make(7, 2), make(30011, 3)};
  const Params grad{make(20001, 4), make(7, 5), make(30011, 6)};
  const xshard::sgd rule{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
  // The reference: the plain loop of sgd's formula, tensor by tensor.
  Params want = start, buf{V::from_shape({20001}), V::from_shape({7}), V::from_shape({30011})};
  const float lr = 0.1f, wd = 0.01f;  // b starts at 0, so the first step's mu b is 0
  xshard::detail::for_each_index<3>([&](auto k) {
    auto& p = std::get<k.value>(want);
    auto& b = std::get<k.value>(buf);
    const auto& g = std::get<k.value>(grad);
    for (std::size_t i = 0; i < p.size(); ++i) {
      const float gi = g(i) * 1.0f + wd * p(i);
      b(i) = gi;  // the first step's momentum buffer (torch: b = g)
      p(i) -= lr * b(i);
    }
  });
  expect_same_for_every_thread_count([&] {
    Params p = start;
    xshard::optimizer<xshard::sgd, Params> opt(rule, p);
    opt.step(p, grad);
    EXPECT_EQ(std::get<0>(p), std::get<0>(want));
    EXPECT_EQ(std::get<1>(p), std::get<1>(want));
    EXPECT_EQ(std::get<2>(p), std::get<2>(want));
    EXPECT_EQ(std::get<2>(opt.state(0)), std::get<2>(buf));
    return std::vector<V>{std::get<0>(p), std::get<1>(p), std::get<2>(p)};
  });
  // layer_updates: a stack of two layers, each layer's three tensors in one region.
  using Stack = std::tuple<xt::xtensor<float, 2>, xt::xtensor<float, 2>, xt::xtensor<float, 2>>;
  auto stack = [](const Params& t) {
    Stack s;
    xshard::detail::for_each_index<3>([&](auto k) {
      const V& x = std::get<k.value>(t);
      auto& y = std::get<k.value>(s);
      y = xt::xtensor<float, 2>::from_shape({2, x.size()});
      xt::view(y, 0) = x;
      xt::view(y, 1) = x * 0.5f;
    });
    return s;
  };
  const Stack sstart = stack(start), sgrad = stack(grad);
  expect_same_for_every_thread_count([&] {
    Stack stepped = sstart, layered = sstart;
    xshard::optimizer<xshard::sgd, Stack> a(rule, stepped), b(rule, layered);
    a.step(stepped, sgrad);
    auto update = b.layer_updates(layered);
    for (std::size_t l = 2; l-- > 0;)
      update(l, std::tuple<V, V, V>(xt::view(std::get<0>(sgrad), l), xt::view(std::get<1>(sgrad), l),
                                    xt::view(std::get<2>(sgrad), l)));
    EXPECT_EQ(std::get<0>(layered), std::get<0>(stepped));
    EXPECT_EQ(std::get<1>(layered), std::get<1>(stepped));
    EXPECT_EQ(std::get<2>(layered), std::get<2>(stepped));
    const V first_layer = xt::view(std::get<0>(layered), 0);
    EXPECT_EQ(first_layer, std::get<0>(want));
    return std::vector<xt::xtensor<float, 2>>{std::get<0>(layered), std::get<1>(layered), std::get<2>(layered)};
  });
}

// The graph's element-wise helpers split over the pool: a cotangent's copy
// (fresh_copy with a workspace open), a gradient's second contribution
// (add_in_place), equal-shape operations and scalings (binary_elements,
// scale_elements) and a gain's gradient (the column sums of g * x, each
// column summed in row order): each equal to a naive loop's bits, for 1, 2
// and 3 threads, on sizes of several grains with a tail off the SIMD width.
TEST(ParallelGraphHelpers, EqualANaiveLoopBitForBit) {
  xt::random::seed(9);
  const xt::xtensor<float, 2> a = xt::random::randn<float>({300, 517});
  const xt::xtensor<float, 2> b = xt::random::randn<float>({300, 517});
  const xt::xtensor<double, 2> ad = xt::random::randn<double>({70, 517});
  const xt::xtensor<double, 2> bd = xt::random::randn<double>({70, 517});
  const std::size_t before = xshard::num_threads();
  for (std::size_t threads : {1, 2, 3}) {
    xshard::set_num_threads(threads);
    xshard::workspace ws;
    const xshard::workspace::scope use(ws);
    const xt::xtensor<float, 2> copy = xshard::detail::fresh_copy<float, 2>(a);
    ASSERT_EQ(copy.shape(), a.shape());
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(copy.data()[i], a.data()[i]) << "copy, element " << i;

    xt::xtensor<float, 2> sum = a;
    xshard::graph::detail::add_in_place(sum.data(), b.data(), sum.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(sum.data()[i], a.data()[i] + b.data()[i]) << "sum, element " << i << ", threads " << threads;
    xt::xtensor<double, 2> sumd = ad;
    xshard::graph::detail::add_in_place(sumd.data(), bd.data(), sumd.size());
    for (std::size_t i = 0; i < ad.size(); ++i)
      ASSERT_EQ(sumd.data()[i], ad.data()[i] + bd.data()[i]) << "double sum, element " << i;

    xt::xtensor<float, 2> out = a;
    xshard::graph::detail::binary_elements<xshard::graph::binary::sub>(out.data(), a.data(), b.data(), out.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(out.data()[i], a.data()[i] - b.data()[i]) << "difference " << i;
    xshard::graph::detail::binary_elements<xshard::graph::binary::div>(out.data(), a.data(), b.data(), out.size());
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(out.data()[i], a.data()[i] / b.data()[i]) << "quotient " << i;
    xshard::graph::detail::scale_elements(out.data(), a.data(), 0.3f, out.size());
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(out.data()[i], a.data()[i] * 0.3f) << "scaled " << i;

    const xt::xtensor<float, 1> w = xt::random::randn<float>({517});
    auto dw = xshard::graph::detail::gain_product_vjp<1>(xt::xtensor<float, 2>(b), a, w);
    ASSERT_TRUE(dw.has_value());
    ASSERT_EQ(dw->size(), 517u);
    for (std::size_t j = 0; j < 517; ++j) {
      float col = 0.0f;
      for (std::size_t i = 0; i < 300; ++i) {
        const float p = b(i, j) * a(i, j);  // rounded before the sum, as the kernel does
        col += p;
      }
      ASSERT_EQ((*dw)(j), col) << "gain gradient, column " << j << ", threads " << threads;
    }
  }
  xshard::set_num_threads(before);
}

}  // namespace
