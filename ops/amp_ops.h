/*
 * Mixed-precision helper ops of GradScaler, on the CPU and on CUDA: the fused unscale-and-check
 * pass (torch._amp_foreach_non_finite_check_and_unscale_) and the scale update
 * (torch._amp_update_scale_). Both read their scalars from tensors when they run, so that a
 * step with loss scaling can be captured into a CUDA graph and each replay uses its own scale.
 */
#pragma once

#include <vector>

#include "core/tensor.h"

namespace loom {

// Multiplies every tensor of `values` by inv_scale in place, in one pass that also tests each
// value for inf/NaN, and sets found_inf to 1 if any value was inf or NaN before (found_inf is
// left as it was otherwise, so one flag can collect several calls). `values`: contiguous
// float32, float64 or bfloat16 tensors, all on found_inf's device; found_inf: a float32 tensor
// of one element. float64 values are scaled in double by the float inv_scale, the others in
// float, as torch does. Not recorded by autograd (GradScaler calls it under NoGradGuard).
// Throws loom::Error naming the tensor's position for an undefined, non-contiguous, float16 or
// integral value, a value on another device, or a found_inf that is not float32 [1].
void amp_unscale_and_check_(const std::vector<Tensor>& values, const Tensor& found_inf, float inv_scale);
// The same with inv_scale read from a float32 tensor of one element on found_inf's device when
// the pass runs. Throws as above, and for an inv_scale of another dtype, size or device.
void amp_unscale_and_check_(const std::vector<Tensor>& values, const Tensor& found_inf,
                            const Tensor& inv_scale);

// One update of a dynamic loss scale, in place, on the tensors' device (torch._amp_update_scale_):
//   found_inf != 0:  scale *= backoff_factor, growth_tracker = 0;
//   otherwise, if growth_tracker + 1 == growth_interval: scale *= growth_factor unless that
//     overflows float32, growth_tracker = 0;  else ++growth_tracker.
// The products are computed in double and stored in float32, as torch does. scale: float32 [1];
// growth_tracker: int32 [1]; found_inf: float32 [1]; all on one device. Nothing is read back to
// the host. Throws loom::Error naming amp_update_scale_ for a tensor of another dtype, size or
// device, growth_factor not > 1, backoff_factor outside (0, 1) or growth_interval < 1.
void amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                       double growth_factor, double backoff_factor, int64_t growth_interval);

}  // namespace loom
