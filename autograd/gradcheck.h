/*
 * gradcheck: compares the Jacobian that autograd computes with central finite differences,
 * in float64, for every input that requires grad (torch.autograd.gradcheck). gradgradcheck
 * does the same for the gradient itself (second derivatives, create_graph).
 *
 *   auto r = loom::autograd::gradcheck([](const auto& x) { return std::vector{x[0].tanh()}; }, {x});
 *   CHECK_MESSAGE(r.ok, r.message);
 */
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace loom::autograd {

using TensorFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct GradcheckResult {
  bool ok = true;
  std::string message;  // the first mismatch: input, output, element, analytic and numeric values
  explicit operator bool() const { return ok; }
};

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

// Inputs that require grad must be float64 (any shape, strides or view); fn must be
// deterministic. Outputs that are not floating are ignored.
GradcheckResult gradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions options = {});

// gradcheck of (inputs) -> grad(fn(inputs), inputs, v, create_graph) for fixed random v.
GradcheckResult gradgradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs, GradcheckOptions options = {});

}  // namespace loom::autograd
