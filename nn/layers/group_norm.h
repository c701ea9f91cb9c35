/*
 * GroupNorm, as torch.nn.GroupNorm (Wu & He, 2018): normalises each sample's channels in
 * groups, independently of the batch size, with a per-channel affine transform (weight ones,
 * bias zeros). The normalisation of vision models trained with small batches.
 */
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"

namespace loom::nn {

class GroupNorm : public Module {
 public:
  // weight and bias [num_channels] when affine. Throws unless num_groups >= 1 divides
  // num_channels, or if eps < 0.
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);

  // [N, num_channels, *] -> the same shape (loom::group_norm). Throws if dim 1 is not
  // num_channels.
  Tensor forward(const Tensor& input) override;
  // weight = 1, bias = 0.
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t num_groups() const { return num_groups_; }
  int64_t num_channels() const { return num_channels_; }
  double eps() const { return eps_; }

  Tensor weight;  // [num_channels], undefined unless affine
  Tensor bias;    // [num_channels], undefined unless affine

 private:
  int64_t num_groups_, num_channels_;
  double eps_;
  bool affine_;
};

}  // namespace loom::nn
