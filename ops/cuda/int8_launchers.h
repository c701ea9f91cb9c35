/*
 * The interface of the CUDA INT8 kernels (ops/cuda/int8.cu) for the C++20 side
 * (int8_kernels.cpp, which runs the GEMM itself through cuBLASLt). Plain C++17, like launchers.h.
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/launchers.h"

namespace loom::cuda {

// dst int8 [rows, dst_cols] (row-major) = src [rows, src_cols] (row-major, src_cols <= dst_cols)
// with `shift` added to each value (as 8-bit wrap-around: -128 turns uint8 0..255 into int8
// -128..127) and zeros in the columns past src_cols (cuBLASLt's multiple-of-4 padding).
// src_dtype is kCodeUInt8 or kCodeInt8.
cudaError_t launch_int8_shift_pad(int8_t* dst, int64_t rows, int64_t dst_cols, const void* src, int src_dtype,
                                  int64_t src_cols, int shift, cudaStream_t stream);

// row_sums[r] = sum_c w[r, c] for w int8 [rows, cols] row-major (exact in int32).
cudaError_t launch_int8_row_sums(int32_t* row_sums, const int8_t* w, int64_t rows, int64_t cols,
                                 cudaStream_t stream);

// The requantization of ops/kernel_types.h's Int8Epilogue on the GEMM's int32 sums:
// out [rows, cols] (row-major, out_dtype kCodeFloat32, kCodeUInt8 or kCodeInt8) from
// acc[r * acc_ld + c] + correction_factor * row_sums[c] (the exact sum over the unshifted,
// zero-point-relative input), bias (null or [cols]) and scales ([cols], or [1] when
// !per_channel_scales).
struct Int8RequantArgs {
  void* out = nullptr;
  int out_dtype = kCodeFloat32;
  const int32_t* acc = nullptr;
  int64_t acc_ld = 0;
  const int32_t* row_sums = nullptr;
  int32_t correction_factor = 0;
  const float* bias = nullptr;
  const float* scales = nullptr;
  bool per_channel_scales = false;
  int64_t rows = 0, cols = 0;
  int32_t output_zero_point = 0;
  bool relu = false;
};
cudaError_t launch_int8_requantize(const Int8RequantArgs& args, cudaStream_t stream);

// A 4-D uint8/int8 tensor's sizes [N, C, H, W] and element strides.
struct Int8Image {
  int64_t sizes[4] = {};
  int64_t strides[4] = {};
};
// The convolution geometry of int8_im2col and int8_max_pool2d.
struct Int8Window {
  int64_t kernel[2] = {1, 1}, stride[2] = {1, 1}, padding[2] = {0, 0}, dilation[2] = {1, 1};
};

// out uint8 [N * Ho * Wo, C * kh * kw] (contiguous) = the patches of x (see ops/kernel_types.h's
// Int8Im2colKernel); positions in the padding read pad_value.
cudaError_t launch_int8_im2col(uint8_t* out, int64_t out_h, int64_t out_w, const uint8_t* x, const Int8Image& image,
                               const Int8Window& window, uint8_t pad_value, cudaStream_t stream);

// out = max pooling of x (dtype kCodeUInt8 or kCodeInt8) over window (no dilation); padded
// positions never win. out's sizes and strides in out_image.
cudaError_t launch_int8_max_pool2d(void* out, const Int8Image& out_image, const void* x, const Int8Image& image,
                                   int dtype, const Int8Window& window, cudaStream_t stream);

// quantize_per_tensor (float32 src -> dst of dst_dtype kCodeUInt8/kCodeInt8) and
// dequantize_per_tensor (src of src_dtype kCodeUInt8/kCodeInt8 -> float32 dst), over a strided
// layout (launchers.h).
cudaError_t launch_quantize_per_tensor(void* dst, int dst_dtype, const float* src, const StridedLayout& layout,
                                       int64_t numel, float scale, int32_t zero_point, cudaStream_t stream);
cudaError_t launch_dequantize_per_tensor(float* dst, const void* src, int src_dtype, const StridedLayout& layout,
                                         int64_t numel, float scale, int32_t zero_point, cudaStream_t stream);

}  // namespace loom::cuda
