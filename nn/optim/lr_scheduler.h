/*
 * Learning-rate schedules: StepLR, LinearLR, OneCycleLR (torch.optim.lr_scheduler's, same
 * numbers) and CosineWithWarmup (linear warm-up then cosine decay, the usual transformer
 * schedule). A schedule sets every parameter group's "lr" from the step count, so a training
 * loop calls step() once per optimizer step:
 *
 *   nn::AdamW opt(model.parameters(), {.lr = 3e-4});
 *   nn::CosineWithWarmup sched(opt, 100, 10000);  // lr = 0 at step 0
 *   for (...) { ...; opt.step(); sched.step(); }
 *
 * Unlike torch's chainable form (each step multiplies the current lr), every schedule here is
 * a closed formula of (step, the group's base lr): resuming from a state dict gives exactly
 * the lrs of an uninterrupted run, and an lr edited by hand is overwritten by the next step().
 */
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nn/optim/optimizer.h"
#include "nn/state_dict.h"

namespace loom::nn {

class LRScheduler {
 public:
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;
  virtual ~LRScheduler() = default;

  // Advances to the next step and sets every group's lr to the schedule's value there.
  // Throws if the optimizer's number of groups changed since construction.
  void step();
  // Every group's lr as set by the last step() (or by the constructor, for step 0).
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  // Steps taken: 0 right after construction.
  int64_t last_step() const { return last_step_; }
  // Each group's lr when the schedule was created (what the formulas scale).
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return optimizer_; }

  // "last_step" (0-dim int64), "base_lrs.<g>" and "last_lr.<g>" (0-dim float64).
  StateDict state_dict() const;
  // Restores what state_dict() returned and sets the groups' lrs (and cycled momentum) for
  // the restored step, as step() had. Throws, changing nothing, when the number of groups
  // differs or an entry is missing, unexpected or not one number.
  void load_state_dict(const StateDict& state);

 protected:
  // Records each group's current lr as its base lr.
  explicit LRScheduler(Optimizer& optimizer);

  // The lr of group g at `step`.
  virtual double lr_at(int64_t step, size_t g) const = 0;
  // Changes a group's other hyper-parameters for `step` (OneCycleLR cycles momentum here).
  virtual void adjust_group(int64_t /*step*/, size_t /*g*/, ParamGroup& /*group*/) const {}
  // Sets every group's lr for last_step(). A derived constructor calls it once it is fully
  // built (virtual calls from the base constructor would not reach it), for step 0.
  void apply();

  std::vector<double> base_lrs_;

 private:
  Optimizer& optimizer_;
  int64_t last_step_ = 0;
  std::vector<double> last_lr_;
};

// lr = base_lr * gamma^floor(step / step_size) (torch.optim.lr_scheduler.StepLR).
// Throws for step_size < 1 or gamma < 0.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  double lr_at(int64_t step, size_t g) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = base_lr * (start_factor + (end_factor - start_factor) * min(step, total_iters) / total_iters)
// (torch.optim.lr_scheduler.LinearLR, closed form). Throws for start_factor outside (0, 1],
// end_factor outside [0, 1] or total_iters < 1.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3.0, double end_factor = 1.0,
           int64_t total_iters = 5);

 protected:
  double lr_at(int64_t step, size_t g) const override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// Linear warm-up, then half a cosine down to min_lr, then min_lr. With W = warmup_steps,
// T = total_steps, f0 = warmup_start_factor:
//   step < W:       lr = base_lr * (f0 + (1 - f0) * step / W)
//   W <= step <= T: lr = min_lr + (base_lr - min_lr) * (1 + cos(pi * (step - W) / (T - W))) / 2
//   step > T:       lr = min_lr
// With f0 = 0 the first step has lr 0 and step W has base_lr (as HuggingFace's
// get_cosine_schedule_with_warmup; min_lr is absolute, the same for every group).
// Throws for warmup_steps < 0, total_steps <= warmup_steps, min_lr < 0 or f0 outside [0, 1].
class CosineWithWarmup : public LRScheduler {
 public:
  CosineWithWarmup(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps, double min_lr = 0.0,
                   double warmup_start_factor = 0.0);

 protected:
  double lr_at(int64_t step, size_t g) const override;

 private:
  int64_t warmup_steps_, total_steps_;
  double min_lr_, start_factor_;
};

struct OneCycleOptions {
  enum class Anneal { kCos, kLinear };

  double pct_start = 0.3;  // fraction of the steps spent increasing the lr
  Anneal anneal_strategy = Anneal::kCos;
  bool cycle_momentum = true;  // momentum (SGD) or beta1 (Adam) moves opposite to the lr
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25.0;       // initial_lr = max_lr / div_factor
  double final_div_factor = 1e4;  // min_lr = initial_lr / final_div_factor
  bool three_phase = false;       // up, back down to initial_lr, then down to min_lr
};

// The 1cycle policy (torch.optim.lr_scheduler.OneCycleLR, PyTorch 1.13). Phases end at
// steps pct_start * total_steps - 1 (and 2 * pct_start * total_steps - 2 with three_phase)
// and total_steps - 1; within a phase, lr and momentum are annealed (cos: end + (start - end)
// * (1 + cos(pi * pct)) / 2; linear: start + (end - start) * pct) between
//   two phases:   initial_lr -> max_lr -> min_lr;  momentum max -> base -> max
//   three phases: initial_lr -> max_lr -> initial_lr -> min_lr;  max -> base -> max -> max
// The constructor sets lr = initial_lr and, with cycle_momentum, the group's "beta1" (if it has
// one) or "momentum" to max_momentum. Throws for total_steps < 1, pct_start outside [0, 1], a
// max_lr per group whose count differs from the groups', a phase of zero length, and — with
// cycle_momentum — groups with neither "beta1" nor "momentum"; step() throws when stepped past
// total_steps (torch allows one step more than total_steps - 1, and so does this).
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, OneCycleOptions options = {});
  OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps,
             OneCycleOptions options = {});

 protected:
  double lr_at(int64_t step, size_t g) const override;
  void adjust_group(int64_t step, size_t g, ParamGroup& group) const override;

 private:
  struct Phase {
    double end_step;
    int start_lr, end_lr;  // 0: initial_lr, 1: max_lr, 2: min_lr
    bool start_at_max_momentum, end_at_max_momentum;
  };
  // The phase containing `step` and how far into it (0..1) the step is.
  std::pair<const Phase*, double> locate(int64_t step) const;
  double anneal(double start, double end, double pct) const;

  int64_t total_steps_;
  OneCycleOptions options_;
  std::vector<Phase> phases_;
  std::vector<std::array<double, 3>> lrs_;  // per group: initial_lr, max_lr, min_lr
  std::string momentum_key_;                // "beta1", "momentum", or empty when not cycled
};

}  // namespace loom::nn
