/*
 * The int8 layers of a QuantizedModel as ops of the table (ops/int8_ops.h), for devices other
 * than the CPU: on CUDA the GEMM is cuBLASLt's INT8 path. A linear layer is one int8_linear; a
 * convolution is int8_im2col (padding reads the input's zero point, i.e. real 0) then the same
 * int8_linear on the patches, whose [N * Ho * Wo, O] result is the NHWC output.
 *
 * The numbers are the CPU layers' (quant/kernels/): the per-channel scales and the bias come from
 * the same detail::channel_params, and the input zero point is folded into the bias exactly where
 * Int8Linear/Int8Conv2d fold it (a padded convolution subtracts it in int32 instead, as oneDNN's
 * source zero point does), so that both devices round the same float32 values.
 */
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"
#include "ops/kernel_types.h"
#include "quant/kernels/int8_conv2d.h"
#include "quant/kernels/int8_linear.h"

namespace loom::quant::detail {

struct DeviceLayer {
  Tensor weight;  // int8 [O, K] (a convolution's [O, C * kh * kw]) on the device
  Tensor scales;  // float32 [O] or [1]
  Tensor bias;    // float32 [O], or undefined
  Int8Epilogue epilogue;
  DType out_dtype = DType::Float32;
  float input_scale = 1;  // to quantize a float input (the model's first layer)
  int32_t input_zero_point = 0;
  bool conv = false;
  std::array<int64_t, 2> kernel{1, 1};
  Conv2dParams conv_params;
};

// The layer's tensors on `device`. Throws loom::Error for a grouped convolution (no device path).
DeviceLayer device_layer(const Int8Linear& linear, Device device);
DeviceLayer device_layer(const Int8Conv2d& conv, Device device);

// x on the layer's device: uint8 (or float32, quantized first with the layer's input qparams),
// [N, in] for a linear layer, [N, C, H, W] of any strides for a convolution -> [N, out] or
// [N, O, Ho, Wo] (NHWC-strided) in out_dtype. Throws loom::Error naming the shapes on a mismatch.
Tensor run_device_layer(const DeviceLayer& layer, const Tensor& x);

}  // namespace loom::quant::detail
