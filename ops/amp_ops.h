/*
 * Mixed-precision helper ops: the fused unscale-and-check pass of GradScaler
 * (torch._amp_foreach_non_finite_check_and_unscale_), on the CPU and on CUDA.
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

}  // namespace loom
