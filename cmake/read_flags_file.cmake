# xshard_read_flags_file(<file> <implicit include dirs> <out var>): the
# compile flags of an xshard test TU from a flags file that
# tests/CMakeLists.txt generates, one argument per line (the first line is
# CMAKE_CXX_FLAGS, split like a shell command line). Skips empty -D/-I
# entries and -I of the compiler's implicit include dirs (an explicit
# -I/usr/include breaks libstdc++'s #include_next). Shared by the drivers
# run_compile_fail.cmake and run_compile_only.cmake.
function(xshard_read_flags_file file implicit_includes out)
  file(STRINGS "${file}" lines)
  list(POP_FRONT lines first_line)
  separate_arguments(flags UNIX_COMMAND "${first_line}")
  foreach(arg IN LISTS lines)
    string(STRIP "${arg}" arg)
    if(arg STREQUAL "" OR arg STREQUAL "-D" OR arg STREQUAL "-I")
      continue()
    endif()
    # (Two ifs: ${CMAKE_MATCH_1} in the same if() would be the previous match.)
    if(arg MATCHES "^-I(.*)$")
      if("${CMAKE_MATCH_1}" IN_LIST implicit_includes)
        continue()
      endif()
    endif()
    list(APPEND flags "${arg}")
  endforeach()
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

# xshard_must_compile(<compiler> <flags list> <source> <message>): compiles
# the source with -fsyntax-only and the flags; if that fails, prints what the
# compiler said and stops with the message. Shared by the same drivers.
function(xshard_must_compile compiler flags source what)
  execute_process(
    COMMAND "${compiler}" ${flags} -fsyntax-only "${source}"
    RESULT_VARIABLE result
    OUTPUT_VARIABLE output
    ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message("${output}")
    message(FATAL_ERROR "${what}")
  endif()
endfunction()
