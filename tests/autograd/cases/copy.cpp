/* Gradcheck cases of copy: to, clone, contiguous, copy_ with broadcasting, in-place ops, fill_. */
#include "tests/autograd/cases/gradcheck_case.h"

namespace loom::test {

[[maybe_unused]] static RegisterCases copy_cases{{
    {Op::copy, "clone", [] { return inputs(leaf({2, 3}, 1)); },
     [](const Inputs& x) { return outputs(x[0].clone() * x[0]); }, kSecondOrder},
    {Op::copy, "contiguous of a transpose", [] { return inputs(transposed_leaf(3, 2, 2)); },
     [](const Inputs& x) { return outputs(x[0].contiguous()); }},
    {Op::copy, "to float32 and back (float32 rounding is within tolerance)", [] { return inputs(leaf({4}, 3)); },
     [](const Inputs& x) { return outputs(x[0].to(kFloat32).to(kFloat64) * 2.0); },
     kFirstOrder, {1e-3, 1e-3, 1e-3}},
    {Op::copy, "copy_ broadcasting src [3] into [2, 3]", [] { return inputs(leaf({3}, 4), leaf({2, 3}, 5)); },
     [](const Inputs& x) {
       Tensor dst = x[1] * 1.0;
       dst.copy_(x[0]);
       return outputs(dst * x[1]);
     }},
    {Op::copy, "in-place op on a non-leaf", [] { return inputs(leaf({2, 2}, 6), leaf({2, 2}, 7)); },
     [](const Inputs& x) {
       Tensor a = x[0] * 1.0;
       a.mul_(x[1]).add_(x[0]);
       return outputs(a);
     }},
    {Op::copy, "fill_ ends the history (gradient reaches only later uses)", [] { return inputs(leaf({3}, 8)); },
     [](const Inputs& x) {
       Tensor a = x[0] * 2.0;
       a.fill_(1.5);
       return outputs(a * x[0]);
     }},
}};

}  // namespace loom::test
