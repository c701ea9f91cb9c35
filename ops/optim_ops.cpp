/*
 * The multi-tensor optimizer ops (see optim_ops.h): validation, then one kernel call per op.
 * Kernels write through raw pointers, so the version counters of what they wrote are bumped
 * here, where autograd can still see the change.
 */
#include "ops/optim_ops.h"

#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"
#include "ops/dispatch.h"
#include "ops/factories.h"

namespace loom {

namespace {

// Checks that list[i] can stand beside params[i] in a fused call of `op`.
void check_companion(const char* op, const char* list_name, const std::vector<Tensor>& list,
                     const std::vector<Tensor>& params) {
  LOOM_CHECK(list.size() == params.size(), op, ": ", list_name, " has ", list.size(), " tensors but params has ",
             params.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const Tensor& t = list[i];
    const Tensor& p = params[i];
    LOOM_CHECK(t.defined(), op, ": ", list_name, "[", i, "] is an undefined tensor");
    LOOM_CHECK(t.sizes() == p.sizes() && t.dtype() == p.dtype() && t.device() == p.device(), op, ": ",
               list_name, "[", i, "] is ", t.dtype(), " ", t.sizes(), " on ", t.device(), " but params[", i,
               "] is ", p.dtype(), " ", p.sizes(), " on ", p.device());
    LOOM_CHECK(t.is_contiguous(), op, ": ", list_name, "[", i, "] of shape ", t.sizes(), " is not contiguous");
  }
}

// Checks a list of float tensors that must all be contiguous and on `device`.
void check_float_list(const char* op, const char* list_name, const std::vector<Tensor>& list, Device device) {
  for (size_t i = 0; i < list.size(); ++i) {
    const Tensor& t = list[i];
    LOOM_CHECK(t.defined(), op, ": ", list_name, "[", i, "] is an undefined tensor");
    LOOM_CHECK(t.dtype() == kFloat32 || t.dtype() == kFloat64, op, ": ", list_name, "[", i, "] has dtype ",
               t.dtype(), "; expected float32 or float64");
    LOOM_CHECK(t.device() == device, op, ": ", list_name, "[", i, "] is on ", t.device(), " but the call runs on ",
               device);
    LOOM_CHECK(t.is_contiguous(), op, ": ", list_name, "[", i, "] of shape ", t.sizes(), " is not contiguous");
  }
}

// The device of a call's first tensor, after checking that it exists.
Device first_device(const char* op, const char* list_name, const std::vector<Tensor>& list) {
  LOOM_CHECK(list[0].defined(), op, ": ", list_name, "[0] is an undefined tensor");
  return list[0].device();
}

// Checks a 0-dim tensor that a capturable step reads on `device`.
void check_device_scalar(const char* op, const std::string& name, const Tensor& t, DType dtype,
                         Device device) {
  LOOM_CHECK(t.defined(), op, ": ", name, " is an undefined tensor");
  LOOM_CHECK(t.dim() == 0 && t.dtype() == dtype && t.device() == device, op, ": ", name, " must be a 0-dim ",
             dtype, " on ", device, ", got ", t.dtype(), " ", t.sizes(), " on ", t.device());
}

// GradScaler's found_inf, when given: one float32 on `device`.
void check_found_inf(const char* op, const Tensor& found_inf, Device device) {
  if (!found_inf.defined()) return;
  LOOM_CHECK(found_inf.dtype() == kFloat32 && found_inf.numel() == 1 && found_inf.device() == device, op,
             ": found_inf must be one float32 element on ", device, ", got ", found_inf.dtype(), " ",
             found_inf.sizes(), " on ", found_inf.device());
}

void bump_versions(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) t.storage()->bump_version();
}

// The checks of both forms of fused_adam_ on everything but the step counts; false when there
// is nothing to update.
bool check_adam_call(const char* op, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                     const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                     const std::vector<Tensor>& max_exp_avg_sqs, const AdamStepOptions& h) {
  LOOM_CHECK(h.lr >= 0 && h.eps >= 0 && h.weight_decay >= 0, op,
             ": lr, eps and weight_decay must be >= 0, got lr=", h.lr, ", eps=", h.eps,
             ", weight_decay=", h.weight_decay);
  LOOM_CHECK(h.beta1 >= 0 && h.beta1 < 1 && h.beta2 >= 0 && h.beta2 < 1, op,
             ": beta1 and beta2 must lie in [0, 1), got beta1=", h.beta1, ", beta2=", h.beta2);
  if (params.empty()) return false;
  check_float_list(op, "params", params, first_device(op, "params", params));
  check_companion(op, "grads", grads, params);
  check_companion(op, "exp_avgs", exp_avgs, params);
  check_companion(op, "exp_avg_sqs", exp_avg_sqs, params);
  if (h.amsgrad)
    check_companion(op, "max_exp_avg_sqs", max_exp_avg_sqs, params);
  else
    LOOM_CHECK(max_exp_avg_sqs.empty(), op, ": max_exp_avg_sqs must be empty without amsgrad, got ",
               max_exp_avg_sqs.size(), " tensors");
  return true;
}

void bump_adam_versions(const std::vector<Tensor>& params, const std::vector<Tensor>& exp_avgs,
                        const std::vector<Tensor>& exp_avg_sqs, const std::vector<Tensor>& max_exp_avg_sqs) {
  bump_versions(params);
  bump_versions(exp_avgs);
  bump_versions(exp_avg_sqs);
  bump_versions(max_exp_avg_sqs);
}

// Both forms of fused_sgd_: lr is null for the host's options.lr; found_inf comes only with lr.
void run_fused_sgd(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                   const std::vector<Tensor>& momentum_buffers, const Tensor* lr, const Tensor& found_inf,
                   const SgdStepOptions& options) {
  constexpr const char* kOp = "fused_sgd_";
  const SgdStepOptions& h = options;
  LOOM_CHECK(h.lr >= 0 && h.momentum >= 0 && h.dampening >= 0 && h.weight_decay >= 0, kOp,
             ": lr, momentum, dampening and weight_decay must be >= 0, got lr=", h.lr, ", momentum=", h.momentum,
             ", dampening=", h.dampening, ", weight_decay=", h.weight_decay);
  LOOM_CHECK(!h.nesterov || (h.momentum > 0 && h.dampening == 0), kOp,
             ": Nesterov momentum requires momentum > 0 and dampening = 0, got momentum=", h.momentum,
             ", dampening=", h.dampening);
  if (params.empty()) return;
  check_float_list(kOp, "params", params, first_device(kOp, "params", params));
  check_companion(kOp, "grads", grads, params);
  if (h.momentum != 0)
    check_companion(kOp, "momentum_buffers", momentum_buffers, params);
  else
    LOOM_CHECK(momentum_buffers.empty(), kOp, ": momentum_buffers must be empty without momentum, got ",
               momentum_buffers.size(), " tensors");
  if (lr != nullptr) check_device_scalar(kOp, "lr", *lr, kFloat64, params[0].device());
  check_found_inf(kOp, found_inf, params[0].device());
  get_kernel<Op::fused_sgd_>(params[0].device())(params, grads, momentum_buffers, lr ? *lr : Tensor(),
                                                 found_inf, h);
  bump_versions(params);
  bump_versions(momentum_buffers);
}

}  // namespace

AdamStepFactors adam_step_factors(const AdamStepOptions& options, int64_t step) {
  const double t = static_cast<double>(step);
  return {options.lr / (1.0 - std::pow(options.beta1, t)), 1.0 / std::sqrt(1.0 - std::pow(options.beta2, t))};
}

void fused_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                 const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<int64_t>& steps,
                 const AdamStepOptions& options) {
  constexpr const char* kOp = "fused_adam_";
  if (!check_adam_call(kOp, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, options)) return;
  LOOM_CHECK(steps.size() == params.size(), kOp, ": steps has ", steps.size(), " entries but params has ",
             params.size());
  std::vector<AdamStepFactors> factors;
  factors.reserve(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    LOOM_CHECK(steps[i] >= 1, kOp, ": steps[", i, "] is ", steps[i],
               "; a step count after incrementing is >= 1");
    factors.push_back(adam_step_factors(options, steps[i]));
  }
  get_kernel<Op::fused_adam_>(params[0].device())(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
                                                  factors, {}, Tensor(), Tensor(), options);
  bump_adam_versions(params, exp_avgs, exp_avg_sqs, max_exp_avg_sqs);
}

void fused_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                 const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<Tensor>& step_counts,
                 const Tensor& lr, const AdamStepOptions& options, const Tensor& found_inf) {
  constexpr const char* kOp = "fused_adam_";
  if (!check_adam_call(kOp, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, options)) return;
  const Device device = params[0].device();
  LOOM_CHECK(step_counts.size() == params.size(), kOp, ": step_counts has ", step_counts.size(),
             " tensors but params has ", params.size());
  for (size_t i = 0; i < step_counts.size(); ++i)
    check_device_scalar(kOp, "step_counts[" + std::to_string(i) + "]", step_counts[i], kInt64, device);
  check_device_scalar(kOp, "lr", lr, kFloat64, device);
  check_found_inf(kOp, found_inf, device);
  get_kernel<Op::fused_adam_>(device)(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, {}, step_counts,
                                      lr, found_inf, options);
  bump_adam_versions(params, exp_avgs, exp_avg_sqs, max_exp_avg_sqs);
  bump_versions(step_counts);
}

void fused_sgd_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_buffers, const SgdStepOptions& options) {
  run_fused_sgd(params, grads, momentum_buffers, nullptr, Tensor(), options);
}

void fused_sgd_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_buffers, const Tensor& lr, const SgdStepOptions& options,
                const Tensor& found_inf) {
  run_fused_sgd(params, grads, momentum_buffers, &lr, found_inf, options);
}

Tensor foreach_norm_reduce(const std::vector<Tensor>& tensors, double norm_type, Device device) {
  constexpr const char* kOp = "foreach_norm_reduce";
  LOOM_CHECK(norm_type > 0, kOp, ": norm_type must be > 0 or infinity, got ", norm_type);
  check_float_list(kOp, "tensors", tensors, device);
  Tensor out = zeros({}, TensorOptions(kFloat64).device(device));
  if (tensors.empty()) return out;
  get_kernel<Op::foreach_norm_reduce>(device)(out, tensors, norm_type);
  return out;
}

void foreach_mul_(const std::vector<Tensor>& tensors, const Tensor& scale) {
  constexpr const char* kOp = "foreach_mul_";
  LOOM_CHECK(scale.defined() && scale.dtype() == kFloat64 && scale.numel() == 1, kOp,
             ": scale must be one float64 element, got ",
             scale.defined() ? std::string(dtype_name(scale.dtype())) : std::string("an undefined tensor"));
  check_float_list(kOp, "tensors", tensors, scale.device());
  if (tensors.empty()) return;
  get_kernel<Op::foreach_mul_>(scale.device())(tensors, scale);
  bump_versions(tensors);
}

}  // namespace loom
