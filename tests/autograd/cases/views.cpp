/*
 * Gradcheck cases of the view ops (as_strided, view, permute, expand, slice, select, squeeze,
 * unsqueeze) and of the composites that end in them (reshape, transpose, t, narrow, flatten,
 * unflatten, split, chunk, broadcast_tensors, operator[]). Second-order cases square the view
 * so that the first derivative depends on the input and its graph goes through the view's
 * formula again.
 */
#include "tests/autograd/cases/gradcheck_case.h"

namespace loom::test {

namespace {
Tensor square(const Tensor& t) { return t * t; }
}  // namespace

[[maybe_unused]] static RegisterCases view_cases{{
    // ---- as_strided ---------------------------------------------------------------------------
    {Op::as_strided, "as_strided windows of a [3, 4] leaf", [] { return inputs(leaf({3, 4}, 1)); },
     [](const Inputs& x) { return outputs(square(x[0].as_strided({2, 2}, {4, 1}, 1))); }, kSecondOrder},
    {Op::as_strided, "as_strided overlapping sliding windows accumulate", [] { return inputs(leaf({6}, 2)); },
     [](const Inputs& x) { return outputs(square(x[0].as_strided({4, 3}, {1, 1}, 0))); }, kSecondOrder},
    {Op::as_strided, "as_strided with a zero stride (a broadcast read)", [] { return inputs(leaf({5}, 3)); },
     [](const Inputs& x) { return outputs(x[0].as_strided({3, 2}, {0, 2}, 1) * 1.5); }},
    {Op::as_strided, "as_strided of a transposed (non-contiguous) leaf",
     [] { return inputs(transposed_leaf(3, 4, 4)); },
     [](const Inputs& x) { return outputs(square(x[0].as_strided({2, 3}, {1, 4}, 1))); }, kSecondOrder},
    {Op::as_strided, "as_strided of a slice (input with a storage offset)", [] { return inputs(leaf({4, 3}, 5)); },
     [](const Inputs& x) {
       Tensor s = (x[0] * 1.0).slice(0, 1, 3);  // offset 3 in its storage
       return outputs(square(s.as_strided({2, 2}, {1, 3}, 4)));
     },
     kSecondOrder},
    {Op::as_strided, "as_strided recorded for a view written in place (the view is read again)",
     [] { return inputs(leaf({3, 4}, 6), leaf({2, 4}, 7)); },
     [](const Inputs& x) {
       Tensor b = x[0] * 1.0;
       Tensor v = b.slice(0, 1, 3);
       v.mul_(x[1]);
       return outputs(square(v), b);
     },
     kSecondOrder},

    // ---- view / reshape / flatten / unflatten ----------------------------------------------------
    {Op::view, "view [2, 3, 4] -> [4, -1]", [] { return inputs(leaf({2, 3, 4}, 10)); },
     [](const Inputs& x) { return outputs(square(x[0].view({4, -1}))); }, kSecondOrder},
    {Op::view, "view of a 0-dim tensor as [1, 1]", [] { return inputs(leaf({}, 11)); },
     [](const Inputs& x) { return outputs(square(x[0].view({1, 1}))); }, kSecondOrder},
    {Op::view, "reshape of a transposed leaf copies, then views", [] { return inputs(transposed_leaf(3, 4, 12)); },
     [](const Inputs& x) { return outputs(square(x[0].reshape({2, 6}))); }, kSecondOrder},
    {Op::view, "reshape that is a view, flatten, unflatten", [] { return inputs(leaf({2, 3, 2}, 13)); },
     [](const Inputs& x) {
       Tensor f = x[0].reshape({6, 2}).flatten();
       return outputs(square(f.unflatten(0, {3, -1})));
     },
     kSecondOrder},

    // ---- permute / transpose / t ----------------------------------------------------------------
    {Op::permute, "permute [2, 3, 4] by (2, 0, 1)", [] { return inputs(leaf({2, 3, 4}, 20)); },
     [](const Inputs& x) { return outputs(square(x[0].permute({2, 0, 1}))); }, kSecondOrder},
    {Op::permute, "permute with negative dims", [] { return inputs(leaf({2, 3, 4}, 21)); },
     [](const Inputs& x) { return outputs(x[0].permute({-1, -3, 1}) * 2.0); }},
    {Op::permute, "transpose(-1, 0) and t of a transposed leaf", [] { return inputs(transposed_leaf(3, 2, 22)); },
     [](const Inputs& x) { return outputs(square(x[0].t()), x[0].transpose(-1, 0) * 3.0); }, kSecondOrder},

    // ---- expand / broadcast_tensors ---------------------------------------------------------------
    {Op::expand, "expand [3, 1] -> [2, 3, 4]", [] { return inputs(leaf({3, 1}, 30)); },
     [](const Inputs& x) { return outputs(square(x[0].expand({2, 3, 4}))); }, kSecondOrder},
    {Op::expand, "expand a 0-dim tensor, and with -1", [] { return inputs(leaf({}, 31), leaf({1, 3}, 32)); },
     [](const Inputs& x) { return outputs(x[0].expand({3}) * x[1].expand({2, -1}).sin()); }, kSecondOrder},
    {Op::expand, "broadcast_tensors of a transposed leaf and a [3, 1] leaf",
     [] { return inputs(transposed_leaf(1, 4, 33), leaf({3, 1}, 34)); },
     [](const Inputs& x) {
       std::vector<Tensor> b = broadcast_tensors({x[0], x[1]});
       return outputs(b[0] * b[1]);
     },
     kSecondOrder},

    // ---- slice / narrow / split / chunk -----------------------------------------------------------
    {Op::slice, "slice rows 1:3 of [4, 3]", [] { return inputs(leaf({4, 3}, 40)); },
     [](const Inputs& x) { return outputs(square(x[0].slice(0, 1, 3))); }, kSecondOrder},
    {Op::slice, "slice with step 2 from 1 along dim -1", [] { return inputs(leaf({3, 7}, 41)); },
     [](const Inputs& x) { return outputs(square(x[0].slice(-1, 1, std::nullopt, 2))); }, kSecondOrder},
    {Op::slice, "slice with step 3 whose last spread row overshoots, negative start",
     [] { return inputs(leaf({8, 2}, 42)); },
     [](const Inputs& x) { return outputs(square(x[0].slice(0, -7, std::nullopt, 3))); }, kSecondOrder},
    {Op::slice, "empty slice (gradient all zeros) beside a full one", [] { return inputs(leaf({4}, 43)); },
     [](const Inputs& x) { return outputs(x[0].slice(0, 3, 1).sum() + x[0].slice(0, 0, 4, 5).sum() * 2.0); }},
    {Op::slice, "slice of a transposed leaf with a step", [] { return inputs(transposed_leaf(5, 3, 44)); },
     [](const Inputs& x) { return outputs(square(x[0].slice(0, 0, 5, 2))); }, kSecondOrder},
    {Op::slice, "narrow, split and chunk", [] { return inputs(leaf({5, 4}, 45)); },
     [](const Inputs& x) {
       std::vector<Tensor> parts = x[0].split(2, 0);    // rows 0-1, 2-3, 4
       std::vector<Tensor> halves = x[0].chunk(2, -1);  // cols 0-1, 2-3
       return outputs(square(x[0].narrow(1, 1, 2)), parts[0] * parts[1], parts[2] * 3.0, halves[0] * halves[1]);
     },
     kSecondOrder},

    // ---- select / operator[] ----------------------------------------------------------------------
    {Op::select, "select(1, -1) of [3, 4]", [] { return inputs(leaf({3, 4}, 50)); },
     [](const Inputs& x) { return outputs(square(x[0].select(1, -1))); }, kSecondOrder},
    {Op::select, "operator[] twice, down to a 0-dim tensor", [] { return inputs(leaf({2, 3}, 51)); },
     [](const Inputs& x) { return outputs(square(x[0][1][2]) + x[0][0][0]); }, kSecondOrder},
    {Op::select, "select of a transposed leaf", [] { return inputs(transposed_leaf(4, 3, 52)); },
     [](const Inputs& x) { return outputs(square(x[0].select(0, 2))); }, kSecondOrder},

    // ---- squeeze / unsqueeze ----------------------------------------------------------------------
    {Op::squeeze, "squeeze all size-1 dims of [2, 1, 3, 1]", [] { return inputs(leaf({2, 1, 3, 1}, 60)); },
     [](const Inputs& x) { return outputs(square(x[0].squeeze())); }, kSecondOrder},
    {Op::squeeze, "squeeze(-2), and squeeze of a dim that is not 1 (a no-op view)",
     [] { return inputs(leaf({3, 1, 2}, 61)); },
     [](const Inputs& x) { return outputs(square(x[0].squeeze(-2)), x[0].squeeze(0) * 2.0); }, kSecondOrder},
    {Op::unsqueeze, "unsqueeze(-1) and unsqueeze(0) of a transposed leaf",
     [] { return inputs(transposed_leaf(2, 3, 62)); },
     [](const Inputs& x) { return outputs(square(x[0].unsqueeze(-1)), x[0].unsqueeze(0) * 2.0); }, kSecondOrder},

    // ---- chains of views --------------------------------------------------------------------------
    {Op::slice, "a chain: transpose, reshape, slice, unsqueeze, expand, select",
     [] { return inputs(leaf({4, 6}, 70)); },
     [](const Inputs& x) {
       Tensor c = x[0].transpose(0, 1).reshape({3, 8}).slice(1, 1, 8, 3).unsqueeze(0).expand({2, 3, 3}).select(2, -1);
       return outputs(square(c));
     },
     kSecondOrder},
    {Op::as_strided, "a chain through a view written in place: slice, select, in place, permute",
     [] { return inputs(leaf({2, 3, 4}, 71)); },
     [](const Inputs& x) {
       Tensor b = x[0] * 1.0;
       Tensor v = b.select(1, 1);  // [2, 4]
       v.mul_(x[0].select(1, 0));  // the view now reads the rebased b
       return outputs(v.permute({1, 0}).slice(0, 0, 4, 2) * 2.0, b.sum({2}));
     },
     kSecondOrder},
}};

}  // namespace loom::test
