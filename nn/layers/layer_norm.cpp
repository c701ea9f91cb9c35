/*
 * LayerNorm: argument checks, torch's initialisation and printing around loom::layer_norm.
 */
#include "nn/layers/layer_norm.h"

#include "nn/init.h"
#include "nn/layers/repr.h"
#include "ops/ops.h"

namespace loom::nn {

LayerNorm::LayerNorm(std::vector<int64_t> normalized_shape, double eps, bool elementwise_affine, bool bias)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps), elementwise_affine_(elementwise_affine) {
  LOOM_CHECK(!normalized_shape_.empty(), "LayerNorm: expected normalized_shape with at least 1 dim, got ()");
  for (int64_t size : normalized_shape_) {
    LOOM_CHECK(size >= 1, "LayerNorm: expected normalized_shape sizes >= 1, got ",
               detail::python_tuple(normalized_shape_));
  }
  LOOM_CHECK(eps >= 0, "LayerNorm: expected eps >= 0, got ", eps);
  if (elementwise_affine) {
    weight = register_parameter("weight", loom::empty(normalized_shape_));
    if (bias) this->bias = register_parameter("bias", loom::empty(normalized_shape_));
  }
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor& input) {
  LOOM_CHECK(input.defined(), "LayerNorm: the input is undefined");
  return layer_norm(input, normalized_shape_, weight, bias, eps_);
}

std::string LayerNorm::extra_repr() const {
  return detail::python_tuple(normalized_shape_) + ", eps=" + detail::python_float(eps_) +
         ", elementwise_affine=" + detail::python_bool(elementwise_affine_);
}

}  // namespace loom::nn
