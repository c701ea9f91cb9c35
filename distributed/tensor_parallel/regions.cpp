/* The tensor-parallel communication operators (see regions.h). */
#include "distributed/tensor_parallel/regions.h"

#include <functional>
#include <string>

#include "autograd/autograd_meta.h"
#include "autograd/recorder.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "ops/ops.h"

namespace loom::distributed {
namespace {

using Fn = std::function<Tensor(const Tensor&)>;

// A one-input, one-output backward step given as a function of the output's gradient.
class RegionBackward final : public autograd::Node {
 public:
  RegionBackward(std::string name, Fn backward) : name_(std::move(name)), backward_(std::move(backward)) {}
  std::string name() const override { return name_; }
  autograd::Grads apply(autograd::Grads&& grads) override {
    autograd::Grads out;
    out.push_back(backward_(grads[0]));
    return out;
  }

 private:
  std::string name_;
  Fn backward_;
};

// forward(x) with `backward` recorded as its gradient function when x needs a gradient.
Tensor record(const char* name, const Tensor& x, const Fn& forward, Fn backward) {
  Tensor y;
  {
    NoGradGuard no_grad;  // the collectives themselves are not differentiated through
    y = forward(x);
  }
  if (GradMode::is_enabled() && x.requires_grad()) {
    autograd::install_autograd();
    auto node = std::make_shared<RegionBackward>(name, std::move(backward));
    node->add_input(autograd::gradient_edge(x), x);
    node->add_output_meta(y);
    autograd::set_history(y, node, 0);
  }
  return y;
}

ProcessGroup& checked(const std::shared_ptr<ProcessGroup>& group, const char* op) {
  LOOM_CHECK(group != nullptr, op, ": null tensor-parallel group");
  return *group;
}

// The sum over the group, in a fresh tensor (the input is left alone). Waits for the all-reduce.
Tensor all_reduced(const Tensor& x, ProcessGroup& group) {
  Tensor sum = x.contiguous().clone();
  group.all_reduce(sum);
  return sum;
}

// [..., n] from every rank -> [..., n * size], rank r's block at columns [r n, (r + 1) n).
Tensor all_gathered_last_dim(const Tensor& x, ProcessGroup& group) {
  const int size = group.size();
  // all_gather concatenates along dim 0: swap the last dimension to the front, gather, swap back.
  Tensor moved = x.dim() > 1 ? x.transpose(0, -1).contiguous() : x.contiguous();
  DimVector gathered_sizes(moved.sizes());
  gathered_sizes[0] *= size;
  Tensor gathered = empty(gathered_sizes, x.options());  // on x's device: NCCL gathers CUDA tensors
  group.all_gather(moved, gathered);  // waits for every rank's block
  return x.dim() > 1 ? gathered.transpose(0, -1).contiguous() : gathered;
}

Tensor my_columns(const Tensor& x, ProcessGroup& group, const char* op) {
  const int64_t total = x.size(-1);
  LOOM_CHECK(total % group.size() == 0, op, ": the last dimension (", total, ") is not divisible by the ",
             group.size(), " ranks of the tensor-parallel group");
  const int64_t n = total / group.size();
  return x.slice(-1, group.rank() * n, (group.rank() + 1) * n).contiguous();
}

}  // namespace

Tensor copy_to_tensor_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group) {
  checked(group, "copy_to_tensor_parallel_region");
  return record(
      "CopyToTensorParallelRegionBackward", x, [](const Tensor& t) { return t.clone(); },  // a new tensor: x keeps its own history
      [group](const Tensor& grad) { return all_reduced(grad, *group); });
}

Tensor reduce_from_tensor_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group) {
  ProcessGroup& g = checked(group, "reduce_from_tensor_parallel_region");
  return record(
      "ReduceFromTensorParallelRegionBackward", x, [&g](const Tensor& t) { return all_reduced(t, g); },
      [](const Tensor& grad) { return grad; });
}

Tensor gather_from_tensor_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group) {
  ProcessGroup& g = checked(group, "gather_from_tensor_parallel_region");
  return record(
      "GatherFromTensorParallelRegionBackward", x, [&g](const Tensor& t) { return all_gathered_last_dim(t, g); },
      [group](const Tensor& grad) { return my_columns(grad, *group, "gather_from_tensor_parallel_region"); });
}

Tensor scatter_to_tensor_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group) {
  ProcessGroup& g = checked(group, "scatter_to_tensor_parallel_region");
  return record(
      "ScatterToTensorParallelRegionBackward", x,
      [&g](const Tensor& t) { return my_columns(t, g, "scatter_to_tensor_parallel_region"); },
      [group](const Tensor& grad) { return all_gathered_last_dim(grad, *group); });
}

}  // namespace loom::distributed
