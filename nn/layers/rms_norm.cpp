/*
 * RMSNorm: argument checks, torch's initialisation and printing around loom::rms_norm.
 */
#include "nn/layers/rms_norm.h"

#include "nn/init.h"
#include "nn/layers/repr.h"
#include "ops/ops.h"

namespace loom::nn {

RMSNorm::RMSNorm(std::vector<int64_t> normalized_shape, std::optional<double> eps, bool elementwise_affine)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps), elementwise_affine_(elementwise_affine) {
  LOOM_CHECK(!normalized_shape_.empty(), "RMSNorm: expected normalized_shape with at least 1 dim, got ()");
  for (int64_t size : normalized_shape_) {
    LOOM_CHECK(size >= 1, "RMSNorm: expected normalized_shape sizes >= 1, got ",
               detail::python_tuple(normalized_shape_));
  }
  LOOM_CHECK(!eps || *eps >= 0, "RMSNorm: expected eps >= 0, got ", eps.value_or(0));
  if (elementwise_affine) weight = register_parameter("weight", loom::empty(normalized_shape_));
  reset_parameters();
}

void RMSNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
}

Tensor RMSNorm::forward(const Tensor& input) {
  LOOM_CHECK(input.defined(), "RMSNorm: the input is undefined");
  return rms_norm(input, normalized_shape_, weight, eps_);
}

std::string RMSNorm::extra_repr() const {
  return detail::python_tuple(normalized_shape_) + ", eps=" + (eps_ ? detail::python_float(*eps_) : "None") +
         ", elementwise_affine=" + detail::python_bool(elementwise_affine_);
}

}  // namespace loom::nn
