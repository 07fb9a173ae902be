// xshard/core/memory.hpp - keep what a training step frees for the next step.
//
// glibc hands blocks of 128 KiB and more to the kernel (its mmap threshold:
// a 64 x 512 float activation is exactly that) and trims the heap's top
// beyond 128 KiB. A training step frees and reallocates its activations,
// residuals and gradients every layer and every step, so each step faults
// the same pages in again: a quarter of train_mlp's single-device profile,
// and half of its step time. retain_freed_memory() keeps blocks up to 32 MiB
// in the heap and stops trimming, so the next step reuses them. Call it once
// at the start of a training program; it is process-wide (glibc's
// mallopt), which is why the library never calls it itself.
//
// Example (compiled in tests/compile/doc_core.cpp):
//   xshard::retain_freed_memory();   // false where the allocator is not glibc's
#pragma once

#include <cstddef>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace xshard {

/// glibc's largest mmap threshold on 64-bit targets (DEFAULT_MMAP_THRESHOLD_MAX).
inline constexpr std::size_t retained_block_limit = std::size_t(32) << 20;

/// Keeps freed blocks up to retained_block_limit bytes in the heap and never
/// trims it. Returns whether the allocator took both settings.
inline bool retain_freed_memory() {
#if defined(__GLIBC__)
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, static_cast<int>(retained_block_limit)) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, -1) == 1;  // -1: never trim
  return mmap_ok && trim_ok;
#else
  return false;
#endif
}

}  // namespace xshard
