/*
 * The timeout test's program (run by timeout_test.cmake under mpirun -np 2; not a doctest suite,
 * since its job is to end the whole job with a non-zero exit).
 *
 * Rank 1 skips the all_reduce that rank 0 makes: it sleeps instead, as a rank that hangs or is
 * stuck elsewhere would. Rank 0's wait() must throw after the 2 s timeout with a message that
 * names the operation, the group and the rank, and abort_job() must then end both processes,
 * rank 1 in the middle of its sleep. Without the timeout, rank 0 would wait forever; without
 * abort_job, rank 1 would keep the job alive for ten minutes, then exit 0.
 *
 * argv[1] = "abort": rank 0 calls abort_job, the intended reaction. "return": rank 0 prints the
 * error and returns from main, as a careless program would; the exit handler must then see that
 * the communication thread is stuck in the timed-out all_reduce and abort the job, instead of
 * hanging in MPI_Finalize. "unwaited": rank 0 starts the all_reduce and returns from main without
 * waiting for it, and rank 1 returns as well; the exit handler must give the pending operation
 * its timeout, then abort the job instead of waiting forever.
 * "sigkill", "exit1", "sigstop": rank 1 dies (SIGKILL, or exit(1) without finalising MPI) or
 * freezes (SIGSTOP) where it should join the all_reduce. A death ends the job at once (mpirun
 * sees it and names the rank and how it ended); a frozen rank looks like a hang, so rank 0's
 * timeout names the operation and abort_job ends the job, the stopped process included.
 * argv[2] (ignored): a token on the command line, by which the wrapper finds leftover processes.
 */
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <set>
#include <string>
#include <thread>

#include "distributed/process_group.h"
#include "ops/ops.h"

int main(int argc, char** argv) {
  using namespace loom;
  using namespace loom::distributed;
  auto world = init_process_group(Backend::Mpi);
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::set<std::string> modes{"abort", "return", "unwaited", "sigkill", "exit1", "sigstop"};
  if (world->size() != 2 || !modes.contains(mode)) {
    std::cerr << "timeout_main: run with mpirun -np 2 timeout_main abort|return|unwaited|sigkill|exit1|sigstop"
              << std::endl;
    return 2;
  }
  world->barrier();  // both ranks are up: what follows is a hang, not a slow start
  world->set_timeout(std::chrono::milliseconds(2000));
  Tensor t = ones({1000});
  if (mode == "unwaited") {
    if (world->rank() == 0) world->all_reduce_async(t);  // dropped; rank 1 never joins it
    return 0;
  }
  if (world->rank() == 1) {
    if (mode == "sigkill") ::raise(SIGKILL);
    if (mode == "sigstop") ::raise(SIGSTOP);
    if (mode == "exit1") std::_Exit(1);  // no MPI_Finalize, no exit handlers: a crash's way out
    std::this_thread::sleep_for(std::chrono::minutes(10));
    return 0;  // only reached if nobody aborted the job
  }
  try {
    world->all_reduce(t);  // waits for rank 1, which never comes
  } catch (const Error& e) {
    if (mode != "return") abort_job(std::string("timeout_main: ") + e.what(), 3);
    std::cerr << "timeout_main: " << e.what() << std::endl;
    return 0;  // the exit handler must notice the stuck operation and abort the job
  }
  std::cerr << "timeout_main: the all_reduce completed although rank 1 skipped it" << std::endl;
  return 0;
}
