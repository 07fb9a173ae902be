# Compile-only test driver, run by CTest as
#   cmake -DCOMPILER=<c++> -DFLAGS_FILE=<flags.txt> [-DEXTRA_FLAGS_FILE=<flags.txt>] [-DNO_PCH=ON]
#         [-DIMPLICIT_INCLUDES=<dirs>] -DSOURCE=<file.cpp> -P run_compile_only.cmake
#
# A compile-only test (tests/compile/*.cpp) is static_asserts and code that
# must compile, never run: the driver compiles it with -fsyntax-only (every
# template it uses is instantiated and every static_assert evaluated; no
# object code is generated, which is most of an -O0 sanitizer build's time)
# with the flags of an xshard test TU (FLAGS_FILE, read like
# run_compile_fail.cmake does), then EXTRA_FLAGS_FILE's (the same format:
# a source's own include directories and definitions). NO_PCH=ON drops the
# flags' `-include <the carrier's PCH>`: for sources whose definitions
# change what xshard.hpp includes (the PCH was built without them).
cmake_minimum_required(VERSION 3.21)

foreach(var IN ITEMS COMPILER FLAGS_FILE SOURCE)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_compile_only.cmake: -D${var}=... is required")
  endif()
endforeach()

include(${CMAKE_CURRENT_LIST_DIR}/read_flags_file.cmake)
xshard_read_flags_file("${FLAGS_FILE}" "${IMPLICIT_INCLUDES}" flags)
if(NO_PCH)
  list(FIND flags "-include" at)
  if(at GREATER_EQUAL 0)
    list(REMOVE_AT flags ${at})
    list(REMOVE_AT flags ${at})
  endif()
endif()
if(DEFINED EXTRA_FLAGS_FILE AND NOT EXTRA_FLAGS_FILE STREQUAL "")
  xshard_read_flags_file("${EXTRA_FLAGS_FILE}" "${IMPLICIT_INCLUDES}" extra)
  list(APPEND flags ${extra})
endif()

xshard_must_compile("${COMPILER}" "${flags}" "${SOURCE}" "compile-only: ${SOURCE} does not compile")
message(STATUS "compile-only: ${SOURCE} compiles")
