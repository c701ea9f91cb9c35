/*
 * GradScaler (see grad_scaler.h). The state machine per optimizer (ready -> unscaled ->
 * stepped -> ready at update) and the scale update follow torch's
 * torch/amp/grad_scaler.py and _amp_update_scale_ exactly, so that a run resumed from a
 * torch checkpoint or compared with one sees the same sequence of scales and skipped steps.
 * The state machine runs on the host (once, when a step is captured); the scale, the growth
 * tracker and the inf/NaN flags are tensors on the scale's device.
 *
 * unscale_ is one pass over all gradients of the optimizer per device, amp_unscale_and_check_
 * (ops/amp_ops.h, torch's _amp_foreach_non_finite_check_and_unscale_): each value is read once
 * to test it for inf/NaN and scale it. One pass matters because it reads as many bytes as the
 * optimizer step itself.
 */
#include "nn/amp/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cuda_graph.h"
#include "core/grad_mode.h"
#include "ops/ops.h"

namespace loom::nn {

namespace {

void check_factors(double growth_factor, double backoff_factor, int64_t growth_interval) {
  LOOM_CHECK(growth_factor > 1.0 && std::isfinite(growth_factor),
             "GradScaler: growth_factor must be a finite number > 1.0, got ", growth_factor);
  LOOM_CHECK(backoff_factor > 0.0 && backoff_factor < 1.0,
             "GradScaler: backoff_factor must be in (0, 1), got ", backoff_factor);
  // The tracker is an int32 on the device, as torch's.
  LOOM_CHECK(growth_interval >= 1 && growth_interval <= std::numeric_limits<int32_t>::max(),
             "GradScaler: growth_interval must be in [1, 2^31 - 1], got ", growth_interval);
}

void check_scale(double scale, std::string_view what) {
  LOOM_CHECK(scale > 0.0 && std::isfinite(static_cast<float>(scale)), "GradScaler: ", what,
             " must be positive and finite in float32, got ", scale);
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), host_scale_(static_cast<float>(options.init_scale)) {
  if (!options_.enabled) return;  // torch checks nothing for a disabled scaler either
  check_scale(options_.init_scale, "init_scale");
  check_factors(options_.growth_factor, options_.backoff_factor, options_.growth_interval);
}

void GradScaler::place_state(Device device) {
  // Made inside a capture, the state would be made afresh by every replay, which would forget
  // what the replays before had learnt.
  LOOM_CHECK(!cuda::current_stream_capturing(), "GradScaler.scale: the scale does not exist on ", device,
             " yet; run a step before capturing the loop into a CUDA graph (warm-up)");
  scale_ = full({1}, host_scale_, TensorOptions(kFloat32).device(device));
  growth_tracker_ = full({1}, host_growth_tracker_, TensorOptions(kInt32).device(device));
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  LOOM_CHECK(loss.defined(), "GradScaler.scale: the loss is an undefined tensor");
  LOOM_CHECK(loss.is_floating_point(), "GradScaler.scale: expected a floating-point loss, got ",
             loss.dtype());
  if (!scale_.defined()) place_state(loss.device());
  const bool reduced = loss.dtype() == kFloat16 || loss.dtype() == kBFloat16;
  // A 0-dim view, so that the product keeps the loss's shape.
  return mul(reduced ? loss.to(kFloat32) : loss, scale_.to(loss.device()).reshape({}));
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  OptimizerState& state = state_of(optimizer);
  LOOM_CHECK(
      state.stage != Stage::kUnscaled,
      "GradScaler.unscale_: unscale_() has already been called on this optimizer since the last update()");
  LOOM_CHECK(state.stage != Stage::kStepped, "GradScaler.unscale_: unscale_() is being called after step()");
  LOOM_CHECK(scale_.defined(),
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
  // torch's rounding: 1/scale computed in double, then rounded to float32; on the scale's
  // device, so that a captured step divides by each replay's scale.
  const Device home = scale_.device();
  const Tensor inv_scale =
      full({1}, 1.0, TensorOptions(kFloat64).device(home)).div(scale_.to(kFloat64)).to(kFloat32);
  Tensor found_inf = zeros({1}, TensorOptions(kFloat32).device(home));
  for (auto& [device, values] : per_device) {
    Tensor found_here = device == home ? found_inf : zeros({1}, TensorOptions(kFloat32).device(device));
    amp_unscale_and_check_(values, found_here, inv_scale.to(device));
    if (device != home) found_inf = found_inf.add(found_here.to(home));
  }
  for (auto& [grad, values] : write_back) grad.copy_(values);
  for (ParamGroup& group : optimizer.param_groups())
    for (Tensor& param : group.params)
      if (param.grad().defined() && param.grad().numel() > 0) param.grad().storage()->bump_version();

  // Left on the device: step() reads it back only for an optimizer that cannot skip there.
  state.found_inf = found_inf;
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
  // A replay cannot ask the host whether to step: the optimizer's kernels must read the flag.
  // Checked before step() unscales anything itself.
  const bool capturing = cuda::current_stream_capturing();
  LOOM_CHECK(
      !capturing || optimizer.can_skip_on_device(),
      "GradScaler.step: inside a CUDA graph capture the optimizer must skip an inf/NaN step on the device, "
      "which this optimizer cannot; construct SGD, Adam or AdamW with capturable = true");
  if (state.stage == Stage::kReady) unscale_(optimizer);
  LOOM_CHECK(state.has_grads,
             "GradScaler.step: no inf checks were recorded for this optimizer: none of its parameters has a "
             "gradient (did backward run?)");
  // On CUDA an optimizer that can skip on the device takes the flag as a tensor, as torch's
  // fused optimizers take found_inf: the step is queued behind the unscale kernels and nothing
  // waits for the GPU. Inside a capture that is the only way.
  if (capturing || (state.found_inf.is_cuda() && optimizer.can_skip_this_step_on_device())) {
    optimizer.step_unless_found_inf(state.found_inf);
    state.stage = Stage::kStepped;
    return true;
  }
  // Otherwise the host decides, as torch's GradScaler.step does for other optimizers: on CUDA
  // reading the flag waits for the unscale kernels (a device-to-host copy).
  const bool stepped = state.found_inf.item<float>() == 0.0f;
  if (stepped) optimizer.step();
  state.stage = Stage::kStepped;
  return stepped;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled) return;
  if (new_scale) {
    check_scale(*new_scale, "new_scale");
    if (scale_.defined())
      scale_.fill_(static_cast<float>(*new_scale));
    else
      host_scale_ = static_cast<float>(*new_scale);
  } else {
    Tensor found_inf;  // the sum of every optimizer's flag
    for (const auto& [optimizer, state] : per_optimizer_) {
      if (state.stage == Stage::kReady || !state.has_grads) continue;
      found_inf = found_inf.defined() ? found_inf.add(state.found_inf) : state.found_inf;
    }
    LOOM_CHECK(found_inf.defined(),
               "GradScaler.update: no inf checks were recorded prior to update() (call step() or "
               "unscale_() on an optimizer with gradients first)");
    amp_update_scale_(scale_, growth_tracker_, found_inf, options_.growth_factor, options_.backoff_factor,
                      options_.growth_interval);
  }
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_.defined() ? static_cast<double>(scale_.item<float>()) : static_cast<double>(host_scale_);
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
  const int64_t tracker = growth_tracker_.defined() ? growth_tracker_.item<int32_t>() : host_growth_tracker_;
  return {{"scale", scalar_tensor(get_scale(), kFloat64)},
          {"growth_factor", scalar_tensor(options_.growth_factor, kFloat64)},
          {"backoff_factor", scalar_tensor(options_.backoff_factor, kFloat64)},
          {"growth_interval", scalar_tensor(options_.growth_interval, kInt64)},
          {"_growth_tracker", scalar_tensor(tracker, kInt64)}};
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
  options_.growth_factor = growth_factor;
  options_.backoff_factor = backoff_factor;
  options_.growth_interval = growth_interval;
  if (scale_.defined()) {
    scale_.fill_(static_cast<float>(scale));
    growth_tracker_.fill_(growth_tracker);
  } else {
    host_scale_ = static_cast<float>(scale);
    host_growth_tracker_ = static_cast<int32_t>(growth_tracker);
  }
}

}  // namespace loom::nn
