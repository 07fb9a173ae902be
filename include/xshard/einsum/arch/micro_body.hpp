// xshard/einsum/arch/micro_body.hpp - the GEMM micro-kernel's body, written
// once and stamped out per instruction set by the includer:
//
//   #include "micro_body.hpp"
//   XSHARD_DEFINE_MICRO_KERNEL(micro_avx2, XSHARD_TARGET_AVX2, avx2_ops)
//   #undef XSHARD_DEFINE_MICRO_KERNEL
//
// (no include guard: each includer defines its kernels and #undefs the macro,
// so it never leaks). The body cannot be an ordinary template over the
// operations: GCC only inlines the operations' always-inline functions,
// which carry the target attribute, into a function with that target.
//
//   c_rows[i][0 .. NR) (+)= sum over p < kc of a[p * MR + i] * b[p * bs + j]
//                           (+ bias[j] when bias is given, after C's own value:
//                            the epilogue's bias add)
//
// with NR = 2 vectors; bs is NR for a packed panel of B, B's row stride for
// rows read in place. A's micro-panel (MR x kc) stays in L1 while the
// driver sweeps B's micro-panels (kc x NR) out of L2. Each row of the C tile
// is written in place (c_rows[i] points at its first element, contiguous
// along N).
#include <cstddef>

#ifndef XSHARD_MICRO_PREFETCH_AHEAD
#define XSHARD_MICRO_PREFETCH_AHEAD
// (Included inside namespace xshard::detail, as the kernels are.)
/// Prefetches (for reading, with __builtin_prefetch's Locality) the line n
/// elements past p without forming that pointer: it may lie past the end of
/// the operand (the k loop's last steps, a packed block's last rows), where a
/// prefetch does not fault but pointer arithmetic is undefined.
template <int Locality = 3, class T>
__attribute__((always_inline)) inline void prefetch_ahead(const T* p, std::ptrdiff_t n) {
  using address = __UINTPTR_TYPE__;
  const address at = reinterpret_cast<address>(p) + static_cast<address>(n) * sizeof(T);
  __builtin_prefetch(reinterpret_cast<const void*>(at), 0, Locality);
}
#endif

#ifndef XSHARD_DEFINE_MICRO_KERNEL
// The body: MR rows x 2 vectors of accumulators over kc steps, then each C
// row stored (add: loaded and summed first). A's element (i, p) is at
// a[i * rs + p * cs]: (1, MR) for a packed panel, (lda, 1) for rows read in
// place; the rows are addressed from ceil(MR / 3) base pointers plus three
// row offsets, which keeps every address in a register. Every line of the C
// tile's rows is prefetched first so it arrives while the k loop runs (an
// AVX-512 row of 32 floats spans two or three lines; prefetching only its
// first left the others to miss at the store: `bhqd,bhkd->bhqk`, whose
// K = 64 gives the k loop little time, ran at 58-68 GFLOP/s against 95-123
// with every line, on the Xeon of PERF-NOTES). With OPS::prefetch_k > 0,
// the k loop also prefetches B's row prefetch_k steps ahead and A's packed
// micro-panel twice as far (AVX-512: measured 3-6% on the GEMM-shaped
// cases there; AVX2 showed no gain, and keeps 0). A bias (NR
// values, one per column) is added to every row as it is stored (the last
// K block's call): a bias add in the GEMM's epilogue, in the same order as a
// separate pass over C, so the same bits.
#define XSHARD_DEFINE_MICRO_KERNEL(NAME, TARGET, OPS)                                                               \
  template <class T, int MR>                                                                                        \
  TARGET void NAME(std::size_t kc, const T* a, std::ptrdiff_t rs, std::ptrdiff_t cs, const T* b, std::ptrdiff_t bs, \
                   T* const* c_rows, bool add, const T* bias) {                                                     \
    using V = decltype(OPS::zero(a));                                                                               \
    constexpr int L = OPS::template lanes<T>, Q = (MR + 2) / 3;                                                     \
    constexpr int line = 64 / static_cast<int>(sizeof(T)), PK = OPS::prefetch_k;                                    \
    for (int i = 0; i < MR; ++i) {                                                                                  \
      for (int j = 0; j < 2 * L; j += line) __builtin_prefetch(c_rows[i] + j, 1, 3);                                \
      __builtin_prefetch(c_rows[i] + 2 * L - 1, 1, 3); /* the last line of a row not aligned to one */              \
    }                                                                                                               \
    V acc[MR][2];                                                                                                   \
    _Pragma("GCC unroll 12") for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = OPS::zero(a);                     \
    const T* base[Q];                                                                                               \
    for (int q = 0; q < Q; ++q) base[q] = a + 3 * q * rs;                                                           \
    const std::ptrdiff_t off[3] = {0, rs, 2 * rs};                                                                  \
    const std::ptrdiff_t b_ahead = bs * PK, a_ahead = cs * (2 * PK); /* prefetch distances */                       \
    _Pragma("GCC unroll 2") for (std::size_t p = 0; p < kc; ++p) {                                                  \
      if constexpr (PK > 0) {                                                                                       \
        prefetch_ahead(b, b_ahead);                                                                                 \
        prefetch_ahead(b, b_ahead + L);                                                                             \
        prefetch_ahead(base[0], a_ahead);                                                                           \
      }                                                                                                             \
      const V b0 = OPS::load(b), b1 = OPS::load(b + L);                                                             \
      _Pragma("GCC unroll 4") for (int q = 0; q < Q; ++q) {                                                         \
        _Pragma("GCC unroll 3") for (int r = 0; r < 3; ++r) {                                                       \
          if (3 * q + r >= MR) break; /* a last group of fewer than 3 rows */                                       \
          const V ai = OPS::bcast(base[q] + off[r]);                                                                \
          acc[3 * q + r][0] = OPS::fma(ai, b0, acc[3 * q + r][0]);                                                  \
          acc[3 * q + r][1] = OPS::fma(ai, b1, acc[3 * q + r][1]);                                                  \
        }                                                                                                           \
        base[q] += cs;                                                                                              \
      }                                                                                                             \
      b += bs;                                                                                                      \
    }                                                                                                               \
    _Pragma("GCC unroll 12") for (int i = 0; i < MR; ++i) {                                                         \
      T* c = c_rows[i];                                                                                             \
      if (add) {                                                                                                    \
        acc[i][0] = OPS::add(acc[i][0], OPS::load(c));                                                              \
        acc[i][1] = OPS::add(acc[i][1], OPS::load(c + L));                                                          \
      }                                                                                                             \
      if (bias) { /* after C's own: (C + AB) + bias, the order of a separate bias add */                            \
        acc[i][0] = OPS::add(acc[i][0], OPS::load(bias));                                                           \
        acc[i][1] = OPS::add(acc[i][1], OPS::load(bias + L));                                                       \
      }                                                                                                             \
      OPS::store(c, acc[i][0]);                                                                                     \
      OPS::store(c + L, acc[i][1]);                                                                                 \
    }                                                                                                               \
  }

#endif
