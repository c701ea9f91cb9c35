/*
 * The activation functions beyond relu, gelu, silu, tanh and sigmoid (elementwise.h), with
 * torch.nn.functional's formulas, defaults, gradients at the kinks and NaN propagation.
 *
 * They are composites of recorded elementwise ops: every device that runs those runs these,
 * autograd differentiates them without formulas of their own (to any order), and autocast
 * treats them as their parts. The hot activations of today's models (relu, gelu, silu) have
 * fused kernels; these cost a few elementwise passes each.
 *
 * All take a floating tensor of any shape and return its shape and dtype; an integer or bool
 * input, an undefined one or a bad parameter throws loom::Error naming the op.
 */
#pragma once

#include "core/tensor.h"

namespace loom {

// x > 0 ? x : negative_slope * x. The gradient at 0 is negative_slope, as torch.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);

// x > 0 ? x : alpha * (exp(x) - 1). The gradient at 0 is alpha, as torch.
Tensor elu(const Tensor& x, double alpha = 1.0);

// scale * elu(x, alpha) with the self-normalising constants of Klambauer et al. (2017):
// alpha = 1.6732632423543772, scale = 1.0507009873554805.
Tensor selu(const Tensor& x);

// x > 0 ? x : alpha * (exp(x / alpha) - 1); the gradient is continuous (1 at 0). Throws if
// alpha is 0.
Tensor celu(const Tensor& x, double alpha = 1.0);

// log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold (where the two agree
// to the dtype's precision), as torch. Throws if beta is 0.
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);

// x clamped to [min_val, max_val]; unlike clamp, the gradient is 0 on the bounds themselves,
// as torch.nn.functional.hardtanh. Throws if min_val > max_val.
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);

// hardtanh(x, 0, 6)
Tensor relu6(const Tensor& x);

// 0 for x <= -3, 1 for x >= 3, x / 6 + 1/2 between (gradient 1/6 strictly inside only).
Tensor hardsigmoid(const Tensor& x);

// x * relu6(x + 3) / 6 (Howard et al., MobileNetV3). torch's gradient, x / 3 + 1/2, holds on
// the closed interval [-3, 3]; it is 0 below and 1 above.
Tensor hardswish(const Tensor& x);

// x * tanh(softplus(x)) (Misra, 2019)
Tensor mish(const Tensor& x);

// log(sigmoid(x)) = -softplus(-x), without overflow for large |x|.
Tensor log_sigmoid(const Tensor& x);

// x / (1 + |x|)
Tensor softsign(const Tensor& x);

// x > 0 ? x : weight * x with a learned slope: weight, of x's dtype, has 1 element (shared) or x.size(1)
// (one per channel of x [N, C, *]). Throws if weight's size is neither, naming both shapes.
Tensor prelu(const Tensor& x, const Tensor& weight);

}  // namespace loom
