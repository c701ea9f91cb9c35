/*
 * Batch and layer normalisation with their backward functions.
 *   y = (x - mean) / sqrt(var + eps) * weight + bias
 * batch_norm normalises over (N, H, W) per channel C of x [N, C, *]; layer_norm over the
 * trailing `normalized_shape` dims. Statistics are computed in float32 (float64 for f64).
 * group_norm and rms_norm are composites: group_norm runs layer_norm's kernels on the groups,
 * rms_norm is a few elementwise ops and a mean.
 */
#pragma once

#include <optional>
#include <tuple>

#include "core/tensor.h"

namespace loom {

// Updates running_mean/running_var in place when training and they are defined:
//   running = (1 - momentum) * running + momentum * batch_stat  (unbiased var)
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);
// out, save_mean, save_invstd (the stats backward needs; running stats in eval). Under autograd
// only out has history: the statistics are constants to the graph (they never require grad).
std::tuple<Tensor, Tensor, Tensor> batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                                      const Tensor& running_mean, const Tensor& running_var,
                                                      bool training, double momentum, double eps);
// grad_input, grad_weight, grad_bias (the last two undefined when weight is undefined)
std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& grad_out, const Tensor& x,
                                                       const Tensor& weight, const Tensor& save_mean,
                                                       const Tensor& save_invstd);

Tensor layer_norm(const Tensor& x, IntArrayRef normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
// out, mean, rstd (mean/rstd shaped like x's leading dims; without history under autograd)
std::tuple<Tensor, Tensor, Tensor> layer_norm_forward(const Tensor& x, IntArrayRef normalized_shape,
                                                      const Tensor& weight, const Tensor& bias, double eps);
std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& grad_out, const Tensor& x,
                                                       IntArrayRef normalized_shape, const Tensor& mean,
                                                       const Tensor& rstd, const Tensor& weight);

// x [N, C, *] -> the same shape: the C channels are split into num_groups groups of C /
// num_groups consecutive channels, and each (sample, group) is normalised over its channels
// and positions (biased variance), then weight [C] and bias [C] apply per channel. As
// torch.nn.functional.group_norm; under autocast it runs in float32, as torch. The result has
// x's dtype. Throws unless x has >= 2 dims and num_groups >= 1 divides C, or if weight or bias
// is not [C].
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);

// x [*, *normalized_shape] -> the same shape: x / sqrt(mean(x^2) + eps) * weight, the mean over
// the trailing normalized_shape dims (Zhang & Sennrich, 2019), as torch.nn.functional.rms_norm:
// 16-bit inputs are normalised in float32 and the result cast back before the weight, and eps
// defaults to the machine epsilon of the computing dtype (float32's, or float64's). Throws if
// the trailing dims differ from normalized_shape or weight is not normalized_shape.
Tensor rms_norm(const Tensor& x, IntArrayRef normalized_shape, const Tensor& weight = {},
                std::optional<double> eps = std::nullopt);

}  // namespace loom
