// bench/core_pingpong.cpp - the cache-line round trip between two CPUs.
//
//   build/release/bench/core_pingpong [--benchmark_filter=...]
//
// Two threads, pinned to CPU 0 and CPU 1 (Linux), bounce one atomic: the
// caller writes an odd value, the partner answers with the next even one.
// The time per round trip is what every hand-off between the thread pool's
// threads costs at least (the work index, the done count, then the data a
// thread wrote and the other reads). On the 2-vCPU VMs of
// bench/results/train_steps_2026-11-26.md it moved between ~80 ns and ~400
// ns during the day, and train_mlp's two-thread step with it (0.47 s vs
// 0.81-0.98 s; one thread unchanged): run it beside any two-thread figure.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>
#include <thread>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace {

/// Pins the calling thread to `cpu`; false where that is not possible.
bool pin_to(int cpu) {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
#else
  (void)cpu;
  return false;
#endif
}

void BM_round_trip(benchmark::State& state) {
  if (std::thread::hardware_concurrency() < 2) {
    state.SkipWithError("needs two CPUs");
    return;
  }
  alignas(64) std::atomic<std::int64_t> flag{0};
  std::atomic<bool> stop{false};
  std::thread partner([&] {
    pin_to(1);
    std::int64_t seen = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const std::int64_t v = flag.load(std::memory_order_acquire);
      if (v != seen && v % 2 == 1) {
        flag.store(v + 1, std::memory_order_release);
        seen = v + 1;
      }
    }
  });
  const bool pinned = pin_to(0);
  std::int64_t v = 0;
  for (auto _ : state) {
    flag.store(v + 1, std::memory_order_release);
    while (flag.load(std::memory_order_acquire) != v + 2) {
    }
    v += 2;
  }
  stop.store(true, std::memory_order_relaxed);
  partner.join();
  state.SetLabel(pinned ? "CPU 0 <-> CPU 1" : "not pinned");
}
BENCHMARK(BM_round_trip)->MinTime(0.2);

}  // namespace

BENCHMARK_MAIN();
