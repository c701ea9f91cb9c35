/*
 * Gradcheck cases of the reductions: sum, prod, amax/amin, var and max/min along a dim, over
 * several dim sets, keepdim both ways, on non-contiguous inputs, and the composites written with
 * them (mean, std, logsumexp, norm, max() over everything), each filed under the primitive it
 * records. Random inputs have no ties, so amax/amin and max/min are differentiable there.
 */
#include "tests/autograd/cases/gradcheck_case.h"

namespace loom::test {

namespace {
// A 0-dim float64 leaf.
Tensor scalar_leaf(double v) { return scalar_tensor(v, kFloat64).requires_grad_(); }
}  // namespace

[[maybe_unused]] static RegisterCases reduction_cases{{
    // ---- sum ------------------------------------------------------------------------------------
    {Op::sum, "sum over everything", [] { return inputs(leaf({2, 3}, 101)); },
     [](const Inputs& x) { return outputs(x[0].sum()); }},
    {Op::sum, "sum dims {0, 2} of [2, 3, 4]", [] { return inputs(leaf({2, 3, 4}, 102)); },
     [](const Inputs& x) { return outputs(x[0].sum({0, 2})); }},
    {Op::sum, "sum dim -1 keepdim of a transpose", [] { return inputs(transposed_leaf(3, 4, 103)); },
     [](const Inputs& x) { return outputs(x[0].sum({-1}, true)); }},
    {Op::sum, "sum of a 0-dim tensor", [] { return inputs(scalar_leaf(1.5)); },
     [](const Inputs& x) { return outputs(x[0].sum() * x[0]); }},
    {Op::sum, "sum of squares, second order", [] { return inputs(leaf({3, 4}, 104)); },
     [](const Inputs& x) { return outputs((x[0] * x[0]).sum({1}, true)); }, kSecondOrder},
    {Op::sum, "mean dims {1, 2} keepdim (composite)", [] { return inputs(leaf({2, 3, 2}, 105)); },
     [](const Inputs& x) { return outputs(x[0].mean({1, 2}, true)); }},
    {Op::sum, "logsumexp dim 1 (composite), second order", [] { return inputs(leaf({3, 4}, 106)); },
     [](const Inputs& x) { return outputs(x[0].logsumexp({1})); }, kSecondOrder},
    {Op::sum, "norm p=2 dim 1 (composite), second order", [] { return inputs(leaf({3, 4}, 107)); },
     [](const Inputs& x) { return outputs(x[0].norm(2.0, {1})); }, kSecondOrder},
    {Op::sum, "norm p=3 over everything (composite)", [] { return inputs(leaf({2, 3}, 108)); },
     [](const Inputs& x) { return outputs(x[0].norm(3.0)); }},
    {Op::sum, "norm p=1 dims {0} keepdim (composite)", [] { return inputs(positive_leaf({3, 2}, 109)); },
     [](const Inputs& x) { return outputs(x[0].norm(1.0, {0}, true)); }},

    // ---- prod -----------------------------------------------------------------------------------
    {Op::prod, "prod over everything", [] { return inputs(leaf({2, 3}, 111)); },
     [](const Inputs& x) { return outputs(x[0].prod()); }, kSecondOrder},
    {Op::prod, "prod dim 1", [] { return inputs(leaf({3, 4}, 112)); },
     [](const Inputs& x) { return outputs(x[0].prod({1})); }},
    {Op::prod, "prod dims {0, 2} keepdim", [] { return inputs(leaf({2, 3, 2}, 113)); },
     [](const Inputs& x) { return outputs(x[0].prod({0, 2}, true)); }, kSecondOrder},
    {Op::prod, "prod dim 0 of a transpose", [] { return inputs(transposed_leaf(3, 2, 114)); },
     [](const Inputs& x) { return outputs(x[0].prod({0})); }},
    {Op::prod, "prod with one zero in a row, second order",
     [] { return inputs(make({0.5, 0.0, -1.5, 2.0, 0.7, -0.3}, {2, 3}).requires_grad_()); },
     [](const Inputs& x) { return outputs(x[0].prod({1})); }, kSecondOrder},
    {Op::prod, "prod with two zeros in a row (first order)",
     [] { return inputs(make({0.0, 1.3, 0.0, -0.8, 0.0, 2.0}, {2, 3}).requires_grad_()); },
     [](const Inputs& x) { return outputs(x[0].prod({1})); }},

    // ---- amax / amin ----------------------------------------------------------------------------
    {Op::amax, "amax dim 1", [] { return inputs(leaf({3, 4}, 121)); },
     [](const Inputs& x) { return outputs(x[0].amax({1})); }, kSecondOrder},
    {Op::amax, "amax dims {0, 2} keepdim", [] { return inputs(leaf({2, 3, 4}, 122)); },
     [](const Inputs& x) { return outputs(x[0].amax({0, 2}, true)); }},
    {Op::amax, "max() over everything of a transpose (composite)",
     [] { return inputs(transposed_leaf(3, 4, 123)); },
     [](const Inputs& x) { return outputs(x[0].max()); }},
    {Op::amax, "norm p=inf dim 1 (composite)", [] { return inputs(leaf({3, 4}, 124)); },
     [](const Inputs& x) { return outputs(x[0].norm(INFINITY, {1})); }},
    {Op::amin, "amin dim 0", [] { return inputs(leaf({3, 4}, 125)); },
     [](const Inputs& x) { return outputs(x[0].amin({0})); }, kSecondOrder},
    {Op::amin, "amin dims {1, 2} keepdim of a permuted view", [] { return inputs(leaf({3, 2, 4}, 126)); },
     [](const Inputs& x) { return outputs(x[0].permute({2, 0, 1}).amin({1, 2}, true)); }},
    {Op::amin, "min() over everything (composite)", [] { return inputs(leaf({2, 3}, 127)); },
     [](const Inputs& x) { return outputs(x[0].min()); }},

    // ---- var ------------------------------------------------------------------------------------
    {Op::var, "var dim 1", [] { return inputs(leaf({3, 4}, 131)); },
     [](const Inputs& x) { return outputs(x[0].var({1})); }, kSecondOrder},
    {Op::var, "var dims {0, 2} keepdim, correction 0", [] { return inputs(leaf({2, 3, 4}, 132)); },
     [](const Inputs& x) { return outputs(x[0].var({0, 2}, 0, true)); }, kSecondOrder},
    {Op::var, "var over everything of a transpose", [] { return inputs(transposed_leaf(3, 4, 133)); },
     [](const Inputs& x) { return outputs(x[0].var()); }},
    {Op::var, "std dim 0 (composite), second order", [] { return inputs(leaf({4, 3}, 134)); },
     [](const Inputs& x) { return outputs(x[0].std({0})); }, kSecondOrder},

    // ---- max / min along a dim ------------------------------------------------------------------
    {Op::max_dim, "max dim 1", [] { return inputs(leaf({3, 4}, 141)); },
     [](const Inputs& x) { return outputs(std::get<0>(x[0].max(1))); }, kSecondOrder},
    {Op::max_dim, "max dim 0 keepdim of [2, 3, 2]", [] { return inputs(leaf({2, 3, 2}, 142)); },
     [](const Inputs& x) { return outputs(std::get<0>(x[0].max(0, true))); }},
    {Op::max_dim, "max dim -1 of a transpose, values and indices",
     [] { return inputs(transposed_leaf(3, 4, 143)); },
     [](const Inputs& x) {
       auto [values, indices] = x[0].max(-1);
       return outputs(values, indices);
     }},
    {Op::max_dim, "max dim 0 of a 0-dim tensor", [] { return inputs(scalar_leaf(0.7)); },
     [](const Inputs& x) { return outputs(std::get<0>(x[0].max(0)) * x[0]); }},
    {Op::min_dim, "min dim 1 keepdim", [] { return inputs(leaf({3, 4}, 144)); },
     [](const Inputs& x) { return outputs(std::get<0>(x[0].min(1, true))); }, kSecondOrder},
    {Op::min_dim, "min dim 2 of a permuted view", [] { return inputs(leaf({2, 3, 4}, 145)); },
     [](const Inputs& x) { return outputs(std::get<0>(x[0].permute({1, 2, 0}).min(2))); }},
}};

}  // namespace loom::test
