// xshard/core/fiber.hpp - several tasks on one thread, switched in user space.
//
// A thread_mesh with more devices than cores runs several devices on one
// worker thread as fibers (spmd/thread_mesh.hpp). A device that must wait for
// its group hands its thread to another of the thread's devices that can go
// on: a switch of registers and stack (ucontext), instead of a sleep, a
// futex wake and a trip through the kernel's scheduler for every waiter at
// every collective.
//
// fiber_host::run(n, task, ctx) runs task(ctx, i) for i in [0, n) as fibers
// on the calling thread and returns when all have returned. Inside one,
// fiber_host::current() is the host and wait_until(pred) switches to another
// fiber that can run until pred() holds. When none can, the thread spins,
// then yields, then sleeps on a progress_signal until some other thread
// bump()s it: whatever can make a fiber's predicate true must bump the
// signal after doing so.
//
// The fibers' stacks are 8 MiB of address space each, like a thread's
// (pages are committed as they are touched), with a guard page below. A
// task must not let an exception escape (catch it in the task); a fiber
// blocks its host thread while it runs, so fibers of one host must only
// wait for each other through wait_until. ASan and TSan are told of every
// switch (their fiber interfaces), so both sanitizers follow the fibers.
//
// Example (compiled in tests/compile/doc_core.cpp):
//   xshard::detail::progress_signal progress;
//   std::atomic<int> turn{0};
//   xshard::detail::fiber_host host(2);
//   host.run(2, [](void* c, std::size_t i) {
//     auto& t = *static_cast<std::atomic<int>*>(c);
//     xshard::detail::fiber_host::current()->wait_until([&] { return t.load() == int(i); });
//     ++t;                                   // fiber 1 waits for fiber 0
//   }, &turn, progress);
#pragma once

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "error.hpp"
#include "thread_pool.hpp"  // cpu_relax, spin_before_sleep

#if defined(__SANITIZE_ADDRESS__)
#define XSHARD_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define XSHARD_FIBER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define XSHARD_FIBER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define XSHARD_FIBER_TSAN 1
#endif
#endif
#if defined(XSHARD_FIBER_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(XSHARD_FIBER_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

namespace xshard::detail {

/// A counter that threads bump when they make progress, and that a thread
/// with nothing to do can sleep on until it changes.
class progress_signal {
 public:
  std::uint64_t epoch() const noexcept { return epoch_.load(std::memory_order_seq_cst); }
  /// Something changed: wake the sleepers (a syscall only when there are some).
  void bump() noexcept {
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      { std::lock_guard lock(mu_); }
      cv_.notify_all();
    }
  }
  /// Sleeps until epoch() != seen.
  void wait_change(std::uint64_t seen) {
    std::unique_lock lock(mu_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    cv_.wait(lock, [&] { return epoch_.load(std::memory_order_seq_cst) != seen; });
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  }

 private:
  std::atomic<std::uint64_t> epoch_{0};
  std::atomic<int> sleepers_{0};
  std::mutex mu_;
  std::condition_variable cv_;
};

/// Runs tasks as fibers on the calling thread (see the file comment).
class fiber_host {
 public:
  using task_fn = void (*)(void*, std::size_t);
  /// Called on the host thread just before fiber `i` (or, with
  /// npos, the host itself) resumes: swaps thread-local state per fiber.
  using enter_fn = void (*)(void*, std::size_t);
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  static constexpr std::size_t stack_bytes = std::size_t(8) << 20;

  /// Room for `capacity` fibers (their stacks are mapped on first use).
  explicit fiber_host(std::size_t capacity) : fibers_(capacity) {}
  fiber_host(const fiber_host&) = delete;
  fiber_host& operator=(const fiber_host&) = delete;
  ~fiber_host() {
    for (fiber& f : fibers_) {
      if (f.stack) munmap(f.stack, f.map_bytes);
#if defined(XSHARD_FIBER_TSAN)
      if (f.tsan) __tsan_destroy_fiber(f.tsan);
#endif
    }
  }

  /// The host of the fiber running on this thread, or nullptr.
  static fiber_host* current() noexcept { return current_; }
  /// Index of the running fiber.
  std::size_t running() const noexcept { return cur_; }

  /// Runs task(ctx, i), i in [0, n), as fibers on this thread; returns when
  /// all have returned. on_enter(enter_ctx, i) runs before each switch into
  /// fiber i and on_enter(enter_ctx, npos) before the switch back here.
  void run(std::size_t n, task_fn task, void* ctx, progress_signal& progress, enter_fn on_enter = nullptr,
           void* enter_ctx = nullptr) {
    if (n > fibers_.size())
      throw error("xshard: fiber_host of " + std::to_string(fibers_.size()) + " fibers asked to run " +
                  std::to_string(n));
    if (current_) throw error("xshard: fiber_host::run called from inside a fiber");
    n_ = n;
    task_ = task;
    ctx_ = ctx;
    progress_ = &progress;
    on_enter_ = on_enter;
    enter_ctx_ = enter_ctx;
    done_ = 0;
    for (std::size_t i = 0; i < n; ++i) prepare(fibers_[i]);
    main_.stack_bottom = nullptr;  // recorded by the first fiber to start (ASan)
#if defined(XSHARD_FIBER_TSAN)
    main_.tsan = __tsan_get_current_fiber();
#endif
    current_ = this;
    std::size_t next = 0;
    int idle = 0;
    while (done_ < n_) {
      const std::uint64_t seen = progress.epoch();
      const std::size_t i = find_ready(next);
      if (i == npos) {
        idle_step(idle++, seen);
        continue;
      }
      idle = 0;
      next = (i + 1) % n_;
      cur_ = i;
      switch_to(main_, fibers_[i], false);
      cur_ = npos;
    }
    current_ = nullptr;
    if (on_enter_) on_enter_(enter_ctx_, npos);
  }

  /// On a fiber of this host: returns once pred() holds, running the host's
  /// other fibers meanwhile.
  template <class Pred>
  void wait_until(Pred&& pred) {
    if (pred()) return;
    using P = std::remove_reference_t<Pred>;
    fiber& me = fibers_[cur_];
    const std::size_t mine = cur_;
    me.pred = [](const void* p) { return static_cast<bool>((*static_cast<P*>(const_cast<void*>(p)))()); };
    me.pred_ctx = &pred;
    int idle = 0;
    while (true) {
      const std::uint64_t seen = progress_->epoch();
      if (pred()) break;
      const std::size_t j = find_ready((mine + 1) % n_, mine);
      if (j == npos) {
        idle_step(idle++, seen);
        continue;
      }
      idle = 0;
      cur_ = j;
      switch_to(me, fibers_[j], false);
      cur_ = mine;
    }
    me.pred = nullptr;
    me.pred_ctx = nullptr;
  }

 private:
  enum class state : unsigned char { idle, fresh, running, done };
  struct context {
    ucontext_t uc{};
    void* asan_fake = nullptr;  // ASan's fake stack of a fiber switched away from
    const void* stack_bottom = nullptr;
    std::size_t stack_size = 0;
    void* tsan = nullptr;
  };
  struct fiber : context {
    void* stack = nullptr;  // the mapping: a guard page, then the stack
    std::size_t map_bytes = 0;
    state st = state::idle;
    bool (*pred)(const void*) = nullptr;  // set while the fiber waits
    const void* pred_ctx = nullptr;
  };

  void prepare(fiber& f) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    if (!f.stack) {
      f.map_bytes = stack_bytes + page;
      void* m = mmap(nullptr, f.map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED)
        throw error("xshard: could not map a fiber stack of " + std::to_string(f.map_bytes) + " bytes");
      f.stack = m;
      mprotect(m, page, PROT_NONE);  // guard: an overflow faults instead of writing a neighbour
    }
    f.stack_bottom = static_cast<char*>(f.stack) + page;
    f.stack_size = stack_bytes;
#if defined(XSHARD_FIBER_ASAN)
    // Frames of the last run that never returned left their poison behind.
    __asan_unpoison_memory_region(f.stack_bottom, f.stack_size);
#endif
#if defined(XSHARD_FIBER_TSAN)
    if (f.tsan) __tsan_destroy_fiber(f.tsan);  // a fresh one: the last run's frames never returned
    f.tsan = __tsan_create_fiber(0);
#endif
    if (getcontext(&f.uc) != 0) throw error("xshard: getcontext failed for a fiber");
    f.uc.uc_stack.ss_sp = const_cast<void*>(f.stack_bottom);
    f.uc.uc_stack.ss_size = f.stack_size;
    f.uc.uc_link = nullptr;
    makecontext(&f.uc, &fiber_host::entry, 0);
    f.asan_fake = nullptr;
    f.st = state::fresh;
    f.pred = nullptr;
  }

  /// A fiber other than `skip` that can run now, searching from `from`.
  std::size_t find_ready(std::size_t from, std::size_t skip = npos) const {
    for (std::size_t k = 0; k < n_; ++k) {
      const std::size_t i = (from + k) % n_;
      if (i == skip) continue;
      const fiber& f = fibers_[i];
      if (f.st == state::fresh || (f.st == state::running && (f.pred == nullptr || f.pred(f.pred_ctx)))) return i;
    }
    return npos;
  }

  /// Nothing can run: spin for spin_before_sleep (the thread pool's
  /// spin: a group's other members usually arrive within a layer's work),
  /// then yield a few times, then sleep until progress. Round 0 starts the clock.
  void idle_step(int round, std::uint64_t seen) {
    if (round == 0) {
      idle_until_ = std::chrono::steady_clock::now() + spin_before_sleep;
      idle_spinning_ = true;
      idle_yields_ = 0;
    }
    if (idle_spinning_) {
      for (int i = 0; i < 16; ++i) cpu_relax();
      if ((round & 15) == 15 && std::chrono::steady_clock::now() >= idle_until_) idle_spinning_ = false;
    } else if (idle_yields_ < 32) {
      ++idle_yields_;
      std::this_thread::yield();
    } else {
      progress_->wait_change(seen);
    }
  }

  /// From `from` (the running context) to `to`; returns when `from` runs again.
  void switch_to(context& from, context& to, [[maybe_unused]] bool from_finishes) {
    if (on_enter_) on_enter_(enter_ctx_, &to == &main_ ? npos : cur_);
#if defined(XSHARD_FIBER_ASAN)
    __sanitizer_start_switch_fiber(from_finishes ? nullptr : &from.asan_fake, to.stack_bottom, to.stack_size);
#endif
#if defined(XSHARD_FIBER_TSAN)
    __tsan_switch_to_fiber(to.tsan, 0);
#endif
    swapcontext(&from.uc, &to.uc);
    landed(from);
  }
  /// Back on `self` after a switch.
  void landed([[maybe_unused]] context& self) {
#if defined(XSHARD_FIBER_ASAN)
    __sanitizer_finish_switch_fiber(self.asan_fake, nullptr, nullptr);
#endif
  }

  static void entry() {
    fiber_host& h = *current_;
    fiber& me = h.fibers_[h.cur_];
#if defined(XSHARD_FIBER_ASAN)
    // A run's first fiber starts from the host thread: record its stack.
    if (h.main_.stack_bottom == nullptr) {
      const void* bottom = nullptr;
      std::size_t size = 0;
      __sanitizer_finish_switch_fiber(nullptr, &bottom, &size);
      h.main_.stack_bottom = bottom;
      h.main_.stack_size = size;
    } else {
      __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
    }
#endif
    me.st = state::running;
    h.task_(h.ctx_, h.cur_);
    me.st = state::done;
    ++h.done_;
    h.switch_to(me, h.main_, true);  // never returns
  }

  std::vector<fiber> fibers_;
  context main_;
  std::size_t n_ = 0, done_ = 0, cur_ = npos;
  task_fn task_ = nullptr;
  void* ctx_ = nullptr;
  progress_signal* progress_ = nullptr;
  enter_fn on_enter_ = nullptr;
  void* enter_ctx_ = nullptr;
  std::chrono::steady_clock::time_point idle_until_{};
  bool idle_spinning_ = false;
  int idle_yields_ = 0;
  static inline thread_local fiber_host* current_ = nullptr;
};

}  // namespace xshard::detail
