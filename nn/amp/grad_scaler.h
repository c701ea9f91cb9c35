/*
 * GradScaler: dynamic loss scaling for float16 training (torch.cuda.amp.GradScaler).
 *
 * float16 gradients of small magnitude lose precision below 6e-5 and flush to zero below 6e-8. Scaling the
 * loss by S before backward scales every gradient by S and lifts them into range; the gradients
 * are divided by S again before the optimizer sees them. S is chosen dynamically: when a step
 * produces an inf or NaN gradient the step is skipped and S shrinks (backoff_factor); after
 * growth_interval clean steps S grows (growth_factor), so it settles just below overflow.
 *
 *   nn::GradScaler scaler;
 *   for (...) {
 *     opt.zero_grad();
 *     Tensor loss;
 *     {
 *       AutocastGuard autocast(kCUDA, kFloat16);
 *       loss = loss_fn(model(x), y);
 *     }
 *     scaler.scale(loss).backward();
 *     scaler.unscale_(opt);            // optional: only to clip or inspect the true gradients
 *     nn::clip_grad_norm_(model.parameters(), 1.0);
 *     scaler.step(opt);                // skipped when a gradient is inf/NaN
 *     scaler.update();
 *   }
 *
 * bfloat16 has float32's exponent range, so bf16 autocast needs no scaler; a disabled scaler
 * (enabled = false) turns every call into the plain step, so one loop serves both.
 *
 * As in torch, the scale lives on the device of the first loss scaled, as a tensor, and is
 * updated there. So the whole loop body above can be captured into a CUDA graph
 * (nn::GraphedStep): each replay scales by the scale the replay before left, and skips its own
 * optimizer step on the device when a gradient is inf/NaN. Inside a capture, step() needs an
 * optimizer built with capturable = true (SGD, Adam, AdamW), and nothing is read back to the
 * host. Outside one the same optimizer skips on the device too, so an eager float16 step never
 * waits for the GPU (torch's fused optimizers with found_inf); another optimizer has step() read
 * the inf/NaN flag back once per step to decide.
 */
#pragma once

#include <cstdint>
#include <map>
#include <optional>

#include "core/tensor.h"
#include "nn/optim/optimizer.h"
#include "nn/state_dict.h"

namespace loom::nn {

struct GradScalerOptions {
  double init_scale = 65536.0;     // 2^16
  double growth_factor = 2.0;      // > 1
  double backoff_factor = 0.5;     // in (0, 1)
  int64_t growth_interval = 2000;  // clean steps between growths, >= 1
  bool enabled = true;
};

class GradScaler {
 public:
  // Throws loom::Error when enabled and an option is out of range (init_scale not positive and
  // finite, growth_factor <= 1, backoff_factor outside (0, 1), growth_interval < 1).
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (any shape). A float16/bfloat16 loss is multiplied in float32, as torch's
  // float32 scale tensor promotes it, so that the scaled value does not overflow float16.
  // Disabled: loss itself.
  Tensor scale(const Tensor& loss);

  // Divides the gradients of every parameter of `optimizer` by the scale, in place, and
  // records whether any of them holds an inf or NaN (one fused pass over all gradients per
  // device: multi-threaded on the CPU, one kernel per 64 gradients on CUDA). Call it at most
  // once per optimizer between update()s, before step().
  // Throws loom::Error if called twice before update(), after step(), before any scale(), or
  // for float16 gradients (torch's rule: they cannot be the float32 master gradients).
  void unscale_(Optimizer& optimizer);

  // Unscales the gradients if unscale_ was not called, then runs optimizer.step() unless a
  // gradient was inf/NaN. Returns whether the optimizer stepped (disabled: always steps).
  // With CUDA gradients and an optimizer that skips on the device (SGD, Adam, AdamW built with
  // capturable = true; Optimizer::can_skip_this_step_on_device() says when: not SGD's first step
  // with momentum, nor with non-contiguous parameters), the decision is the GPU's, as with
  // torch's fused optimizers: the step is queued with the flag (Optimizer::step_unless_found_inf),
  // the device skips it on an inf/NaN, nothing waits for the GPU, and step() returns true,
  // meaning "queued"; get_scale() after update() shows whether it backed off. Inside a CUDA graph
  // capture that is the only way, and true means "captured". Another optimizer on CUDA waits
  // here for the unscale kernels.
  // Throws loom::Error if called twice before update() or if no parameter has a gradient, and,
  // inside a capture, for an optimizer that cannot skip on the device (capturable = false).
  bool step(Optimizer& optimizer);

  // Adjusts the scale after the steps of this iteration: times backoff_factor if any optimizer
  // found an inf/NaN gradient; times growth_factor after growth_interval clean iterations in a
  // row. new_scale, when given, replaces the scale instead. Throws loom::Error if no unscale_ or
  // step happened since the last update (there is nothing to base the update on). The update is
  // one kernel on the scale's device (amp_update_scale_); nothing is read back.
  void update(std::optional<double> new_scale = std::nullopt);

  // The current scale (1.0 when disabled). Reads it back from its device (waiting for the steps
  // queued there), so it cannot be called inside a capture.
  double get_scale() const;
  double get_growth_factor() const { return options_.growth_factor; }
  void set_growth_factor(double factor);
  double get_backoff_factor() const { return options_.backoff_factor; }
  void set_backoff_factor(double factor);
  int64_t get_growth_interval() const { return options_.growth_interval; }
  void set_growth_interval(int64_t interval);
  bool is_enabled() const { return options_.enabled; }

  // "scale" (float64), "growth_factor" (float64), "backoff_factor" (float64), "growth_interval"
  // (int64) and "_growth_tracker" (int64, clean steps since the last change): 0-dim tensors on
  // the CPU, the keys of torch's GradScaler.state_dict(). Empty when disabled.
  StateDict state_dict() const;
  // Restores what state_dict() returned. Ignored when disabled (as torch); throws loom::Error
  // naming the key when a key is missing, not a one-element tensor, or out of range, and changes
  // nothing then.
  void load_state_dict(const StateDict& state);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct OptimizerState {
    Stage stage = Stage::kReady;
    // Whether a gradient was inf/NaN: on the scale's device (float32 [1], nonzero for yes); read
    // back by step() only for an optimizer that cannot skip on the device.
    Tensor found_inf;
    bool has_grads = false;  // the unscale_ pass saw at least one gradient (torch: an inf check was recorded)
  };

  OptimizerState& state_of(const Optimizer& optimizer) { return per_optimizer_[&optimizer]; }
  // Makes scale_ and growth_tracker_ on `device` from the host values (the first scale()).
  void place_state(Device device);

  GradScalerOptions options_;
  // float32 and int32 tensors of one element, as torch keeps them (the same scale sequence and
  // the same rounding of 1/scale), on the device of the first loss scaled; undefined before,
  // when host_scale_ and host_growth_tracker_ stand for them.
  Tensor scale_, growth_tracker_;
  float host_scale_;
  int32_t host_growth_tracker_ = 0;
  std::map<const Optimizer*, OptimizerState> per_optimizer_;
};

}  // namespace loom::nn
