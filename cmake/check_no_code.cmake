# Checks that object files define no symbol of namespace xshard, run by CTest as
#   cmake -DNM=<nm> -DOBJECTS=<a.o;b.o> -P check_no_code.cmake
#
# The objects come from a TU that includes xshard's headers and uses nothing
# (tests/CMakeLists.txt: headers.no_code): a header-only library must not
# compile code into every TU that includes it (static initialisers,
# registries, non-template functions that are odr-used at namespace scope).
cmake_minimum_required(VERSION 3.21)

foreach(var IN ITEMS NM OBJECTS)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "check_no_code.cmake: -D${var}=... is required")
  endif()
endforeach()

set(found "")
foreach(object IN LISTS OBJECTS)
  execute_process(
    COMMAND "${NM}" -C --defined-only "${object}"
    RESULT_VARIABLE result
    OUTPUT_VARIABLE symbols
    ERROR_VARIABLE error)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "check_no_code: ${NM} failed on ${object}: ${error}")
  endif()
  string(REGEX MATCHALL "[^\n]*xshard::[^\n]*" hits "${symbols}")
  foreach(hit IN LISTS hits)
    string(APPEND found "  ${object}: ${hit}\n")
  endforeach()
endforeach()

if(NOT found STREQUAL "")
  message(FATAL_ERROR "check_no_code: a TU that includes xshard's headers and uses nothing defines xshard symbols:\n${found}")
endif()
message(STATUS "check_no_code: no xshard symbol in ${OBJECTS}")
