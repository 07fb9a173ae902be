// bench/trace.cpp - the cost of one xshard::trace_me scope.
//
// What is timed (one iteration = one scope, on one thread):
//
//   empty_loop            the loop alone (benchmark::ClobberMemory per iteration)
//   trace_me/off          a scope while tracing is off: one relaxed atomic load
//                         and a branch at open, a test of a member at close
//   trace_me/off/args     the same with {{"i", i}} args (builds the view array)
//   trace_me/on           a scope while tracing is on: two clock reads, the name
//                         copied (short: no allocation), the event appended to
//                         the thread's buffer under its uncontended mutex
//   trace_me/on/args      the same with one int64 arg (allocates the args vector)
//
// While tracing is on the events pile up; every 2^16 iterations the buffer is
// cleared with timing paused, so the number is the steady cost of recording
// into a warm buffer, not of growing it.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <xshard/trace/trace.hpp>

namespace {

constexpr std::int64_t clear_every = std::int64_t{1} << 16;

void bm_empty_loop(benchmark::State& state) {
  for (auto _ : state) benchmark::ClobberMemory();
}

void bm_trace_off(benchmark::State& state) {
  xshard::tracer::instance().stop();
  for (auto _ : state) {
    xshard::trace_me t("layer3/forward");
    benchmark::ClobberMemory();
  }
}

void bm_trace_off_args(benchmark::State& state) {
  xshard::tracer::instance().stop();
  std::int64_t i = 0;
  for (auto _ : state) {
    xshard::trace_me t("scan/iter", {{"i", i++}});
    benchmark::ClobberMemory();
  }
}

template <bool WithArgs>
void bm_trace_on(benchmark::State& state) {
  xshard::tracer& tracer = xshard::tracer::instance();
  tracer.clear();
  tracer.start();
  std::int64_t i = 0;
  for (auto _ : state) {
    if constexpr (WithArgs) {
      xshard::trace_me t("scan/iter", {{"i", i}});
      benchmark::ClobberMemory();
    } else {
      xshard::trace_me t("layer3/forward");
      benchmark::ClobberMemory();
    }
    if (++i % clear_every == 0) {
      state.PauseTiming();
      tracer.clear();
      state.ResumeTiming();
    }
  }
  tracer.stop();
  tracer.clear();
}

BENCHMARK(bm_empty_loop)->Name("empty_loop");
BENCHMARK(bm_trace_off)->Name("trace_me/off");
BENCHMARK(bm_trace_off_args)->Name("trace_me/off/args");
BENCHMARK(bm_trace_on<false>)->Name("trace_me/on");
BENCHMARK(bm_trace_on<true>)->Name("trace_me/on/args");

}  // namespace

BENCHMARK_MAIN();
