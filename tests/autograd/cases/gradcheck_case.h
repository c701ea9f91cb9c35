/*
 * The gradcheck table: every differentiable primitive op has at least one case here, in
 * float64, and tests/autograd/test_gradcheck.cpp runs them all (and fails for an op with
 * neither a case nor a place in its reviewed list of non-differentiable ops).
 *
 * One file per op family in this folder registers its cases:
 *
 *   static RegisterCases cases{{
 *       {Op::mul, "mul broadcast [3,1] x [4]", [] { return inputs(leaf({3, 1}, 1), leaf({4}, 2)); },
 *        [](const Inputs& x) { return outputs(x[0] * x[1]); }, kSecondOrder},
 *   }};
 *
 * Each case must record its op (the test checks that the graph contains the op's node), and
 * should also cover broadcast, non-contiguous and view inputs where the op takes them.
 */
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ops/dispatch.h"
#include "tests/autograd/autograd_test_util.h"

namespace loom::test {

using Inputs = std::vector<Tensor>;

enum CheckOrder { kFirstOrder = 1, kSecondOrder = 2 };  // kSecondOrder runs gradgradcheck too

struct GradcheckCase {
  Op op;
  std::string name;
  std::function<Inputs()> make_inputs;
  autograd::TensorFn fn;
  CheckOrder order = kFirstOrder;
  autograd::GradcheckOptions options = {};
};

std::vector<GradcheckCase>& gradcheck_cases();

struct RegisterCases {
  RegisterCases(std::initializer_list<GradcheckCase> cases) {
    for (const auto& c : cases) gradcheck_cases().push_back(c);
  }
};

template <class... T>
Inputs inputs(T... t) {
  return Inputs{t...};
}
template <class... T>
std::vector<Tensor> outputs(T... t) {
  return std::vector<Tensor>{t...};
}

// A float64 leaf whose values stay away from 0 (for log, sqrt, div, pow ...).
inline Tensor positive_leaf(IntArrayRef shape, uint64_t seed) {
  Tensor x = make(random_values(shape_numel(shape), seed, 0.3, 0.0), shape).abs() + 0.5;
  return x.detach().requires_grad_();
}

// A non-contiguous float64 leaf: the transpose of a [cols, rows] tensor, made a leaf itself.
inline Tensor transposed_leaf(int64_t rows, int64_t cols, uint64_t seed) {
  return make(random_values(rows * cols, seed), {cols, rows}).t().requires_grad_();
}

inline std::string name_of(Op op) { return std::string(op_name(op)); }

}  // namespace loom::test
