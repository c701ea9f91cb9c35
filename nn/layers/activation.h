/*
 * Activation layers, as torch.nn.ReLU, GELU, SiLU, Tanh and Sigmoid: elementwise, no
 * parameters, any shape in and the same shape out. They exist so that an activation can be an
 * element of a Sequential and show in print(model); inside forward(), calling x.relu() is
 * the same.
 */
#pragma once

#include <string>

#include "nn/module.h"

namespace loom::nn {

// max(x, 0)
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& input) override;
};

// x * Phi(x), with Phi the standard normal CDF ("none", exact, with erf) or its tanh
// approximation ("tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))).
class GELU : public Module {
 public:
  // Throws if approximate is neither "none" nor "tanh".
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  const std::string& approximate() const { return approximate_; }

 private:
  std::string approximate_;
};

// x * sigmoid(x) (swish)
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& input) override;
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& input) override;
};

// 1 / (1 + exp(-x))
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& input) override;
};

}  // namespace loom::nn
