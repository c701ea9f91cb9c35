/* The gradient steps of a split model (see gradient_sync.h). */
#include "distributed/gradient_sync.h"

#include <cmath>

#include "core/grad_mode.h"
#include "ops/ops.h"

namespace loom::distributed {

void average_gradients(const std::vector<Tensor>& params, ProcessGroup& group) {
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    grads.push_back(p.grad().defined() ? p.grad().reshape({-1}) : zeros({p.numel()}, p.options()));
  // One all-reduce for the whole piece: waits for the replicas' gradients of the same step.
  Tensor flat = cat(grads, 0);
  group.all_reduce(flat);
  flat.div_(static_cast<double>(group.size()));
  int64_t offset = 0;
  for (Tensor p : params) {
    if (p.grad().defined()) p.mutable_grad().copy_(flat.slice(0, offset, offset + p.numel()).reshape(p.sizes()));
    offset += p.numel();
  }
}

double clip_grad_norm_across(const std::vector<Tensor>& params, const std::vector<Tensor>& counted,
                             double max_norm, const std::vector<ProcessGroup*>& groups) {
  NoGradGuard no_grad;
  double squares = 0;
  for (const Tensor& p : counted) {
    if (!p.grad().defined()) continue;
    Tensor g = p.grad().to(kFloat64);
    squares += g.mul(g).sum().item<double>();
  }
  double total = squares;
  for (ProcessGroup* group : groups) {
    // On the group's device: the NCCL backend reduces CUDA tensors only.
    Tensor sum = loom::full({1}, total, TensorOptions(kFloat64).device(group->device()));
    group->all_reduce(sum);  // waits for the group's other pieces
    total = sum.item<double>();
  }
  const double norm = std::sqrt(total);
  const double coef = max_norm / (norm + 1e-6);  // as nn::clip_grad_norm_
  if (coef < 1.0)
    for (Tensor p : params)
      if (p.grad().defined()) p.mutable_grad().mul_(coef);
  return norm;
}

void sum_tied_gradient(const Tensor& weight, bool holds_copy, ProcessGroup& pipeline_group) {
  NoGradGuard no_grad;
  Tensor tied = weight;
  Tensor sum = holds_copy && tied.grad().defined() ? tied.grad().contiguous().clone()
                                                   : zeros(tied.sizes(), tied.options());
  // Waits for the other copy's gradient (the stages that hold none add zeros).
  pipeline_group.all_reduce(sum);
  if (!holds_copy) return;
  if (tied.grad().defined())
    tied.mutable_grad().copy_(sum);
  else
    tied.mutable_grad() = sum;
}

}  // namespace loom::distributed
