/* Tensor-parallel linear layers (see layers.h). */
#include "distributed/tensor_parallel/layers.h"

#include <sstream>

#include "core/error.h"
#include "core/grad_mode.h"
#include "distributed/tensor_parallel/regions.h"
#include "nn/layers/linear.h"
#include "ops/ops.h"

namespace loom::distributed {
namespace {

int checked_size(const std::shared_ptr<ProcessGroup>& group, int64_t features, const char* layer, const char* what) {
  LOOM_CHECK(group != nullptr, layer, ": null tensor-parallel group");
  LOOM_CHECK(features % group->size() == 0, layer, ": ", what, " (", features, ") is not divisible by the ",
             group->size(), " ranks of the tensor-parallel group");
  return group->size();
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(int64_t in_features, int64_t out_features,
                                           std::shared_ptr<ProcessGroup> group, bool bias, bool gather_output)
    : ColumnParallelLinear(nn::Linear(in_features, out_features, bias), std::move(group), gather_output) {}

ColumnParallelLinear::ColumnParallelLinear(const nn::Linear& full, std::shared_ptr<ProcessGroup> group,
                                           bool gather_output)
    : ColumnParallelLinear(full.weight, full.bias, std::move(group), gather_output) {}

ColumnParallelLinear::ColumnParallelLinear(const Tensor& full_weight, const Tensor& full_bias,
                                           std::shared_ptr<ProcessGroup> group, bool gather_output)
    : group_(std::move(group)), gather_output_(gather_output) {
  LOOM_CHECK(full_weight.defined() && full_weight.dim() == 2, "ColumnParallelLinear: expected a full weight [out, in]");
  in_ = full_weight.size(1);
  out_ = full_weight.size(0);
  const int t = checked_size(group_, out_, "ColumnParallelLinear", "out_features");
  const int64_t n = out_ / t, r = group_->rank();
  NoGradGuard no_grad;
  weight = register_parameter("weight", full_weight.slice(0, r * n, (r + 1) * n).contiguous().clone());
  if (full_bias.defined())
    bias = register_parameter("bias", full_bias.slice(0, r * n, (r + 1) * n).contiguous().clone());
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  Tensor y = linear(copy_to_tensor_parallel_region(x, group_), weight, bias);
  return gather_output_ ? gather_from_tensor_parallel_region(y, group_) : y;
}

std::string ColumnParallelLinear::extra_repr() const {
  std::ostringstream os;
  os << "in_features=" << in_ << ", out_features=" << out_ << " (" << weight.size(0) << " on this rank of "
     << group_->size() << "), bias=" << (bias.defined() ? "True" : "False")
     << ", gather_output=" << (gather_output_ ? "True" : "False");
  return os.str();
}

RowParallelLinear::RowParallelLinear(int64_t in_features, int64_t out_features, std::shared_ptr<ProcessGroup> group,
                                     bool bias, bool input_is_parallel)
    : RowParallelLinear(nn::Linear(in_features, out_features, bias), std::move(group), input_is_parallel) {}

RowParallelLinear::RowParallelLinear(const nn::Linear& full, std::shared_ptr<ProcessGroup> group,
                                     bool input_is_parallel)
    : RowParallelLinear(full.weight, full.bias, std::move(group), input_is_parallel) {}

RowParallelLinear::RowParallelLinear(const Tensor& full_weight, const Tensor& full_bias,
                                     std::shared_ptr<ProcessGroup> group, bool input_is_parallel)
    : group_(std::move(group)), input_is_parallel_(input_is_parallel) {
  LOOM_CHECK(full_weight.defined() && full_weight.dim() == 2, "RowParallelLinear: expected a full weight [out, in]");
  in_ = full_weight.size(1);
  out_ = full_weight.size(0);
  const int t = checked_size(group_, in_, "RowParallelLinear", "in_features");
  const int64_t n = in_ / t, r = group_->rank();
  NoGradGuard no_grad;
  weight = register_parameter("weight", full_weight.slice(1, r * n, (r + 1) * n).contiguous().clone());
  if (full_bias.defined()) bias = register_parameter("bias", full_bias.contiguous().clone());
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  const Tensor mine = input_is_parallel_ ? x : scatter_to_tensor_parallel_region(x, group_);
  LOOM_CHECK(mine.size(-1) == weight.size(1), "RowParallelLinear: expected this rank's input [*, ", weight.size(1),
             "], got ", mine.sizes());
  // The bias is added after the sum, so that it is counted once and not t times.
  Tensor y = reduce_from_tensor_parallel_region(linear(mine, weight), group_);
  return bias.defined() ? y + bias : y;
}

std::string RowParallelLinear::extra_repr() const {
  std::ostringstream os;
  os << "in_features=" << in_ << " (" << weight.size(1) << " on this rank of " << group_->size()
     << "), out_features=" << out_ << ", bias=" << (bias.defined() ? "True" : "False")
     << ", input_is_parallel=" << (input_is_parallel_ ? "True" : "False");
  return os.str();
}

}  // namespace loom::distributed
