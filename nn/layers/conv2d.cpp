/*
 * Conv2d: torch.nn.Conv2d's validation, initialisation and printing around loom::conv2d.
 */
#include "nn/layers/conv2d.h"

#include "nn/layers/conv_init.h"
#include "nn/layers/repr.h"
#include "ops/ops.h"

namespace loom::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options)
    : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size), options_(options) {
  const auto pair = [](Size2 s) { return s.tuple_string(); };
  LOOM_CHECK(in_channels >= 0 && out_channels >= 0, "Conv2d: expected non-negative channel counts, got ",
             in_channels, " and ", out_channels);
  LOOM_CHECK(options.groups >= 1, "Conv2d: expected groups >= 1, got ", options.groups);
  LOOM_CHECK(in_channels % options.groups == 0, "Conv2d: in_channels=", in_channels,
             " must be divisible by groups=", options.groups);
  LOOM_CHECK(out_channels % options.groups == 0, "Conv2d: out_channels=", out_channels,
             " must be divisible by groups=", options.groups);
  LOOM_CHECK(kernel_size.h >= 1 && kernel_size.w >= 1, "Conv2d: expected kernel_size >= 1, got ",
             pair(kernel_size));
  LOOM_CHECK(options.stride.h >= 1 && options.stride.w >= 1, "Conv2d: expected stride >= 1, got ",
             pair(options.stride));
  LOOM_CHECK(options.padding.h >= 0 && options.padding.w >= 0, "Conv2d: expected padding >= 0, got ",
             pair(options.padding));
  LOOM_CHECK(options.dilation.h >= 1 && options.dilation.w >= 1, "Conv2d: expected dilation >= 1, got ",
             pair(options.dilation));
  LOOM_CHECK(options.padding_mode == "zeros" || options.padding_mode == "reflect" ||
                 options.padding_mode == "replicate" || options.padding_mode == "circular",
             "Conv2d: padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', got '",
             options.padding_mode, "'");
  weight = register_parameter(
      "weight", empty({out_channels, in_channels / options.groups, kernel_size.h, kernel_size.w}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  reset_parameters();
}

void Conv2d::reset_parameters() {
  detail::reset_conv_parameters(weight, bias);
}

Tensor Conv2d::forward(const Tensor& input) {
  LOOM_CHECK(input.defined(), "Conv2d: the input is undefined");
  LOOM_CHECK(input.dim() == 3 || input.dim() == 4, "Conv2d(", extra_repr(),
             "): expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape ", input.sizes());
  const bool batched = input.dim() == 4;
  const Tensor x = batched ? input : input.unsqueeze(0);
  LOOM_CHECK(x.size(1) == in_channels_, "Conv2d(", extra_repr(), "): expected ", in_channels_,
             " input channels, got input of shape ", input.sizes());
  // A padding mode other than zeros pads the input first (pad names the dim and shape when the
  // input is too small for reflect or circular) and convolves it unpadded.
  const Size2 p = options_.padding;
  const bool zero_padding = options_.padding_mode == "zeros";
  const Tensor in = zero_padding ? x : pad(x, {p.w, p.w, p.h, p.h}, options_.padding_mode);
  Tensor out = conv2d(in, weight, bias, options_.stride.array(), zero_padding ? p.array() : Size2(0).array(),
                      options_.dilation.array(), options_.groups);
  return batched ? out : out.squeeze(0);
}

std::string Conv2d::extra_repr() const {
  // torch's _ConvNd.extra_repr: the non-default options only.
  std::string s = std::to_string(in_channels_) + ", " + std::to_string(out_channels_) +
                  ", kernel_size=" + kernel_size_.tuple_string() +
                  ", stride=" + options_.stride.tuple_string();
  if (options_.padding != Size2(0)) s += ", padding=" + options_.padding.tuple_string();
  if (options_.dilation != Size2(1)) s += ", dilation=" + options_.dilation.tuple_string();
  if (options_.groups != 1) s += ", groups=" + std::to_string(options_.groups);
  if (!bias.defined()) s += ", bias=False";
  if (options_.padding_mode != "zeros") s += ", padding_mode=" + options_.padding_mode;
  return s;
}

}  // namespace loom::nn
