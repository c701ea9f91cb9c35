/*
 * ProcessGroup: a set of processes (ranks 0 .. size-1) that exchange tensors. One process per
 * device, started by `mpirun -np N program`; that is how a job runs on one machine or many.
 *
 * Every collective exists in two forms: a blocking one (`all_reduce(t)`) and an asynchronous one
 * (`all_reduce_async(t)`) that returns a Work to wait() on, so that communication can overlap
 * computation (DDP all-reduces gradient buckets while backward still runs). Tensors are
 * handles: the results are written into the storage of the tensors passed in, as torch.distributed.
 *
 * Backends (chosen at run time by init_process_group): MPI for CPU tensors (distributed/mpi/),
 * NCCL for CUDA tensors (distributed/nccl/, bootstrapped over MPI). For teaching and checking,
 * all_reduce, all_gather and reduce_scatter can also run as the textbook ring algorithms written
 * over send/recv (distributed/ring.h): set_algorithm(Algorithm::Ring). The ring counts the bytes
 * each rank sends, which shows the 2(N-1)/N traffic factor of a ring all-reduce.
 *
 * Every operation is also counted, whatever the backend or algorithm, in stats() by the bytes
 * this rank sends under the standard (bandwidth-optimal, NCCL-like) algorithm model, with N the
 * group size and B the bytes of the tensor named:
 *   all_reduce(B)                2(N-1)/N·B       ring: reduce-scatter + all-gather
 *   all_gather(input B)          (N-1)·B          = (N-1)/N of the gathered output
 *   reduce_scatter(output B)     (N-1)·B          = (N-1)/N of the input
 *   broadcast(B, root)           B, except 0 on the rank before the root in the ring
 *                                (a pipelined chain root -> root+1 -> ... -> root-1)
 *   reduce(B, root)              B, except 0 on the root (the chain in the other direction)
 *   scatter(input, root)         (N-1)/N of the input on the root, 0 elsewhere
 *   gather(input B, root)        B, except 0 on the root
 *   all_to_all(input)            (N-1)/N of the input (the own block stays)
 *   send(B)                      B;  recv and barrier send nothing
 * This is what a planner predicts (distributed/plan/): the counts come from the operations a
 * real step makes, the formula is the model's. The ring algorithm's own point-to-point sends are
 * not counted again as sends.
 *
 * Every operation has a timeout (set_timeout, default 5 minutes): a collective that does not
 * complete in time throws loom::Error naming the operation, the group and the rank, instead of
 * hanging. The process cannot then continue safely (the other ranks may be inside the
 * collective); abort_job() ends every rank of the job with a non-zero exit.
 *
 * Shapes: all_gather and reduce_scatter use one flat "concatenated along dim 0" tensor for the
 * size pieces, as torch's all_gather_into_tensor / reduce_scatter_tensor:
 *   all_gather(input [n, *], output [size * n, *]),  reduce_scatter(input [size * n, *], output [n, *]),
 *   scatter(input [size * n, *] on root, output [n, *]),  gather(input [n, *], output [size * n, *] on root),
 *   all_to_all(input [size * n, *], output [size * n, *]): block i of the input goes to rank i.
 * All tensors must be contiguous, of one dtype, on the backend's device type; errors name the
 * operation, the shapes and the rank.
 */
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace loom::distributed {

enum class ReduceOp { Sum, Avg, Max, Min };
// "Sum", "Avg", "Max", "Min": for messages.
const char* reduce_op_name(ReduceOp op);
// Native: the backend's own collective. Ring: reduce-scatter + all-gather over send/recv.
enum class Algorithm { Native, Ring };

// The handle of an asynchronous operation.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation completed. Throws loom::Error if it failed or did not complete
  // within the group's timeout (the message names the operation, the group and the rank).
  virtual void wait() = 0;
  // Non-blocking test.
  virtual bool is_completed() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

// One kind of operation, as counted in CommStats: how often this rank called it, the bytes of
// its operands (the tensor B of the model in the header comment) and the bytes the model says
// this rank sent. For all_reduce, modeled_bytes_sent is 2(N-1)/N of the summed payload, rounded
// down once (so that it is exact for any number of calls).
struct OperationCount {
  uint64_t calls = 0;
  uint64_t payload_bytes = 0;
  uint64_t modeled_bytes_sent = 0;
};

// Bytes this rank sent through a group.
struct CommStats {
  // What actually went through the backend's point-to-point sends: the ring algorithms' and
  // send()'s (the native collectives are the backend's and not seen here).
  uint64_t bytes_sent = 0;
  uint64_t messages_sent = 0;
  // Every operation under the algorithm model (header comment), whichever algorithm ran it.
  OperationCount all_reduce, all_gather, reduce_scatter, broadcast, reduce, scatter, gather, all_to_all, send, recv;
  // The sum of modeled_bytes_sent over every kind.
  uint64_t modeled_bytes_sent() const;
};

class ProcessGroup : public std::enable_shared_from_this<ProcessGroup> {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The ranks of this group's members in the world group (member i is world rank ranks()[i]).
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  virtual std::string backend_name() const = 0;  // "mpi", "nccl"
  // Where this group's tensors live: the CPU (MPI) or this rank's GPU (NCCL). Code that makes
  // its own message tensors (a shape header, a flat buffer) makes them there.
  virtual Device device() const = 0;

  // ---- asynchronous collectives (each counted in stats() once the backend accepted it) -----
  WorkPtr broadcast_async(const Tensor& tensor, int root);
  WorkPtr reduce_async(const Tensor& tensor, int root, ReduceOp op = ReduceOp::Sum);
  WorkPtr all_reduce_async(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  WorkPtr all_gather_async(const Tensor& input, const Tensor& output);
  WorkPtr reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceOp op = ReduceOp::Sum);
  WorkPtr scatter_async(const Tensor& input, const Tensor& output, int root);
  WorkPtr gather_async(const Tensor& input, const Tensor& output, int root);
  WorkPtr all_to_all_async(const Tensor& input, const Tensor& output);
  WorkPtr send_async(const Tensor& tensor, int dst, int tag = 0);
  WorkPtr recv_async(const Tensor& tensor, int src, int tag = 0);
  virtual WorkPtr barrier_async() = 0;

  // ---- blocking forms: the async form, then wait() -----------------------------------------
  void broadcast(const Tensor& tensor, int root) { broadcast_async(tensor, root)->wait(); }
  void reduce(const Tensor& tensor, int root, ReduceOp op = ReduceOp::Sum) { reduce_async(tensor, root, op)->wait(); }
  void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum) { all_reduce_async(tensor, op)->wait(); }
  void all_gather(const Tensor& input, const Tensor& output) { all_gather_async(input, output)->wait(); }
  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op = ReduceOp::Sum) {
    reduce_scatter_async(input, output, op)->wait();
  }
  void scatter(const Tensor& input, const Tensor& output, int root) { scatter_async(input, output, root)->wait(); }
  void gather(const Tensor& input, const Tensor& output, int root) { gather_async(input, output, root)->wait(); }
  void all_to_all(const Tensor& input, const Tensor& output) { all_to_all_async(input, output)->wait(); }
  void send(const Tensor& tensor, int dst, int tag = 0) { send_async(tensor, dst, tag)->wait(); }
  void recv(const Tensor& tensor, int src, int tag = 0) { recv_async(tensor, src, tag)->wait(); }
  void barrier() { barrier_async()->wait(); }

  // A group of the members with these ranks (ranks of *this* group, in the order given).
  // Collective: every member of this group must call it with the same list. Returns nullptr on
  // the members that are not in the list. Throws on duplicates or out-of-range ranks.
  virtual std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) = 0;

  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_algorithm(Algorithm algorithm) { algorithm_ = algorithm; }
  Algorithm algorithm() const { return algorithm_; }
  // Safe to call while other threads communicate through the group.
  CommStats stats() const;
  void reset_stats();
  // "mpi group of 4 (world ranks 0,1,2,3), rank 1": for error messages.
  std::string describe() const;
  // A short name for traces (comm_trace.h): what set_label gave ("data", "tensor", ... as the
  // mesh names its groups; "world" for init_process_group's), else "ranks 0,2".
  std::string label() const;
  void set_label(std::string label) { label_ = std::move(label); }

 protected:
  ProcessGroup(int rank, int size, std::vector<int> world_ranks);

  // The backend's own operations; the public forms above count them and (for all-reduce,
  // all-gather and reduce-scatter) choose between them and the ring.
  virtual WorkPtr native_all_reduce_async(const Tensor& tensor, ReduceOp op) = 0;
  virtual WorkPtr native_all_gather_async(const Tensor& input, const Tensor& output) = 0;
  virtual WorkPtr native_reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceOp op) = 0;
  virtual WorkPtr native_broadcast_async(const Tensor& tensor, int root) = 0;
  virtual WorkPtr native_reduce_async(const Tensor& tensor, int root, ReduceOp op) = 0;
  virtual WorkPtr native_scatter_async(const Tensor& input, const Tensor& output, int root) = 0;
  virtual WorkPtr native_gather_async(const Tensor& input, const Tensor& output, int root) = 0;
  virtual WorkPtr native_all_to_all_async(const Tensor& input, const Tensor& output) = 0;
  virtual WorkPtr native_send_async(const Tensor& tensor, int dst, int tag) = 0;
  virtual WorkPtr native_recv_async(const Tensor& tensor, int src, int tag) = 0;

  // Point-to-point traffic, counted by native_send_async implementations.
  void count_sent(uint64_t bytes);

 private:
  // Algorithm::Native runs `native`; Ring runs `ring` and returns a completed Work.
  WorkPtr native_or_ring(const std::function<WorkPtr()>& native, const std::function<void()>& ring);
  // Adds one call of `payload` bytes, of which this rank sent `sent` under the model.
  void count(OperationCount CommStats::*kind, uint64_t payload, uint64_t sent);
  // `work`, reporting to the communication trace when waited for, if a sink is installed
  // (comm_trace.h); else `work` itself.
  WorkPtr traced(WorkPtr work, const char* operation, std::chrono::steady_clock::time_point posted,
                 uint64_t payload, int peer) const;

  int rank_, size_;
  std::vector<int> world_ranks_;
  std::string label_;
  std::chrono::milliseconds timeout_{std::chrono::minutes(5)};
  Algorithm algorithm_ = Algorithm::Native;
  // Guards stats_: DDP launches all-reduces from backward's hooks while other threads may send.
  mutable std::mutex stats_mutex_;
  CommStats stats_;
};

enum class Backend { Auto, Mpi, Nccl };

// Initialises MPI (once per process; thread level MPI_THREAD_MULTIPLE or SERIALIZED, see the
// backend) and returns the world group: Mpi for CPU tensors, Nccl for CUDA tensors (one GPU
// per rank: rank r uses device r % device_count), Auto = Nccl when built with NCCL and a GPU is
// present, else Mpi. Throws loom::Error when the backend is not built or not usable here.
std::shared_ptr<ProcessGroup> init_process_group(Backend backend = Backend::Auto);

// Ends the whole job with a non-zero exit after printing `message` (MPI_Abort): what a rank
// does when a collective failed or timed out, since the other ranks may be waiting in it.
[[noreturn]] void abort_job(const std::string& message, int exit_code = 1);

}  // namespace loom::distributed
