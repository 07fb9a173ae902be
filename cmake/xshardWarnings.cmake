# xshard_target_warnings(<target>)
#
# Warning flags for xshard's OWN targets (tests, examples, benchmarks); never
# put on the xshard interface target, so consumers are not forced to use them.
# Dependencies (xtensor, xsimd, Boost.Hana, GoogleTest, benchmark) come from
# /usr/include or imported targets, which compilers treat as system headers,
# so -Wpedantic stays clean for them with GCC 12 and Clang 14.
include_guard(GLOBAL)

option(XSHARD_WARNINGS_AS_ERRORS "Add -Werror to xshard's own tests, examples and benchmarks" ON)

function(xshard_target_warnings tgt)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${tgt} PRIVATE -Wall -Wextra -Wpedantic)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
      # GCC 12 reports -Wrestrict inside libstdc++'s own inlined std::string
      # code at -O2/-O3 (GCC bug 105329, fixed in 13): not our code.
      target_compile_options(${tgt} PRIVATE -Wno-restrict)
      # GCC 12 at -O2/-O3 reports -Wmaybe-uninitialized inside xtl's
      # forward_sequence (a std::array filled by std::copy) and xsimd's
      # AVX-512 hadd once they are inlined into our code (GCC bug 105593
      # and kin): not our code, and not reported by GCC at -O0 or by Clang.
      target_compile_options(${tgt} PRIVATE $<$<NOT:$<CONFIG:Debug>>:-Wno-maybe-uninitialized>)
      # GCC 12 at -O3 reports -Wstringop-overflow and -Warray-bounds inside
      # libstdc++'s own operator+(const char*, std::string&&) once inlined
      # (a memcpy bound "between 2^63 + 1 and 2^64 - 1": GCC bug 105651 and
      # kin, fixed in 13); they stopped the release preset's build of three
      # test TUs (`s += (i ? "," : "") + std::to_string(v)`).
      target_compile_options(${tgt} PRIVATE $<$<NOT:$<CONFIG:Debug>>:-Wno-stringop-overflow>
                                               $<$<NOT:$<CONFIG:Debug>>:-Wno-array-bounds>)
    endif()
    if(XSHARD_WARNINGS_AS_ERRORS)
      target_compile_options(${tgt} PRIVATE -Werror)
    endif()
  elseif(MSVC)
    target_compile_options(${tgt} PRIVATE /W4 /permissive-)
    if(XSHARD_WARNINGS_AS_ERRORS)
      target_compile_options(${tgt} PRIVATE /WX)
    endif()
  endif()
endfunction()
