# Compile-fail test driver, run by CTest as
#   cmake -DBINARY_DIR=<build tree> -DTARGET=cf_<name> -DSOURCE=<file.cpp> [-DCONFIG=<cfg>] -P run_compile_fail.cmake
#
# Builds TARGET (the snippet compiled with XSHARD_NEGATIVE defined) and exits
# with success only if the build FAILS and its output matches the regex on the
# snippet's `// expect: <regex>` line (a CMake regex, matched anywhere in the
# output). A build that succeeds, or fails with other output, is a failure and
# the whole output is printed. Build-tool lines (ninja progress, `FAILED:`,
# the compile command carrying -DXSHARD_NEGATIVE) are dropped before matching,
# so the regex cannot match the file name or the command line by accident.
cmake_minimum_required(VERSION 3.21)

foreach(var IN ITEMS BINARY_DIR TARGET SOURCE)
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

set(config_args)
if(DEFINED CONFIG AND NOT CONFIG STREQUAL "")
  set(config_args --config "${CONFIG}")
endif()

execute_process(
  COMMAND "${CMAKE_COMMAND}" --build "${BINARY_DIR}" --target "${TARGET}" ${config_args}
  RESULT_VARIABLE build_result
  OUTPUT_VARIABLE build_output
  ERROR_VARIABLE build_output)

# Keep only what the compiler said.
set(diagnostics "\n${build_output}")
string(REGEX REPLACE "\n[^\n]*XSHARD_NEGATIVE[^\n]*" "" diagnostics "${diagnostics}")
string(REGEX REPLACE "\nFAILED: [^\n]*" "" diagnostics "${diagnostics}")
string(REGEX REPLACE "\n\\[[0-9]+/[0-9]+\\] [^\n]*" "" diagnostics "${diagnostics}")

if(build_result EQUAL 0)
  message("${build_output}")
  message(FATAL_ERROR "compile-fail: ${TARGET} COMPILED, but ${SOURCE} must not compile with XSHARD_NEGATIVE defined")
endif()

string(REGEX MATCH "${expect}" matched "${diagnostics}")
if(NOT diagnostics MATCHES "${expect}")
  message("${build_output}")
  message(FATAL_ERROR "compile-fail: ${TARGET} failed to compile as expected, "
                      "but the compiler output does not match the regex `${expect}` from ${SOURCE}")
endif()

message(STATUS "compile-fail: ${TARGET} failed to compile as expected; matched `${expect}`: ${matched}")
