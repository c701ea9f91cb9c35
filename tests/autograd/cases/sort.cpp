/*
 * Gradcheck cases of cumsum and sort, and of the ops composed of sort (argsort has no
 * gradient; topk, kthvalue and median differentiate through sort and the views or gather that
 * pick their elements). The leaves' values are distinct random numbers, so no tie sits within
 * the finite-difference step. Second-order cases square the output so that the first derivative
 * depends on the input.
 */
#include "tests/autograd/cases/gradcheck_case.h"

namespace loom::test {

namespace {
Tensor square(const Tensor& t) {
  return t * t;
}
}  // namespace

[[maybe_unused]] static RegisterCases sort_cases{{
    // ---- cumsum ---------------------------------------------------------------------------------
    {Op::cumsum, "cumsum along dim -1 of [3, 4]",
     [] {
       return inputs(leaf({3, 4}, 301));
     },
     [](const Inputs& x) { return outputs(square(cumsum(x[0], -1))); }, kSecondOrder},
    {Op::cumsum, "cumsum along dim 0 of a transposed leaf", [] { return inputs(transposed_leaf(4, 3, 302)); },
     [](const Inputs& x) { return outputs(square(x[0].cumsum(0))); }, kSecondOrder},
    {Op::cumsum, "cumsum along the middle dim of [2, 3, 2]",
     [] {
       return inputs(leaf({2, 3, 2}, 303));
     },
     [](const Inputs& x) { return outputs(cumsum(x[0], 1)); }},
    {Op::cumsum, "cumsum of a 0-dim tensor", [] { return inputs(leaf({}, 304)); },
     [](const Inputs& x) { return outputs(square(cumsum(x[0], 0))); }, kSecondOrder},

    // ---- sort and its composites ---------------------------------------------------------------
    {Op::sort, "sort along dim -1, values",
     [] {
       return inputs(leaf({3, 5}, 311));
     },
     [](const Inputs& x) { return outputs(square(std::get<0>(sort(x[0], -1)))); }, kSecondOrder},
    {Op::sort, "sort descending along dim 0 of a transposed leaf",
     [] { return inputs(transposed_leaf(4, 3, 312)); },
     [](const Inputs& x) { return outputs(square(std::get<0>(x[0].sort(0, true)))); }, kSecondOrder},
    {Op::sort, "sort of a 0-dim tensor", [] { return inputs(leaf({}, 313)); },
     [](const Inputs& x) { return outputs(square(std::get<0>(sort(x[0])))); }, kSecondOrder},
    {Op::sort, "topk 2 of 5 along dim 1 (sort, then a slice)",
     [] {
       return inputs(leaf({3, 5}, 314));
     },
     [](const Inputs& x) { return outputs(square(std::get<0>(topk(x[0], 2, 1)))); }, kSecondOrder},
    {Op::sort, "topk smallest 3 along dim 0 of [4, 2, 2]",
     [] {
       return inputs(leaf({4, 2, 2}, 315));
     },
     [](const Inputs& x) { return outputs(std::get<0>(topk(x[0], 3, 0, /*largest=*/false))); }},
    {Op::sort, "kthvalue 2 along dim -1 with keepdim",
     [] {
       return inputs(leaf({3, 4}, 316));
     },
     [](const Inputs& x) { return outputs(square(std::get<0>(kthvalue(x[0], 2, -1, true)))); }, kSecondOrder},
    {Op::sort, "median along dim 0 and of all elements",
     [] {
       return inputs(leaf({5, 3}, 317));
     },
     [](const Inputs& x) { return outputs(square(std::get<0>(median(x[0], 0))), median(x[0]) * 3.0); },
     kSecondOrder},
}};

}  // namespace loom::test
