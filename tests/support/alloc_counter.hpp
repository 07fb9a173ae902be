// tests/support/alloc_counter.hpp - replaces the global operator new and
// operator delete (every form: plain, array, aligned, sized, nothrow) with
// versions that count allocations and track live and peak live bytes.
//
// Include it in EXACTLY ONE translation unit of an executable: it defines
// the replacement functions, which the standard forbids declaring inline, so
// a second TU that includes it is a multiple-definition link error. The
// statistics are read from that same TU (the tests and benchmarks that use
// it are single-TU programs).
//
//   #include "../support/alloc_counter.hpp"           // from tests/runtime/
//   #include "../tests/support/alloc_counter.hpp"     // from bench/
//
//   namespace stats = xshard_test::alloc_stats;
//   const std::size_t before = stats::live_bytes();
//   stats::reset_peak();                                // peak := live now
//   run();
//   const std::size_t peak = stats::peak_bytes() - before;   // high-water mark of run()
//   const std::size_t n = stats::allocations();               // operator new calls so far
//   const std::size_t t = stats::thread_allocations();        // ... made on this thread
//
// What is counted: every successful global operator new / new[] in the
// process, from any thread and any library (libstdc++, Google Benchmark,
// GoogleTest), by the size the caller asked for (the bookkeeping header is
// not counted). A new-expression the compiler elides (C++14 lets it drop a
// new/delete pair whose block does not escape; clang does) is not counted.
// Memory obtained by malloc directly is not seen: xtensor's
// containers allocate through std::allocator, i.e. operator new, unless
// XTENSOR_USE_XSIMD (or XTENSOR_DEFAULT_ALLOCATOR) picks another allocator.
//
// Layout: each block is preceded by a header of two std::size_t, the size
// asked for and the distance back to the start of the malloc'd block, so
// every delete form (sized or not, aligned or not) finds both. The header
// occupies the last 16 bytes before the pointer returned; the block starts
// `offset` bytes earlier, where offset = 16 for the default alignment
// (__STDCPP_DEFAULT_NEW_ALIGNMENT__, which malloc already gives) and
// offset = max(alignment, 16) for the aligned forms (block from
// std::aligned_alloc), so the pointer keeps the alignment asked for.
//
// Counters use relaxed atomics; peak_bytes() is a compare-and-swap maximum,
// so it is exact for one thread and never below the true peak by more than
// the allocations in flight on other threads at the moment of the peak.
//
// fill_new_blocks(0xFF) makes every later block start as that byte (0xFF...
// is a NaN as float and as double), so an element nobody writes is visible;
// fill_new_blocks(-1) (the default) leaves new blocks as malloc gives them.
//
// Under Clang's AddressSanitizer or ThreadSanitizer the replacements cannot
// be defined: Clang links the sanitizer's static runtime, which defines
// operator new and delete itself (a multiple-definition link error). There
// the same statistics come from the sanitizer's allocator hooks
// (__sanitizer_install_malloc_and_free_hooks, installed before main), which
// see every heap allocation, operator new and malloc alike, from the moment
// they are installed; the sizes freed are the allocator's
// (__sanitizer_get_allocated_size). GCC's sanitizer runtimes are shared
// libraries, so GCC builds keep the replacements.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__clang__) && defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define XSHARD_TEST_ALLOC_HOOKS 1
#include <sanitizer/allocator_interface.h>
#endif
#endif

#if !defined(__STDCPP_DEFAULT_NEW_ALIGNMENT__)
#error "alloc_counter.hpp needs C++17 aligned new (__STDCPP_DEFAULT_NEW_ALIGNMENT__)"
#endif

namespace xshard_test::alloc_stats {

namespace detail {

inline constinit std::atomic<std::size_t> allocations{0};
inline constinit std::atomic<std::size_t> deallocations{0};
inline constinit std::atomic<std::size_t> live{0};
inline constinit std::atomic<std::size_t> peak{0};
inline constinit std::atomic<int> fill{-1};                        // byte for new blocks, or -1
inline constinit thread_local std::size_t thread_allocations = 0;  // this thread's

struct header {
  std::size_t size;    // bytes the caller asked for
  std::size_t offset;  // returned pointer - start of the malloc'd block
};
inline constexpr std::size_t header_room = 16;
static_assert(sizeof(header) <= header_room);
static_assert(__STDCPP_DEFAULT_NEW_ALIGNMENT__ <= header_room,
              "the plain forms rely on malloc's alignment covering operator new's default");

inline void note_allocation(std::size_t n) noexcept {
  allocations.fetch_add(1, std::memory_order_relaxed);
  ++thread_allocations;
  const std::size_t now = live.fetch_add(n, std::memory_order_relaxed) + n;
  std::size_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

#if defined(XSHARD_TEST_ALLOC_HOOKS)
inline void on_malloc(const volatile void* ptr, std::size_t n) {
  if (const int f = fill.load(std::memory_order_relaxed); f >= 0) std::memset(const_cast<void*>(ptr), f, n);
  note_allocation(n);
}
inline void on_free(const volatile void* ptr) {
  if (!ptr) return;
  deallocations.fetch_add(1, std::memory_order_relaxed);
  live.fetch_sub(__sanitizer_get_allocated_size(const_cast<const void*>(ptr)), std::memory_order_relaxed);
}
// Not inline: an unused inline variable is never emitted (nor initialised).
[[maybe_unused]] const bool hooks_installed = __sanitizer_install_malloc_and_free_hooks(&on_malloc, &on_free) != 0;
#else
/// One attempt: a counted block of n bytes aligned to `align`
/// (0 = the default alignment), or nullptr.
inline void* try_allocate(std::size_t n, std::size_t align) noexcept {
  const std::size_t offset = std::max(align, header_room);
  if (n > static_cast<std::size_t>(-1) - 2 * offset) return nullptr;
  void* block;
  if (align == 0) {
    block = std::malloc(offset + n);
  } else {
    const std::size_t total = (offset + n + offset - 1) / offset * offset;  // aligned_alloc: a multiple of align
    block = std::aligned_alloc(offset, total);
  }
  if (!block) return nullptr;
  std::byte* p = static_cast<std::byte*>(block) + offset;
  ::new (p - header_room) header{n, offset};
  if (const int f = fill.load(std::memory_order_relaxed); f >= 0) std::memset(p, f, n);
  note_allocation(n);
  return p;
}

/// operator new's contract: retry through the new_handler, else bad_alloc.
inline void* allocate(std::size_t n, std::size_t align) {
  for (;;) {
    if (void* p = try_allocate(n, align)) return p;
    std::new_handler h = std::get_new_handler();
    if (!h) throw std::bad_alloc();
    h();
  }
}

inline void* allocate_nothrow(std::size_t n, std::size_t align) noexcept {
  try {
    return allocate(n, align);
  } catch (...) {
    return nullptr;
  }
}

inline void deallocate(void* ptr) noexcept {
  if (!ptr) return;
  std::byte* p = static_cast<std::byte*>(ptr);
  const header* h = std::launder(reinterpret_cast<const header*>(p - header_room));
  const std::size_t n = h->size, offset = h->offset;
  deallocations.fetch_add(1, std::memory_order_relaxed);
  live.fetch_sub(n, std::memory_order_relaxed);
  std::free(p - offset);
}
#endif  // XSHARD_TEST_ALLOC_HOOKS

}  // namespace detail

/// Successful global operator new calls (all forms) since the program started.
inline std::size_t allocations() { return detail::allocations.load(std::memory_order_relaxed); }
/// The same, made on the calling thread only: what a call that runs on
/// this thread allocates, whatever other threads (a pool's workers starting
/// up, the sanitizer runtime) do meanwhile.
inline std::size_t thread_allocations() { return detail::thread_allocations; }
/// Global operator delete calls on non-null pointers since the program started.
inline std::size_t deallocations() { return detail::deallocations.load(std::memory_order_relaxed); }
/// Bytes allocated through operator new and not yet deleted.
inline std::size_t live_bytes() { return detail::live.load(std::memory_order_relaxed); }
/// The largest live_bytes() since the last reset_peak() (or program start).
inline std::size_t peak_bytes() { return detail::peak.load(std::memory_order_relaxed); }
/// Starts a new high-water mark at the current live_bytes().
inline void reset_peak() {
  detail::peak.store(detail::live.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

/// Every block allocated from now on starts as `byte` (0..255), or is left
/// as malloc gives it (-1, the default).
inline void fill_new_blocks(int byte) { detail::fill.store(byte, std::memory_order_relaxed); }

}  // namespace xshard_test::alloc_stats

#if !defined(XSHARD_TEST_ALLOC_HOOKS)
// The replacements ([replacement.functions]): not inline, so one TU only.
// noinline: defined in the caller's TU, they would otherwise be inlined, and
// clang -O2 then applies its allocation optimisations to the body (malloc /
// free, the header) apart from the bookkeeping: in a scratch test where a
// block never escaped, live_bytes() went wrong. Opaque calls keep clang to
// eliding whole new/delete pairs, which the counts never see either way.
[[gnu::noinline]] void* operator new(std::size_t n) { return xshard_test::alloc_stats::detail::allocate(n, 0); }
[[gnu::noinline]] void* operator new[](std::size_t n) { return xshard_test::alloc_stats::detail::allocate(n, 0); }
[[gnu::noinline]] void* operator new(std::size_t n, std::align_val_t a) {
  return xshard_test::alloc_stats::detail::allocate(n, static_cast<std::size_t>(a));
}
[[gnu::noinline]] void* operator new[](std::size_t n, std::align_val_t a) {
  return xshard_test::alloc_stats::detail::allocate(n, static_cast<std::size_t>(a));
}
[[gnu::noinline]] void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return xshard_test::alloc_stats::detail::allocate_nothrow(n, 0);
}
[[gnu::noinline]] void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return xshard_test::alloc_stats::detail::allocate_nothrow(n, 0);
}
[[gnu::noinline]] void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return xshard_test::alloc_stats::detail::allocate_nothrow(n, static_cast<std::size_t>(a));
}
[[gnu::noinline]] void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return xshard_test::alloc_stats::detail::allocate_nothrow(n, static_cast<std::size_t>(a));
}

[[gnu::noinline]] void operator delete(void* p) noexcept { xshard_test::alloc_stats::detail::deallocate(p); }
[[gnu::noinline]] void operator delete[](void* p) noexcept { xshard_test::alloc_stats::detail::deallocate(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept {
  xshard_test::alloc_stats::detail::deallocate(p);
}
[[gnu::noinline]] void operator delete[](void* p, std::size_t) noexcept {
  xshard_test::alloc_stats::detail::deallocate(p);
}
[[gnu::noinline]] void operator delete(void* p, std::align_val_t) noexcept {
  xshard_test::alloc_stats::detail::deallocate(p);
}
[[gnu::noinline]] void operator delete[](void* p, std::align_val_t) noexcept {
  xshard_test::alloc_stats::detail::deallocate(p);
}
[[gnu::noinline]] void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  xshard_test::alloc_stats::detail::deallocate(p);
}
[[gnu::noinline]] void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  xshard_test::alloc_stats::detail::deallocate(p);
}
[[gnu::noinline]] void operator delete(void* p, const std::nothrow_t&) noexcept {
  xshard_test::alloc_stats::detail::deallocate(p);
}
[[gnu::noinline]] void operator delete[](void* p, const std::nothrow_t&) noexcept {
  xshard_test::alloc_stats::detail::deallocate(p);
}
[[gnu::noinline]] void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  xshard_test::alloc_stats::detail::deallocate(p);
}
[[gnu::noinline]] void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  xshard_test::alloc_stats::detail::deallocate(p);
}
#endif  // !XSHARD_TEST_ALLOC_HOOKS
