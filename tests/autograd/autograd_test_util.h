/*
 * Helpers for the autograd tests: float64 leaves from deterministic random values, a CHECK
 * that runs gradcheck (and optionally gradgradcheck) and prints the mismatch, and a check of
 * second derivatives against a composite.
 */
#pragma once

#include <functional>
#include <vector>

#include "autograd/autograd.h"
#include "tests/test_util.h"

namespace loom::test {

// A float64 leaf that requires grad, values uniform in [shift - scale, shift + scale).
inline Tensor leaf(IntArrayRef shape, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  return make(random_values(shape_numel(shape), seed, scale, shift), shape).requires_grad_();
}

// Checks that the second derivative of `f` equals that of `reference` (the same function
// written another way), in float64: d/dinputs of <d/dinputs sum(f(inputs) * r), u> for fixed
// random r and u. An input that enters linearly (a bias) has a zero second derivative.
inline void check_same_second_derivative(const std::vector<Tensor>& inputs,
                                         const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                         const std::function<Tensor(const std::vector<Tensor>&)>& reference,
                                         Tol tol = {1e-9, 1e-10}) {
  auto second_derivative = [&](const std::function<Tensor(const std::vector<Tensor>&)>& fn) {
    Tensor y = fn(inputs);
    Tensor r = make(random_values(y.numel(), 91), y.sizes());
    auto first = autograd::grad({(y * r).sum()}, inputs, {}, {}, /*create_graph=*/true);
    Tensor dot = zeros({}, TensorOptions(kFloat64));
    for (size_t i = 0; i < first.size(); ++i)
      dot = dot + (first[i] * make(random_values(first[i].numel(), 92 + i), first[i].sizes())).sum();
    auto second = autograd::grad({dot}, inputs, {}, {}, false, /*allow_unused=*/true);
    for (size_t i = 0; i < second.size(); ++i)
      if (!second[i].defined()) second[i] = zeros(inputs[i].sizes(), inputs[i].options());
    return second;
  };
  auto got = second_derivative(f), expected = second_derivative(reference);
  for (size_t i = 0; i < inputs.size(); ++i) {
    CAPTURE(i);
    check_close(got[i], values(expected[i]), tol);
  }
}

#define LOOM_CHECK_GRADCHECK(fn, inputs)                                       \
  do {                                                                         \
    auto loom_gc_result = ::loom::autograd::gradcheck((fn), (inputs));         \
    CHECK_MESSAGE(loom_gc_result.ok, loom_gc_result.message);                  \
  } while (0)

#define LOOM_CHECK_GRADGRADCHECK(fn, inputs)                                   \
  do {                                                                         \
    auto loom_ggc_result = ::loom::autograd::gradgradcheck((fn), (inputs));    \
    CHECK_MESSAGE(loom_ggc_result.ok, loom_ggc_result.message);                \
  } while (0)

}  // namespace loom::test
