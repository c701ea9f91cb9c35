/*
 * ConvTranspose1d and ConvTranspose2d: torch.nn's validation, initialisation and printing
 * around loom::conv_transpose1d/2d.
 */
#include "nn/layers/conv_transpose.h"

#include "nn/layers/conv_init.h"
#include "nn/layers/repr.h"
#include "ops/ops.h"

namespace loom::nn {

namespace {

void check_channels(std::string_view name, int64_t in_channels, int64_t out_channels, int64_t groups) {
  LOOM_CHECK(in_channels >= 0 && out_channels >= 0, name, ": expected non-negative channel counts, got ",
             in_channels, " and ", out_channels);
  LOOM_CHECK(groups >= 1, name, ": expected groups >= 1, got ", groups);
  LOOM_CHECK(in_channels % groups == 0 && out_channels % groups == 0, name, ": in_channels=", in_channels,
             " and out_channels=", out_channels, " must be divisible by groups=", groups);
}

// torch's checks; an output_padding must be smaller than the stride (torch also allows one below
// the dilation, which loom::conv_transpose2d refuses).
void check_sizes(std::string_view name, int64_t kernel, int64_t stride, int64_t padding,
                 int64_t output_padding, int64_t dilation) {
  LOOM_CHECK(kernel >= 1 && stride >= 1 && dilation >= 1 && padding >= 0 && output_padding >= 0, name,
             ": expected kernel_size, stride and dilation >= 1 and paddings >= 0, got kernel_size ", kernel,
             ", stride ", stride, ", dilation ", dilation, ", padding ", padding, ", output_padding ",
             output_padding);
  LOOM_CHECK(output_padding < stride, name, ": output_padding (", output_padding,
             ") must be smaller than the stride (", stride, ")");
}

}  // namespace

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
                                 ConvTranspose2dOptions options)
    : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size), options_(options) {
  check_channels("ConvTranspose2d", in_channels, out_channels, options.groups);
  check_sizes("ConvTranspose2d", kernel_size.h, options.stride.h, options.padding.h, options.output_padding.h,
              options.dilation.h);
  check_sizes("ConvTranspose2d", kernel_size.w, options.stride.w, options.padding.w, options.output_padding.w,
              options.dilation.w);
  weight = register_parameter(
      "weight", empty({in_channels, out_channels / options.groups, kernel_size.h, kernel_size.w}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  reset_parameters();
}

void ConvTranspose2d::reset_parameters() {
  detail::reset_conv_parameters(weight, bias);
}

Tensor ConvTranspose2d::forward(const Tensor& input) {
  LOOM_CHECK(input.defined(), "ConvTranspose2d: the input is undefined");
  LOOM_CHECK((input.dim() == 3 || input.dim() == 4) && input.size(-3) == in_channels_, "ConvTranspose2d(",
             extra_repr(), "): expected input [N, ", in_channels_, ", H, W] or [", in_channels_,
             ", H, W], got shape ", input.sizes());
  return conv_transpose2d(input, weight, bias, options_.stride.array(), options_.padding.array(),
                          options_.output_padding.array(), options_.groups, options_.dilation.array());
}

std::string ConvTranspose2d::extra_repr() const {
  std::string s = std::to_string(in_channels_) + ", " + std::to_string(out_channels_) +
                  ", kernel_size=" + kernel_size_.tuple_string() +
                  ", stride=" + options_.stride.tuple_string();
  if (options_.padding != Size2(0)) s += ", padding=" + options_.padding.tuple_string();
  if (options_.dilation != Size2(1)) s += ", dilation=" + options_.dilation.tuple_string();
  if (options_.output_padding != Size2(0)) s += ", output_padding=" + options_.output_padding.tuple_string();
  if (options_.groups != 1) s += ", groups=" + std::to_string(options_.groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

ConvTranspose1d::ConvTranspose1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
                                 ConvTranspose1dOptions options)
    : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size), options_(options) {
  check_channels("ConvTranspose1d", in_channels, out_channels, options.groups);
  check_sizes("ConvTranspose1d", kernel_size, options.stride, options.padding, options.output_padding,
              options.dilation);
  weight = register_parameter("weight", empty({in_channels, out_channels / options.groups, kernel_size}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  reset_parameters();
}

void ConvTranspose1d::reset_parameters() {
  detail::reset_conv_parameters(weight, bias);
}

Tensor ConvTranspose1d::forward(const Tensor& input) {
  LOOM_CHECK(input.defined(), "ConvTranspose1d: the input is undefined");
  LOOM_CHECK((input.dim() == 2 || input.dim() == 3) && input.size(-2) == in_channels_, "ConvTranspose1d(",
             extra_repr(), "): expected input [N, ", in_channels_, ", L] or [", in_channels_,
             ", L], got shape ", input.sizes());
  return conv_transpose1d(input, weight, bias, options_.stride, options_.padding, options_.output_padding,
                          options_.groups, options_.dilation);
}

std::string ConvTranspose1d::extra_repr() const {
  const auto tuple = [](int64_t v) { return detail::python_tuple({v}); };
  std::string s = std::to_string(in_channels_) + ", " + std::to_string(out_channels_) +
                  ", kernel_size=" + tuple(kernel_size_) + ", stride=" + tuple(options_.stride);
  if (options_.padding != 0) s += ", padding=" + tuple(options_.padding);
  if (options_.dilation != 1) s += ", dilation=" + tuple(options_.dilation);
  if (options_.output_padding != 0) s += ", output_padding=" + tuple(options_.output_padding);
  if (options_.groups != 1) s += ", groups=" + std::to_string(options_.groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

}  // namespace loom::nn
