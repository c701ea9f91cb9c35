# One fuzz target's CTest smoke run (tests/fuzz/CMakeLists.txt): replay the regression inputs,
# then fuzz for SECONDS from a scratch copy of the seed corpus (libFuzzer adds the inputs it
# finds to its first corpus folder, which must not be the source tree). Fails when libFuzzer
# reports anything.
#   cmake -DFUZZER=... -DCORPUS=... -DREGRESSIONS=... -DDICT=... -DWORK=... -DSECONDS=... -P run_smoke.cmake
foreach(var FUZZER CORPUS REGRESSIONS DICT WORK SECONDS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_smoke.cmake: -D${var}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/corpus ${WORK}/artifacts)
# libFuzzer's limits: an input that runs 10 s is a hang; more than 2 GB of memory (or one
# malloc that large) is a size cap missing. -artifact_prefix keeps the failing input.
set(limits -timeout=10 -rss_limit_mb=2048 -artifact_prefix=${WORK}/artifacts/)

file(GLOB regressions ${REGRESSIONS}/*)
if(regressions)
  list(LENGTH regressions n)
  message(STATUS "replaying ${n} regression inputs from ${REGRESSIONS}")
  execute_process(COMMAND ${FUZZER} ${limits} ${regressions} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "a regression input failed again (exit ${rc}); see the output above")
  endif()
endif()

file(GLOB seeds ${CORPUS}/*)
if(NOT seeds)
  message(FATAL_ERROR "no seed inputs in ${CORPUS}")
endif()
file(COPY ${seeds} DESTINATION ${WORK}/corpus)
set(dict)
if(EXISTS ${DICT})
  set(dict -dict=${DICT})
endif()
execute_process(COMMAND ${FUZZER} ${limits} ${dict} -max_total_time=${SECONDS} -print_final_stats=1
                        ${WORK}/corpus
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(GLOB found ${WORK}/artifacts/*)
  message(FATAL_ERROR "the fuzzer failed (exit ${rc}); the input that did it: ${found}")
endif()
