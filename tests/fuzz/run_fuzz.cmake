# Runs one fuzz target for a bounded time on a copy of its seed corpus:
#   cmake -DFUZZER=<exe> -DCORPUS=<seed dir> -DDICT=<file> -DWORK_DIR=<dir>
#         -DMAX_LEN=<bytes> -DSECONDS=<n> -P run_fuzz.cmake
# WORK_DIR is recreated each run: WORK_DIR/corpus receives the copy (and the
# new inputs libFuzzer finds), WORK_DIR/crash-* any failing input. A non-zero
# exit status (crash, leak, timeout, failed property) fails the test.
foreach(var FUZZER CORPUS DICT WORK_DIR MAX_LEN SECONDS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_fuzz.cmake: -D${var}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/corpus")
file(GLOB seeds "${CORPUS}/*")
if(seeds)
  file(COPY ${seeds} DESTINATION "${WORK_DIR}/corpus")
endif()

execute_process(
  COMMAND "${FUZZER}" -max_total_time=${SECONDS} -max_len=${MAX_LEN} -timeout=10 -rss_limit_mb=2048 -dict=${DICT}
          -print_final_stats=1 -artifact_prefix=${WORK_DIR}/ "${WORK_DIR}/corpus"
  WORKING_DIRECTORY "${WORK_DIR}"
  RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  file(GLOB artifacts "${WORK_DIR}/crash-*" "${WORK_DIR}/leak-*" "${WORK_DIR}/timeout-*" "${WORK_DIR}/oom-*")
  message(FATAL_ERROR "${FUZZER} exited with ${status}; failing inputs: ${artifacts}")
endif()
