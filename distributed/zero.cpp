/* ZeRO stages 1 and 2: sharded optimizer state and gradients (see zero.h). */
#include "distributed/zero.h"

#include <algorithm>
#include <set>

#include "core/grad_mode.h"
#include "ops/ops.h"

namespace loom::distributed {

int64_t optimizer_state_bytes(const nn::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& [key, value] : optimizer.state_dict())
    if (key.rfind("state.", 0) == 0) bytes += static_cast<int64_t>(value.nbytes());
  return bytes;
}

ZeroOptimizer::ZeroOptimizer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> group, int stage,
                             ShardOptimizerFactory make_optimizer)
    : params_(std::move(params)), group_(std::move(group)), stage_(stage) {
  LOOM_CHECK(group_ != nullptr, "ZeroOptimizer: null process group");
  LOOM_CHECK(stage_ == 1 || stage_ == 2, "ZeroOptimizer: stage must be 1 or 2, got ", stage_,
             " (stage 3 is FullyShardedDataParallel, distributed/zero3.h)");
  LOOM_CHECK(!params_.empty(), "ZeroOptimizer: no parameters");
  LOOM_CHECK(make_optimizer != nullptr, "ZeroOptimizer: no optimizer factory");
  const Tensor& first = params_.front();
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    LOOM_CHECK(p.is_floating_point() && p.dtype() == first.dtype() && p.device() == first.device(),
               "ZeroOptimizer: parameter ", i, " is ", p.dtype(), " on ", p.device(), ", parameter 0 is ",
               first.dtype(), " on ", first.device(), "; all must share one floating dtype and device");
    LOOM_CHECK(p.is_contiguous(), "ZeroOptimizer: parameter ", i, " (shape ", p.sizes(),
               ") is not contiguous");
    offsets_.push_back(numel_);
    numel_ += p.numel();
  }

  // S = ceil(Ψ / N): N equal shards, the last one padded. Equal shards are what all_gather and
  // reduce_scatter require ([S] per rank <-> [N * S] in all).
  const int64_t n = group_->size();
  shard_size_ = (numel_ + n - 1) / n;
  shard_begin_ = std::min(numel_, shard_size_ * group_->rank());
  shard_end_ = std::min(numel_, shard_begin_ + shard_size_);

  // One flat buffer holds all parameters; each parameter handle is re-pointed at its part
  // (set_data keeps identity, requires_grad and grad), so the module trains the flat buffer.
  NoGradGuard no_grad;
  flat_params_ = zeros({n * shard_size_}, first.options());
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor part = flat_params_.narrow(0, offsets_[i], params_[i].numel()).view(params_[i].sizes());
    part.copy_(params_[i]);
    params_[i].set_data(part);
  }
  // Start from rank 0's values; waits for them because the first forward reads the replica.
  group_->broadcast(flat_params_, 0);

  // The shard's views: the part of every parameter that lies in [shard_begin, shard_end).
  // They are what the inner optimizer sees, so its state is shard-sized (stage 1).
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t lo = std::max(offsets_[i], shard_begin_);
    const int64_t hi = std::min(offsets_[i] + params_[i].numel(), shard_end_);
    if (lo >= hi) continue;
    shard_params_.push_back(flat_params_.narrow(0, lo, hi - lo));
    shard_param_begin_.push_back(lo);
  }
  // A rank whose shard is empty (Ψ < N, or the padding covers it) has nothing to update; it
  // still takes part in every collective of step().
  if (!shard_params_.empty()) {
    inner_ = make_optimizer(shard_params_);
    LOOM_CHECK(inner_ != nullptr, "ZeroOptimizer: the optimizer factory returned null");
  }
}

// The full gradient laid out like flat_params_ (missing gradients and the padding are zero).
Tensor ZeroOptimizer::gather_flat_gradient() const {
  Tensor flat = zeros({flat_params_.numel()}, flat_params_.options());
  bool any = false;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& g = params_[i].grad();
    if (!g.defined()) continue;
    LOOM_CHECK(g.sizes() == params_[i].sizes(), "ZeroOptimizer::step: parameter ", i, " has shape ",
               params_[i].sizes(), " but its gradient ", g.sizes());
    flat.narrow(0, offsets_[i], params_[i].numel()).copy_(g.reshape({-1}));
    any = true;
  }
  LOOM_CHECK(any, "ZeroOptimizer::step: no parameter has a gradient (", group_->describe(), ")");
  return flat;
}

void ZeroOptimizer::step() {
  NoGradGuard no_grad;
  Tensor flat = gather_flat_gradient();

  if (stage_ == 1) {
    // Every rank gets the whole averaged gradient (the same all-reduce DDP does), then uses
    // only its shard. Blocking: the inner step below reads it.
    group_->all_reduce(flat, ReduceOp::Avg);
    flat_grad_ = flat;
    // The parameters' grads become views of the averaged buffer: the gradient is stored once.
    for (size_t i = 0; i < params_.size(); ++i)
      params_[i].mutable_grad() =
          flat_grad_.narrow(0, offsets_[i], params_[i].numel()).view(params_[i].sizes());
    for (size_t k = 0; k < shard_params_.size(); ++k)
      shard_params_[k].mutable_grad() = flat_grad_.narrow(0, shard_param_begin_[k], shard_params_[k].numel());
  } else {
    // reduce_scatter: block r of the summed gradient lands on rank r only, averaged:
    //   shard_grad_r = (1/N) sum_q flat_q[r*S, (r+1)*S)
    // Half the traffic of an all-reduce, and no rank stores another's shard. Blocking: the
    // inner step below reads it.
    shard_grad_ = zeros({shard_size_}, flat.options());
    group_->reduce_scatter(flat, shard_grad_, ReduceOp::Avg);
    // Free the rest: the full gradients are not needed any more on this rank.
    flat = Tensor();
    for (Tensor& p : params_) p.mutable_grad() = Tensor();
    const int64_t base = shard_size_ * group_->rank();
    for (size_t k = 0; k < shard_params_.size(); ++k)
      shard_params_[k].mutable_grad() =
          shard_grad_.narrow(0, shard_param_begin_[k] - base, shard_params_[k].numel());
  }

  if (inner_) inner_->step();

  // all_gather: every rank contributes its updated shard and receives all of them, so every
  // replica holds the same full parameters again. The input is copied out of flat_params_
  // because the output is flat_params_ itself (MPI forbids overlapping send and receive
  // buffers). Blocking: the next forward reads the parameters.
  Tensor mine = flat_params_.narrow(0, shard_size_ * group_->rank(), shard_size_).clone();
  group_->all_gather(mine, flat_params_);
}

nn::Optimizer& ZeroOptimizer::inner() {
  LOOM_CHECK(inner_ != nullptr, "ZeroOptimizer::inner: rank ", group_->rank(), " owns an empty shard of the ",
             numel_, " parameters (", group_->size(), " ranks), so it has no optimizer");
  return *inner_;
}

void ZeroOptimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (Tensor& p : params_) {
    Tensor& g = p.mutable_grad();
    if (!g.defined()) continue;
    if (set_to_none)
      g = Tensor();
    else
      g.zero_();
  }
}

ZeroMemoryReport ZeroOptimizer::memory_report() const {
  ZeroMemoryReport report;
  report.parameter_bytes = static_cast<int64_t>(flat_params_.nbytes());
  // Gradient storage, each storage counted once (stage 1's parameter grads view flat_grad_).
  std::set<const void*> seen;
  auto count = [&](const Tensor& t) {
    if (!t.defined()) return;
    if (seen.insert(t.storage().get()).second)
      report.gradient_bytes += static_cast<int64_t>(t.storage()->nbytes());
  };
  if (stage_ == 1) count(flat_grad_);
  if (stage_ == 2) count(shard_grad_);
  for (const Tensor& p : params_) count(p.grad());
  report.optimizer_state_bytes = inner_ ? optimizer_state_bytes(*inner_) : 0;
  return report;
}

}  // namespace loom::distributed
