/*
 * amp_unscale_and_check_ (see amp_ops.h): validation, then one kernel call per device.
 */
#include "ops/amp_ops.h"

#include "core/error.h"
#include "ops/dispatch.h"

namespace loom {

void amp_unscale_and_check_(const std::vector<Tensor>& values, const Tensor& found_inf, float inv_scale) {
  LOOM_CHECK(found_inf.defined(), "amp_unscale_and_check_: found_inf is an undefined tensor");
  LOOM_CHECK(found_inf.dtype() == kFloat32 && found_inf.numel() == 1,
             "amp_unscale_and_check_: found_inf must be a float32 tensor of one element, got ",
             found_inf.dtype(), " of shape ", found_inf.sizes());
  for (size_t i = 0; i < values.size(); ++i) {
    const Tensor& v = values[i];
    LOOM_CHECK(v.defined(), "amp_unscale_and_check_: value ", i, " is an undefined tensor");
    LOOM_CHECK(v.dtype() == kFloat32 || v.dtype() == kFloat64 || v.dtype() == kBFloat16,
               "amp_unscale_and_check_: value ", i, " has dtype ", v.dtype(),
               "; expected float32, float64 or bfloat16");
    LOOM_CHECK(v.device() == found_inf.device(), "amp_unscale_and_check_: value ", i, " is on ", v.device(),
               " but found_inf is on ", found_inf.device());
    LOOM_CHECK(v.is_contiguous(), "amp_unscale_and_check_: value ", i, " of shape ", v.sizes(),
               " is not contiguous");
  }
  if (values.empty()) return;
  get_kernel<Op::amp_unscale_and_check_>(found_inf.device())(values, found_inf, inv_scale);
}

}  // namespace loom
