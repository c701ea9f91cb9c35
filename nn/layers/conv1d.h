/*
 * Conv1d, as torch.nn.Conv1d: the same arguments (padding_mode included), parameter names,
 * initialisation and printing, over loom::conv1d (conv2d on a height of 1).
 */
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"

namespace loom::nn {

struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  // "zeros", or "reflect", "replicate" or "circular": the input is padded by loom::pad first.
  std::string padding_mode = "zeros";
};

class Conv1d : public Module {
 public:
  // weight [out_channels, in_channels / groups, kernel_size], bias [out_channels] (none when
  // !options.bias), both U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in/groups * kernel_size, as
  // torch. Throws as Conv2d for groups, sizes, strides, dilations, paddings and padding_mode.
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions options = {});

  // [N, in_channels, L] -> [N, out_channels, Lo], or unbatched [C, L] -> [Cout, Lo],
  // Lo = floor((L + 2 padding - dilation (k - 1) - 1) / stride) + 1.
  Tensor forward(const Tensor& input) override;
  void reset_parameters();
  std::string extra_repr() const override;

  const Conv1dOptions& options() const { return options_; }

  Tensor weight;  // [out_channels, in_channels / groups, kernel_size]
  Tensor bias;    // [out_channels], undefined without bias

 private:
  int64_t in_channels_, out_channels_, kernel_size_;
  Conv1dOptions options_;
};

}  // namespace loom::nn
