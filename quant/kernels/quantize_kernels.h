/*
 * Fast per-tensor conversions of activations between float32 and 8-bit integers: the first
 * int8 layer quantizes the model's float input, the last one (or a float op between int8
 * layers) dequantizes. They run on every inference call, so they are vectorised (AVX-512 where
 * the build has it) and split over threads for large tensors.
 *
 * Semantics are PyTorch's quantize_per_tensor / dequantize:
 *   q = clamp(round_half_even(x * (1 / scale)) + zero_point, qmin, qmax)
 *   x = (q - zero_point) * scale
 * (multiplying by the float reciprocal, as fbgemm and torch's reference kernel do, so that ties
 * round the same way).
 */
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace loom::quant {

// x: Float32 of any shape -> UInt8 or Int8 of the same shape (and the same strides when x is
// contiguous or channels-last NCHW; contiguous otherwise). scale > 0 and finite; zero_point in
// the range of dtype. NaN becomes qmin (as torch's kernels in practice). Throws loom::Error naming the bad
// dtype, scale or zero point.
Tensor quantize_per_tensor_fast(const Tensor& x, float scale, int32_t zero_point, DType dtype);

// q: UInt8 or Int8 of any shape -> Float32 of the same shape (same layout rule as above).
// Throws loom::Error on another dtype, a non-positive scale or a zero point outside q's range.
Tensor dequantize_per_tensor_fast(const Tensor& q, float scale, int32_t zero_point);

}  // namespace loom::quant
