/*
 * Exact int8 products on CPUs without VNNI.
 *
 * There, oneDNN's u8 x s8 kernels multiply with vpmaddubsw, which adds two products in a
 * saturating int16: 255 * 127 * 2 = 64770 comes out as 32767, and the layer's output is wrong
 * with no error (measured on an AVX2 AMD EPYC: a 256-long dot product of 255s and 127s gave
 * 4,194,176 instead of 8,290,560). PyTorch's fbgemm avoids it by quantizing activations to 7
 * bits (reduce_range), which changes the model's numbers.
 *
 * Loom keeps them exact instead. Each weight is split into two halves of at most 64 in
 * magnitude, w = (w - (w >> 1)) + (w >> 1), and the input is repeated along the reduced dim, so
 *     x . w = [x, x] . [w - (w >> 1); w >> 1]
 * and any two adjacent products now sum to at most 2 * 255 * 64 = 32640: no saturation, the same
 * int32 sum, the same scales, bias, zero points and output transform. It costs twice the
 * products, on CPUs that need it only.
 */
#pragma once

#include "core/tensor.h"

namespace loom::quant {

// Whether this CPU's oneDNN saturates u8 x s8 products (asked once, by running a two-element
// product that saturates where it would).
bool int8_products_saturate();

// The weight halves [w - (w >> 1), w >> 1] of an int8 weight [out, in_per_group, ...] (2-D for a
// linear layer, [out, in / groups, kh, kw] for a convolution) side by side along dim 1:
// [out, 2 * in_per_group, ...].
Tensor split_weight_halves(const Tensor& weight);

// The u8 input [N, C, ...] with each group's channels repeated once: [N, 2 * C, ...] in the
// order split_weight_halves expects (group g: its C / groups channels, then the same again).
Tensor repeat_input_channels(const Tensor& x, int64_t groups);

}  // namespace loom::quant
