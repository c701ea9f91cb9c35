/*
 * GradScaler (see grad_scaler.h). The state machine per optimizer (ready -> unscaled ->
 * stepped -> ready at update) and the scale update follow torch 1.13's
 * torch/cuda/amp/grad_scaler.py and _amp_update_scale_ exactly, so that a run resumed from a
 * torch checkpoint or compared with one sees the same sequence of scales and skipped steps.
 *
 * unscale_ is one pass over all gradients of the optimizer per device, amp_unscale_and_check_
 * (ops/amp_ops.h, torch's _amp_foreach_non_finite_check_and_unscale_): each value is read once
 * to test it for inf/NaN and scale it. One pass matters because it reads as many bytes as the
 * optimizer step itself.
 */
#include "nn/amp/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/grad_mode.h"
#include "ops/ops.h"

namespace loom::nn {

namespace {

void check_factors(double growth_factor, double backoff_factor, int64_t growth_interval) {
  LOOM_CHECK(growth_factor > 1.0 && std::isfinite(growth_factor),
             "GradScaler: growth_factor must be a finite number > 1.0, got ", growth_factor);
  LOOM_CHECK(backoff_factor > 0.0 && backoff_factor < 1.0,
             "GradScaler: backoff_factor must be in (0, 1), got ", backoff_factor);
  LOOM_CHECK(growth_interval >= 1, "GradScaler: growth_interval must be >= 1, got ", growth_interval);
}

void check_scale(double scale, std::string_view what) {
  LOOM_CHECK(scale > 0.0 && std::isfinite(static_cast<float>(scale)), "GradScaler: ", what,
             " must be positive and finite in float32, got ", scale);
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), scale_(static_cast<float>(options.init_scale)) {
  if (!options_.enabled) return;  // torch checks nothing for a disabled scaler either
  check_scale(options_.init_scale, "init_scale");
  check_factors(options_.growth_factor, options_.backoff_factor, options_.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  LOOM_CHECK(loss.defined(), "GradScaler.scale: the loss is an undefined tensor");
  LOOM_CHECK(loss.is_floating_point(), "GradScaler.scale: expected a floating-point loss, got ",
             loss.dtype());
  scale_used_ = true;
  const bool reduced = loss.dtype() == kFloat16 || loss.dtype() == kBFloat16;
  return mul(reduced ? loss.to(kFloat32) : loss, static_cast<double>(scale_));
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  OptimizerState& state = state_of(optimizer);
  LOOM_CHECK(
      state.stage != Stage::kUnscaled,
      "GradScaler.unscale_: unscale_() has already been called on this optimizer since the last update()");
  LOOM_CHECK(state.stage != Stage::kStepped, "GradScaler.unscale_: unscale_() is being called after step()");
  LOOM_CHECK(scale_used_,
             "GradScaler.unscale_: no scale() call came before it; the gradients were not scaled by this "
             "scaler (did the script forget scaler.scale(loss)?)");

  // Gradients that are not contiguous are unscaled in a contiguous copy, written back after.
  // One list of values per device, in the order the devices first appear.
  std::vector<std::pair<Device, std::vector<Tensor>>> per_device;
  std::vector<std::pair<Tensor, Tensor>> write_back;  // (grad, contiguous copy)
  bool any_grad = false;
  NoGradGuard no_grad;
  for (ParamGroup& group : optimizer.param_groups()) {
    for (Tensor& param : group.params) {
      const Tensor& grad = param.grad();
      if (!grad.defined()) continue;
      any_grad = true;
      LOOM_CHECK(grad.dtype() != kFloat16,
                 "GradScaler.unscale_: attempting to unscale float16 gradients (parameter of shape ",
                 param.sizes(), "); keep the parameters in float32 and let autocast make the float16 copies");
      LOOM_CHECK(grad.dtype() == kFloat32 || grad.dtype() == kFloat64 || grad.dtype() == kBFloat16,
                 "GradScaler.unscale_: expected float32, float64 or bfloat16 gradients, got ", grad.dtype(),
                 " for a parameter of shape ", param.sizes());
      if (grad.numel() == 0) continue;
      Tensor values = grad;
      if (!grad.is_contiguous()) {
        values = grad.contiguous();
        write_back.emplace_back(grad, values);
      }
      auto it = std::find_if(per_device.begin(), per_device.end(),
                             [&](const auto& entry) { return entry.first == values.device(); });
      if (it == per_device.end()) it = per_device.insert(per_device.end(), {values.device(), {}});
      it->second.push_back(values);
    }
  }
  // torch's rounding: 1/scale computed in double, then rounded to float32.
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  bool found = false;
  for (auto& [device, values] : per_device) {
    Tensor found_inf = zeros({1}, TensorOptions().dtype(kFloat32).device(device));
    amp_unscale_and_check_(values, found_inf, inv_scale);
    // Reading the flag waits for the unscale kernels of this device (a device-to-host copy on
    // CUDA): step() must know now whether to skip, as torch's GradScaler.step does.
    found = found || found_inf.item<float>() != 0.0f;
  }
  for (auto& [grad, values] : write_back) grad.copy_(values);
  for (ParamGroup& group : optimizer.param_groups())
    for (Tensor& param : group.params)
      if (param.grad().defined() && param.grad().numel() > 0) param.grad().storage()->bump_version();

  state.found_inf = found;
  state.has_grads = any_grad;
  state.stage = Stage::kUnscaled;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  OptimizerState& state = state_of(optimizer);
  LOOM_CHECK(state.stage != Stage::kStepped,
             "GradScaler.step: step() has already been called since the last update()");
  if (state.stage == Stage::kReady) unscale_(optimizer);
  LOOM_CHECK(state.has_grads,
             "GradScaler.step: no inf checks were recorded for this optimizer: none of its parameters has a "
             "gradient (did backward run?)");
  const bool stepped = !state.found_inf;
  if (stepped) optimizer.step();
  state.stage = Stage::kStepped;
  return stepped;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled) return;
  if (new_scale) {
    check_scale(*new_scale, "new_scale");
    scale_ = static_cast<float>(*new_scale);
  } else {
    bool any_checked = false, found_inf = false;
    for (const auto& [optimizer, state] : per_optimizer_) {
      if (state.stage == Stage::kReady || !state.has_grads) continue;
      any_checked = true;
      found_inf = found_inf || state.found_inf;
    }
    LOOM_CHECK(any_checked,
               "GradScaler.update: no inf checks were recorded prior to update() (call step() or "
               "unscale_() on an optimizer with gradients first)");
    // torch's _amp_update_scale_: the products are computed in double and stored in float32.
    if (found_inf) {
      scale_ = static_cast<float>(static_cast<double>(scale_) * options_.backoff_factor);
      growth_tracker_ = 0;
    } else if (growth_tracker_ + 1 == options_.growth_interval) {
      const float grown = static_cast<float>(static_cast<double>(scale_) * options_.growth_factor);
      if (std::isfinite(grown)) scale_ = grown;
      growth_tracker_ = 0;
    } else {
      ++growth_tracker_;
    }
  }
  per_optimizer_.clear();
}

void GradScaler::set_growth_factor(double factor) {
  check_factors(factor, options_.backoff_factor, options_.growth_interval);
  options_.growth_factor = factor;
}

void GradScaler::set_backoff_factor(double factor) {
  check_factors(options_.growth_factor, factor, options_.growth_interval);
  options_.backoff_factor = factor;
}

void GradScaler::set_growth_interval(int64_t interval) {
  check_factors(options_.growth_factor, options_.backoff_factor, interval);
  options_.growth_interval = interval;
}

StateDict GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  return {{"scale", scalar_tensor(static_cast<double>(scale_), kFloat64)},
          {"growth_factor", scalar_tensor(options_.growth_factor, kFloat64)},
          {"backoff_factor", scalar_tensor(options_.backoff_factor, kFloat64)},
          {"growth_interval", scalar_tensor(options_.growth_interval, kInt64)},
          {"_growth_tracker", scalar_tensor(growth_tracker_, kInt64)}};
}

void GradScaler::load_state_dict(const StateDict& state) {
  if (!options_.enabled) return;
  LOOM_CHECK(!state.empty(),
             "GradScaler.load_state_dict: the state dict is empty, possibly because it was "
             "saved from a disabled GradScaler");
  auto value = [&](const char* key) {
    const Tensor* t = state.find(key);
    LOOM_CHECK(t != nullptr, "GradScaler.load_state_dict: missing key '", key, "'");
    LOOM_CHECK(t->defined() && t->numel() == 1, "GradScaler.load_state_dict: expected '", key,
               "' to be a one-element tensor, got ", t->defined() ? t->sizes() : IntArrayRef{});
    return t->item();
  };
  // Everything is read and checked before anything is assigned: a bad state changes nothing.
  const double scale = value("scale").to_double();
  const double growth_factor = value("growth_factor").to_double();
  const double backoff_factor = value("backoff_factor").to_double();
  const int64_t growth_interval = value("growth_interval").to<int64_t>();
  const int64_t growth_tracker = value("_growth_tracker").to<int64_t>();
  check_scale(scale, "'scale'");
  check_factors(growth_factor, backoff_factor, growth_interval);
  LOOM_CHECK(growth_tracker >= 0 && growth_tracker < growth_interval,
             "GradScaler.load_state_dict: expected "
             "'_growth_tracker' in [0, growth_interval = ",
             growth_interval, "), got ", growth_tracker);
  scale_ = static_cast<float>(scale);
  options_.growth_factor = growth_factor;
  options_.backoff_factor = backoff_factor;
  options_.growth_interval = growth_interval;
  growth_tracker_ = growth_tracker;
}

}  // namespace loom::nn
