/*
 * Linear: torch.nn.Linear's initialisation and printing around loom::linear.
 */
#include "nn/layers/linear.h"

#include <cmath>

#include "nn/init.h"
#include "nn/layers/repr.h"
#include "ops/ops.h"

namespace loom::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : in_features_(in_features), out_features_(out_features) {
  LOOM_CHECK(in_features >= 0 && out_features >= 0,
             "Linear: expected non-negative sizes, got in_features=", in_features,
             ", out_features=", out_features);
  weight = register_parameter("weight", empty({out_features, in_features}));
  if (bias) this->bias = register_parameter("bias", empty({out_features}));
  reset_parameters();
}

void Linear::reset_parameters() {
  // kaiming_uniform_ with a = sqrt(5) is torch's way of writing U(-1/sqrt(fan_in), 1/sqrt(fan_in)):
  // gain sqrt(2 / (1 + 5)) times sqrt(3 / fan_in).
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = in_features_ > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features_)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& input) {
  LOOM_CHECK(input.defined(), "Linear: the input is undefined");
  LOOM_CHECK(input.dim() >= 1 && input.size(-1) == in_features_, "Linear(", extra_repr(),
             "): expected an input of shape [*, ", in_features_, "], got ", input.sizes());
  return linear(input, weight, bias);
}

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features_) + ", out_features=" + std::to_string(out_features_) +
         ", bias=" + detail::python_bool(bias.defined());
}

}  // namespace loom::nn
