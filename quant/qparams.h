/*
 * Quantization parameters and the affine map they define, shared by every part of INT8
 * quantization (observers choose them, fake-quant and the int8 kernels apply them):
 *
 *   real = scale * (q - zero_point),     q = clamp(round(real / scale) + zero_point, qmin, qmax)
 *
 * with one (scale, zero_point) per tensor or one per channel along an axis (weights). The
 * rules follow torch.ao.quantization so that a model calibrated here and in PyTorch gets the
 * same integers: the range always contains 0 (zero padding and ReLU zeros must be exact),
 * scale is at least FLT_EPSILON, and rounding is half-to-even on x * (1 / scale), as fbgemm's
 * and torch's reference kernels compute it.
 */
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "core/tensor.h"

namespace loom::quant {

// Quantization parameters of one tensor: real = scale * (q - zero_point), q in [quant_min, quant_max].
struct QParams {
  Tensor scale;       // Float32, shape [1] (per tensor) or [C] (per channel along `axis`)
  Tensor zero_point;  // Int32, same shape as scale
  int64_t axis = -1;  // -1: per tensor; else the channel axis of the tensor these parameters quantize
  DType dtype = DType::UInt8;  // DType::UInt8 or DType::Int8 (the stored integer type)
  int64_t quant_min = 0, quant_max = 255;

  bool per_channel() const { return axis >= 0; }
  // scale.numel(): 1 per tensor, C per channel. Throws when scale is undefined.
  int64_t num_channels() const;
  // The scale and zero point of channel c (c = 0 per tensor). Throws for c out of range.
  float scale_at(int64_t c) const;
  int32_t zero_point_at(int64_t c) const;
  // "per-tensor u8 [0, 255] scale=0.0123 zero_point=114", or per channel
  // "per-channel(axis=0) s8 [-128, 127] 64 channels scale=[0.01, 0.02, ...] zero_point=[0, 0, ...]".
  std::string to_string() const;
  // Throws loom::Error (naming `op`) unless the fields are consistent: scale Float32 [1] or [C],
  // finite and > 0; zero_point Int32 of the same shape; dtype UInt8 or Int8; quant_min <=
  // quant_max inside the dtype's range; axis -1 with one scale, or >= 0.
  void validate(const char* op) const;
};

// Integer range of a quantized dtype: UInt8 -> [0, 255], Int8 -> [-128, 127]; reduce_range halves it
// (7 bits: [0, 127] / [-64, 63]) like torch's reduce_range. Throws for other dtypes.
std::pair<int64_t, int64_t> quant_range(DType dtype, bool reduce_range = false);
// The same with `bits` (1..8) bits of the 8-bit storage: UInt8 -> [0, 2^bits - 1], Int8 ->
// [-2^(bits-1), 2^(bits-1) - 1]; reduce_range takes one bit more away. Throws for bits outside
// [2, 8] (or [3, 8] with reduce_range) and for other dtypes.
std::pair<int64_t, int64_t> quant_range(DType dtype, bool reduce_range, int64_t bits);

// torch.ao.quantization semantics (ObserverBase._calculate_qparams), computed in float32 as torch
// does: min is lowered to <= 0 and max raised to >= 0 (zero must be exactly representable);
//   affine:    scale = (max - min) / (qmax - qmin), zero_point = qmin - round(min / scale)
//              clamped to [qmin, qmax];
//   symmetric: scale = max(|min|, |max|) / ((qmax - qmin) / 2), zero_point = 0 for Int8 and the
//              middle of the range, (qmin + qmax + 1) / 2, for UInt8: 128 for [0, 255]. (torch
//              keeps 128 with reduce_range too, where qmax is 127 and every positive value would
//              clamp; the middle, 64, is what it means.)
// scale is at least FLT_EPSILON (torch's eps, torch.finfo(torch.float32).eps). Returns per-tensor
// QParams (axis -1). Throws for min > max or non-finite values, naming them.
QParams choose_qparams(float min, float max, DType dtype, bool symmetric, bool reduce_range = false);
// The same for an explicit integer range [quant_min, quant_max] inside dtype's range (fewer bits).
QParams choose_qparams(float min, float max, DType dtype, bool symmetric, int64_t quant_min,
                       int64_t quant_max);
// Per channel: mins/maxs are Float32 [C] (other floating dtypes are converted). axis (>= 0) is
// stored in the result. Throws for shapes that are not [C] and equal, axis < 0, or a channel
// whose min > max or is not finite (naming the channel).
QParams choose_qparams_per_channel(const Tensor& mins, const Tensor& maxs, int64_t axis, DType dtype,
                                   bool symmetric, bool reduce_range = false);
QParams choose_qparams_per_channel(const Tensor& mins, const Tensor& maxs, int64_t axis, DType dtype,
                                   bool symmetric, int64_t quant_min, int64_t quant_max);

// q = clamp(round_half_even(x * (1 / scale)) + zero_point, quant_min, quant_max) as qp.dtype
// (torch rounds half to even via nearbyint, multiplying by the float reciprocal); per channel
// along qp.axis. x: any shape, any floating dtype (converted to Float32), contiguous or not;
// the result is contiguous on the CPU, same shape. NaN becomes quant_min.
// Throws for a non-float input, invalid qparams (QParams::validate), an axis out of range or a
// channel count that differs from x.size(axis).
Tensor quantize(const Tensor& x, const QParams& qp);
// real = scale * (q - zero_point) as Float32, same shape (contiguous). q must have qp.dtype.
// Throws for another dtype and the same qparams errors as quantize.
Tensor dequantize(const Tensor& q, const QParams& qp);
// The same round trip in float (quantize then dequantize) in one pass, without autograd: what
// fake-quant computes. Returns x's floating dtype, contiguous on the CPU (the arithmetic is in
// float32). Throws as quantize.
Tensor quantize_dequantize(const Tensor& x, const QParams& qp);

}  // namespace loom::quant
