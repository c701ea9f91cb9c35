/* ProcessGroup's shared parts: algorithm dispatch and descriptions (see process_group.h). */
#include "distributed/process_group.h"

#include <sstream>

#include "distributed/ring.h"

namespace loom::distributed {
namespace {

// The Work of an operation that already finished (the ring runs synchronously).
class CompletedWork final : public Work {
 public:
  void wait() override {}
  bool is_completed() override { return true; }
};

}  // namespace

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

WorkPtr ProcessGroup::all_reduce_async(const Tensor& tensor, ReduceOp op) {
  if (algorithm_ == Algorithm::Native) return native_all_reduce_async(tensor, op);
  ring_all_reduce(*this, tensor, op);
  return std::make_shared<CompletedWork>();
}

WorkPtr ProcessGroup::all_gather_async(const Tensor& input, const Tensor& output) {
  if (algorithm_ == Algorithm::Native) return native_all_gather_async(input, output);
  ring_all_gather(*this, input, output);
  return std::make_shared<CompletedWork>();
}

WorkPtr ProcessGroup::reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceOp op) {
  if (algorithm_ == Algorithm::Native) return native_reduce_scatter_async(input, output, op);
  ring_reduce_scatter(*this, input, output, op);
  return std::make_shared<CompletedWork>();
}

}  // namespace loom::distributed
