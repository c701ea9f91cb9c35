/*
 * The INT8 inference ops (see int8_ops.h): validation with messages that name the op, the
 * shapes and the dtypes, output allocation, then one kernel call on the inputs' device.
 */
#include "ops/int8_ops.h"

#include <cmath>
#include <string_view>

#include "core/error.h"
#include "ops/copy_ops.h"
#include "ops/dispatch.h"
#include "ops/memory_format.h"
#include "ops/op_utils.h"
#include "ops/view_ops.h"

namespace loom {

namespace {

void check_dtype_range(std::string_view op, std::string_view what, int32_t value, DType dtype) {
  const int32_t lo = dtype == kUInt8 ? 0 : -128, hi = dtype == kUInt8 ? 255 : 127;
  LOOM_CHECK(value >= lo && value <= hi, op, ": ", what, " ", value, " is outside the range [", lo, ", ", hi,
             "] of ", dtype);
}

void check_qparams(std::string_view op, float scale, int32_t zero_point, DType dtype) {
  LOOM_CHECK(dtype == kUInt8 || dtype == kInt8, op, ": expected a uint8 or int8 quantized dtype, got ", dtype);
  LOOM_CHECK(std::isfinite(scale) && scale > 0, op, ": expected a positive finite scale, got ", scale);
  check_dtype_range(op, "zero point", zero_point, dtype);
}

}  // namespace

Tensor int8_linear(const Tensor& x, const Tensor& w, const Tensor& scales, const Tensor& bias, DType out_dtype,
                   const Int8Epilogue& epilogue) {
  constexpr std::string_view op = "int8_linear";
  check_defined(x, op, "x");
  check_defined(w, op, "weight");
  check_defined(scales, op, "scales");
  LOOM_CHECK(x.dtype() == kUInt8 && w.dtype() == kInt8 && scales.dtype() == kFloat32, op,
             ": expected x uint8, weight int8 and scales float32, got ", x.dtype(), ", ", w.dtype(), " and ",
             scales.dtype());
  LOOM_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1) && w.size(1) > 0, op,
             ": expected x [M, K] and weight [O, K] with K >= 1, got ", x.sizes(), " and ", w.sizes());
  const int64_t out_features = w.size(0);
  LOOM_CHECK(scales.dim() == 1 && (scales.numel() == out_features || scales.numel() == 1), op,
             ": expected scales of shape [", out_features, "] or [1], got ", scales.sizes());
  check_same_device(x, w, op);
  check_same_device(x, scales, op);
  if (bias.defined()) {
    LOOM_CHECK(bias.dtype() == kFloat32 && bias.dim() == 1 && bias.numel() == out_features, op,
               ": expected a float32 bias of shape [", out_features, "], got ", bias.dtype(), " ", bias.sizes());
    check_same_device(x, bias, op);
  }
  LOOM_CHECK(out_dtype == kFloat32 || out_dtype == kUInt8 || out_dtype == kInt8, op,
             ": expected an output dtype float32, uint8 or int8, got ", out_dtype);
  check_dtype_range(op, "input zero point", epilogue.input_zero_point, kUInt8);
  if (out_dtype != kFloat32) check_dtype_range(op, "output zero point", epilogue.output_zero_point, out_dtype);
  Tensor out = empty({x.size(0), out_features}, x.options().dtype(out_dtype));
  if (out.numel() == 0) return out;
  get_kernel<Op::int8_linear>(x.device())(out, contiguous(x), contiguous(w), contiguous(scales),
                                          bias.defined() ? contiguous(bias) : bias, epilogue);
  return out;
}

Tensor int8_im2col(const Tensor& x, std::array<int64_t, 2> kernel, const Conv2dParams& p, int32_t pad_value) {
  constexpr std::string_view op = "int8_im2col";
  check_defined(x, op);
  LOOM_CHECK(x.dtype() == kUInt8 && x.dim() == 4, op, ": expected a uint8 input [N, C, H, W], got ", x.dtype(),
             " ", x.sizes());
  LOOM_CHECK(p.groups == 1, op, ": expected groups == 1, got ", p.groups);
  check_dtype_range(op, "pad value", pad_value, kUInt8);
  int64_t out_hw[2];
  for (int d = 0; d < 2; ++d) {
    LOOM_CHECK(kernel[d] >= 1 && p.stride[d] >= 1 && p.dilation[d] >= 1 && p.padding[d] >= 0, op,
               ": expected kernel, stride, dilation >= 1 and padding >= 0, got kernel (", kernel[0], ", ",
               kernel[1], "), stride (", p.stride[0], ", ", p.stride[1], "), dilation (", p.dilation[0], ", ",
               p.dilation[1], "), padding (", p.padding[0], ", ", p.padding[1], ")");
    out_hw[d] = (x.size(2 + d) + 2 * p.padding[d] - p.dilation[d] * (kernel[d] - 1) - 1) / p.stride[d] + 1;
    LOOM_CHECK(out_hw[d] >= 1, op, ": the kernel (", kernel[0], ", ", kernel[1], ") does not fit input ",
               x.sizes(), " with padding (", p.padding[0], ", ", p.padding[1], ")");
  }
  Tensor out = empty({x.size(0) * out_hw[0] * out_hw[1], x.size(1) * kernel[0] * kernel[1]}, x.options());
  if (out.numel() > 0) get_kernel<Op::int8_im2col>(x.device())(out, x, kernel, p, pad_value);
  return out;
}

Tensor int8_max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                       std::array<int64_t, 2> padding) {
  constexpr std::string_view op = "int8_max_pool2d";
  check_defined(x, op);
  LOOM_CHECK((x.dtype() == kUInt8 || x.dtype() == kInt8) && x.dim() == 4, op,
             ": expected a uint8 or int8 input [N, C, H, W], got ", x.dtype(), " ", x.sizes());
  Pool2dParams p;
  p.kernel = kernel;
  p.stride = stride;
  p.padding = padding;
  DimVector out_shape{x.size(0), x.size(1), 0, 0};
  for (int d = 0; d < 2; ++d) {
    LOOM_CHECK(kernel[d] >= 1 && stride[d] >= 1 && padding[d] >= 0 && padding[d] <= kernel[d] / 2, op,
               ": expected kernel, stride >= 1 and 0 <= padding <= kernel / 2, got kernel (", kernel[0], ", ",
               kernel[1], "), stride (", stride[0], ", ", stride[1], "), padding (", padding[0], ", ", padding[1],
               ")");
    out_shape[2 + d] = (x.size(2 + d) + 2 * padding[d] - kernel[d]) / stride[d] + 1;
  }
  LOOM_CHECK(out_shape[2] >= 1 && out_shape[3] >= 1, op, ": the kernel (", kernel[0], ", ", kernel[1],
             ") with padding (", padding[0], ", ", padding[1], ") does not fit input ", x.sizes());
  Tensor out = empty_4d(out_shape, x.options(), is_channels_last(x));
  // A batch of 0 (or no channels) pools to an empty output, as max_pool2d's does.
  if (out.numel() > 0) get_kernel<Op::int8_max_pool2d>(x.device())(out, Tensor(), x, p);
  return out;
}

Tensor quantize_per_tensor(const Tensor& x, float scale, int32_t zero_point, DType dtype) {
  constexpr std::string_view op = "quantize_per_tensor";
  check_defined(x, op);
  LOOM_CHECK(x.dtype() == kFloat32, op, ": expected a float32 input, got ", x.dtype());
  check_qparams(op, scale, zero_point, dtype);
  Tensor out = empty(x.sizes(), x.options().dtype(dtype));
  if (out.numel() > 0) get_kernel<Op::quantize_per_tensor>(x.device())(out, x, scale, zero_point);
  return out;
}

Tensor dequantize_per_tensor(const Tensor& q, float scale, int32_t zero_point) {
  constexpr std::string_view op = "dequantize_per_tensor";
  check_defined(q, op);
  check_qparams(op, scale, zero_point, q.dtype());
  Tensor out = empty(q.sizes(), q.options().dtype(kFloat32));
  if (out.numel() > 0) get_kernel<Op::dequantize_per_tensor>(q.device())(out, q, scale, zero_point);
  return out;
}

}  // namespace loom
