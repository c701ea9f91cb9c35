/* ProcessGroup's shared parts: algorithm dispatch and descriptions (see process_group.h). */
#include "distributed/process_group.h"

#include <atomic>
#include <functional>
#include <sstream>

#include "distributed/comm_trace.h"
#include "distributed/ring.h"

namespace loom::distributed {
namespace {

// The Work of an operation that already finished (the ring runs synchronously).
class CompletedWork final : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

// Set while this thread runs a ring collective: its sends are the collective's, counted once
// as the collective, not again as sends.
thread_local int ring_depth = 0;

struct InsideRing {
  InsideRing() { ++ring_depth; }
  ~InsideRing() { --ring_depth; }
  InsideRing(const InsideRing&) = delete;
  InsideRing& operator=(const InsideRing&) = delete;
};

uint64_t bytes_of(const Tensor& t) { return static_cast<uint64_t>(t.nbytes()); }

}  // namespace

uint64_t CommStats::modeled_bytes_sent() const {
  uint64_t total = 0;
  for (const OperationCount* kind :
       {&all_reduce, &all_gather, &reduce_scatter, &broadcast, &reduce, &scatter, &gather, &all_to_all, &send, &recv})
    total += kind->modeled_bytes_sent;
  return total;
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "Sum";
    case ReduceOp::Avg: return "Avg";
    case ReduceOp::Max: return "Max";
    case ReduceOp::Min: return "Min";
  }
  return "?";
}

ProcessGroup::ProcessGroup(int rank, int size, std::vector<int> world_ranks)
    : rank_(rank), size_(size), world_ranks_(std::move(world_ranks)) {
  LOOM_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_ && static_cast<int>(world_ranks_.size()) == size_,
             "ProcessGroup: inconsistent rank ", rank_, " / size ", size_, " / ", world_ranks_.size(), " world ranks");
}

std::string ProcessGroup::describe() const {
  std::ostringstream os;
  os << backend_name() << " group of " << size_ << " (world ranks ";
  for (size_t i = 0; i < world_ranks_.size(); ++i) os << (i ? "," : "") << world_ranks_[i];
  os << "), rank " << rank_;
  return os.str();
}

std::string ProcessGroup::label() const {
  if (!label_.empty()) return label_;
  std::ostringstream os;
  os << "ranks ";
  for (size_t i = 0; i < world_ranks_.size(); ++i) os << (i ? "," : "") << world_ranks_[i];
  return os.str();
}

namespace {

// Reports its operation to the communication trace when the first wait() returns.
class TracedWork : public Work {
 public:
  TracedWork(WorkPtr inner, CommEvent event) : inner_(std::move(inner)), event_(std::move(event)) {}
  void wait() override {
    const auto begin = std::chrono::steady_clock::now();
    inner_->wait();
    if (reported_.exchange(true)) return;
    event_.wait_begin = begin;
    event_.done = std::chrono::steady_clock::now();
    detail::report_comm_event(event_);
  }
  bool is_completed() override { return inner_->is_completed(); }

 private:
  WorkPtr inner_;
  CommEvent event_;
  std::atomic<bool> reported_{false};
};

}  // namespace

WorkPtr ProcessGroup::traced(WorkPtr work, const char* operation, std::chrono::steady_clock::time_point posted,
                             uint64_t payload, int peer) const {
  if (!comm_sink_installed()) return work;
  CommEvent event{.operation = operation,
                  .group = label(),
                  .group_size = size_,
                  .peer = peer,
                  .bytes = static_cast<int64_t>(payload),
                  .posted = posted};
  return std::make_shared<TracedWork>(std::move(work), std::move(event));
}

CommStats ProcessGroup::stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  CommStats out = stats_;
  const auto n = static_cast<uint64_t>(size_);
  out.all_reduce.modeled_bytes_sent = 2 * (n - 1) * out.all_reduce.payload_bytes / n;
  return out;
}

void ProcessGroup::reset_stats() {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_ = {};
}

void ProcessGroup::count_sent(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_.bytes_sent += bytes;
  ++stats_.messages_sent;
}

void ProcessGroup::count(OperationCount CommStats::*kind, uint64_t payload, uint64_t sent) {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  OperationCount& c = stats_.*kind;
  ++c.calls;
  c.payload_bytes += payload;
  c.modeled_bytes_sent += sent;  // all_reduce's is derived from payload_bytes in stats()
}

// Each form runs the operation first and counts it after: one the backend rejects (bad shapes)
// moved nothing.

// The backend's collective, or the ring written over send/recv (set_algorithm), which runs to
// completion here and whose own sends are not counted as sends.
WorkPtr ProcessGroup::native_or_ring(const std::function<WorkPtr()>& native, const std::function<void()>& ring) {
  if (algorithm_ == Algorithm::Native) return native();
  InsideRing inside;
  ring();
  return std::make_shared<CompletedWork>();
}

WorkPtr ProcessGroup::all_reduce_async(const Tensor& tensor, ReduceOp op) {
  const auto posted = std::chrono::steady_clock::now();
  WorkPtr work = native_or_ring([&] { return native_all_reduce_async(tensor, op); },
                                [&] { ring_all_reduce(*this, tensor, op); });
  count(&CommStats::all_reduce, bytes_of(tensor), 0);
  return traced(std::move(work), "all_reduce", posted, bytes_of(tensor), -1);
}

WorkPtr ProcessGroup::all_gather_async(const Tensor& input, const Tensor& output) {
  const auto posted = std::chrono::steady_clock::now();
  WorkPtr work = native_or_ring([&] { return native_all_gather_async(input, output); },
                                [&] { ring_all_gather(*this, input, output); });
  count(&CommStats::all_gather, bytes_of(input), static_cast<uint64_t>(size_ - 1) * bytes_of(input));
  return traced(std::move(work), "all_gather", posted, bytes_of(input), -1);
}

WorkPtr ProcessGroup::reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceOp op) {
  const auto posted = std::chrono::steady_clock::now();
  WorkPtr work = native_or_ring([&] { return native_reduce_scatter_async(input, output, op); },
                                [&] { ring_reduce_scatter(*this, input, output, op); });
  count(&CommStats::reduce_scatter, bytes_of(output), static_cast<uint64_t>(size_ - 1) * bytes_of(output));
  return traced(std::move(work), "reduce_scatter", posted, bytes_of(output), -1);
}

WorkPtr ProcessGroup::broadcast_async(const Tensor& tensor, int root) {
  const auto posted = std::chrono::steady_clock::now();
  WorkPtr work = native_broadcast_async(tensor, root);
  const bool chain_end = (root + size_ - 1) % size_ == rank_;  // the last of root -> root+1 -> ...
  count(&CommStats::broadcast, bytes_of(tensor), chain_end ? 0 : bytes_of(tensor));
  return traced(std::move(work), "broadcast", posted, bytes_of(tensor), root);
}

WorkPtr ProcessGroup::reduce_async(const Tensor& tensor, int root, ReduceOp op) {
  const auto posted = std::chrono::steady_clock::now();
  WorkPtr work = native_reduce_async(tensor, root, op);
  count(&CommStats::reduce, bytes_of(tensor), rank_ == root ? 0 : bytes_of(tensor));
  return traced(std::move(work), "reduce", posted, bytes_of(tensor), root);
}

WorkPtr ProcessGroup::scatter_async(const Tensor& input, const Tensor& output, int root) {
  const auto posted = std::chrono::steady_clock::now();
  WorkPtr work = native_scatter_async(input, output, root);
  // The input is read on the root only; the blocks it sends away are N-1 outputs' worth.
  const uint64_t block = bytes_of(output);
  count(&CommStats::scatter, rank_ == root ? static_cast<uint64_t>(size_) * block : 0,
        rank_ == root ? static_cast<uint64_t>(size_ - 1) * block : 0);
  return traced(std::move(work), "scatter", posted, rank_ == root ? static_cast<uint64_t>(size_) * block : 0, root);
}

WorkPtr ProcessGroup::gather_async(const Tensor& input, const Tensor& output, int root) {
  const auto posted = std::chrono::steady_clock::now();
  WorkPtr work = native_gather_async(input, output, root);
  count(&CommStats::gather, bytes_of(input), rank_ == root ? 0 : bytes_of(input));
  return traced(std::move(work), "gather", posted, bytes_of(input), root);
}

WorkPtr ProcessGroup::all_to_all_async(const Tensor& input, const Tensor& output) {
  const auto posted = std::chrono::steady_clock::now();
  WorkPtr work = native_all_to_all_async(input, output);
  count(&CommStats::all_to_all, bytes_of(input), bytes_of(input) / static_cast<uint64_t>(size_) * (size_ - 1));
  return traced(std::move(work), "all_to_all", posted, bytes_of(input), -1);
}

WorkPtr ProcessGroup::send_async(const Tensor& tensor, int dst, int tag) {
  const auto posted = std::chrono::steady_clock::now();
  WorkPtr work = native_send_async(tensor, dst, tag);
  if (ring_depth == 0) count(&CommStats::send, bytes_of(tensor), bytes_of(tensor));
  return ring_depth == 0 ? traced(std::move(work), "send", posted, bytes_of(tensor), dst) : work;
}

WorkPtr ProcessGroup::recv_async(const Tensor& tensor, int src, int tag) {
  const auto posted = std::chrono::steady_clock::now();
  WorkPtr work = native_recv_async(tensor, src, tag);
  if (ring_depth == 0) count(&CommStats::recv, bytes_of(tensor), 0);
  return ring_depth == 0 ? traced(std::move(work), "recv", posted, bytes_of(tensor), src) : work;
}

}  // namespace loom::distributed
