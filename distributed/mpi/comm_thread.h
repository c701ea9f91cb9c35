/*
 * The MPI backend's communication thread: one per process, it makes every MPI call, in the
 * order the program issued the operations (process_group_mpi.h says why), and MpiWork, the
 * handle that a caller waits on until its operation has run there.
 *
 *   caller thread                         communication thread
 *   all_reduce_async(t) ─ checks ─► FIFO ─► MPI_Allreduce(t) ─► work.finish() ─► wait() returns
 *   send_async(t, dst)  ─ checks ─► FIFO ─► MPI_Isend ─► (polled with MPI_Test while idle) ─► finish
 */
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "distributed/process_group.h"

namespace loom::distributed::mpi {

using std::chrono::milliseconds;

// The handle of one queued operation.
class MpiWork final : public Work {
 public:
  MpiWork(std::string op, std::string where, milliseconds timeout)
      : op_(std::move(op)), where_(std::move(where)), timeout_(timeout) {}

  void wait() override;
  bool is_completed() override { return completed_.load(std::memory_order_acquire); }

  // Called by the communication thread when the operation has run (error: null on success).
  void finish(std::exception_ptr error);

  const std::string& op() const { return op_; }
  const std::string& where() const { return where_; }
  milliseconds timeout() const { return timeout_; }

 private:
  std::string op_, where_;
  milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable done_;
  std::atomic<bool> completed_{false};
  bool timed_out_ = false;  // counted in CommThread::stuck_ until the operation completes
  std::exception_ptr error_;
};

class CommThread {
 public:
  // Created on first use and never destroyed: the thread is stopped explicitly before
  // MPI_Finalize (shutdown(), from init.cpp's exit handler). A static object would be destroyed
  // at an order relative to that handler that depends on which was created first.
  static CommThread& get();

  // A blocking operation: `run` makes the MPI call(s) on the communication thread.
  void enqueue(const std::shared_ptr<MpiWork>& work, std::function<void()> run);
  // A point-to-point operation: `post` starts it (MPI_Isend / MPI_Irecv) and returns the request;
  // `check` looks at the status once the request completed, and may throw.
  void enqueue_p2p(const std::shared_ptr<MpiWork>& work, std::function<MPI_Request()> post,
                   std::function<void(const MPI_Status&)> check);
  // Fire-and-forget cleanup (MPI_Comm_free of a destroyed group); dropped once stopped.
  void enqueue_cleanup(std::function<void()> run);

  // The user-defined reduction for a 16-bit float dtype; communication thread only.
  MPI_Op half_op(DType dtype, ReduceOp op);

  // A wait() gave up on an operation that has not completed yet (and one that later did).
  void add_stuck() { stuck_.fetch_add(1); }
  void remove_stuck() { stuck_.fetch_sub(1); }

  // Stops the thread after the queued operations have run (see ProcessGroupMpi::shutdown_comm_thread).
  bool shutdown();

 private:
  struct Entry {
    std::shared_ptr<MpiWork> work;  // null for cleanups
    std::function<void()> run;
    std::function<MPI_Request()> post;
    std::function<void(const MPI_Status&)> check;
  };
  struct Pending {
    std::shared_ptr<MpiWork> work;
    MPI_Request request;
    std::function<void(const MPI_Status&)> check;
  };

  CommThread() = default;

  void push(Entry entry);
  void start_locked();
  void loop();
  void run(Entry& entry);
  void poll_pending();
  void finish(MpiWork& work, std::exception_ptr error);
  void free_mpi_objects();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Entry> queue_;
  bool stopped_ = false;
  bool exited_ = false;  // the loop has returned
  std::condition_variable exit_cv_;
  std::multiset<milliseconds> open_timeouts_;  // of the operations queued and not yet finished
  std::atomic<int> stuck_{0};
  std::thread thread_;
  // Communication thread only:
  std::vector<Pending> pending_;
  std::chrono::steady_clock::time_point last_progress_;
  MPI_Op half_ops_[2][3] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}, {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};
};

}  // namespace loom::distributed::mpi
