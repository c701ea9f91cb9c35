/*
 * Conv1d: torch.nn.Conv1d's validation, initialisation and printing around loom::conv1d.
 */
#include "nn/layers/conv1d.h"

#include "nn/layers/conv_init.h"
#include "nn/layers/repr.h"
#include "ops/ops.h"

namespace loom::nn {

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions options)
    : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size), options_(options) {
  LOOM_CHECK(in_channels >= 0 && out_channels >= 0, "Conv1d: expected non-negative channel counts, got ",
             in_channels, " and ", out_channels);
  LOOM_CHECK(options.groups >= 1, "Conv1d: expected groups >= 1, got ", options.groups);
  LOOM_CHECK(in_channels % options.groups == 0 && out_channels % options.groups == 0,
             "Conv1d: in_channels=", in_channels, " and out_channels=", out_channels,
             " must be divisible by groups=", options.groups);
  LOOM_CHECK(kernel_size >= 1 && options.stride >= 1 && options.dilation >= 1 && options.padding >= 0,
             "Conv1d: expected kernel_size, stride and dilation >= 1 and padding >= 0, got ", kernel_size,
             ", ", options.stride, ", ", options.dilation, " and ", options.padding);
  LOOM_CHECK(options.padding_mode == "zeros" || options.padding_mode == "reflect" ||
                 options.padding_mode == "replicate" || options.padding_mode == "circular",
             "Conv1d: padding_mode must be 'zeros', 'reflect', 'replicate' or 'circular', got '",
             options.padding_mode, "'");
  weight = register_parameter("weight", empty({out_channels, in_channels / options.groups, kernel_size}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  reset_parameters();
}

void Conv1d::reset_parameters() {
  detail::reset_conv_parameters(weight, bias);
}

Tensor Conv1d::forward(const Tensor& input) {
  LOOM_CHECK(input.defined(), "Conv1d: the input is undefined");
  LOOM_CHECK(input.dim() == 2 || input.dim() == 3, "Conv1d(", extra_repr(),
             "): expected a 2-D [C, L] or 3-D [N, C, L] input, got shape ", input.sizes());
  LOOM_CHECK(input.size(-2) == in_channels_, "Conv1d(", extra_repr(), "): expected ", in_channels_,
             " input channels, got input of shape ", input.sizes());
  const int64_t p = options_.padding;
  const bool zero_padding = options_.padding_mode == "zeros";
  const Tensor in = zero_padding ? input : pad(input, {p, p}, options_.padding_mode);
  return conv1d(in, weight, bias, options_.stride, zero_padding ? p : 0, options_.dilation, options_.groups);
}

std::string Conv1d::extra_repr() const {
  // torch's _ConvNd.extra_repr: the non-default options only, sizes as 1-tuples.
  const auto tuple = [](int64_t v) { return detail::python_tuple({v}); };
  std::string s = std::to_string(in_channels_) + ", " + std::to_string(out_channels_) +
                  ", kernel_size=" + tuple(kernel_size_) + ", stride=" + tuple(options_.stride);
  if (options_.padding != 0) s += ", padding=" + tuple(options_.padding);
  if (options_.dilation != 1) s += ", dilation=" + tuple(options_.dilation);
  if (options_.groups != 1) s += ", groups=" + std::to_string(options_.groups);
  if (!bias.defined()) s += ", bias=False";
  if (options_.padding_mode != "zeros") s += ", padding_mode=" + options_.padding_mode;
  return s;
}

}  // namespace loom::nn
