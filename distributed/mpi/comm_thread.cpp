/*
 * The MPI communication thread and MpiWork (see comm_thread.h).
 */
#include "distributed/mpi/comm_thread.h"

#include <cstdio>

#include "core/half.h"
#include "distributed/mpi/mpi_check.h"

namespace loom::distributed::mpi {
namespace {

// float16 and bfloat16 have no MPI datatype and MPI's built-in operations cannot add them: they
// travel as 16-bit integers and are reduced by these user-defined operations, which convert
// each pair to float, combine, and round back (as the CPU kernels of the 16-bit dtypes do).
template <class T, class Combine>
void reduce_16bit(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = T(Combine{}(static_cast<float>(a[i]), static_cast<float>(b[i])));
}
struct AddF {
  float operator()(float a, float b) const { return a + b; }
};
struct MaxF {  // NaN wins, as torch.maximum
  float operator()(float a, float b) const { return (a != a || a > b) ? a : b; }
};
struct MinF {
  float operator()(float a, float b) const { return (a != a || a < b) ? a : b; }
};

// Messages in flight are tested back to back (yielding the core in between) for kSpinFor after
// the last one completed, then every kPollInterval. Measured on 2 busy cores, np 2: one ring step
// (send + recv of one float) took 65-80 us when sleeping kPollInterval between tests, 10 us spinning.
constexpr std::chrono::microseconds kPollInterval{20};
constexpr std::chrono::microseconds kSpinFor{500};

Error wrap(const MpiWork& work, const std::exception& e) {
  return Error(work.op() + " failed on " + work.where() + ": " + e.what());
}

}  // namespace

CommThread& CommThread::get() {
  static CommThread* thread = new CommThread();
  return *thread;
}

void CommThread::enqueue(const std::shared_ptr<MpiWork>& work, std::function<void()> run) {
  push(Entry{work, std::move(run), {}, {}});
}

void CommThread::enqueue_p2p(const std::shared_ptr<MpiWork>& work, std::function<MPI_Request()> post,
                             std::function<void(const MPI_Status&)> check) {
  push(Entry{work, {}, std::move(post), std::move(check)});
}

void CommThread::enqueue_cleanup(std::function<void()> run) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopped_ || stuck_.load() > 0) return;
  start_locked();
  queue_.push_back(Entry{nullptr, std::move(run), {}, {}});
  wake_.notify_one();  // the thread may sleep in loop() with nothing queued
}

MPI_Op CommThread::half_op(DType dtype, ReduceOp op) {
  const int d = dtype == DType::Float16 ? 0 : 1;
  const int o = op == ReduceOp::Max ? 1 : op == ReduceOp::Min ? 2 : 0;  // Avg = Sum, then divide
  MPI_Op& slot = half_ops_[d][o];
  if (slot == MPI_OP_NULL) {
    MPI_User_function* fns[2][3] = {
        {reduce_16bit<Half, AddF>, reduce_16bit<Half, MaxF>, reduce_16bit<Half, MinF>},
        {reduce_16bit<BFloat16, AddF>, reduce_16bit<BFloat16, MaxF>, reduce_16bit<BFloat16, MinF>}};
    LOOM_MPI_CHECK(MPI_Op_create(fns[d][o], /*commute=*/1, &slot));
  }
  return slot;
}

bool CommThread::shutdown() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (stopped_) return exited_;
  // The thread may sit forever in the call that timed out: joining it would hang the exit.
  if (stuck_.load() > 0) return false;
  stopped_ = true;
  if (!thread_.joinable()) return exited_ = true;
  wake_.notify_one();  // loop() may sleep with nothing queued: it must see stopped_
  // Waits for the operations still queued (every rank issued them, so they complete) and for
  // the thread to free its MPI objects; MPI_Finalize may only follow after that. Nobody may
  // have waited for those operations, so the longest timeout among them bounds this wait: a
  // peer that never joins one of them must not hang the exit. (Cleanups alone are local.)
  const milliseconds bound = open_timeouts_.empty() ? milliseconds(10000) : *open_timeouts_.rbegin();
  if (!exit_cv_.wait_for(lock, bound, [&] { return exited_; })) {
    std::fprintf(stderr,
                 "loom: the MPI communication thread did not finish its queued operations within %lld ms\n",
                 static_cast<long long>(bound.count()));
    return false;
  }
  lock.unlock();
  thread_.join();  // the loop has returned (exited_): only the thread's exit is left
  return true;
}

void CommThread::push(Entry entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  LOOM_CHECK(!stopped_, entry.work->op(), " on ", entry.work->where(),
             ": MPI has been shut down (the program is exiting)");
  LOOM_CHECK(stuck_.load() == 0, entry.work->op(), " on ", entry.work->where(),
             ": an earlier operation timed out and the communication thread is still waiting in it, so no "
             "further MPI operation can run in this process; end the job with abort_job()");
  start_locked();
  open_timeouts_.insert(entry.work->timeout());
  queue_.push_back(std::move(entry));
  wake_.notify_one();  // loop() may sleep with nothing queued
}

void CommThread::start_locked() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { loop(); });
}

void CommThread::loop() {
  for (;;) {
    Entry entry;
    bool spinning = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto ready = [&] { return stopped_ || !queue_.empty(); };
      // MPI moves a message only while some thread is inside MPI, so with messages in flight
      // the thread keeps testing them: without sleeping while they progress (a ring step is a
      // few microseconds; a 20 us sleep costs 50-100 us once the timer slack and the wake-up
      // are counted), then, after kSpinFor without progress, every kPollInterval. Idle, it
      // sleeps until an operation is queued.
      if (pending_.empty())
        wake_.wait(lock, ready);
      else if (std::chrono::steady_clock::now() - last_progress_ > kSpinFor)
        wake_.wait_for(lock, kPollInterval, ready);
      else
        spinning = true;
      if (!queue_.empty()) {
        entry = std::move(queue_.front());
        queue_.pop_front();
      } else if (stopped_ && pending_.empty()) {
        break;
      }
    }
    if (entry.run || entry.post)
      run(entry);
    else if (spinning)
      std::this_thread::yield();  // the peers may share this core (mpirun --oversubscribe)
    poll_pending();
  }
  free_mpi_objects();
  std::lock_guard<std::mutex> lock(mutex_);
  exited_ = true;
  exit_cv_.notify_all();  // shutdown() waits for the loop to return
}

void CommThread::run(Entry& entry) {
  try {
    if (entry.post) {
      MPI_Request request = entry.post();
      pending_.push_back(Pending{std::move(entry.work), request, std::move(entry.check)});
      return;
    }
    entry.run();
    // Drops the operation's references to its tensors before its Work completes: what the
    // caller frees after wait() is then free at once (the allocator's peak does not depend on
    // when this thread gets to its next entry).
    entry.run = nullptr;
    if (entry.work) finish(*entry.work, nullptr);
  } catch (const std::exception& e) {
    entry.run = nullptr;
    if (entry.work)
      finish(*entry.work, std::make_exception_ptr(wrap(*entry.work, e)));
    else  // a cleanup: nobody waits for it
      std::fprintf(stderr, "loom: MPI cleanup failed: %s\n", e.what());
  }
}

// Tests every message in flight; finishes the Works of those that completed.
void CommThread::poll_pending() {
  if (pending_.empty()) last_progress_ = std::chrono::steady_clock::now();
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    std::exception_ptr error;
    bool done = false;
    try {
      int flag = 0;
      MPI_Status status;
      // MPI_Test, not MPI_Wait: one message must not hold up the others or the queue.
      LOOM_MPI_CHECK(MPI_Test(&p.request, &flag, &status));
      done = flag != 0;
      if (done) p.check(status);
    } catch (const std::exception& e) {
      done = true;
      error = std::make_exception_ptr(wrap(*p.work, e));
    }
    if (!done) {
      ++i;
      continue;
    }
    last_progress_ = std::chrono::steady_clock::now();
    p.check = nullptr;  // a send's tensor is free when its Work completes (as in run())
    finish(*p.work, error);
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void CommThread::finish(MpiWork& work, std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    open_timeouts_.erase(open_timeouts_.find(work.timeout()));
  }
  work.finish(std::move(error));
}

void CommThread::free_mpi_objects() {
  try {
    for (auto& row : half_ops_)
      for (MPI_Op& op : row)
        if (op != MPI_OP_NULL) LOOM_MPI_CHECK(MPI_Op_free(&op));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: %s\n", e.what());
  }
}

void MpiWork::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  // Waits for the communication thread to run this operation, i.e. for every other member of
  // the group to reach the same collective (or the matching send/recv), up to the timeout.
  if (!done_.wait_for(lock, timeout_, [&] { return completed_.load(std::memory_order_acquire); })) {
    if (!timed_out_) {
      timed_out_ = true;
      CommThread::get().add_stuck();
    }
    LOOM_FAIL(op_, " timed out after ", timeout_.count(), " ms on ", where_,
              ": a rank may have skipped it or died (the job cannot continue: call abort_job)");
  }
  if (error_) std::rethrow_exception(error_);
}

void MpiWork::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::move(error);
    completed_.store(true, std::memory_order_release);
    if (timed_out_) CommThread::get().remove_stuck();
  }
  done_.notify_all();  // the callers blocked in wait()
}

}  // namespace loom::distributed::mpi
