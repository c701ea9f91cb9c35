/*
 * Max pooling on quantized activations, between the int8 convolutions of a quantized CNN.
 *
 * Dequantization x = s * (q - zp) is monotonic increasing (s > 0), so the max of the real
 * values is the dequantized max of the integers: pooling runs on the integers and the qparams
 * pass through unchanged. No conversion to float and back.
 */
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace loom::quant {

// x: UInt8 or Int8 [N, C, H, W] (contiguous NCHW or NHWC-strided) -> the same dtype
// [N, C, Ho, Wo] with Ho = (H + 2 padding - kernel) / stride + 1 (torch's floor mode), laid
// out as x (NHWC-strided stays NHWC-strided, anything else gives contiguous NCHW). Padded
// positions never win (as torch, which pads with -inf). Throws loom::Error naming the value
// unless kernel >= 1, stride >= 1, 0 <= padding <= kernel / 2, and the output is not empty.
Tensor int8_max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding = 0);

}  // namespace loom::quant
