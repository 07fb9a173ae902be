// bench/fork_join.cpp - what one parallel call costs on two threads:
// xshard's thread pool beside OpenMP (libgomp), in the same run.
//
//   build/release/bench/fork_join [--benchmark_filter=...]
//
// Each iteration is one fork-join over two threads whose tasks do almost
// nothing (an atomic increment), so the time is the hand-off: the caller
// publishes the call, the other thread sees it and runs its task, the
// caller sees it finish. The `gap` rows first spin for 5 us on the calling
// thread alone, as a training step does between its kernels (an einsum's
// setup, a small serial op); their time is reported without the gap.
// Run bench/core_pingpong beside it: the cache-line round trip between the
// two CPUs bounds both from below, and it moves with the VM's state.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <xshard/core/thread_pool.hpp>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace {

using clock_type = std::chrono::steady_clock;
constexpr auto gap = std::chrono::microseconds(5);

void spin_for(std::chrono::nanoseconds d) {
  const auto until = clock_type::now() + d;
  while (clock_type::now() < until) {
  }
}

/// The iteration's time without the serial gap, as a manual time.
template <class Call>
void time_calls(benchmark::State& state, bool with_gap, const Call& call) {
  for (auto _ : state) {
    if (with_gap) spin_for(gap);
    const auto t0 = clock_type::now();
    call();
    state.SetIterationTime(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
}

void BM_xshard_pool(benchmark::State& state) {
  xshard::set_num_threads(2);
  alignas(64) std::atomic<std::size_t> hits{0};
  time_calls(state, state.range(0) != 0, [&] {
    xshard::default_thread_pool().parallel_for(2, [&](std::size_t) { hits.fetch_add(1, std::memory_order_relaxed); });
  });
  if (hits.load() < 2 * static_cast<std::size_t>(state.iterations())) state.SkipWithError("a task did not run");
}
BENCHMARK(BM_xshard_pool)->ArgName("gap")->Arg(0)->Arg(1)->UseManualTime()->MinTime(0.3);

#if defined(_OPENMP)
void BM_openmp(benchmark::State& state) {
  alignas(64) std::atomic<std::size_t> hits{0};
  time_calls(state, state.range(0) != 0, [&] {
#pragma omp parallel num_threads(2)
    hits.fetch_add(1, std::memory_order_relaxed);
  });
  if (hits.load() < 2 * static_cast<std::size_t>(state.iterations())) state.SkipWithError("a task did not run");
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  state.SetLabel(std::string("OMP_WAIT_POLICY=") + (policy ? policy : "(unset)"));
}
BENCHMARK(BM_openmp)->ArgName("gap")->Arg(0)->Arg(1)->UseManualTime()->MinTime(0.3);
#endif

}  // namespace

BENCHMARK_MAIN();
