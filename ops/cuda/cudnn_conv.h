/*
 * Loom's cuDNN convolution: 2-D convolution forward, backward data and backward filter through
 * the cuDNN 9 graph (backend) API. Per problem (kind, shapes, strides, alignment, dtype,
 * parameters) one operation graph with one convolution node is built, the heuristic (mode A) is
 * asked for engine configurations, and the first that finalizes into an execution plan, and whose
 * numerics Loom accepts, is cached; each call then only builds a variant pack and executes, with
 * the workspace from the caching allocator. The same code runs on a GPU and in the emulated
 * build (core/cuda/emulated/cudnn_graph.h).
 */
#pragma once

#include <cuda_runtime_api.h>

#include "core/tensor.h"
#include "ops/cuda/op_stream.h"
#include "ops/kernel_types.h"

namespace loom::cuda {

enum class CudnnConvKind {
  kForward,         // writes y from x and w
  kBackwardData,    // writes x (the input gradient) from y (the output gradient) and w
  kBackwardFilter,  // writes w (the weight gradient) from y (the output gradient) and x
};

// Whether the CUDA conv2d and batch_norm kernels try cuDNN first (torch.backends.cudnn.enabled);
// on by default. Off, they run Loom's own kernels, which is how the tests reach those on the
// emulated build.
void set_cudnn_enabled(bool enabled);
bool cudnn_enabled();

// One convolution with x [N, C, H, W], w [K, C / groups, R, S], y [N, K, P, Q], all on the
// current CUDA device with one dtype (f32, f64, f16, bf16), each dense in NCHW or NHWC order
// (sizes in NCHW order; strides say which). The written operand becomes the result, or, with
// `accumulate`, the result plus its prior contents (cuDNN's beta = 1), summed before the one
// rounding to the dtype. Returns false, writing nothing, when cuDNN has no engine for the
// problem (another dtype, layout or shape cuDNN does not run): the caller falls back. Throws
// loom::Error when a cuDNN call fails otherwise.
bool cudnn_convolution(CudnnConvKind kind, const Tensor& x, const Tensor& w, const Tensor& y,
                       const Conv2dParams& p, bool accumulate = false, cudaStream_t stream = op_stream());

}  // namespace loom::cuda
