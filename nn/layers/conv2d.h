/*
 * Conv2d, as torch.nn.Conv2d: the same arguments (padding_mode included), parameter names,
 * initialisation and printing. The options that have defaults are a struct so that call
 * sites name them, as torch's keywords do: nn::Conv2d(3, 32, 5, {.padding = 2}).
 */
#pragma once

#include <cstdint>
#include <string>

#include "nn/layers/size2.h"
#include "nn/module.h"

namespace loom::nn {

struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  // "zeros" (the convolution's own padding), or "reflect", "replicate" or "circular": the input
  // is padded by loom::pad first and the convolution runs unpadded, as torch does.
  std::string padding_mode = "zeros";
};

class Conv2d : public Module {
 public:
  // weight [out_channels, in_channels / groups, kh, kw], bias [out_channels] (none when
  // !options.bias), both U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in/groups * kh * kw,
  // as torch. Throws if groups does not divide both channel counts, or a kernel size, stride or
  // dilation is below 1, a padding is negative, or padding_mode is none of the four.
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options = {});

  // [N, in_channels, H, W] -> [N, out_channels, Ho, Wo], or unbatched [C, H, W] -> [Cout, Ho, Wo],
  // Ho = floor((H + 2 padding - dilation (kh - 1) - 1) / stride) + 1.
  // Throws if the channel count differs or the padded input is smaller than the kernel.
  Tensor forward(const Tensor& input) override;
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  Size2 kernel_size() const { return kernel_size_; }
  const Conv2dOptions& options() const { return options_; }

  Tensor weight;  // [out_channels, in_channels / groups, kh, kw]
  Tensor bias;    // [out_channels], undefined without bias

 private:
  int64_t in_channels_, out_channels_;
  Size2 kernel_size_;
  Conv2dOptions options_;
};

}  // namespace loom::nn
