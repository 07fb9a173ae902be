# Package test driver, run by CTest (test package.find_package) as
#   cmake -DBINARY_DIR=... -DCONSUMER_SOURCE_DIR=... -DWORK_DIR=... -DGENERATOR=... -DCXX_COMPILER=...
#         -DINSTALL_CMAKEDIR=... -DINSTALL_BINDIR=... -DEXPECT_XSHARD_PLAN=0|1
#         [-DMAKE_PROGRAM=...] [-DCONFIG=...] -P run_package_test.cmake
#
# 1. cmake --install BINARY_DIR into WORK_DIR/prefix (fresh each run);
# 2. checks the installed package files (and runs bin/xshard-plan when that target exists);
# 3. configures CONSUMER_SOURCE_DIR (tests/package) with CMAKE_PREFIX_PATH=prefix and
#    the same compiler and generator, checks it found THIS prefix, builds and runs it.
cmake_minimum_required(VERSION 3.21)

foreach(var IN ITEMS BINARY_DIR CONSUMER_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER INSTALL_CMAKEDIR INSTALL_BINDIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_package_test.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run_step what)
  message(STATUS "package test: ${what}")
  execute_process(
    COMMAND ${ARGN}
    RESULT_VARIABLE result
    OUTPUT_VARIABLE output
    ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    string(REPLACE ";" " " command "${ARGN}")
    message("${output}")
    message(FATAL_ERROR "package test: ${what} failed (${result}): ${command}")
  endif()
endfunction()

function(require_file path)
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "package test: missing installed file ${path}")
  endif()
endfunction()

set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${prefix}" "${consumer_build}")

set(config_args)
set(build_type_args)
if(DEFINED CONFIG AND NOT CONFIG STREQUAL "")
  set(config_args --config "${CONFIG}")
  set(build_type_args "-DCMAKE_BUILD_TYPE=${CONFIG}")
endif()

run_step("install ${BINARY_DIR} to ${prefix}" "${CMAKE_COMMAND}" --install "${BINARY_DIR}" --prefix "${prefix}"
         ${config_args})

require_file("${prefix}/${INSTALL_CMAKEDIR}/xshardConfig.cmake")
require_file("${prefix}/${INSTALL_CMAKEDIR}/xshardConfigVersion.cmake")
require_file("${prefix}/${INSTALL_CMAKEDIR}/xshardTargets.cmake")
if(EXPECT_XSHARD_PLAN)
  require_file("${prefix}/${INSTALL_BINDIR}/xshard-plan")
  # The installed tool runs (its CLI11 and nlohmann-json are header-only:
  # nothing besides the binary is installed for them).
  run_step("run the installed xshard-plan" "${prefix}/${INSTALL_BINDIR}/xshard-plan" --mesh "x=2" --spec "x")
endif()

set(make_program_args)
if(DEFINED MAKE_PROGRAM AND NOT MAKE_PROGRAM STREQUAL "")
  set(make_program_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
run_step(
  "configure the consumer"
  "${CMAKE_COMMAND}"
  -S
  "${CONSUMER_SOURCE_DIR}"
  -B
  "${consumer_build}"
  -G
  "${GENERATOR}"
  ${make_program_args}
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  ${build_type_args}
  "-DCMAKE_PREFIX_PATH=${prefix}"
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)

# The consumer must have found the package just installed, not another copy.
file(STRINGS "${consumer_build}/CMakeCache.txt" found_dir REGEX "^xshard_DIR:")
string(REGEX REPLACE "^xshard_DIR:[A-Z]+=" "" found_dir "${found_dir}")
file(REAL_PATH "${found_dir}" found_dir)
file(REAL_PATH "${prefix}/${INSTALL_CMAKEDIR}" expected_dir)
if(NOT found_dir STREQUAL expected_dir)
  message(FATAL_ERROR "package test: the consumer found xshard in ${found_dir}, expected ${expected_dir}")
endif()

run_step("build the consumer" "${CMAKE_COMMAND}" --build "${consumer_build}" ${config_args})

file(GLOB_RECURSE consumer_exe "${consumer_build}/xshard_consumer" "${consumer_build}/xshard_consumer.exe")
if(NOT consumer_exe)
  message(FATAL_ERROR "package test: the consumer executable was not built")
endif()
list(GET consumer_exe 0 consumer_exe)
run_step("run the consumer" "${consumer_exe}")

message(STATUS "package test: find_package(xshard) from ${prefix} works")
