/*
 * The optimizer interface shared by SGD, Adam and AdamW, the LR schedules and the GradScaler.
 *
 * As in torch.optim, parameters come in groups, each with its own hyper-parameters ("lr",
 * "weight_decay", "momentum", "beta1", ...). A group names only what it overrides; the rest
 * comes from the optimizer's defaults when the group is added. Schedules change group.lr().
 *
 *   nn::AdamW opt({{model.decay_params(), {{"weight_decay", 0.1}}},
 *                  {model.no_decay_params(), {{"weight_decay", 0.0}}}},
 *                 {.lr = 3e-4});
 */
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/state_dict.h"

namespace loom::nn {

struct ParamGroup {
  std::vector<Tensor> params;
  std::map<std::string, double> options;

  ParamGroup() = default;
  ParamGroup(std::vector<Tensor> params, std::map<std::string, double> options = {})
      : params(std::move(params)), options(std::move(options)) {}

  // Throws naming the option if the group has no such hyper-parameter.
  double& option(const std::string& name);
  double option(const std::string& name) const;
  double& lr() { return option("lr"); }
  double lr() const { return option("lr"); }
};

class Optimizer {
 public:
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  virtual ~Optimizer() = default;

  // One update of every parameter that has a gradient (parameters without one are skipped,
  // as in torch).
  virtual void step() = 0;
  // Whether step_unless_found_inf works: SGD, Adam and AdamW built with capturable = true.
  virtual bool can_skip_on_device() const { return false; }
  // Whether step_unless_found_inf can take this step's flag on the device eagerly, outside a
  // capture: can_skip_on_device(), every parameter with a gradient contiguous (the others take a
  // per-op path, which cannot skip), and no state missing that only a plain first step starts
  // (SGD's momentum buffers). GradScaler then leaves the skip of an eager step to the GPU.
  virtual bool can_skip_this_step_on_device() const;
  // step(), skipped whole on the device (parameters, state and step counts untouched) when
  // found_inf, a float32 tensor of one element, is not 0 when the step runs: GradScaler's route
  // inside a CUDA graph capture, where the host cannot read the flag (torch's fused optimizers
  // with found_inf). Nothing is read back. Throws loom::Error unless can_skip_on_device(); SGD
  // also for a momentum buffer that this step would start (run a plain step() first).
  virtual void step_unless_found_inf(const Tensor& found_inf);
  // Drops (set_to_none) or zeroes the gradients of every parameter of every group.
  void zero_grad(bool set_to_none = true);
  // Tells the optimizer that groups' hyper-parameters were changed outside step(). The LR
  // schedules call it after each change. A capturable optimizer (SGD, Adam, AdamW with
  // capturable = true) writes the new lrs into the device tensors its captured step reads, so
  // the next replay of a CUDA graph uses them; call it after setting group.lr() by hand
  // between replays. Throws during a capture. The others need nothing: step() reads the groups.
  virtual void hyperparameters_changed() {}

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Fills the options the group does not set from the defaults; throws if a parameter is
  // already in another group or an option is unknown to this optimizer.
  void add_param_group(ParamGroup group);

  // Per-parameter state (momentum buffers, Adam moments, step counts) and every group's
  // hyper-parameters, as tensors, so that a checkpoint stores them with the model's tensors.
  // Keys: "state.<param index>.<name>" (index in the order of param_groups),
  // "param_groups.<group index>.<option>" (0-dim float64) and "param_groups.<group index>.params"
  // (1-D int64: the group's parameter indices, as torch's param_groups[g]['params']).
  StateDict state_dict() const;
  // Restores what state_dict() returned; throws if the groups' sizes or the state's shapes do
  // not match this optimizer's parameters.
  void load_state_dict(const StateDict& state);

 protected:
  Optimizer(std::vector<ParamGroup> groups, std::map<std::string, double> defaults);

  // The state of one parameter, created on its first step: name -> tensor.
  using ParamState = std::map<std::string, Tensor>;
  ParamState& state_of(const Tensor& param);
  // The same without creating it: nullptr before the parameter's first step.
  const ParamState* find_state(const Tensor& param) const;

 private:
  std::vector<ParamGroup> groups_;
  std::map<std::string, double> defaults_;
  std::map<const TensorImpl*, ParamState> state_;
};

}  // namespace loom::nn
