# CTest example.train_mlp_resume: exact resume across processes with the
# train_mlp example (AdamW). -DTRAIN_MLP=<exe> -DWORK_DIR=<dir> -DSTEPS=<N>
#   A: 2N steps, saved             (one process)
#   B: N steps, saved              (a second process)
#   C: B resumed for N steps on the 2x2 mesh (a third): its losses are A's
#      last N, bit for bit, and its parameters A's, bit for bit
#   D: B resumed for N steps on one device: within the tolerance of float32
#      sums taken in another order (train_mlp --compare checks it)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
math(EXPR twice "2 * ${STEPS}")
set(common --optimizer adamw --no-progress --trace trace.json --print-losses)

function(run name out)
  execute_process(
    COMMAND ${TRAIN_MLP} ${common} ${ARGN}
    WORKING_DIRECTORY ${WORK_DIR}
    OUTPUT_VARIABLE o
    ERROR_VARIABLE e
    RESULT_VARIABLE rc)
  file(WRITE ${WORK_DIR}/${name}.log "${o}${e}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "run ${name} (train_mlp ${ARGN}) failed with ${rc}:\n${o}${e}")
  endif()
  set(${out} "${o}" PARENT_SCOPE)
endfunction()

# The loss lines of steps first..last and the digest line of a run's output.
function(losses text first last out)
  set(r "")
  foreach(s RANGE ${first} ${last})
    string(REGEX MATCH "loss\\[${s}\\] = [^\n]*" l "${text}")
    if(l STREQUAL "")
      message(FATAL_ERROR "no loss of step ${s} in:\n${text}")
    endif()
    string(APPEND r "${l}\n")
  endforeach()
  set(${out} "${r}" PARENT_SCOPE)
endfunction()

run(A a --steps ${twice} --save A)
run(B b --steps ${STEPS} --save B)
run(C c --steps ${STEPS} --resume B --compare A/checkpoint.h5)
run(D d --steps ${STEPS} --resume B --devices 1 --compare A/checkpoint.h5)

math(EXPR from "${STEPS} + 1")
losses("${a}" ${from} ${twice} la)
losses("${c}" ${from} ${twice} lc)
if(NOT la STREQUAL lc)
  message(FATAL_ERROR "resumed losses differ:\none run:\n${la}resumed:\n${lc}")
endif()
string(REGEX MATCH "parameters digest[^\n]*" da "${a}")
string(REGEX MATCH "parameters digest[^\n]*" dc "${c}")
if(da STREQUAL "" OR NOT da STREQUAL dc)
  message(FATAL_ERROR "parameter digests differ: '${da}' vs '${dc}'")
endif()
if(NOT c MATCHES "compared with A/checkpoint.h5 \\(step ${twice}\\): bit-identical")
  message(FATAL_ERROR "the resumed mesh run is not bit-identical to the one run:\n${c}")
endif()
string(REGEX MATCH "compared with[^\n]*" dd "${d}")
message(STATUS "2x2 mesh, ${twice} steps in one process == ${STEPS} + save + new process + load + ${STEPS}: losses and parameters bit-identical")
message(STATUS "resumed on one device: ${dd}")
