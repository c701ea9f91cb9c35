/*
 * Loom's cuDNN batch norm: forward (training and inference) and backward through the cuDNN 9
 * graph (backend) API, NORM_FORWARD / NORM_BACKWARD nodes in CUDNN_BATCH_NORM mode. cuDNN's
 * batch norm engines take channels_last (NHWC) activations, which is what a channels_last
 * network hands batch norm (ops/memory_format.h); Loom's own kernels (norm.cu) run the rest.
 * Plans are cached per problem as for the convolution (cudnn_graph.h); the same code runs on a
 * GPU and in the emulated build.
 *
 * Each call returns false, writing nothing, when it does not fit what cuDNN runs: activations
 * not 4-D, not packed channels_last or not f16/bf16/f32; statistics, parameters or running
 * statistics not float32 and dense; or no engine for the problem. The caller then falls back.
 * Throws loom::Error when a cuDNN call fails otherwise.
 */
#pragma once

#include <cuda_runtime_api.h>

#include "core/tensor.h"
#include "ops/cuda/op_stream.h"

namespace loom::cuda {

// out = (x - mean) * invstd * weight + bias per channel of x [N, C, H, W] (weight and bias
// float32 [C], or undefined for ones and zeros). Training: writes the batch's mean and invstd =
// 1 / sqrt(var + eps) into save_mean and save_invstd (float32 [C]) and, when running_mean and
// running_var are defined (float32 [C]), replaces them by (1 - momentum) * running + momentum *
// stat (the unbiased variance), as PyTorch does. Inference: reads save_mean and save_invstd,
// which the caller has filled from the running statistics.
bool cudnn_batch_norm(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& x,
                      const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                      const Tensor& running_var, bool training, double momentum, double eps,
                      cudaStream_t stream = op_stream());

// grad_input, and grad_weight and grad_bias (float32 [C], or undefined when not wanted), from
// grad_out and x [N, C, H, W] and the forward's save_mean and save_invstd.
bool cudnn_batch_norm_backward(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                               const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                               const Tensor& save_mean, const Tensor& save_invstd,
                               cudaStream_t stream = op_stream());

}  // namespace loom::cuda
