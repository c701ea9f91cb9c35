/*
 * Linear (y = x W^T + b) and Identity, as torch.nn.Linear and torch.nn.Identity: the same
 * constructor arguments, parameter names, initialisation and printing, so that a state dict
 * moves between the two frameworks unchanged.
 */
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"

namespace loom::nn {

class Linear : public Module {
 public:
  // weight [out_features, in_features] and bias [out_features] (none when !bias), initialised
  // as torch: weight by kaiming_uniform_(a = sqrt(5)), i.e. U(-1/sqrt(in), 1/sqrt(in)), and the
  // bias by U(-1/sqrt(in), 1/sqrt(in)). Throws if a size is negative.
  Linear(int64_t in_features, int64_t out_features, bool bias = true);

  // [*, in_features] -> [*, out_features]. Throws if the last dim is not in_features.
  Tensor forward(const Tensor& input) override;
  // Draws the initial values again (from the default generator).
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }

  Tensor weight;  // [out_features, in_features]
  Tensor bias;    // [out_features], undefined without bias

 private:
  int64_t in_features_, out_features_;
};

// Returns its input: a placeholder where a model takes a layer (a head removed, a skipped norm).
class Identity : public Module {
 public:
  Tensor forward(const Tensor& input) override { return input; }
};

}  // namespace loom::nn
