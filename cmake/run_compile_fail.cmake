# Compile-fail test driver, run by CTest as
#   cmake -DCOMPILER=<c++> -DFLAGS_FILE=<flags.txt> [-DIMPLICIT_INCLUDES=<dirs>] -DSOURCE=<file.cpp> [-DTWIN=OFF] -P run_compile_fail.cmake
#
# FLAGS_FILE holds the compile flags of an xshard test TU, one argument per
# line (the first line is CMAKE_CXX_FLAGS, split like a shell command line);
# tests/CMakeLists.txt generates it. The driver calls the compiler directly
# with -fsyntax-only, twice (once with -DTWIN=OFF):
#
#   1. without XSHARD_NEGATIVE: must compile (the positive twin; skipped
#      with -DTWIN=OFF, where another compiler's run checks it);
#   2. with -DXSHARD_NEGATIVE: must FAIL, with output matching the regex on
#      the snippet's `// expect: <regex>` line (a CMake regex, matched
#      anywhere in what the compiler said).
#
# Anything else (the twin fails, the negative compiles, or fails with other
# output) is a failure, and the compiler output is printed. No build tool is
# involved, so the tests may run in parallel.
cmake_minimum_required(VERSION 3.21)

foreach(var IN ITEMS COMPILER FLAGS_FILE SOURCE)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_compile_fail.cmake: -D${var}=... is required")
  endif()
endforeach()

file(READ "${SOURCE}" source_text)
string(REGEX MATCH "//[ \t]*expect:[^\n]*" expect_line "${source_text}")
if(expect_line STREQUAL "")
  message(FATAL_ERROR "${SOURCE}: no `// expect: <regex>` line")
endif()
string(REGEX REPLACE "^//[ \t]*expect:[ \t]*" "" expect "${expect_line}")
string(STRIP "${expect}" expect)
if(expect STREQUAL "")
  message(FATAL_ERROR "${SOURCE}: the `// expect:` line has an empty regex")
endif()

include(${CMAKE_CURRENT_LIST_DIR}/read_flags_file.cmake)
xshard_read_flags_file("${FLAGS_FILE}" "${IMPLICIT_INCLUDES}" flags)

if(NOT DEFINED TWIN OR TWIN)
  xshard_must_compile("${COMPILER}" "${flags}" "${SOURCE}"
                      "compile-fail: the positive twin of ${SOURCE} (without XSHARD_NEGATIVE) does not compile")
endif()

execute_process(
  COMMAND "${COMPILER}" ${flags} -DXSHARD_NEGATIVE -fsyntax-only "${SOURCE}"
  RESULT_VARIABLE build_result
  OUTPUT_VARIABLE build_output
  ERROR_VARIABLE build_output)

if(build_result EQUAL 0)
  message("${build_output}")
  message(FATAL_ERROR "compile-fail: ${SOURCE} COMPILED with XSHARD_NEGATIVE defined, but must not")
endif()

string(REGEX MATCH "${expect}" matched "${build_output}")
if(NOT build_output MATCHES "${expect}")
  message("${build_output}")
  message(FATAL_ERROR "compile-fail: ${SOURCE} failed to compile as expected, "
                      "but the compiler output does not match the regex `${expect}`")
endif()

message(STATUS "compile-fail: ${SOURCE} failed to compile as expected; matched `${expect}`: ${matched}")
