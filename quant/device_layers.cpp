/* QuantizedModel's int8 layers as ops, for CUDA (see device_layers.h). */
#include "quant/device_layers.h"

#include "ops/ops.h"

namespace loom::quant::detail {

namespace {

Tensor channel_tensor(const std::vector<float>& values, Device device) {
  return tensor(values, {static_cast<int64_t>(values.size())}).to(device);
}

DeviceLayer make_layer(std::string_view op, const Int8LayerParams& p, bool fold_zero_point, Device device) {
  const ChannelParams channels = channel_params(op, p.weight, p.weight_scales, p.bias, p.input_scale,
                                                p.input_zero_point, p.output, fold_zero_point);
  DeviceLayer layer;
  layer.weight = p.weight.contiguous().view({p.weight.size(0), -1}).to(device);
  layer.scales = channel_tensor(channels.scales, device);
  if (!channels.bias.empty()) layer.bias = channel_tensor(channels.bias, device);
  layer.epilogue.input_zero_point = fold_zero_point ? 0 : p.input_zero_point;
  layer.epilogue.output_zero_point = p.output.dtype == kFloat32 ? 0 : p.output.zero_point;
  layer.epilogue.relu = p.output.relu;
  layer.out_dtype = p.output.dtype;
  layer.input_scale = p.input_scale;
  layer.input_zero_point = p.input_zero_point;
  return layer;
}

}  // namespace

DeviceLayer device_layer(const Int8Linear& linear, Device device) {
  return make_layer("Int8Linear", linear.params(), /*fold_zero_point=*/true, device);
}

DeviceLayer device_layer(const Int8Conv2d& conv, Device device) {
  const Int8ConvOptions& o = conv.options();
  LOOM_CHECK(o.groups == 1, "Int8Conv2d: a grouped convolution (groups ", o.groups, ") has no path on ", device,
             "; run the model on the CPU");
  // Int8Conv2d folds the zero point only without padding (the border must read as the zero point).
  const bool fold = o.pad_h == 0 && o.pad_w == 0;
  DeviceLayer layer = make_layer("Int8Conv2d", conv.params(), fold, device);
  layer.conv = true;
  layer.kernel = {conv.params().weight.size(2), conv.params().weight.size(3)};
  layer.conv_params.stride = {o.stride_h, o.stride_w};
  layer.conv_params.padding = {o.pad_h, o.pad_w};
  layer.conv_params.dilation = {o.dilation_h, o.dilation_w};
  return layer;
}

Tensor run_device_layer(const DeviceLayer& layer, const Tensor& x) {
  Tensor q = x.dtype() == kFloat32 ? quantize_per_tensor(x, layer.input_scale, layer.input_zero_point, kUInt8) : x;
  if (!layer.conv)
    return int8_linear(q, layer.weight, layer.scales, layer.bias, layer.out_dtype, layer.epilogue);
  LOOM_CHECK(q.dim() == 4 && q.size(1) * layer.kernel[0] * layer.kernel[1] == layer.weight.size(1),
             "Int8Conv2d: expected an input [N, ", layer.weight.size(1) / (layer.kernel[0] * layer.kernel[1]),
             ", H, W], got ", q.sizes());
  Tensor patches = int8_im2col(q, layer.kernel, layer.conv_params, layer.input_zero_point);
  Tensor y = int8_linear(patches, layer.weight, layer.scales, layer.bias, layer.out_dtype, layer.epilogue);
  const int64_t n = q.size(0), out_h = patches.size(0) / n;
  const int64_t out_w = (q.size(3) + 2 * layer.conv_params.padding[1] -
                         layer.conv_params.dilation[1] * (layer.kernel[1] - 1) - 1) /
                            layer.conv_params.stride[1] +
                        1;
  return y.view({n, out_h / out_w, out_w, layer.weight.size(0)}).permute({0, 3, 1, 2});
}

}  // namespace loom::quant::detail
