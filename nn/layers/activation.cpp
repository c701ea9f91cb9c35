/*
 * The activation layers: each forwards to its elementwise op.
 */
#include "nn/layers/activation.h"

#include "ops/ops.h"

namespace loom::nn {

Tensor ReLU::forward(const Tensor& input) {
  return relu(input);
}

GELU::GELU(std::string approximate) : approximate_(std::move(approximate)) {
  LOOM_CHECK(approximate_ == "none" || approximate_ == "tanh",
             "GELU: approximate must be 'none' or 'tanh', got '", approximate_, "'");
}

Tensor GELU::forward(const Tensor& input) {
  return gelu(input, approximate_);
}

std::string GELU::extra_repr() const {
  return "approximate='" + approximate_ + "'";
}

Tensor SiLU::forward(const Tensor& input) {
  return silu(input);
}

Tensor Tanh::forward(const Tensor& input) {
  return tanh(input);
}

Tensor Sigmoid::forward(const Tensor& input) {
  return sigmoid(input);
}

}  // namespace loom::nn
