/*
 * INT8 inference ops: the integer stages of a quantized model (quant::QuantizedModel) as ops of
 * the table, so that they run on every device. On the CPU, QuantizedModel keeps its oneDNN
 * layers (quant/kernels/); these ops' CPU kernels are plain references with the same arithmetic,
 * the values the CUDA kernels are tested against. On CUDA the GEMM is cuBLASLt's INT8 IMMA path
 * (s8 x s8 -> s32, ops/cuda/int8_kernels.cpp).
 *
 * Activations are uint8 with a zero point (r = scale * (q - zero_point)), weights int8 and
 * symmetric with one scale per output channel, as quant/qparams.h chooses them. None of these
 * ops is recorded by autograd: a quantized model is for inference.
 */
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"
#include "ops/kernel_types.h"

namespace loom {

// x uint8 [M, K], w int8 [O, K], scales float32 [O] or [1] (positive), bias float32 [O] or
// undefined -> [M, O] in out_dtype (float32, uint8 or int8), contiguous, computed from the int32
// sums acc[m, c] = sum_k x[m, k] w[c, k] with the epilogue of ops/kernel_types.h (Int8Epilogue).
// Any strides for x (made contiguous). Throws loom::Error naming the op, the shapes, dtypes and
// devices on a mismatch (K = 0 included), or on a zero point outside its dtype's range.
Tensor int8_linear(const Tensor& x, const Tensor& w, const Tensor& scales, const Tensor& bias, DType out_dtype,
                   const Int8Epilogue& epilogue);

// The patches of a uint8 convolution input: x [N, C, H, W] (any strides) -> uint8
// [N * Ho * Wo, C * kh * kw] with Ho = (H + 2 padding - dilation (kh - 1) - 1) / stride + 1;
// padding reads pad_value (in [0, 255]). int8_linear of it with the flattened weight [O, C*kh*kw]
// is the convolution, one row per output position (an NHWC result). Throws loom::Error on a
// non-uint8 input, groups != 1, bad params or an empty output.
Tensor int8_im2col(const Tensor& x, std::array<int64_t, 2> kernel, const Conv2dParams& params, int32_t pad_value);

// Max pooling of uint8 or int8 [N, C, H, W] (torch's floor mode, no dilation): dequantization is
// increasing, so the max of the integers is the max of the real values and the qparams pass
// through. The output has x's dtype and is NHWC-strided when x is (contiguous NCHW otherwise);
// padded positions never win. A batch of 0 gives an empty output. Throws loom::Error unless
// kernel, stride >= 1, 0 <= padding <= kernel / 2 and the kernel fits the padded input.
Tensor int8_max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                       std::array<int64_t, 2> padding);

// float32 x -> uint8 or int8 of x's shape: clamp(round_half_even(x * (1 / scale)) + zero_point),
// NaN to the minimum (quant::quantize_per_tensor_fast's and torch's rule). Throws loom::Error
// on another dtype, a scale that is not positive and finite, or a zero point out of range.
Tensor quantize_per_tensor(const Tensor& x, float scale, int32_t zero_point, DType dtype);

// uint8 or int8 q -> float32 (q - zero_point) * scale. Throws loom::Error as above.
Tensor dequantize_per_tensor(const Tensor& q, float scale, int32_t zero_point);

}  // namespace loom
