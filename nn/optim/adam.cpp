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
using optim_detail::fusable;
using optim_detail::group_flag;
using optim_detail::state_tensor;

constexpr const char* kStep = "step";
constexpr const char* kExpAvg = "exp_avg";
constexpr const char* kExpAvgSq = "exp_avg_sq";
constexpr const char* kMaxExpAvgSq = "max_exp_avg_sq";

using AdamHyper = AdamStepOptions;

// The tensors of one fused_adam_ call: a group's parameters on one device.
struct AdamBatch {
  std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
  std::vector<int64_t> steps;
};

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

Adam::Adam(std::vector<ParamGroup> param_groups, std::map<std::string, double> defaults, bool decoupled)
    : Optimizer(std::move(param_groups), std::move(defaults)), decoupled_(decoupled) {
  for (size_t g = 0; g < this->param_groups().size(); ++g)
    read_hyper(this->param_groups()[g], g, decoupled_ ? "AdamW" : "Adam", decoupled_);
}

Adam::Adam(std::vector<ParamGroup> param_groups, AdamOptions options)
    : Adam(std::move(param_groups), defaults_of(options), false) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults_of(options), false) {}

AdamW::AdamW(std::vector<ParamGroup> param_groups, AdamWOptions options)
    : Adam(std::move(param_groups), defaults_of(options), true) {}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults_of(options), true) {}

void Adam::step() {
  const char* name = decoupled_ ? "AdamW" : "Adam";
  // Each replay of a graph would reuse the captured step's bias corrections, which the step count
  // kept on the host decides (torch's Adam without capturable=True refuses the same way).
  LOOM_CHECK(
      !cuda::current_stream_capturing(), name,
      ": cannot be captured into a CUDA graph: its step count lives on the host, so every replay would "
      "repeat the captured step's bias correction. Run optimizer.step() outside the graph, or use SGD");
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
      ParamState& state = state_of(p);

      // The step count stays on the CPU (as torch's non-capturable Adam keeps it), so the
      // bias corrections are plain doubles whatever the parameter's device.
      auto step_it = state.find(kStep);
      if (step_it == state.end()) step_it = state.emplace(kStep, scalar_tensor(0, kInt64)).first;
      Tensor& step = step_it->second;
      LOOM_CHECK(step.is_cpu() && step.dtype() == kInt64 && step.numel() == 1, name,
                 ": state 'step' of parameter ", i, " of group ", g, " should be one int64 on the CPU, got ",
                 step.dtype(), " ", step.sizes(), " on ", step.device());
      const int64_t t = ++step.data_ptr<int64_t>()[0];
      step.storage()->bump_version();

      if (!fusable(p)) {
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
      batch.steps.push_back(t);
    }
    for (const auto& [device, b] : batches)
      fused_adam_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, b.max_exp_avg_sqs, b.steps, h);
  }
}

}  // namespace loom::nn
