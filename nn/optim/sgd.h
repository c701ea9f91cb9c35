/*
 * Stochastic gradient descent with momentum, dampening, Nesterov momentum, L2 weight decay
 * and maximize: torch.optim.SGD's update, computed by one fused loop per step.
 *
 *   nn::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4});
 *   loss.backward();
 *   opt.step();
 *   opt.zero_grad();
 */
#pragma once

#include <limits>

#include "nn/optim/device_lr.h"
#include "nn/optim/optimizer.h"

namespace loom::nn {

struct SGDOptions {
  double lr = std::numeric_limits<double>::quiet_NaN();  // required, as in torch.optim.SGD
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;  // L2 penalty: added to the gradient as weight_decay * param
  bool nesterov = false;
  bool maximize = false;  // ascend the objective instead of descending it
  // Read the lr on the parameters' device when the step runs (nn/optim/device_lr.h), so that a
  // step captured into a CUDA graph follows an LR schedule at every replay. Without it a captured
  // step keeps the lr of the capture.
  bool capturable = false;
};

// For every parameter p with a gradient g (torch.optim.SGD, PyTorch 1.13):
//   d = maximize ? -g : g
//   d = d + weight_decay * p                        (when weight_decay != 0)
//   b = (first step) ? d : momentum * b + (1 - dampening) * d   (when momentum != 0)
//   d = nesterov ? d + momentum * b : b             (when momentum != 0)
//   p = p - lr * d
// Group options: "lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize" (flags
// are 0/1). State per parameter: "momentum_buffer" (the shape of p), only with momentum.
//
// Contiguous parameters are updated by the fused_sgd_ op (ops/optim_ops.h), per group and
// device: on the CPU one fused loop over all of them in one parallel range, on CUDA one launch
// per 64 parameters; non-contiguous ones by tensor ops. With capturable, a step captured into a
// CUDA graph (core/cuda_graph.h) reads each group's lr from a device tensor that every eager step
// and hyperparameters_changed() (called by the LR schedules) keep up to date; momentum,
// dampening and weight decay stay as the capture saw them. A captured step throws when a
// momentum buffer or the lr tensor does not exist yet (run one step first), and, capturable,
// for a non-contiguous parameter. With capturable, step_unless_found_inf lets a GradScaler
// inside the capture skip an inf/NaN step on the device. Throws
// loom::Error on construction for a missing or negative lr, negative momentum, dampening or
// weight_decay, or nesterov without momentum > 0 and dampening 0 (and in step() when a group
// has been edited into one of those), and in step() for a parameter whose dtype is not
// float32/float64 or whose gradient's shape, dtype or device differs from it.
class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> param_groups, SGDOptions options);
  SGD(std::vector<Tensor> params, SGDOptions options);

  void step() override;
  bool can_skip_on_device() const override { return options_.capturable; }
  // Also: every momentum buffer exists (a first step the device skipped would leave it unwritten).
  bool can_skip_this_step_on_device() const override;
  void step_unless_found_inf(const Tensor& found_inf) override;
  void hyperparameters_changed() override;

  const SGDOptions& options() const { return options_; }

 private:
  // step(), or with found_inf defined step_unless_found_inf().
  void run_step(const Tensor& found_inf);

  SGDOptions options_;
  optim_detail::DeviceLrs device_lrs_;  // with options_.capturable
};

}  // namespace loom::nn
