/*
 * Adam's and AdamW's step (see adam.h). The update itself is the fused_adam_ op
 * (ops/optim_ops.h): one fused loop over all parameters on the CPU, one launch per 32
 * parameters on CUDA. This file keeps the state (step counts, moments) and calls it once per
 * group and device. The bias corrections depend on each parameter's own step count (a
 * parameter that had no gradient on some step lags behind, as in torch), so the op takes one
 * step count per parameter.
 */
#include "nn/optim/adam.h"

#include <utility>
#include <vector>

#include "core/cuda_graph.h"
#include "core/grad_mode.h"
#include "nn/optim/step_common.h"
#include "ops/ops.h"

namespace loom::nn {

namespace {

using optim_detail::batch_for;
using optim_detail::check_all_grads;
using optim_detail::check_capturable_layout;
using optim_detail::fusable;
using optim_detail::group_flag;
using optim_detail::state_tensor;

constexpr const char* kStep = "step";
constexpr const char* kExpAvg = "exp_avg";
constexpr const char* kExpAvgSq = "exp_avg_sq";
constexpr const char* kMaxExpAvgSq = "max_exp_avg_sq";

using AdamHyper = AdamStepOptions;

// The tensors of one fused_adam_ call: a group's parameters on one device, with their step counts
// after this step (on the host) or the counts to increment (capturable, on the device).
struct AdamBatch {
  std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, step_counts;
  std::vector<int64_t> steps;
};

// Parameter i's step count, made (0) on its first step and kept on `device`: the CPU, or with
// capturable the parameter's device. A count restored from a checkpoint (always on the CPU) or
// left by the other mode is moved once, eagerly; under a capture the count must already be in
// place, as the graph would make or move it again at every replay.
Tensor& step_count(std::map<std::string, Tensor>& state, Device device, const char* name, size_t g,
                   size_t i) {
  auto it = state.find(kStep);
  const bool in_place = it != state.end() && it->second.device() == device;
  LOOM_CHECK(in_place || !cuda::current_stream_capturing(), name, ": parameter ", i, " of group ", g,
             " has no step count on ", device,
             " yet; run a step before capturing the optimizer into a CUDA graph "
             "(warm-up)");
  if (it == state.end()) it = state.emplace(kStep, zeros({}, TensorOptions(kInt64).device(device))).first;
  Tensor& step = it->second;
  LOOM_CHECK(step.dtype() == kInt64 && step.numel() == 1, name, ": state 'step' of parameter ", i,
             " of group ", g, " should be one int64, got ", step.dtype(), " ", step.sizes(), " on ",
             step.device());
  if (!in_place) step = step.to(device).reshape({});
  return step;
}

// A count on the CPU advanced by one, written through its pointer, so its version is bumped here.
int64_t advance_host_count(Tensor& step) {
  const int64_t t = ++step.data_ptr<int64_t>()[0];
  step.storage()->bump_version();
  return t;
}

AdamHyper read_hyper(const ParamGroup& group, size_t g, const char* name, bool decoupled) {
  AdamHyper h;
  h.lr = group.option("lr");
  h.beta1 = group.option("beta1");
  h.beta2 = group.option("beta2");
  h.eps = group.option("eps");
  h.weight_decay = group.option("weight_decay");
  h.decoupled = decoupled;
  h.amsgrad = group_flag(group, "amsgrad", name, g);
  h.maximize = group_flag(group, "maximize", name, g);
  LOOM_CHECK(h.lr >= 0, name, ": group ", g, " has an invalid learning rate lr=", h.lr, " (expected >= 0)");
  LOOM_CHECK(h.eps >= 0, name, ": group ", g, " has an invalid eps=", h.eps, " (expected >= 0)");
  LOOM_CHECK(h.beta1 >= 0 && h.beta1 < 1, name, ": group ", g, " has an invalid beta1=", h.beta1,
             " (expected in [0, 1))");
  LOOM_CHECK(h.beta2 >= 0 && h.beta2 < 1, name, ": group ", g, " has an invalid beta2=", h.beta2,
             " (expected in [0, 1))");
  LOOM_CHECK(h.weight_decay >= 0, name, ": group ", g, " has an invalid weight_decay=", h.weight_decay,
             " (expected >= 0)");
  return h;
}

template <class Options>
std::map<std::string, double> defaults_of(const Options& o) {
  return {{"lr", o.lr},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

// The same update with tensor ops, for parameters the fused op cannot take (non-contiguous
// views). Slower: one pass and one temporary per term.
void adam_by_ops(Tensor& p, const Tensor& grad, std::map<std::string, Tensor>& state, const AdamHyper& h,
                 const AdamStepFactors& factors, const char* name) {
  auto zeros_like_p = [&] { return zeros(p.sizes(), p.options()); };
  Tensor& m = state_tensor(state, kExpAvg, p, name, zeros_like_p);
  Tensor& v = state_tensor(state, kExpAvgSq, p, name, zeros_like_p);
  Tensor g = h.maximize ? grad.neg() : grad;
  if (h.decoupled)
    p.mul_(1.0 - h.lr * h.weight_decay);
  else if (h.weight_decay != 0)
    g = g.add(p, h.weight_decay);
  m.mul_(h.beta1).add_(g, 1.0 - h.beta1);
  v.mul_(h.beta2).add_(g.mul(g), 1.0 - h.beta2);
  Tensor second = v;
  if (h.amsgrad) {
    Tensor& v_max = state_tensor(state, kMaxExpAvgSq, p, name, zeros_like_p);
    v_max.copy_(v_max.maximum(v));
    second = v_max;
  }
  Tensor denom = second.sqrt().mul_(factors.inv_bias_corr2_sqrt).add_(h.eps);
  p.add_(m.div(denom), -factors.step_size);
}

}  // namespace

Adam::Adam(std::vector<ParamGroup> param_groups, std::map<std::string, double> defaults, bool decoupled,
           bool capturable)
    : Optimizer(std::move(param_groups), std::move(defaults)),
      decoupled_(decoupled),
      capturable_(capturable) {
  for (size_t g = 0; g < this->param_groups().size(); ++g)
    read_hyper(this->param_groups()[g], g, name(), decoupled_);
}

Adam::Adam(std::vector<ParamGroup> param_groups, AdamOptions options)
    : Adam(std::move(param_groups), defaults_of(options), false, options.capturable) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults_of(options), false,
           options.capturable) {}

AdamW::AdamW(std::vector<ParamGroup> param_groups, AdamWOptions options)
    : Adam(std::move(param_groups), defaults_of(options), true, options.capturable) {}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults_of(options), true,
           options.capturable) {}

void Adam::step() {
  run_step(Tensor());
}

void Adam::step_unless_found_inf(const Tensor& found_inf) {
  LOOM_CHECK(capturable_, name(),
             ": step_unless_found_inf needs capturable = true (the step counts must live on the device to "
             "be skipped there)");
  LOOM_CHECK(found_inf.defined(), name(), ": step_unless_found_inf was given an undefined found_inf");
  run_step(found_inf);
}

void Adam::run_step(const Tensor& found_inf) {
  const char* name = this->name();
  const bool capturing = cuda::current_stream_capturing();
  // A step the device may skip must be one fused op per device: the per-op path would not skip.
  const bool device_decides = capturing || found_inf.defined();
  // Each replay of a graph would reuse the captured step's bias corrections, which the step count
  // kept on the host decides (torch's Adam without capturable=True refuses the same way).
  LOOM_CHECK(
      capturable_ || !capturing, name,
      ": cannot be captured into a CUDA graph: its step count lives on the host, so every replay would "
      "repeat the captured step's bias correction. Construct it with capturable = true, or run "
      "optimizer.step() outside the graph");
  NoGradGuard no_grad;
  std::vector<ParamGroup>& groups = param_groups();
  std::vector<AdamHyper> hypers;
  hypers.reserve(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) hypers.push_back(read_hyper(groups[g], g, name, decoupled_));

  check_all_grads(groups, name);

  for (size_t g = 0; g < groups.size(); ++g) {
    const AdamHyper& h = hypers[g];
    std::vector<std::pair<Device, AdamBatch>> batches;
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      Tensor& p = groups[g].params[i];
      if (!p.grad().defined()) continue;
      const Tensor& grad = p.grad();
      if (capturable_) check_capturable_layout(p, device_decides, name, g, i);
      ParamState& state = state_of(p);
      Tensor& step = step_count(state, capturable_ ? p.device() : Device(kCPU), name, g, i);

      if (!fusable(p)) {
        // Eager only (checked above): the count is read back to the host when it lives on a device.
        const int64_t t = capturable_ ? step.add_(1).item<int64_t>() : advance_host_count(step);
        adam_by_ops(p, grad, state, h, adam_step_factors(h, t), name);
        continue;
      }
      auto zeros_like_p = [&] { return zeros(p.sizes(), p.options()); };
      AdamBatch& batch = batch_for(batches, p.device());
      batch.params.push_back(p);
      batch.grads.push_back(grad.contiguous());
      batch.exp_avgs.push_back(state_tensor(state, kExpAvg, p, name, zeros_like_p));
      batch.exp_avg_sqs.push_back(state_tensor(state, kExpAvgSq, p, name, zeros_like_p));
      if (h.amsgrad) batch.max_exp_avg_sqs.push_back(state_tensor(state, kMaxExpAvgSq, p, name, zeros_like_p));
      if (capturable_)
        batch.step_counts.push_back(step);  // incremented by the op, on the device
      else
        batch.steps.push_back(advance_host_count(step));
    }
    for (const auto& [device, b] : batches) {
      if (capturable_)
        fused_adam_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, b.max_exp_avg_sqs, b.step_counts,
                    device_lrs_.for_step(g, device, h.lr, name), h, optim_detail::flag_on(found_inf, device));
      else
        fused_adam_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, b.max_exp_avg_sqs, b.steps, h);
    }
  }
}

void Adam::hyperparameters_changed() {
  if (capturable_) device_lrs_.write(param_groups(), name());
}

}  // namespace loom::nn
