/*
 * ConvTranspose1d and ConvTranspose2d, as torch.nn's: the same arguments, parameter names and
 * shapes (weight [in_channels, out_channels / groups, k...]), initialisation and printing, over
 * loom::conv_transpose1d/2d (conv2d's input gradient). Only the zeros padding mode exists, as
 * in torch.
 */
#pragma once

#include <cstdint>
#include <string>

#include "nn/layers/size2.h"
#include "nn/module.h"

namespace loom::nn {

struct ConvTranspose2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 output_padding = 0;  // extra rows/columns at the end of the output: smaller than stride
  int64_t groups = 1;
  bool bias = true;
  Size2 dilation = 1;
};

class ConvTranspose2d : public Module {
 public:
  // weight [in_channels, out_channels / groups, kh, kw], bias [out_channels] (none when
  // !options.bias), both U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with torch's fan_in for this weight,
  // out_channels / groups * kh * kw. Throws if groups does not divide both channel counts or a
  // size, stride, dilation or padding is out of range.
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
                  ConvTranspose2dOptions options = {});

  // [N, in_channels, H, W] -> [N, out_channels, Ho, Wo] (or unbatched [C, H, W]),
  // Ho = (H - 1) stride - 2 padding + dilation (kh - 1) + output_padding + 1.
  Tensor forward(const Tensor& input) override;
  void reset_parameters();
  std::string extra_repr() const override;

  Tensor weight;  // [in_channels, out_channels / groups, kh, kw]
  Tensor bias;    // [out_channels], undefined without bias

 private:
  int64_t in_channels_, out_channels_;
  Size2 kernel_size_;
  ConvTranspose2dOptions options_;
};

struct ConvTranspose1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t output_padding = 0;
  int64_t groups = 1;
  bool bias = true;
  int64_t dilation = 1;
};

class ConvTranspose1d : public Module {
 public:
  // weight [in_channels, out_channels / groups, kernel_size], as ConvTranspose2d.
  ConvTranspose1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
                  ConvTranspose1dOptions options = {});

  // [N, in_channels, L] -> [N, out_channels, Lo] (or unbatched [C, L]),
  // Lo = (L - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1.
  Tensor forward(const Tensor& input) override;
  void reset_parameters();
  std::string extra_repr() const override;

  Tensor weight;  // [in_channels, out_channels / groups, kernel_size]
  Tensor bias;    // [out_channels], undefined without bias

 private:
  int64_t in_channels_, out_channels_, kernel_size_;
  ConvTranspose1dOptions options_;
};

}  // namespace loom::nn
