/*
 * Fake quantization for quantization-aware training (QAT): quantize-then-dequantize inside the
 * float forward pass, so that the model trains against the rounding and clamping that INT8
 * inference will apply, while its weights and activations stay float:
 *
 *   x_q = clamp(nearbyint(x / scale) + zero_point, quant_min, quant_max)
 *   out = (x_q - zero_point) * scale
 *
 * round() has zero derivative almost everywhere, so backward uses the straight-through
 * estimator (Bengio et al. 2013): the gradient passes unchanged where x_q was not clamped and
 * is zero where it was. The learnable variants (LSQ, Esser et al. 2020) also train scale and
 * zero_point. Forward values and gradients equal PyTorch 1.13's fake_quantize_per_tensor_affine,
 * fake_quantize_per_channel_affine and _fake_quantize_learnable_per_{tensor,channel}_affine
 * (x / scale is computed as x * (1 / scale) in float32, as torch's CPU kernels do, and rounds
 * half to even). These are autograd operations written as custom backward nodes (the quant
 * layer sits above autograd, see autograd/node.h), CPU only.
 *
 * Common to every function: x is a Float32 CPU tensor of any shape (a non-contiguous one is
 * copied first); the result is a new contiguous Float32 tensor of x's shape. With grad mode
 * on and an input that requires grad, the result records a node; the non-learnable ones save
 * a one-byte mask per element for backward, not x. quant_min < quant_max, both within
 * [-2^23, 2^23] (so every integer of the range, and every difference of two, is exact in
 * float32). Throws loom::Error on bad input, naming the function and the offending value.
 */
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace loom::quant {

// Per-tensor fake quantization with a straight-through gradient for x (scale and zero_point
// receive none: they are observer statistics, not parameters).
// x: Float32 [*] -> Float32 [*]. scale: Float32, one element ([] or [1]), positive and finite
// with a finite reciprocal. zero_point: Int32 or Int64, one element, in [quant_min, quant_max].
// Throws on a non-float32 or non-CPU x, on a scale or zero_point of the wrong dtype, size or
// value, and on quant_min >= quant_max or a range outside [-2^23, 2^23].
Tensor fake_quantize_per_tensor(const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                                int64_t quant_min, int64_t quant_max);
Tensor fake_quantize_per_tensor(const Tensor& x, float scale, int32_t zero_point, int64_t quant_min,
                                int64_t quant_max);

// Per-channel fake quantization along `axis` (in [-x.dim(), x.dim()), negative counts from the
// end): element x[..., c, ...] uses scale[c] and zero_point[c]. Typical uses are axis 0 of a
// conv weight [C_out, C_in, kh, kw] or a linear weight [C_out, C_in].
// x: Float32 [..., C, ...] -> same shape. scale: Float32 [C], each positive and finite.
// zero_point: Int32 or Int64 [C], each in [quant_min, quant_max].
// Throws as fake_quantize_per_tensor does, and on a 0-dim x, an axis out of range, or a
// scale/zero_point whose length is not x.size(axis).
Tensor fake_quantize_per_channel(const Tensor& x, const Tensor& scale, const Tensor& zero_point, int64_t axis,
                                 int64_t quant_min, int64_t quant_max);

// Learnable per-tensor fake quantization (LSQ / LSQ+): scale and zero_point are Float32
// parameters that receive gradients. The forward uses zero_point rounded half to even and
// clamped to [quant_min, quant_max]. The gradients are torch 1.13's, elementwise then summed:
//   d out/d x     = 1 inside the range, 0 outside (straight-through);
//   d out/d scale = (x_q - zp) - x / scale inside, (quant_min - zp) or (quant_max - zp) outside
//                   (the clamped side);
//   d out/d zp    = 0 inside, -scale outside;
// with scale's and zp's gradients multiplied by grad_factor (LSQ uses 1 / sqrt(numel *
// quant_max)). As in torch, backward takes zp as trunc(clamp(zp + 0.5, quant_min, quant_max)),
// not the forward's round-half-even: they differ for a negative non-integer zero_point (-0.7:
// forward -1, backward 0) and for halves with an even floor (2.5: forward 2, backward 3).
// x: Float32 [*] -> same shape. scale: Float32 [] or [1], positive and finite. zero_point:
// Float32 [] or [1] (any value: it is clamped). quant_min <= 0 <= quant_max (torch requires
// the range to contain 0 for these). Throws as fake_quantize_per_tensor does, and on a range
// that excludes 0. Backward throws under create_graph when a second derivative would need to
// go through it (torch 1.13 does not differentiate this backward either).
Tensor fake_quantize_learnable_per_tensor(const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                                          int64_t quant_min, int64_t quant_max, double grad_factor = 1.0);

// Learnable per-channel fake quantization along `axis`: the per-channel version of the above;
// zero_point[c] is rounded half to even and clamped, in forward and backward alike (torch
// 1.13's per-channel backward rounds, unlike its per-tensor one).
// x: Float32 [..., C, ...] -> same shape. scale: Float32 [C], each positive and finite.
// zero_point: Float32 [C]. Gradients of scale and zero_point: Float32 [C].
// Throws as fake_quantize_per_channel and fake_quantize_learnable_per_tensor do.
Tensor fake_quantize_learnable_per_channel(const Tensor& x, const Tensor& scale, const Tensor& zero_point,
                                           int64_t axis, int64_t quant_min, int64_t quant_max,
                                           double grad_factor = 1.0);

}  // namespace loom::quant
