/*
 * GroupNorm: argument checks, torch's initialisation and printing around loom::group_norm.
 */
#include "nn/layers/group_norm.h"

#include "nn/init.h"
#include "nn/layers/repr.h"
#include "ops/ops.h"

namespace loom::nn {

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine)
    : num_groups_(num_groups), num_channels_(num_channels), eps_(eps), affine_(affine) {
  LOOM_CHECK(num_groups >= 1 && num_channels >= 1 && num_channels % num_groups == 0,
             "GroupNorm: num_channels (", num_channels, ") must be divisible by num_groups (", num_groups,
             "), both >= 1");
  LOOM_CHECK(eps >= 0, "GroupNorm: expected eps >= 0, got ", eps);
  if (affine) {
    weight = register_parameter("weight", loom::empty({num_channels}));
    bias = register_parameter("bias", loom::empty({num_channels}));
  }
  reset_parameters();
}

void GroupNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor GroupNorm::forward(const Tensor& input) {
  LOOM_CHECK(input.defined(), "GroupNorm: the input is undefined");
  LOOM_CHECK(input.dim() >= 2 && input.size(1) == num_channels_, "GroupNorm: expected input [N, ",
             num_channels_, ", *], got ", input.sizes());
  return group_norm(input, num_groups_, weight, bias, eps_);
}

std::string GroupNorm::extra_repr() const {
  return std::to_string(num_groups_) + ", " + std::to_string(num_channels_) +
         ", eps=" + detail::python_float(eps_) + ", affine=" + detail::python_bool(affine_);
}

}  // namespace loom::nn
