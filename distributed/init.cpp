/*
 * init_process_group and abort_job (declared in process_group.h): the life cycle of MPI in a
 * Loom process.
 *
 *   init_process_group  MPI_Init_thread once (MPI_THREAD_MULTIPLE if the library has it, at
 *                       least MPI_THREAD_SERIALIZED: the MPI backend's communication thread makes
 *                       the MPI calls, not the thread that called MPI_Init), then the world group.
 *   exit                the communication thread is stopped and joined, then MPI_Finalize, from
 *                       an atexit handler: a program that just returns from main is a correct
 *                       MPI program. If the thread is stuck in a collective that timed out, the
 *                       job is aborted instead (MPI_Finalize would wait for it forever).
 *   abort_job           MPI_Abort(MPI_COMM_WORLD): mpirun ends every rank with a non-zero exit.
 *
 * NCCL groups are bootstrapped over the MPI world group (distributed/nccl/), so MPI is
 * initialised whichever backend is asked for.
 */
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>

#include "core/cuda.h"
#include "distributed/mpi/mpi_check.h"
#include "distributed/mpi/process_group_mpi.h"
#include "distributed/process_group.h"
#if LOOM_WITH_NCCL
#include "distributed/nccl/process_group_nccl.h"
#endif

namespace loom::distributed {
namespace {

std::once_flag g_init_once;
bool g_owns_mpi = false;  // we called MPI_Init, so we finalise

void finalize_at_exit() {
  if (!ProcessGroupMpi::shutdown_comm_thread()) {
    // The communication thread waits in an operation that timed out, or that a peer never
    // joined: neither joining it nor MPI_Finalize would return. The other ranks may wait in it
    // too; end them all.
    abort_job(
        "loom: exiting while an MPI operation is still pending (it timed out, or a rank never joined it); "
        "aborting the job");
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_owns_mpi && !finalized) MPI_Finalize();
}

void init_mpi_once() {
  std::call_once(g_init_once, [] {
    int initialized = 0, provided = 0;
    LOOM_MPI_CHECK(MPI_Initialized(&initialized));
    if (initialized) {
      // Somebody else (the program, a library) initialised MPI and will finalise it.
      LOOM_MPI_CHECK(MPI_Query_thread(&provided));
    } else {
      LOOM_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
      g_owns_mpi = true;
    }
    LOOM_CHECK(provided >= MPI_THREAD_SERIALIZED,
               "init_process_group: the MPI library provides thread level ", provided,
               ", but Loom's communication thread needs MPI_THREAD_SERIALIZED (", MPI_THREAD_SERIALIZED,
               ") or higher; use an MPI built with thread support");
    // Stops the communication thread (and finalises) before static objects are destroyed.
    std::atexit(finalize_at_exit);
  });
}

std::shared_ptr<ProcessGroup> mpi_world() {
  // One world group per process: it owns nothing but MPI_COMM_WORLD, and sharing it keeps its
  // timeout and statistics in one place.
  static std::shared_ptr<ProcessGroup> world = [] {
    std::shared_ptr<ProcessGroup> group = ProcessGroupMpi::world();
    group->set_label("world");
    return group;
  }();
  return world;
}

}  // namespace

std::shared_ptr<ProcessGroup> init_process_group(Backend backend) {
  init_mpi_once();
  if (backend == Backend::Auto)
    backend = (LOOM_WITH_NCCL && cuda::is_available()) ? Backend::Nccl : Backend::Mpi;
  if (backend == Backend::Mpi) return mpi_world();
#if LOOM_WITH_NCCL
  static std::shared_ptr<ProcessGroup> nccl_world = [] {
    std::shared_ptr<ProcessGroup> group = make_nccl_group(*mpi_world());
    group->set_label("world (nccl)");
    return group;
  }();
  return nccl_world;
#else
  LOOM_FAIL(
      "init_process_group: the NCCL backend is not built (configure with -DLOOM_WITH_CUDA=ON and NCCL "
      "installed); use Backend::Mpi for CPU tensors");
#endif
}

void abort_job(const std::string& message, int exit_code) {
  // A zero exit code would let mpirun report success for a job that failed.
  if (exit_code == 0) exit_code = 1;
  std::cerr << message << std::endl;
  std::fflush(stdout);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  // MPI_Abort may be called from any thread, while the communication thread is blocked in a
  // collective; it kills every process of the job (mpirun exits with a non-zero status).
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // not an MPI job (or MPI already gone): end this process alone
}

}  // namespace loom::distributed
