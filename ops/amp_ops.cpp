/*
 * GradScaler's ops (see amp_ops.h): validation, then one kernel call on the tensors' device.
 */
#include "ops/amp_ops.h"

#include <cmath>

#include "core/error.h"
#include "ops/dispatch.h"
#include "ops/factories.h"

namespace loom {

namespace {

// A float32 or int32 tensor of one element on `device`, as the amp kernels read them.
void check_flag(const char* op, const char* name, const Tensor& t, DType dtype, Device device) {
  LOOM_CHECK(t.defined(), op, ": ", name, " is an undefined tensor");
  LOOM_CHECK(t.dtype() == dtype && t.numel() == 1 && t.is_contiguous(), op, ": ", name, " must be a ", dtype,
             " tensor of one element, got ", t.dtype(), " of shape ", t.sizes());
  LOOM_CHECK(t.device() == device, op, ": ", name, " is on ", t.device(), " but the call runs on ", device);
}

}  // namespace

void amp_unscale_and_check_(const std::vector<Tensor>& values, const Tensor& found_inf,
                            const Tensor& inv_scale) {
  constexpr const char* kOp = "amp_unscale_and_check_";
  LOOM_CHECK(found_inf.defined(), kOp, ": found_inf is an undefined tensor");
  check_flag(kOp, "found_inf", found_inf, kFloat32, found_inf.device());
  check_flag(kOp, "inv_scale", inv_scale, kFloat32, found_inf.device());
  for (size_t i = 0; i < values.size(); ++i) {
    const Tensor& v = values[i];
    LOOM_CHECK(v.defined(), kOp, ": value ", i, " is an undefined tensor");
    LOOM_CHECK(v.dtype() == kFloat32 || v.dtype() == kFloat64 || v.dtype() == kBFloat16, kOp, ": value ", i,
               " has dtype ", v.dtype(), "; expected float32, float64 or bfloat16");
    LOOM_CHECK(v.device() == found_inf.device(), kOp, ": value ", i, " is on ", v.device(),
               " but found_inf is on ", found_inf.device());
    LOOM_CHECK(v.is_contiguous(), kOp, ": value ", i, " of shape ", v.sizes(), " is not contiguous");
  }
  if (values.empty()) return;
  get_kernel<Op::amp_unscale_and_check_>(found_inf.device())(values, found_inf, inv_scale);
}

void amp_unscale_and_check_(const std::vector<Tensor>& values, const Tensor& found_inf, float inv_scale) {
  LOOM_CHECK(found_inf.defined(), "amp_unscale_and_check_: found_inf is an undefined tensor");
  amp_unscale_and_check_(values, found_inf,
                         full({1}, inv_scale, TensorOptions(kFloat32).device(found_inf.device())));
}

void amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                       double growth_factor, double backoff_factor, int64_t growth_interval) {
  constexpr const char* kOp = "amp_update_scale_";
  LOOM_CHECK(scale.defined(), kOp, ": scale is an undefined tensor");
  const Device device = scale.device();
  check_flag(kOp, "scale", scale, kFloat32, device);
  check_flag(kOp, "growth_tracker", growth_tracker, kInt32, device);
  check_flag(kOp, "found_inf", found_inf, kFloat32, device);
  LOOM_CHECK(growth_factor > 1.0 && std::isfinite(growth_factor), kOp,
             ": growth_factor must be a finite number > 1, got ", growth_factor);
  LOOM_CHECK(backoff_factor > 0.0 && backoff_factor < 1.0, kOp, ": backoff_factor must be in (0, 1), got ",
             backoff_factor);
  LOOM_CHECK(growth_interval >= 1, kOp, ": growth_interval must be >= 1, got ", growth_interval);
  get_kernel<Op::amp_update_scale_>(device)(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                                            growth_interval);
  scale.storage()->bump_version();
  growth_tracker.storage()->bump_version();
}

}  // namespace loom
