/*
 * Helpers for the autograd tests: float64 leaves from deterministic random values, and a
 * CHECK that runs gradcheck (and optionally gradgradcheck) and prints the mismatch.
 */
#pragma once

#include "autograd/autograd.h"
#include "tests/test_util.h"

namespace loom::test {

// A float64 leaf that requires grad, values uniform in [shift - scale, shift + scale).
inline Tensor leaf(IntArrayRef shape, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  return make(random_values(shape_numel(shape), seed, scale, shift), shape).requires_grad_();
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
