/*
 * Int8Conv2d: a 2-D convolution computed in 8-bit integers on the CPU (oneDNN's u8 x s8 ->
 * s32 convolution, AVX-512 VNNI), the kernel under the quantized conv modules. Same numerics
 * as Int8Linear (quant/kernels/int8_linear.h): symmetric per-output-channel int8 weights, a
 * u8 input with any zero point, float or requantized u8/s8 output with optional fused ReLU.
 *
 * Layout. Loom is NCHW; oneDNN's int8 convolutions run on NHWC ("acdb") activations. The
 * public forward takes and returns logical [N, C, H, W] tensors of any strides: a contiguous
 * NCHW input is reordered to NHWC inside, and the result is reordered back to contiguous
 * NCHW unless Int8ConvOptions::channels_last_output asks to keep it NHWC-strided (still
 * [N, C, H, W] to the rest of Loom, which follows strides). A chain of int8 layers set up that
 * way (conv, pool, conv) never reorders between layers.
 *
 * The input zero point: without padding it is folded into the bias as in Int8Linear; with
 * padding it cannot be (the padded border must read as the zero point, i.e. real 0, which
 * only the kernel knows), so oneDNN's source zero point is used.
 */
#pragma once

#include <cstdint>
#include <memory>

#include "core/tensor.h"
#include "quant/kernels/int8_linear.h"

namespace loom::quant {

struct Int8ConvOptions {
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1, groups = 1;
  // Return outputs NHWC-strided (logical shape still [N, C, Ho, Wo]): skips the reorder back to
  // NCHW when the next layer is int8 too.
  bool channels_last_output = false;
};

namespace detail {
// Whether x [N, C, H, W] is NHWC-strided (channels innermost, no gaps), ignoring the strides of
// size-1 dims. A 4-D tensor with C == 1 counts as both layouts.
bool is_channels_last(const Tensor& x);
}  // namespace detail

class Int8Conv2d {
 public:
  // weight: Int8 [out, in / groups, kh, kw] (symmetric); weight_scales: Float32 [out] or [1];
  // bias: Float32 [out] or undefined; input_scale > 0, input_zero_point in [0, 255]; options:
  // strides and dilations >= 1, paddings >= 0, groups >= 1 dividing out. Throws loom::Error
  // naming the bad argument.
  Int8Conv2d(const Tensor& weight, const Tensor& weight_scales, const Tensor& bias, float input_scale,
             int32_t input_zero_point, Int8ConvOptions options, Int8Output output);
  ~Int8Conv2d();
  Int8Conv2d(Int8Conv2d&&) noexcept;
  Int8Conv2d& operator=(Int8Conv2d&&) noexcept;

  // x: UInt8 (or Float32, quantized with the input qparams first) [N, in, H, W], any strides
  // -> [N, out, Ho, Wo] in output().dtype, Ho = (H + 2 pad_h - dilation_h (kh - 1) - 1) /
  // stride_h + 1 (floor), contiguous NCHW (or NHWC-strided, see channels_last_output). Throws
  // loom::Error naming the shape or dtype when x is not a 4-D UInt8/Float32 CPU tensor with
  // `in` channels, or when the output would be empty.
  Tensor forward(const Tensor& x) const;

  int64_t in_channels() const;
  int64_t out_channels() const;
  // The parameters it was built from (for saving): the plain int8 weight, scales, bias, input
  // qparams, output; and the convolution's options.
  const Int8LayerParams& params() const;
  const Int8ConvOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::quant
