// core/fiber.hpp: fibers on one thread hand it to each other in wait_until,
// in the order their predicates allow; a host whose fibers all wait for
// another thread sleeps until that thread bumps the progress signal; hosts
// are reused across runs; exceptions stay inside their fiber.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <xshard/core/fiber.hpp>

namespace {

using xshard::detail::fiber_host;
using xshard::detail::progress_signal;

// The header's example: fiber 1 waits for fiber 0.
TEST(Fiber, HeaderExample) {
  progress_signal progress;
  std::atomic<int> turn{0};
  fiber_host host(2);
  host.run(
      2,
      [](void* c, std::size_t i) {
        auto& t = *static_cast<std::atomic<int>*>(c);
        fiber_host::current()->wait_until([&] { return t.load() == int(i); });
        ++t;
      },
      &turn, progress);
  EXPECT_EQ(turn.load(), 2);
  EXPECT_EQ(fiber_host::current(), nullptr);
}

// Five fibers take turns in reverse order of their index, three rounds: the
// log is the order a hand-written schedule gives.
struct relay {
  int n = 5;
  int turn = 0;  // whose turn: counts down n-1, ..., 0, n-1, ...
  int step = 0;
  std::vector<std::string> log;
};

TEST(Fiber, TurnsInTheOrderThePredicatesAllow) {
  progress_signal progress;
  fiber_host host(8);
  for (int run = 0; run < 2; ++run) {  // the host and its stacks are reused
    relay r;
    r.turn = r.n - 1;
    host.run(
        static_cast<std::size_t>(r.n),
        [](void* c, std::size_t i) {
          auto& rl = *static_cast<relay*>(c);
          const int me = static_cast<int>(i);
          EXPECT_EQ(fiber_host::current()->running(), i);
          for (int round = 0; round < 3; ++round) {
            fiber_host::current()->wait_until([&] { return rl.turn == me; });
            rl.log.push_back(std::to_string(round) + ":" + std::to_string(me));
            rl.turn = me == 0 ? rl.n - 1 : me - 1;
          }
        },
        &r, progress);
    std::vector<std::string> expected;
    for (int round = 0; round < 3; ++round)
      for (int me = r.n - 1; me >= 0; --me) expected.push_back(std::to_string(round) + ":" + std::to_string(me));
    EXPECT_EQ(r.log, expected) << "run " << run;
  }
}

// Fibers keep their own stacks: deep recursion with locals on each, switched
// in the middle, comes back with every local intact.
int depth_sum(int depth, int seed, std::atomic<int>& gate, int turn) {
  volatile int local[64];
  for (int k = 0; k < 64; ++k) local[k] = seed + k;
  if (depth == 0) {
    fiber_host::current()->wait_until([&] { return gate.load() == turn; });
    gate.fetch_add(1);  // the next fiber's turn
  }
  const int below = depth == 0 ? 0 : depth_sum(depth - 1, seed + 1, gate, turn);
  int s = 0;
  for (int k = 0; k < 64; ++k) s += local[k] - (seed + k);
  return below + s + 1;
}

TEST(Fiber, EachFiberKeepsItsStack) {
  struct ctx {
    std::atomic<int> gate{0};
    std::vector<int> result = std::vector<int>(4, -1);
  } c;
  progress_signal progress;
  fiber_host host(4);
  host.run(
      4,
      [](void* p, std::size_t i) {
        auto& cx = *static_cast<ctx*>(p);
        // Fibers pass the gate last to first: fibers 0, 1 and 2 each wait
        // 200 frames deep while the later ones run, and resume there.
        cx.result[i] = depth_sum(200, static_cast<int>(i) * 1000, cx.gate, 3 - static_cast<int>(i));
      },
      &c, progress);
  EXPECT_EQ(c.result, std::vector<int>(4, 201));  // every frame's locals as written
}

// Two hosts on two threads: each fiber waits for a counter the other
// thread's fibers advance, so each host at times has no fiber that can run
// and must wait (spin, yield, sleep) until the other thread bumps progress.
TEST(Fiber, HostsOnTwoThreadsWakeEachOther) {
  constexpr int rounds = 2000;
  struct shared {
    progress_signal progress;
    std::atomic<int> counter{0};  // fiber k of thread t acts when counter % 4 == 2 * k + t
  } s;
  struct task {
    shared* s;
    int thread;
  };
  auto body = [](void* p, std::size_t i) {
    auto& tk = *static_cast<task*>(p);
    const int slot = 2 * static_cast<int>(i) + tk.thread;
    for (int r = 0; r < rounds; ++r) {
      fiber_host::current()->wait_until([&] { return tk.s->counter.load() % 4 == slot; });
      tk.s->counter.fetch_add(1);
      tk.s->progress.bump();
      if (r % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the peer sleeps meanwhile
    }
  };
  task t0{&s, 0}, t1{&s, 1};
  std::thread other([&] {
    fiber_host h(2);
    h.run(2, body, &t1, s.progress);
  });
  fiber_host h(2);
  h.run(2, body, &t0, s.progress);
  other.join();
  EXPECT_EQ(s.counter.load(), 4 * rounds);
}

// The thread-local hook runs before every switch into a fiber (its index)
// and back to the host (npos): a fiber sees its own value of a
// thread_local that the hook swaps.
thread_local int fiber_tag = -1;
TEST(Fiber, EnterHookSwapsThreadLocalState) {
  struct ctx {
    int turn = 0;
    std::vector<int> seen;
  } c;
  progress_signal progress;
  fiber_host host(3);
  host.run(
      3,
      [](void* p, std::size_t i) {
        auto& cx = *static_cast<ctx*>(p);
        for (int round = 0; round < 2; ++round) {
          fiber_host::current()->wait_until([&] { return cx.turn % 3 == static_cast<int>(i); });
          cx.seen.push_back(fiber_tag);
          ++cx.turn;
        }
      },
      &c, progress, [](void*, std::size_t i) { fiber_tag = i == fiber_host::npos ? -1 : 100 + static_cast<int>(i); },
      nullptr);
  EXPECT_EQ(c.seen, (std::vector<int>{100, 101, 102, 100, 101, 102}));
  EXPECT_EQ(fiber_tag, -1);
}

TEST(Fiber, Misuse) {
  progress_signal progress;
  fiber_host host(2);
  try {
    host.run(
        3, [](void*, std::size_t) {}, nullptr, progress);
    ADD_FAILURE() << "no error";
  } catch (const xshard::error& e) {
    EXPECT_STREQ(e.what(), "xshard: fiber_host of 2 fibers asked to run 3");
  }
  // run() from inside a fiber: the error is caught inside it.
  struct ctx {
    fiber_host* host;
    progress_signal* progress;
    std::string what;
  } c{&host, &progress, {}};
  host.run(
      1,
      [](void* p, std::size_t) {
        auto& cx = *static_cast<ctx*>(p);
        try {
          cx.host->run(
              1, [](void*, std::size_t) {}, nullptr, *cx.progress);
        } catch (const xshard::error& e) {
          cx.what = e.what();
        }
      },
      &c, progress);
  EXPECT_EQ(c.what, "xshard: fiber_host::run called from inside a fiber");
}

}  // namespace
