// xshard/core/thread_pool.hpp - the library's worker threads.
//
// One process-wide pool; its size is $XSHARD_NUM_THREADS (a positive
// integer) or else the hardware's thread count. parallel_for(n, f) runs
// f(i) for i in [0, n) on the pool and the calling thread and returns when
// all are done. Work is handed out by index, so which thread runs a task never
// changes the result of a task that writes its own output.
// parallel_for_balanced(shares(n), f) runs one task per thread, task i on
// thread i, and times them: shares() cuts the next call's work by each
// thread's measured speed (threads on vCPUs that a hypervisor runs at
// different speeds finish together), which the GEMM and the optimizer use.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "error.hpp"

namespace xshard {

/// Threads the library uses: $XSHARD_NUM_THREADS or the hardware's count.
inline std::size_t default_thread_count() {
  if (const char* env = std::getenv("XSHARD_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end == env || *end != '\0' || n < 1 || n > 4096)
      throw error(std::string("xshard: XSHARD_NUM_THREADS must be an integer in [1, 4096], got \"") + env + '"');
    return static_cast<std::size_t>(n);
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw ? hw : 1;
}

/// A non-owning reference to a task body f(i), what parallel_for hands its
/// threads. (std::function would allocate for every call whose lambda
/// captures more than two references: a GEMM's does.) It refers to f, so f
/// must outlive the parallel_for call: a lambda written in the call does.
class task_ref {
 public:
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, task_ref> && std::is_invocable_v<const F&, std::size_t>)
      task_ref(const F& f)  // implicit: callers pass lambdas
      : obj_(std::addressof(f)), call_([](const void* o, std::size_t i) { (*static_cast<const F*>(o))(i); }) {}
  void operator()(std::size_t i) const { call_(obj_, i); }

 private:
  const void* obj_;
  void (*call_)(const void*, std::size_t);
};

namespace detail {
/// How long a thread with nothing to do spins before it sleeps (the
/// pool's workers and callers, thread_mesh's fiber hosts): back-to-back work
/// arrives within tens of microseconds in a training step, and a futex
/// wake-up on a VM costs about that much.
inline constexpr std::chrono::microseconds spin_before_sleep{200};

/// Element-wise kernels split their elements (or rows) over the thread pool
/// when every thread gets at least this many elements (about 10-50 us of
/// work: more than a spinning worker's start-up), on boundaries of 16
/// elements (a 64-byte line of floats, every ISA's width divides it).
inline constexpr std::size_t parallel_grain = 16384;
inline constexpr std::size_t parallel_unit = 16;

/// A pause for a spinning thread.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// The most tasks a balanced call (thread_pool::parallel_for_balanced)
/// splits its work into: one per thread of a pool of up to this many.
inline constexpr std::size_t max_balanced_tasks = 64;

/// What a balanced call's tasks measured: task i had fraction[i] of the
/// work, ran for seconds[i] and ran on thread runner[i] (0 the caller, w
/// the w-th worker).
struct balanced_timing {
  std::size_t tasks = 0;
  std::array<double, max_balanced_tasks> fraction{}, seconds{};
  std::array<std::size_t, max_balanced_tasks> runner{};
};

/// A balanced call's effect on the threads' relative speeds (mean 1 over
/// the call's threads): each thread's speed moves by `rate` of the way
/// toward its tasks' work per second (over the call's mean), then the
/// speeds are brought back to mean 1 and kept within [1/2, 2]. A call with
/// a task shorter than `min_seconds` (too short to tell a slower thread from
/// a late start or an interrupt) changes nothing.
inline void rebalance(std::span<double> speed, const balanced_timing& m, double rate = 1.0 / 16,
                      double min_seconds = 5e-6) {
  const std::size_t n = std::min(m.tasks, speed.size());
  if (n < 2) return;
  double mean = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!(m.seconds[i] >= min_seconds) || !(m.fraction[i] > 0)) return;
    mean += m.fraction[i] / m.seconds[i];
  }
  mean /= static_cast<double>(n);
  for (std::size_t i = 0; i < n; ++i) {
    double& v = speed[std::min(m.runner[i], n - 1)];
    v += rate * (m.fraction[i] / m.seconds[i] / mean - v);
  }
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) total += speed[i];
  for (std::size_t i = 0; i < n; ++i) speed[i] = std::clamp(speed[i] * static_cast<double>(n) / total, 0.5, 2.0);
}
}  // namespace detail

/// How a balanced call divides its work: task i gets [cut[i], cut[i + 1])
/// of [0, 1), in proportion to the speed of the thread that runs it
/// (thread_pool::balanced_shares).
struct balanced_shares {
  std::size_t tasks = 1;
  std::array<double, detail::max_balanced_tasks + 1> cut{0.0, 1.0};

  /// Equal shares of `tasks` (1 to max_balanced_tasks).
  static balanced_shares equal(std::size_t tasks) {
    balanced_shares s;
    s.tasks = std::clamp<std::size_t>(tasks, 1, detail::max_balanced_tasks);
    for (std::size_t i = 0; i <= s.tasks; ++i) s.cut[i] = static_cast<double>(i) / static_cast<double>(s.tasks);
    return s;
  }
  /// Task i's range of [0, n): boundaries on multiples of `unit` (the last
  /// at n), each share's cut rounded to the nearest unit. The ranges cover
  /// [0, n) once, in order; a small share may be empty.
  std::pair<std::size_t, std::size_t> range(std::size_t n, std::size_t i, std::size_t unit) const {
    const std::size_t units = (n + unit - 1) / unit;
    const auto at = [&](std::size_t k) -> std::size_t {
      if (k == 0) return 0;
      if (k >= tasks) return n;
      const auto u = static_cast<std::size_t>(cut[k] * static_cast<double>(units) + 0.5);
      return std::min(std::min(u, units) * unit, n);
    };
    return {at(i), std::max(at(i), at(i + 1))};
  }
  double fraction(std::size_t i) const { return cut[i + 1] - cut[i]; }
};

class thread_pool {
 public:
  explicit thread_pool(std::size_t threads) {
    for (std::size_t i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
    for (auto& v : speed_) v.store(1.0, std::memory_order_relaxed);
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;
  ~thread_pool() {
    {
      std::lock_guard lock(mu_);
      stop_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  /// Threads that run tasks (the workers plus the caller).
  std::size_t size() const { return workers_.size() + 1; }

  /// Runs f(i) for every i in [0, n); rethrows the first exception.
  /// Calls from inside a task run serially on the calling thread.
  ///
  /// A worker that finished a call spins for spin_time before it sleeps,
  /// and so does a caller waiting for the workers: a training step's
  /// back-to-back calls (a GEMM every ~100 us) then start on threads that
  /// are awake instead of paying a futex wake-up (tens of microseconds on a
  /// VM, long enough for the caller to take every task itself). The spin is
  /// bounded, so idle or oversubscribed threads sleep.
  ///
  /// No lock is taken while the threads are awake: a call moves the
  /// generation's cache line and the counters' line between cores and
  /// nothing else (bench/fork_join: 0.37-0.94 us per call on two vCPUs of an
  /// AVX2 Zen 1 VM, against 0.70-9.6 us when the workers took a mutex to
  /// join and to leave, and 1.7-2.0 us for an OpenMP parallel region).
  void parallel_for(std::size_t n, task_ref f) {
    if (n == 0) return;
    if (n == 1 || workers_.empty() || inside_) {
      for (std::size_t i = 0; i < n; ++i) f(i);
      return;
    }
    std::lock_guard call(call_mu_);  // one call at a time
    run_call(f, n, false);
  }

  /// The shares of a balanced call of `tasks` tasks: in proportion to the
  /// threads' measured speeds when there is one task per thread
  /// (tasks == size()), equal otherwise.
  balanced_shares shares(std::size_t tasks) const {
    balanced_shares s = balanced_shares::equal(tasks);
    if (tasks != size() || tasks < 2 || tasks > detail::max_balanced_tasks) return s;
    double total = 0;
    for (std::size_t i = 0; i < tasks; ++i) total += speed_[i].load(std::memory_order_relaxed);
    double at = 0;
    for (std::size_t i = 1; i < tasks; ++i) {
      at += speed_[i - 1].load(std::memory_order_relaxed);
      s.cut[i] = at / total;
    }
    return s;
  }

  /// parallel_for(s.tasks, f) for tasks that split their work by `s`
  /// (balanced_shares::range): with one task per thread, task i runs on
  /// thread i (0 the caller, i the i-th worker; a thread that has not joined
  /// yet has its task taken by one that has), each task is timed, and the
  /// threads' speeds move toward what the times say (detail::rebalance), so
  /// that the next call's shares() give a thread that runs slower (a vCPU
  /// the hypervisor shares, a core that is busy elsewhere) less work and
  /// the threads finish together. Which thread runs which share never
  /// changes a result whose elements each come from one task, and shares()
  /// change by small steps, so a thread's share of one call is nearly the
  /// one it had the call before (its data stays in its cache).
  void parallel_for_balanced(const balanced_shares& s, task_ref f) {
    const std::size_t n = s.tasks;
    if (n != size() || n < 2 || inside_) return parallel_for(n, f);
    std::lock_guard call(call_mu_);  // one call at a time, and timing_ is this call's until rebalanced
    for (std::size_t i = 0; i < n; ++i) timing_.fraction[i] = s.fraction(i);
    timing_.tasks = n;
    run_call(f, n, true);
    std::array<double, detail::max_balanced_tasks> speed{};
    for (std::size_t i = 0; i < n; ++i) speed[i] = speed_[i].load(std::memory_order_relaxed);
    detail::rebalance(std::span<double>(speed.data(), n), timing_);
    for (std::size_t i = 0; i < n; ++i) speed_[i].store(speed[i], std::memory_order_relaxed);
  }

 private:
  static constexpr std::chrono::microseconds spin_time = detail::spin_before_sleep;

  /// Spins until pred() or spin_time has passed; true if pred() held.
  template <class Pred>
  static bool spin_until(const Pred& pred) {
    const auto until = std::chrono::steady_clock::now() + spin_time;
    while (true) {
      for (int i = 0; i < 64; ++i) {
        if (pred()) return true;
        detail::cpu_relax();
      }
      if (std::chrono::steady_clock::now() >= until) return pred();
    }
  }
  /// Spins until pred(), then sleeps on cv until it holds, counted in
  /// `sleeping` (seq_cst: a thread that makes pred() true and then reads
  /// `sleeping` as 0 made it true before the sleeper's last check).
  template <class Pred>
  void spin_then_wait(const Pred& pred, std::condition_variable& cv, std::atomic<std::size_t>& sleeping) {
    if (spin_until(pred)) return;
    std::unique_lock lock(mu_);
    sleeping.fetch_add(1, std::memory_order_seq_cst);
    cv.wait(lock, pred);
    sleeping.fetch_sub(1, std::memory_order_relaxed);
  }
  /// The caller's wait for its workers (woken by leave()).
  template <class Pred>
  void wait_until(const Pred& pred) {
    spin_then_wait(pred, finished_, waiters_);
  }
  /// After making a sleeper's predicate true: wakes cv's sleepers, if any
  /// (spin_then_wait's counterpart).
  void wake(std::condition_variable& cv, const std::atomic<std::size_t>& sleeping) {
    if (sleeping.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard lock(mu_);
      cv.notify_all();
    }
  }
  /// A worker leaves a call: the caller may be asleep waiting for it.
  void leave() {
    work_.active.fetch_sub(1, std::memory_order_seq_cst);
    wake(finished_, waiters_);
  }

  /// One call of n tasks on the pool and the calling thread (parallel_for,
  /// parallel_for_balanced): publishes it (its job and size, then an odd
  /// generation: open), runs tasks, waits for every task, closes the call
  /// (an even generation: no worker joins it any more), then waits for the
  /// workers that joined it to leave, so none can take an index of the next
  /// call or read its job; rethrows the first exception.
  /// @pre the caller holds call_mu_.
  void run_call(task_ref f, std::size_t n, bool balanced) {
    job_ = &f;
    total_ = n;
    error_ = nullptr;
    balanced_ = balanced;
    if (balanced)
      for (std::size_t i = 0; i < n; ++i) claimed_[i].store(false, std::memory_order_relaxed);
    else
      work_.next.store(1, std::memory_order_relaxed);  // task 0 is the caller's (run_tasks)
    work_.done.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_seq_cst);
    wake(cv_, sleepers_);
    run_tasks(f, n, 0);
    wait_until([&] { return work_.done.load(std::memory_order_acquire) == n; });
    generation_.fetch_add(1, std::memory_order_seq_cst);
    wait_until([&] { return work_.active.load(std::memory_order_seq_cst) == 0; });
    balanced_ = false;
    if (error_) std::rethrow_exception(error_);
  }

  /// Runs tasks of the open call on thread `slot` (0 the caller, w the w-th
  /// worker) until none is left. A plain call: the caller first runs task 0,
  /// then everyone takes the next index. With as many tasks as threads (a
  /// GEMM's or parallel_ranges' shares) the caller's share is the same one
  /// call after call, and so, while the workers are awake, are theirs: the
  /// data a thread wrote stays in its core's cache for the next call that
  /// splits it the same way. A balanced call: the thread's own task first
  /// (if no thread took it), then any task no thread has taken, each timed.
  void run_tasks(task_ref job, std::size_t total, std::size_t slot) {
    const bool was_inside = inside_;
    inside_ = true;
    std::size_t mine = 0;
    std::exception_ptr err;
    const auto run = [&](std::size_t i) {
      try {
        job(i);
      } catch (...) {
        if (!err) err = std::current_exception();
      }
      ++mine;
    };
    if (balanced_) {
      const auto timed = [&](std::size_t i) {
        if (claimed_[i].exchange(true, std::memory_order_acq_rel)) return;
        const auto t0 = std::chrono::steady_clock::now();
        run(i);
        timing_.seconds[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        timing_.runner[i] = slot;
      };
      if (slot < total) timed(slot);
      for (std::size_t i = 0; i < total; ++i) timed(i);
    } else {
      if (slot == 0) run(0);
      for (std::size_t i; (i = work_.next.fetch_add(1, std::memory_order_relaxed)) < total;) run(i);
    }
    inside_ = was_inside;
    if (err) {
      std::lock_guard lock(mu_);
      if (!error_) error_ = err;
    }
    work_.done.fetch_add(mine, std::memory_order_seq_cst);
    if (slot != 0) wake(finished_, waiters_);
  }
  /// A worker: waits for an open call (an odd generation it has not seen),
  /// joins it (counted in work_.active before it reads the job, and only
  /// while the call is still open: the caller closes it before it waits
  /// for work_.active to drop to 0), runs tasks, leaves. No lock on this
  /// path: a call costs the cache lines of generation_ and work_ moving
  /// between cores, not a mutex's.
  void work(std::size_t slot) {
    std::size_t seen = 0;
    const auto called = [&] {
      if (stop_.load(std::memory_order_acquire)) return true;
      const std::size_t g = generation_.load(std::memory_order_seq_cst);
      return g != seen && (g & 1);
    };
    while (true) {
      spin_then_wait(called, cv_, sleepers_);
      if (stop_.load(std::memory_order_acquire)) return;
      const std::size_t g = generation_.load(std::memory_order_seq_cst);
      seen = g;
      if (!(g & 1)) continue;
      work_.active.fetch_add(1, std::memory_order_seq_cst);
      if (generation_.load(std::memory_order_seq_cst) != g) {  // closed (or another call) before we joined
        leave();
        continue;
      }
      run_tasks(*job_, total_, slot);
      leave();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex call_mu_, mu_;
  std::condition_variable cv_, finished_;
  // The open call's job and size: written by the caller before the
  // generation that opens it, read by the workers that joined it.
  const task_ref* job_ = nullptr;
  std::size_t total_ = 0;
  std::exception_ptr error_;  // under mu_ while the call runs
  // A balanced call (parallel_for_balanced): written by the caller before
  // the generation that opens it; its tasks' claims and times.
  bool balanced_ = false;
  std::array<std::atomic<bool>, detail::max_balanced_tasks> claimed_{};
  detail::balanced_timing timing_;  // task i's entries written by the thread that ran it
  // Each thread's relative speed (0 the caller, w the w-th worker), mean 1:
  // what shares() splits by; updated after each balanced call.
  std::array<std::atomic<double>, detail::max_balanced_tasks> speed_{};
  // Odd while a call is open; read by the spinning workers.
  alignas(64) std::atomic<std::size_t> generation_{0};
  // The open call's counters, on a line of their own.
  struct alignas(64) counters {
    std::atomic<std::size_t> next{0}, done{0}, active{0};
  } work_;
  alignas(64) std::atomic<std::size_t> sleepers_{0}, waiters_{0};
  std::atomic<bool> stop_{false};
  static inline thread_local bool inside_ = false;
};

namespace detail {
struct pool_holder {
  std::mutex mu;
  std::unique_ptr<thread_pool> pool;
};
inline pool_holder& pool_state() {
  static pool_holder h;
  return h;
}
}  // namespace detail

/// The process-wide pool, created on first use with default_thread_count().
inline thread_pool& default_thread_pool() {
  auto& h = detail::pool_state();
  std::lock_guard lock(h.mu);
  if (!h.pool) h.pool = std::make_unique<thread_pool>(default_thread_count());
  return *h.pool;
}

/// Replaces the process-wide pool with one of `n` threads (like
/// torch.set_num_threads). @pre no library call is running on the pool.
inline void set_num_threads(std::size_t n) {
  if (n < 1 || n > 4096) throw error("xshard: set_num_threads needs 1..4096 threads, got " + std::to_string(n));
  auto& h = detail::pool_state();
  std::lock_guard lock(h.mu);
  h.pool = std::make_unique<thread_pool>(n);
}

/// Threads in the process-wide pool.
inline std::size_t num_threads() { return default_thread_pool().size(); }

namespace detail {
inline thread_local std::size_t thread_limit = 0;  // 0: no limit

/// Share `i` of `parts` of [0, n), boundaries on multiples of `unit`.
inline std::pair<std::size_t, std::size_t> split_range(std::size_t n, std::size_t parts, std::size_t i,
                                                       std::size_t unit) {
  const std::size_t units = (n + unit - 1) / unit;
  const std::size_t lo = units * i / parts * unit, hi = units * (i + 1) / parts * unit;
  return {std::min(lo, n), std::min(hi, n)};
}
}  // namespace detail

/// Caps the threads library calls made on this thread may use, for the
/// scope's lifetime (thread_mesh's devices run their kernels on their own
/// thread: a device is one worker, like an accelerator).
class scoped_thread_limit {
 public:
  explicit scoped_thread_limit(std::size_t n) : saved_(detail::thread_limit) { detail::thread_limit = n; }
  scoped_thread_limit(const scoped_thread_limit&) = delete;
  scoped_thread_limit& operator=(const scoped_thread_limit&) = delete;
  ~scoped_thread_limit() { detail::thread_limit = saved_; }

 private:
  std::size_t saved_;
};

/// Threads a library call made on this thread may use: the pool's size,
/// or less under a scoped_thread_limit.
inline std::size_t usable_threads() {
  const std::size_t pool = default_thread_pool().size();
  return detail::thread_limit ? std::min(detail::thread_limit, pool) : pool;
}

/// Runs f(lo, hi) on contiguous ranges covering [0, n), one range per
/// thread, when every thread gets at least `grain` items (else f(0, n) on
/// the caller; nothing when n is 0). Range boundaries are multiples of `unit` (e.g. a SIMD
/// width) and depend only on n and the thread count; as long as f writes
/// each item's output from that item alone, the result is the same for
/// every thread count. With pieces_per_thread > 1 each thread's range is
/// cut into that many pieces, handed out as threads come free: a thread
/// that runs slower (its data last written by another core, say) takes
/// fewer, instead of the others waiting for its one range.
template <class F>
void parallel_ranges(std::size_t n, std::size_t grain, F&& f, std::size_t unit = 1, std::size_t pieces_per_thread = 1) {
  if (n == 0) return;
  std::size_t threads = grain ? n / grain : n;
  if (threads > 1) threads = std::min(threads, usable_threads());
  if (threads <= 1) {
    f(std::size_t{0}, n);
    return;
  }
  const std::size_t pieces = threads * std::max<std::size_t>(pieces_per_thread, 1);
  default_thread_pool().parallel_for(pieces, [&](std::size_t t) {
    const auto [lo, hi] = detail::split_range(n, pieces, t, unit);
    if (lo < hi) f(lo, hi);
  });
}

}  // namespace xshard
