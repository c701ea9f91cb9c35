/*
 * 2-D pooling layers, as torch.nn.MaxPool2d, AvgPool2d and AdaptiveAvgPool2d: the same
 * arguments and defaults (the stride defaults to the kernel size) and printing. They have no
 * parameters; they exist so that pooling can sit in a Sequential and show in print(model).
 */
#pragma once

#include <optional>
#include <string>

#include "nn/layers/size2.h"
#include "nn/module.h"

namespace loom::nn {

class MaxPool2d : public Module {
 public:
  // stride defaults to kernel_size. Throws if a kernel size, stride or dilation is below 1, or
  // a padding is negative or more than half the kernel size.
  explicit MaxPool2d(Size2 kernel_size, std::optional<Size2> stride = {}, Size2 padding = 0,
                     Size2 dilation = 1, bool ceil_mode = false);
  // [N, C, H, W] -> [N, C, Ho, Wo] (or unbatched [C, H, W]). Throws on other ranks or an output
  // size below 1.
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  Size2 kernel_size() const { return kernel_size_; }
  Size2 stride() const { return stride_; }
  Size2 padding() const { return padding_; }
  Size2 dilation() const { return dilation_; }
  bool ceil_mode() const { return ceil_mode_; }

 private:
  Size2 kernel_size_, stride_, padding_, dilation_;
  bool ceil_mode_;
};

class AvgPool2d : public Module {
 public:
  // stride defaults to kernel_size. count_include_pad: whether padded zeros count in the mean.
  // Throws as MaxPool2d.
  explicit AvgPool2d(Size2 kernel_size, std::optional<Size2> stride = {}, Size2 padding = 0,
                     bool ceil_mode = false, bool count_include_pad = true);
  // [N, C, H, W] -> [N, C, Ho, Wo] (or unbatched [C, H, W]).
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

 private:
  Size2 kernel_size_, stride_, padding_;
  bool ceil_mode_, count_include_pad_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  // Throws if an output size is below 1.
  explicit AdaptiveAvgPool2d(Size2 output_size);
  // [N, C, H, W] -> [N, C, oh, ow] (or unbatched [C, H, W]), each output the mean of its window
  // [floor(i H / oh), ceil((i + 1) H / oh)).
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

 private:
  Size2 output_size_;
};

}  // namespace loom::nn
