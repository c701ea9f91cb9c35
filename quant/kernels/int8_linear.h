/*
 * Int8Linear: a fully connected layer that computes in 8-bit integers on the CPU (oneDNN's
 * u8 x s8 -> s32 matmul, AVX-512 VNNI), the kernel under the quantized modules.
 *
 * Why: a trained float model becomes a real INT8 model, ~4x smaller and several times faster,
 * only if the matrix products themselves run on integers. The quantized modules (PTQ/QAT flows)
 * hold one of these per layer and chain them: each layer requantizes its output to the next
 * layer's u8 input (with ReLU fused), and the last one dequantizes to float.
 *
 * The input zero point is folded into the bias. With symmetric weights (zero point 0),
 *   sum_k (x_q[k] - x_zp) W[c,k] = sum_k x_q[k] W[c,k] - x_zp * sum_k W[c,k],
 * and the second term is a constant per output channel. oneDNN's own source zero point would
 * instead recompute a compensation on every call; the fold costs nothing at run time.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace loom::quant {

// What an int8 layer produces: float32 (dequantized: the last layer of a model) or u8/s8
// requantized with (scale, zero_point), optionally with ReLU fused (applied in the real domain
// before requantization, i.e. the output is clamped at the zero point).
struct Int8Output {
  DType dtype = DType::Float32;  // Float32, UInt8 or Int8
  float scale = 1.0f;            // for UInt8/Int8 outputs
  int32_t zero_point = 0;
  bool relu = false;
};

// What an int8 layer is built from, and what a quantized-model file stores for it.
struct Int8LayerParams {
  Tensor weight;         // Int8 [out, in] or [out, in / groups, kh, kw], symmetric (zero point 0)
  Tensor weight_scales;  // Float32 [out] (per output channel) or [1] (per tensor)
  Tensor bias;           // Float32 [out], or undefined
  float input_scale = 1.0f;  // of the u8 input
  int32_t input_zero_point = 0;
  Int8Output output;
};

namespace detail {
// Detached contiguous copies of a layer's tensors: a layer keeps no autograd graph alive and
// sees no later in-place edit of the tensors it was built from.
Int8LayerParams detached_layer_params(const Tensor& weight, const Tensor& weight_scales, const Tensor& bias,
                                      float input_scale, int32_t input_zero_point, const Int8Output& output);
// Throws loom::Error naming `op` unless x is a defined CPU tensor of UInt8 (or Float32, which the
// layer quantizes itself).
void check_int8_input(std::string_view op, const Tensor& x);
// Shared by the int8 layers (Int8Linear, Int8Conv2d). Throws loom::Error naming `op` on a bad
// output description (dtype not Float32/UInt8/Int8, scale not positive and finite, zero point
// outside the dtype's range).
void check_int8_output(std::string_view op, const Int8Output& output);
// Checks the int8 weight / scales / bias / input qparams of a layer with `out_channels` output
// channels and computes what oneDNN needs, per output channel c (alpha[c] = input_scale *
// weight_scale[c]):
//   scales[c] = alpha[c] (Float32 output) or alpha[c] / output.scale (requantized output),
//   bias[c]   = bias[c] / alpha[c] - fold_zero_point * sum(weight[c])  (oneDNN 2.x adds the
//               bias to the int32 accumulator before scaling).
// A single scale and no bias when the weight scales are per tensor, there is no bias and no
// zero point to fold. Throws loom::Error naming `op`.
struct ChannelParams {
  std::vector<float> scales;
  std::vector<float> bias;
};
ChannelParams channel_params(std::string_view op, const Tensor& weight, const Tensor& weight_scales,
                             const Tensor& bias, float input_scale, int32_t input_zero_point,
                             const Int8Output& output, bool fold_zero_point);
}  // namespace detail

// An INT8 fully connected layer:
//   y = dequant/requant( (x_q - x_zp) W_q^T * (x_scale * w_scale[c]) + bias[c] ).
// Weights are reordered once into oneDNN's preferred blocked layout at construction; the
// primitives are cached per batch size (batch 1 and 128 both fast). forward() is thread-safe.
class Int8Linear {
 public:
  // weight: Int8 [out, in] (symmetric: zero point 0); weight_scales: Float32 [out] (per output
  // channel) or [1] (per tensor), positive; bias: Float32 [out] or undefined; input qparams of
  // the u8 input: input_scale > 0, input_zero_point in [0, 255]; output: see Int8Output.
  // Throws loom::Error naming the bad argument (dtype, shape or value).
  Int8Linear(const Tensor& weight, const Tensor& weight_scales, const Tensor& bias, float input_scale,
             int32_t input_zero_point, Int8Output output);
  ~Int8Linear();
  Int8Linear(Int8Linear&&) noexcept;
  Int8Linear& operator=(Int8Linear&&) noexcept;

  // x: UInt8 [N, in] -> [N, out] in output().dtype. Also accepts Float32 [N, in]: it is then
  // quantized with (input_scale, input_zero_point) first. Throws loom::Error naming the shape
  // or dtype when x is not a 2-D UInt8/Float32 CPU tensor with in_features columns.
  Tensor forward(const Tensor& x) const;

  int64_t in_features() const;
  int64_t out_features() const;
  // The parameters it was built from (for saving): the int8 weight [out, in] in plain layout,
  // the scales, the bias (undefined when none), the input qparams and the output.
  const Int8LayerParams& params() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::quant
