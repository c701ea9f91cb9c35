/*
 * The interface of the CUDA convolution and pooling kernels (ops/cuda/conv_pool.cu) for the C++20
 * side (conv_pool_kernels.cpp): the geometry of one convolution or pooling as plain integers, the
 * element strides of each 4-D [N, C, H, W] operand, and the launchers. Plain C++17, like
 * launchers.h, because the .cu files see no Loom headers.
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/launchers.h"

namespace loom::cuda {

// Element strides of a 4-D tensor, in (N, C, H, W) order: NCHW-contiguous, channels_last or any
// other view.
struct Strides4 {
  int64_t v[4] = {};
};

// x [n, cin, h, w], weight [cout, cin / groups, kh, kw], out [n, cout, ho, wo].
struct ConvGeometry {
  int64_t n = 0, cin = 0, h = 0, w = 0, cout = 0, kh = 0, kw = 0, ho = 0, wo = 0;
  int64_t stride[2] = {1, 1}, padding[2] = {0, 0}, dilation[2] = {1, 1};
  int64_t groups = 1;
};

// x [n, c, h, w] pooled to out [n, c, ho, wo]. kernel/stride/padding/dilation are unused by the
// adaptive pool.
struct PoolGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0, ho = 0, wo = 0;
  int64_t kernel[2] = {1, 1}, stride[2] = {1, 1}, padding[2] = {0, 0}, dilation[2] = {1, 1};
  bool count_include_pad = true;
};

// All pointers are device memory of the floating dtype `dtype` (indices: int64). Each returns the
// launch status.

// out = conv(x, w) + bias; bias may be null (no bias), else [cout] with element stride bias_stride.
cudaError_t launch_conv2d(int dtype, void* out, Strides4 out_s, const void* x, Strides4 x_s, const void* w,
                          Strides4 w_s, const void* bias, int64_t bias_stride, const ConvGeometry& g,
                          cudaStream_t stream);

// grad_input [n, cin, h, w] from grad_out [n, cout, ho, wo] and w.
cudaError_t launch_conv2d_backward_input(int dtype, void* grad_input, Strides4 gi_s, const void* grad_out,
                                         Strides4 go_s, const void* w, Strides4 w_s, const ConvGeometry& g,
                                         cudaStream_t stream);

// grad_weight [cout, cin / groups, kh, kw] from grad_out and x; grad_bias [cout] (element stride
// gb_stride) too unless it is null.
cudaError_t launch_conv2d_backward_weight(int dtype, void* grad_weight, Strides4 gw_s, void* grad_bias,
                                          int64_t gb_stride, const void* grad_out, Strides4 go_s,
                                          const void* x, Strides4 x_s, const ConvGeometry& g,
                                          cudaStream_t stream);

// out and indices (flat h * w + w within each plane) of max pooling.
cudaError_t launch_max_pool2d(int dtype, void* out, Strides4 out_s, int64_t* indices, Strides4 idx_s,
                              const void* x, Strides4 x_s, const PoolGeometry& g, cudaStream_t stream);

// *bad = the smallest position, in [n, c, ho, wo] order, of an index of `indices` outside
// [0, h * w), if that is smaller than *bad (the caller sets it to all ones, "none", first).
cudaError_t launch_check_pool_indices(unsigned long long* bad, const int64_t* indices, Strides4 idx_s,
                                      const PoolGeometry& g, cudaStream_t stream);

cudaError_t launch_max_pool2d_backward(int dtype, void* grad_input, Strides4 gi_s, const void* grad_out,
                                       Strides4 go_s, const int64_t* indices, Strides4 idx_s,
                                       const PoolGeometry& g, cudaStream_t stream);

cudaError_t launch_avg_pool2d(int dtype, void* out, Strides4 out_s, const void* x, Strides4 x_s,
                              const PoolGeometry& g, cudaStream_t stream);

cudaError_t launch_avg_pool2d_backward(int dtype, void* grad_input, Strides4 gi_s, const void* grad_out,
                                       Strides4 go_s, const PoolGeometry& g, cudaStream_t stream);

cudaError_t launch_adaptive_avg_pool2d(int dtype, void* out, Strides4 out_s, const void* x, Strides4 x_s,
                                       const PoolGeometry& g, cudaStream_t stream);

cudaError_t launch_adaptive_avg_pool2d_backward(int dtype, void* grad_input, Strides4 gi_s,
                                                const void* grad_out, Strides4 go_s, const PoolGeometry& g,
                                                cudaStream_t stream);

}  // namespace loom::cuda
