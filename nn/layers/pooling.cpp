/*
 * The pooling layers: argument checks at construction (a bad kernel fails where the layer is
 * built, not at the first forward) and torch's printing around the pooling ops.
 */
#include "nn/layers/pooling.h"

#include "nn/layers/repr.h"
#include "ops/ops.h"

namespace loom::nn {
namespace {

void check_pool_args(const char* layer, Size2 kernel, Size2 stride, Size2 padding, Size2 dilation) {
  LOOM_CHECK(kernel.h >= 1 && kernel.w >= 1, layer, ": expected kernel_size >= 1, got ",
             kernel.tuple_string());
  LOOM_CHECK(stride.h >= 1 && stride.w >= 1, layer, ": expected stride >= 1, got ", stride.tuple_string());
  LOOM_CHECK(dilation.h >= 1 && dilation.w >= 1, layer, ": expected dilation >= 1, got ",
             dilation.tuple_string());
  LOOM_CHECK(padding.h >= 0 && padding.w >= 0 && padding.h <= kernel.h / 2 && padding.w <= kernel.w / 2,
             layer, ": padding should be at least 0 and at most half of the kernel size, got padding=",
             padding.tuple_string(), " for kernel_size=", kernel.tuple_string());
}

// Runs a pooling op on a 4-D input, or on an unbatched 3-D one through a batch of 1.
template <class F>
Tensor pool_forward(const Module& layer, const Tensor& input, F&& pool) {
  LOOM_CHECK(input.defined(), layer.type_name(), ": the input is undefined");
  LOOM_CHECK(input.dim() == 3 || input.dim() == 4, layer.type_name(), "(", layer.extra_repr(),
             "): expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape ", input.sizes());
  if (input.dim() == 4) return pool(input);
  return pool(input.unsqueeze(0)).squeeze(0);
}

}  // namespace

MaxPool2d::MaxPool2d(Size2 kernel_size, std::optional<Size2> stride, Size2 padding, Size2 dilation,
                     bool ceil_mode)
    : kernel_size_(kernel_size),
      stride_(stride.value_or(kernel_size)),
      padding_(padding),
      dilation_(dilation),
      ceil_mode_(ceil_mode) {
  check_pool_args("MaxPool2d", kernel_size_, stride_, padding_, dilation_);
}

Tensor MaxPool2d::forward(const Tensor& input) {
  return pool_forward(*this, input, [&](const Tensor& x) {
    return max_pool2d(x, kernel_size_.array(), stride_.array(), padding_.array(), dilation_.array(),
                      ceil_mode_);
  });
}

std::string MaxPool2d::extra_repr() const {
  return "kernel_size=" + kernel_size_.short_string() + ", stride=" + stride_.short_string() +
         ", padding=" + padding_.short_string() + ", dilation=" + dilation_.short_string() +
         ", ceil_mode=" + detail::python_bool(ceil_mode_);
}

AvgPool2d::AvgPool2d(Size2 kernel_size, std::optional<Size2> stride, Size2 padding, bool ceil_mode,
                     bool count_include_pad)
    : kernel_size_(kernel_size),
      stride_(stride.value_or(kernel_size)),
      padding_(padding),
      ceil_mode_(ceil_mode),
      count_include_pad_(count_include_pad) {
  check_pool_args("AvgPool2d", kernel_size_, stride_, padding_, 1);
}

Tensor AvgPool2d::forward(const Tensor& input) {
  return pool_forward(*this, input, [&](const Tensor& x) {
    return avg_pool2d(x, kernel_size_.array(), stride_.array(), padding_.array(), ceil_mode_,
                      count_include_pad_);
  });
}

std::string AvgPool2d::extra_repr() const {
  return "kernel_size=" + kernel_size_.short_string() + ", stride=" + stride_.short_string() +
         ", padding=" + padding_.short_string();
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2 output_size) : output_size_(output_size) {
  LOOM_CHECK(output_size.h >= 1 && output_size.w >= 1, "AdaptiveAvgPool2d: expected output_size >= 1, got ",
             output_size.tuple_string());
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& input) {
  return pool_forward(*this, input,
                      [&](const Tensor& x) { return adaptive_avg_pool2d(x, output_size_.array()); });
}

std::string AdaptiveAvgPool2d::extra_repr() const {
  return "output_size=" + output_size_.short_string();
}

}  // namespace loom::nn
