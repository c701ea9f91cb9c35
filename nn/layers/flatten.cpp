/*
 * Flatten: Tensor::flatten with the layer's dims.
 */
#include "nn/layers/flatten.h"

#include "ops/ops.h"

namespace loom::nn {

Tensor Flatten::forward(const Tensor& input) {
  LOOM_CHECK(input.defined(), "Flatten: the input is undefined");
  return input.flatten(start_dim_, end_dim_);
}

std::string Flatten::extra_repr() const {
  return "start_dim=" + std::to_string(start_dim_) + ", end_dim=" + std::to_string(end_dim_);
}

}  // namespace loom::nn
