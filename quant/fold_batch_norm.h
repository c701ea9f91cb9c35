/*
 * Folding an eval-mode BatchNorm into the convolution (or linear layer) before it, the first
 * step of post-training quantization: the quantized model then has one integer kernel where
 * the float model had two ops, and BatchNorm's per-channel scale is absorbed into the
 * per-channel weight scales instead of being applied in float.
 *
 *   BN(conv(x)) = gamma * (W x + b - mean) / sqrt(var + eps) + beta
 *               = (k * W) x + (k * (b - mean) + beta),      k = gamma / sqrt(var + eps)
 */
#pragma once

#include "core/tensor.h"
#include "nn/layers/batch_norm.h"

namespace loom::quant {

// The folded weight and bias of a layer followed by `bn` (computed in float64, returned in the
// weight's dtype). weight: [C_out, ...] (a Conv2d's [C_out, C_in/groups, kh, kw] or a Linear's
// [C_out, C_in]); bias: [C_out] or undefined (no bias). Uses bn's running statistics (the
// eval-mode BatchNorm), whatever mode it is in.
// Throws loom::Error when bn has no running statistics or its channel count is not C_out.
struct FoldedWeights {
  Tensor weight;
  Tensor bias;
};
FoldedWeights fold_batch_norm(const Tensor& weight, const Tensor& bias, const nn::BatchNormBase& bn);

}  // namespace loom::quant
