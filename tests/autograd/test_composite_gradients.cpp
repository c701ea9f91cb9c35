/*
 * Gradients of the composite ops that have no formula of their own (einsum, roll, conv1d,
 * conv_transpose2d, conv_transpose1d): gradcheck and gradgradcheck in float64, through the
 * formulas of the ops they are built from (bmm, as_strided, sum, slice, cat, conv2d and its
 * input gradient).
 */
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "ops/ops.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

Tensor leaf_of(IntArrayRef shape, uint64_t seed) {
  return make(random_values(shape_numel(shape), seed), shape).requires_grad_();
}

void check_both_orders(const std::string& name, const autograd::TensorFn& fn,
                       const std::vector<Tensor>& inputs) {
  INFO(name);
  const auto first = autograd::gradcheck(fn, inputs);
  CHECK_MESSAGE(first.ok, first.message);
  const auto second = autograd::gradgradcheck(fn, inputs);
  CHECK_MESSAGE(second.ok, second.message);
}

}  // namespace

TEST_CASE("einsum passes gradcheck and gradgradcheck: products, diagonals, broadcasting, three operands") {
  const std::vector<std::pair<std::string, std::vector<std::vector<int64_t>>>> cases = {
      {"ij,jk->ik", {{2, 3}, {3, 4}}},
      {"bij,bjk->bk", {{2, 2, 3}, {2, 3, 2}}},
      {"ii->i", {{3, 3}}},
      {"ii", {{3, 3}}},
      {"i,j->ij", {{2}, {3}}},
      {"...ij,...jk->...ik", {{2, 1, 2, 3}, {3, 3, 2}}},
      {"ij,jk,kl->il", {{2, 3}, {3, 2}, {2, 2}}},
      {"ijk,jil->kl", {{2, 3, 2}, {3, 2, 2}}},
  };
  uint64_t seed = 1;
  for (const auto& [equation, shapes] : cases) {
    std::vector<Tensor> inputs;
    for (const auto& s : shapes) inputs.push_back(leaf_of(s, seed++));
    const std::string eq = equation;
    check_both_orders(
        "einsum " + eq,
        [eq](const std::vector<Tensor>& in) { return std::vector<Tensor>{einsum(eq, in) * einsum(eq, in)}; },
        inputs);
  }
}

TEST_CASE("roll, conv1d and the transposed convolutions pass gradcheck and gradgradcheck") {
  check_both_orders("roll",
                    [](const std::vector<Tensor>& in) {
                      const Tensor r = roll(in[0], {1, -2}, {0, 1});
                      return std::vector<Tensor>{r * r};
                    },
                    {leaf_of({3, 4}, 20)});
  check_both_orders("conv1d",
                    [](const std::vector<Tensor>& in) {
                      return std::vector<Tensor>{conv1d(in[0], in[1], in[2], 2, 1, 1, 2)};
                    },
                    {leaf_of({2, 4, 7}, 21), leaf_of({4, 2, 3}, 22), leaf_of({4}, 23)});
  check_both_orders(
      "conv_transpose2d",
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{conv_transpose2d(in[0], in[1], in[2], {2, 1}, {1, 0}, {1, 0}, 2, {1, 2})};
      },
      {leaf_of({1, 4, 3, 3}, 24), leaf_of({4, 1, 2, 2}, 25), leaf_of({2}, 26)});
  check_both_orders("conv_transpose1d",
                    [](const std::vector<Tensor>& in) {
                      return std::vector<Tensor>{conv_transpose1d(in[0], in[1], Tensor(), 2, 0, 1)};
                    },
                    {leaf_of({2, 3, 4}, 27), leaf_of({3, 2, 3}, 28)});
}
