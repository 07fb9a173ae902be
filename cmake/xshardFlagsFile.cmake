# xshard_flags_file(<target> <output> [PCH <header>])
#
# Generates <output>: the flags a compile of one of <target>'s sources gets,
# one argument per line for the syntax-only drivers (run_compile_only.cmake,
# run_compile_fail.cmake read it with read_flags_file.cmake). Line 1 is
# CMAKE_CXX_FLAGS and the build type's flags (split like a command line);
# then the C++20 flag, the target's definitions, include directories and
# compile options, usage requirements of what it links included. PCH adds
# `-include <header>`: the compiler loads <header>.gch / .pch beside it.
include_guard(GLOBAL)

function(xshard_flags_file target output)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "PCH" "")
  if(CMAKE_CXX_EXTENSIONS)
    set(std_flag "${CMAKE_CXX20_EXTENSION_COMPILE_OPTION}")
  else()
    set(std_flag "${CMAKE_CXX20_STANDARD_COMPILE_OPTION}")
  endif()
  string(TOUPPER "${CMAKE_BUILD_TYPE}" build_type)
  set(nl "\n")
  set(pch_lines "")
  if(arg_PCH)
    set(pch_lines "-include\n${arg_PCH}\n")
  endif()
  file(
    GENERATE
    OUTPUT "${output}"
    CONTENT
      "${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${build_type}}
${std_flag}
-D$<JOIN:$<TARGET_PROPERTY:${target},COMPILE_DEFINITIONS>,${nl}-D>
-I$<JOIN:$<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>,${nl}-I>
$<JOIN:$<TARGET_PROPERTY:${target},COMPILE_OPTIONS>,${nl}>
${pch_lines}")
endfunction()
