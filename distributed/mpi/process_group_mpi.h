/*
 * The MPI process group: collectives and point-to-point messages on CPU tensors.
 *
 * One communication thread per process makes every MPI call (torch's ProcessGroupMPI design).
 * The *_async methods validate their arguments in the caller's thread, then append the
 * operation to a process-wide FIFO and return at once; the communication thread runs the
 * operations one after the other, and Work::wait() blocks until its operation has run (or the
 * group's timeout passes).
 *
 * Why a thread: an MPI collective, blocking or not, only makes progress while some thread is
 * inside an MPI call. A thread that sits in MPI_Allreduce while the main thread computes is what
 * lets DDP all-reduce one gradient bucket while backward is still producing the next; with
 * MPI_Iallreduce and no such thread, nothing would move until the main thread called MPI_Wait.
 * Why one thread for all groups: MPI requires the same order of collectives on every member of
 * a communicator, and MPI_THREAD_MULTIPLE is not always available; one FIFO keeps the order in
 * which the program issued them and needs only MPI_THREAD_SERIALIZED.
 *
 * Point-to-point messages are posted as MPI_Isend / MPI_Irecv and tested by the thread between
 * the queued operations (MPI_Test), so that a send never holds up the queue: the ring
 * (distributed/ring.h) sends to its right and receives from its left at the same time, which
 * with blocking sends on one thread per rank would deadlock once messages are too large to be
 * buffered.
 *
 * dtypes: float32, float64, float16, bfloat16, int8, uint8, int32, int64, bool. float16 and
 * bfloat16 are reduced by user-defined MPI operations that add (or compare) in float; bool is
 * sent as a byte, and reduced as a logical or (Sum, Max) or a logical and (Min); Avg needs a
 * floating dtype.
 *
 * Timeouts: wait() throws loom::Error after the group's timeout ("all_reduce timed out after
 * 5000 ms on mpi group of 2 (world ranks 0,1), rank 1: ..."). The communication thread is then
 * still inside the MPI call, waiting for the ranks that never came; until that call returns
 * every further operation of the process fails at once with an error that says so, and a
 * process that exits in that state ends the job (MPI_Abort) instead of hanging in MPI_Finalize.
 * The intended reaction to a timeout is abort_job().
 */
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"

namespace loom::distributed {

class ProcessGroupMpi final : public ProcessGroup {
 public:
  // The group of all processes of the job (MPI_COMM_WORLD). MPI must have been initialised by
  // init_process_group; throws loom::Error otherwise.
  static std::shared_ptr<ProcessGroupMpi> world();

  // Takes ownership of `comm` (freed when the group is destroyed, unless it is MPI_COMM_WORLD),
  // whose member `rank` this process is; world_ranks[i]: the world rank of member i. Rank and
  // size are passed in because only the communication thread may call MPI.
  ProcessGroupMpi(MPI_Comm comm, int rank, std::vector<int> world_ranks);
  ~ProcessGroupMpi() override;

  std::string backend_name() const override { return "mpi"; }
  Device device() const override { return kCPU; }

  WorkPtr barrier_async() override;
  // MPI_Comm_split over this group's communicator; the new group keeps this group's timeout
  // and uses the same communication thread.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override;

  // Stops the communication thread after the operations already queued have run, and frees
  // the MPI objects it created: called once, at exit, before MPI_Finalize (distributed/init.cpp).
  // Returns false, and leaves the thread alone, when it is stuck in an operation that timed
  // out, or has not finished the queued operations within the longest timeout among them (a
  // peer never joined one): the caller must then end the job with MPI_Abort, not finalise.
  static bool shutdown_comm_thread();

 protected:
  WorkPtr native_all_reduce_async(const Tensor& tensor, ReduceOp op) override;
  WorkPtr native_all_gather_async(const Tensor& input, const Tensor& output) override;
  WorkPtr native_reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceOp op) override;
  WorkPtr native_broadcast_async(const Tensor& tensor, int root) override;
  WorkPtr native_reduce_async(const Tensor& tensor, int root, ReduceOp op) override;
  WorkPtr native_scatter_async(const Tensor& input, const Tensor& output, int root) override;
  WorkPtr native_gather_async(const Tensor& input, const Tensor& output, int root) override;
  WorkPtr native_all_to_all_async(const Tensor& input, const Tensor& output) override;
  WorkPtr native_send_async(const Tensor& tensor, int dst, int tag) override;
  WorkPtr native_recv_async(const Tensor& tensor, int src, int tag) override;

 private:
  MPI_Comm comm_;
};

}  // namespace loom::distributed
