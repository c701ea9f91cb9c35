/*
 * Batch and layer normalisation with their backward functions.
 *   y = (x - mean) / sqrt(var + eps) * weight + bias
 * batch_norm normalises over (N, H, W) per channel C of x [N, C, *]; layer_norm over the
 * trailing `normalized_shape` dims. Statistics are computed in float32 (float64 for f64).
 */
#pragma once

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

}  // namespace loom
