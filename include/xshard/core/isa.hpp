// xshard/core/isa.hpp - which vector instructions the fused kernels (the
// einsum GEMM micro-kernels and the composites) use, decided once at run
// time: the CPU's widest of AVX-512
// (avx512f + avx512dq), AVX2 + FMA, or the portable xsimd path the TU was
// compiled for. XSHARD_ISA=avx512|avx2|generic caps it (e.g. AVX2 kernels on
// an AVX-512 CPU for a same-machine comparison); asking for more than the CPU
// has gives what it has.
#pragma once

// The x86-64 kernels under target attributes (einsum/arch/x86_gemm.hpp,
// ops/arch/x86.hpp) build
// with GCC and Clang on x86-64; everything else runs the xsimd path.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define XSHARD_X86_KERNELS 1
#else
#define XSHARD_X86_KERNELS 0
#endif

#include <cstdlib>
#include <string>
#include <string_view>

#include "error.hpp"

namespace xshard {

enum class simd_isa : int { generic = 0, avx2 = 1, avx512 = 2 };

constexpr std::string_view to_string(simd_isa i) {
  return i == simd_isa::avx512 ? "avx512" : i == simd_isa::avx2 ? "avx2" : "generic";
}

namespace detail {

/// The widest the CPU runs (x86-64 with GCC or Clang; generic elsewhere).
inline simd_isa cpu_isa() {
#if XSHARD_X86_KERNELS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")) return simd_isa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return simd_isa::avx2;
#endif
  return simd_isa::generic;
}

/// `cpu`, capped by the text of XSHARD_ISA (null: no cap).
inline simd_isa capped_isa(simd_isa cpu, const char* cap) {
  if (!cap) return cpu;
  const std::string_view c(cap);
  for (simd_isa i : {simd_isa::generic, simd_isa::avx2, simd_isa::avx512})
    if (c == to_string(i)) return static_cast<int>(i) < static_cast<int>(cpu) ? i : cpu;
  throw error("xshard: XSHARD_ISA='" + std::string(c) + "' is not one of avx512, avx2, generic");
}

}  // namespace detail

/// The instruction set the kernels run with (first use decides). The GEMM
/// picks its AVX-512 kernel only where the CPU also has avx512bw.
inline simd_isa active_isa() {
  static const simd_isa isa = detail::capped_isa(detail::cpu_isa(), std::getenv("XSHARD_ISA"));
  return isa;
}

}  // namespace xshard
