/*
 * SGD's step (see sgd.h). The update itself is the fused_sgd_ op (ops/optim_ops.h): one fused
 * loop over all parameters on the CPU, one launch per 64 parameters on CUDA. This file keeps
 * the momentum buffers and calls it per group and device, separately for the parameters whose
 * buffer starts on this step (it is set to the first direction rather than updated).
 */
#include "nn/optim/sgd.h"

#include <array>
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

constexpr const char* kName = "SGD";
constexpr const char* kBuffer = "momentum_buffer";

using SgdHyper = SgdStepOptions;

// The tensors of one fused_sgd_ call.
struct SgdBatch {
  std::vector<Tensor> params, grads, buffers;
};

SgdHyper read_hyper(const ParamGroup& group, size_t g) {
  SgdHyper h;
  h.lr = group.option("lr");
  h.momentum = group.option("momentum");
  h.dampening = group.option("dampening");
  h.weight_decay = group.option("weight_decay");
  h.nesterov = group_flag(group, "nesterov", kName, g);
  h.maximize = group_flag(group, "maximize", kName, g);
  LOOM_CHECK(h.lr >= 0, kName, ": group ", g, " has an invalid learning rate lr=", h.lr,
             " (expected >= 0; SGDOptions.lr has no default and must be given)");
  LOOM_CHECK(h.momentum >= 0, kName, ": group ", g, " has an invalid momentum ", h.momentum,
             " (expected >= 0)");
  LOOM_CHECK(h.dampening >= 0, kName, ": group ", g, " has an invalid dampening ", h.dampening,
             " (expected >= 0)");
  LOOM_CHECK(h.weight_decay >= 0, kName, ": group ", g, " has an invalid weight_decay ", h.weight_decay,
             " (expected >= 0)");
  LOOM_CHECK(!h.nesterov || (h.momentum > 0 && h.dampening == 0), kName, ": group ", g,
             ": Nesterov momentum requires momentum > 0 and dampening = 0, got momentum=", h.momentum,
             ", dampening=", h.dampening);
  return h;
}

std::map<std::string, double> defaults_of(const SGDOptions& o) {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

// The same update with tensor ops, for parameters the fused op cannot take (non-contiguous
// views). Slower: one pass and one temporary per term.
void sgd_by_ops(Tensor& p, const Tensor& grad, std::map<std::string, Tensor>& state, const SgdHyper& h) {
  Tensor d = h.maximize ? grad.neg() : grad;
  if (h.weight_decay != 0) d = d.add(p, h.weight_decay);
  if (h.momentum != 0) {
    if (!state.contains(kBuffer)) {
      state[kBuffer] = d.clone();
    } else {
      Tensor& buf = state_tensor(state, kBuffer, p, kName, [] { return Tensor(); });
      buf.mul_(h.momentum).add_(d, 1.0 - h.dampening);
    }
    const Tensor& buf = state[kBuffer];
    d = h.nesterov ? d.add(buf, h.momentum) : buf;
  }
  p.add_(d, -h.lr);
}

}  // namespace

SGD::SGD(std::vector<ParamGroup> param_groups, SGDOptions options)
    : Optimizer(std::move(param_groups), defaults_of(options)), options_(options) {
  for (size_t g = 0; g < this->param_groups().size(); ++g) read_hyper(this->param_groups()[g], g);
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

void SGD::step() {
  run_step(Tensor());
}

void SGD::step_unless_found_inf(const Tensor& found_inf) {
  LOOM_CHECK(options_.capturable, kName,
             ": step_unless_found_inf needs capturable = true (the lr it reads on the device comes with it)");
  LOOM_CHECK(found_inf.defined(), kName, ": step_unless_found_inf was given an undefined found_inf");
  run_step(found_inf);
}

bool SGD::can_skip_this_step_on_device() const {
  if (!Optimizer::can_skip_this_step_on_device()) return false;
  for (const ParamGroup& group : param_groups()) {
    if (group.option("momentum") == 0) continue;
    for (const Tensor& p : group.params) {
      const ParamState* state = find_state(p);
      if (p.grad().defined() && (state == nullptr || !state->contains(kBuffer))) return false;
    }
  }
  return true;
}

void SGD::run_step(const Tensor& found_inf) {
  NoGradGuard no_grad;
  const bool capturing = cuda::current_stream_capturing();
  // A step the device may skip must be one fused op per device: the per-op path would not skip.
  const bool device_decides = capturing || found_inf.defined();
  std::vector<ParamGroup>& groups = param_groups();
  std::vector<SgdHyper> hypers;
  hypers.reserve(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) hypers.push_back(read_hyper(groups[g], g));

  check_all_grads(groups, kName);

  for (size_t g = 0; g < groups.size(); ++g) {
    const SgdHyper& h = hypers[g];
    // Per device: [0] the parameters whose momentum buffer exists, [1] those whose starts now.
    std::vector<std::pair<Device, std::array<SgdBatch, 2>>> batches;
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      Tensor& p = groups[g].params[i];
      if (!p.grad().defined()) continue;
      const Tensor& grad = p.grad();
      if (options_.capturable) check_capturable_layout(p, device_decides, kName, g, i);
      if (!fusable(p)) {
        ParamState scratch;
        sgd_by_ops(p, grad, h.momentum != 0 ? state_of(p) : scratch, h);
        continue;
      }
      std::array<SgdBatch, 2>& pair = batch_for(batches, p.device());
      if (h.momentum == 0) {
        pair[0].params.push_back(p);
        pair[0].grads.push_back(grad.contiguous());
        continue;
      }
      ParamState& state = state_of(p);
      // A captured first step would start the momentum buffer again at every replay; a skipped
      // one would leave it unwritten while the host took it as started.
      LOOM_CHECK(state.contains(kBuffer) || !device_decides, kName, ": the momentum buffer of parameter ", i,
                 " of group ", g, " does not exist yet; run a plain step() first",
                 capturing ? " (warm-up, before capturing the optimizer into a CUDA graph)" : "");
      SgdBatch& batch = pair[state.contains(kBuffer) ? 0 : 1];
      batch.params.push_back(p);
      batch.grads.push_back(grad.contiguous());
      // On the first step the op writes every element, so the buffer needs no zeroing.
      batch.buffers.push_back(state_tensor(state, kBuffer, p, kName, [&] { return empty(p.sizes(), p.options()); }));
    }
    for (const auto& [device, pair] : batches) {
      const Tensor* lr = options_.capturable ? &device_lrs_.for_step(g, device, h.lr, kName) : nullptr;
      for (int first = 0; first < 2; ++first) {
        SgdHyper call = h;
        call.first_step = first == 1;
        const SgdBatch& b = pair[first];
        if (lr != nullptr)
          fused_sgd_(b.params, b.grads, b.buffers, *lr, call, optim_detail::flag_on(found_inf, device));
        else
          fused_sgd_(b.params, b.grads, b.buffers, call);
      }
    }
  }
}

void SGD::hyperparameters_changed() {
  if (options_.capturable) device_lrs_.write(param_groups(), kName);
}

}  // namespace loom::nn
