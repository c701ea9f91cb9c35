/*
 * Adam and AdamW: torch.optim.Adam / torch.optim.AdamW's updates (bias-corrected first and
 * second moments, optional AMSGrad), computed by one fused loop per step.
 *
 *   nn::AdamW opt(model.parameters(), {.lr = 3e-4, .weight_decay = 0.1});
 */
#pragma once

#include "nn/optim/device_lr.h"
#include "nn/optim/optimizer.h"

namespace loom::nn {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // Adam: L2 penalty added to the gradient
  bool amsgrad = false;
  bool maximize = false;
  // Keep each step count on its parameter's device and read the counts and the lr there when
  // the step runs, so that the step can be captured into a CUDA graph (torch's capturable=True).
  bool capturable = false;
};

// AdamOptions with AdamW's default decoupled weight decay (torch: 1e-2).
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;  // AdamW: p *= 1 - lr * weight_decay before the Adam update
  bool amsgrad = false;
  bool maximize = false;
  // Keep each step count on its parameter's device and read the counts and the lr there when
  // the step runs, so that the step can be captured into a CUDA graph (torch's capturable=True).
  bool capturable = false;
};

// For every parameter p with a gradient g, with t the parameter's own step count after
// incrementing it (torch.optim.Adam / AdamW, PyTorch 1.13):
//   g = maximize ? -g : g
//   Adam:  g = g + weight_decay * p                 (when weight_decay != 0)
//   AdamW: p = p * (1 - lr * weight_decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   v_max = max(v_max, v)                           (amsgrad; v_max replaces v below)
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Group options: "lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad", "maximize" (flags
// are 0/1). State per parameter: "step" (0-dim int64, on the CPU; with capturable, on the
// parameter's device), "exp_avg", "exp_avg_sq" and, with amsgrad, "max_exp_avg_sq" (the shape
// of p). A checkpoint's step counts load into either kind; the first step moves them.
//
// CUDA graphs: without capturable, step() throws during a capture, since every replay would
// repeat the captured step's bias corrections. With capturable, the fused op increments the
// counts and computes the bias corrections on the device, and reads each group's lr from a device
// tensor that every eager step and hyperparameters_changed() (called by the LR schedules) keep
// up to date; betas, eps and weight decay stay as the capture saw them. Capture after one eager
// step (which makes the state); a captured step throws for missing state or a non-contiguous
// parameter. With capturable, step_unless_found_inf lets a GradScaler inside the capture skip
// an inf/NaN step on the device.
//
// Contiguous parameters are updated by the fused_adam_ op (ops/optim_ops.h), once per group and
// device: on the CPU one fused loop over all of them in one parallel range, on CUDA one launch
// per 32 parameters; non-contiguous ones by tensor ops. Throws loom::Error
// on construction (and in step(), for a group edited since) for lr < 0, eps < 0, a beta
// outside [0, 1) or weight_decay < 0, and in step() for a parameter whose dtype is not
// float32/float64 or whose gradient's shape, dtype or device differs from it.
class Adam : public Optimizer {
 public:
  Adam(std::vector<ParamGroup> param_groups, AdamOptions options = {});
  Adam(std::vector<Tensor> params, AdamOptions options = {});

  void step() override;
  bool can_skip_on_device() const override { return capturable_; }
  void step_unless_found_inf(const Tensor& found_inf) override;
  void hyperparameters_changed() override;

 protected:
  Adam(std::vector<ParamGroup> param_groups, std::map<std::string, double> defaults, bool decoupled,
       bool capturable);

 private:
  const char* name() const { return decoupled_ ? "AdamW" : "Adam"; }
  // step(), or with found_inf defined step_unless_found_inf().
  void run_step(const Tensor& found_inf);

  bool decoupled_;  // AdamW's weight decay
  bool capturable_;
  optim_detail::DeviceLrs device_lrs_;  // with capturable_
};

// Adam with decoupled weight decay (Loshchilov & Hutter): the decay shrinks the parameter
// directly instead of entering the moments as an L2 gradient.
class AdamW : public Adam {
 public:
  AdamW(std::vector<ParamGroup> param_groups, AdamWOptions options = {});
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
};

}  // namespace loom::nn
