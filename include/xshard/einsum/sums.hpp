// xshard/einsum/sums.hpp - the two sums that einsum's reduction path
// (run_reduce), the typed path's contiguous sums (fixed.hpp) and the thread
// mesh's all-reduce share, each one function picked at run time:
//
//   add_elements(out, a, b, n)   out[i] = a[i] + b[i] (out may be a or b)
//   sum_run(a, n)                the sum of a[0..n), in a fixed order per width
//
// Floats and doubles on x86-64 run the AVX-512 or AVX2 kernels of
// arch/x86_sums.hpp by active_isa() (XSHARD_ISA caps it), in a binary built
// with or without -march; other types, other CPUs and XSHARD_ISA=generic run
// the portable code (xsimd batches of the compiled architecture for sum_run).
// add_elements gives the same bits at every width; sum_run's bits depend on
// the width (see arch/x86_sums.hpp), so every sum that must agree with
// another (typed and run-time einsum) goes through this one function.
#pragma once

#include <cstddef>
#include <type_traits>
#include <xsimd/xsimd.hpp>

#include "../core/isa.hpp"
#include "arch/x86_sums.hpp"

namespace xshard::detail {

/// The portable sum_run: the same order at xsimd's batch width.
template <class T>
T portable_sum_run(const T* a, std::size_t n) {
  if constexpr (std::is_floating_point_v<T>) {
    using batch = xsimd::batch<T>;
    constexpr std::size_t lanes = batch::size;
    const std::size_t blocked = n / (2 * lanes) * (2 * lanes);
    T s = T(0);
    if (blocked != 0) {
      batch acc0(T(0)), acc1(T(0));
      for (std::size_t k = 0; k < blocked; k += 2 * lanes) {
        acc0 += batch::load_unaligned(a + k);
        acc1 += batch::load_unaligned(a + k + lanes);
      }
      T buf[lanes];
      (acc0 + acc1).store_unaligned(buf);
      for (T x : buf) s += x;
    }
    for (std::size_t k = blocked; k < n; ++k) s += a[k];
    return s;
  } else {
    T s = T(0);
    for (std::size_t k = 0; k < n; ++k) s += a[k];
    return s;
  }
}

/// The sum of a[0..n): two accumulators of one vector's lanes over blocks
/// of two vectors, their sum's lanes in lane order, then the rest in order
/// (a run shorter than two vectors in order), on the widest vectors
/// active_isa() allows.
template <class T>
T sum_run(const T* a, std::size_t n) {
#if XSHARD_X86_KERNELS
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    switch (active_isa()) {
      case simd_isa::avx512:
        return x86::avx512::sum_run(a, n);
      case simd_isa::avx2:
        return x86::avx2::sum_run(a, n);
      case simd_isa::generic:
        break;
    }
  }
#endif
  return portable_sum_run(a, n);
}

/// out[i] = a[i] + b[i] for i < n; out may be a or b (not overlapping them
/// otherwise). One add per element: the same bits on every path. (Signed
/// integers would overflow: callers that need wrapping add them unsigned.)
template <class T>
void add_elements(T* out, const T* a, const T* b, std::size_t n) {
#if XSHARD_X86_KERNELS
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    switch (active_isa()) {
      case simd_isa::avx512:
        return x86::avx512::add_elements(out, a, b, n);
      case simd_isa::avx2:
        return x86::avx2::add_elements(out, a, b, n);
      case simd_isa::generic:
        break;
    }
  }
#endif
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<T>(a[i] + b[i]);
}

}  // namespace xshard::detail
