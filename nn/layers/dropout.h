/*
 * Dropout, as torch.nn.Dropout: while training, zeroes each element with probability p and
 * scales the others by 1 / (1 - p), so that eval mode (the identity) sees the same expected
 * activations.
 */
#pragma once

#include <string>

#include "core/random.h"
#include "nn/module.h"

namespace loom::nn {

class Dropout : public Module {
 public:
  // generator: where the masks come from (loom's default generator when null); it must
  // outlive the layer. Throws if p is outside [0, 1].
  explicit Dropout(double p = 0.5, Generator* generator = nullptr);

  // Any shape -> the same shape; the input itself in eval mode or when p = 0.
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  double p() const { return p_; }

 private:
  double p_;
  Generator* generator_;
};

}  // namespace loom::nn
