/*
 * Dropout: the probability check at construction, and loom::dropout in training mode.
 */
#include "nn/layers/dropout.h"

#include "nn/layers/repr.h"
#include "ops/ops.h"

namespace loom::nn {

Dropout::Dropout(double p, Generator* generator) : p_(p), generator_(generator) {
  LOOM_CHECK(p >= 0.0 && p <= 1.0, "Dropout: dropout probability has to be between 0 and 1, but got ", p);
}

Tensor Dropout::forward(const Tensor& input) {
  LOOM_CHECK(input.defined(), "Dropout: the input is undefined");
  return dropout(input, p_, is_training(), generator_);
}

std::string Dropout::extra_repr() const {
  // torch also prints "inplace=False"; Loom's Dropout has no in-place form.
  return "p=" + detail::python_float(p_);
}

}  // namespace loom::nn
