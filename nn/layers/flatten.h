/*
 * Flatten, as torch.nn.Flatten: merges dims start_dim..end_dim into one (by default all but
 * the batch dim), the step between a convolutional trunk and a Linear head.
 */
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"

namespace loom::nn {

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim_(start_dim), end_dim_(end_dim) {}

  // [N, C, H, W] -> [N, C*H*W] with the defaults; a view when the strides allow. Negative dims
  // count from the end. Throws if a dim is out of range or start_dim comes after end_dim.
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  int64_t start_dim() const { return start_dim_; }
  int64_t end_dim() const { return end_dim_; }

 private:
  int64_t start_dim_, end_dim_;
};

}  // namespace loom::nn
