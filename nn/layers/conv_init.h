/*
 * torch's _ConvNd.reset_parameters, shared by every convolution layer: the weight by
 * kaiming_uniform_(a = sqrt(5)), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the bias from the
 * same bound, fan_in being init::fan_in_and_fan_out's for the weight's layout (for a transposed
 * convolution's [Cin, Cout/groups, k...] weight that is Cout/groups * k..., as torch). Internal
 * to nn/layers.
 */
#pragma once

#include <cmath>

#include "core/tensor.h"
#include "nn/init.h"

namespace loom::nn::detail {

inline void reset_conv_parameters(const Tensor& weight, const Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (!bias.defined()) return;
  const int64_t fan_in = init::fan_in_and_fan_out(weight).first;
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  init::uniform_(bias, -bound, bound);
}

}  // namespace loom::nn::detail
