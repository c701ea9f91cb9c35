# The timeout test: runs timeout_main under mpirun -np 2 and passes iff
#   - mpirun exits non-zero (abort_job ended the job),
#   - within 25 s: the 2 s timeout, not rank 1's 10-minute sleep, decided the end. It takes about
#     2.1 s on an idle machine; the margin is for start-up on a loaded one (once 23 s, on two
#     cores shared with four other test jobs),
#   - the output names the operation, the group and the rank that timed out,
#   - and no process of the job is left behind.
# MODE=abort: rank 0 calls abort_job; MODE=return: it returns from main and the exit handler must
# abort the job (a stuck communication thread must not hang the exit); MODE=unwaited: nobody
# waits for the all_reduce, and the exit handler must abort after its timeout.
# MODE=sigkill / exit1: rank 1 dies instead of joining the all_reduce; mpirun must end the job at
# once and say which rank died and how. MODE=sigstop: rank 1 freezes; rank 0's timeout must name
# the operation and abort_job must end the job, the stopped process included.
# Usage: cmake -DMPIEXEC=<mpirun> -DPROGRAM=<timeout_main> -DMODE=<mode> -P timeout_test.cmake
string(RANDOM LENGTH 16 ALPHABET "abcdefghijklmnopqrstuvwxyz" token)
string(TIMESTAMP start "%s")
execute_process(
  COMMAND ${MPIEXEC} --allow-run-as-root --oversubscribe -np 2 ${PROGRAM} ${MODE} loom-timeout-${token}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 26)
string(TIMESTAMP end "%s")
math(EXPR elapsed "${end} - ${start}")
message("mpirun exited with '${rc}' after ${elapsed} s; its output:\n${out}${err}")

# pgrep finds the processes whose command line holds the token; mpirun has waited for its
# children, but give the kernel a moment to reap them.
set(left "")
foreach(attempt RANGE 10)
  execute_process(COMMAND pgrep -f loom-timeout-${token} RESULT_VARIABLE pgrep_rc OUTPUT_VARIABLE left)
  if(NOT pgrep_rc EQUAL 0)
    break()
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -E sleep 0.2)
endforeach()
if(pgrep_rc EQUAL 0)
  string(REGEX REPLACE "[\r\n]+" ";" pids "${left}")
  execute_process(COMMAND kill -KILL ${pids})  # this run's processes, by id
  message(FATAL_ERROR "processes of the job were left behind: ${left}")
endif()

if(rc STREQUAL "0")
  message(FATAL_ERROR "mpirun exited 0: the timed-out all_reduce did not end the job")
endif()
if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "mpirun did not exit by itself (${rc}): the timeout or abort_job did not work")
endif()
if(elapsed GREATER 25)
  message(FATAL_ERROR "the job took ${elapsed} s to end; expected about 2 s (the timeout) plus start-up")
endif()
if(MODE STREQUAL "sigkill")
  if(NOT "${out}${err}" MATCHES "process rank 1 with PID [0-9]+ on node [^ ]+ exited on signal 9")
    message(FATAL_ERROR "mpirun did not name the rank that was killed")
  endif()
elseif(MODE STREQUAL "exit1")
  if(NOT "${out}${err}" MATCHES "Process name: \\[\\[[0-9]+,[0-9]+\\],1\\]" OR NOT "${out}${err}" MATCHES "Exit code: +1")
    message(FATAL_ERROR "mpirun did not name the rank that exited with status 1")
  endif()
elseif(MODE STREQUAL "unwaited")
  if(NOT "${out}${err}" MATCHES "did not finish its queued operations within 2000 ms")
    message(FATAL_ERROR "the exit handler did not report the operation nobody waited for")
  endif()
elseif(NOT "${out}${err}" MATCHES "all_reduce timed out after 2000 ms on mpi group of 2 \\(world ranks 0,1\\), rank 0")
  message(FATAL_ERROR "the output does not name the operation, the group and the rank that timed out")
endif()
if((MODE STREQUAL "return" OR MODE STREQUAL "unwaited") AND NOT "${out}${err}" MATCHES "exiting while an MPI operation is still pending")
  message(FATAL_ERROR "the exit handler did not report the pending operation it aborted for")
endif()
message("ok: the job ended with exit status ${rc} after ${elapsed} s")
