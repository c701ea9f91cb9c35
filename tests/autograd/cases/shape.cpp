/*
 * Gradcheck cases of the shape ops: cat (and stack), index_select, index_add, gather,
 * scatter_add, tril, triu, flip, pad (constant, reflect, replicate and circular), and the composite repeat.
 * Index tensors are made inside each case: they are constants, not checked inputs.
 * Second-order cases multiply the op's output by itself or by another input so that the first
 * derivative depends on the inputs.
 */
#include "tests/autograd/cases/gradcheck_case.h"

namespace loom::test {

namespace {
Tensor square(const Tensor& t) { return t * t; }
Tensor index(std::initializer_list<int64_t> values, IntArrayRef shape) { return tensor<int64_t>(values, shape); }
}  // namespace

[[maybe_unused]] static RegisterCases shape_cases{{
    // ---- cat / stack ------------------------------------------------------------------------------
    {Op::cat, "cat along dim -1 of a leaf, a transposed leaf and a view",
     [] { return inputs(leaf({3, 2}, 1), transposed_leaf(3, 4, 2), leaf({2, 3}, 3)); },
     [](const Inputs& x) { return outputs(square(cat({x[0], x[1], x[2].t()}, -1))); }, kSecondOrder},
    {Op::cat, "cat along dim 0 with an input that needs no grad and a legacy empty one",
     [] { return inputs(leaf({2, 3}, 4), leaf({0}, 5)); },
     [](const Inputs& x) {
       Tensor constant = make({1, 2, 3}, {1, 3});
       return outputs(square(cat({constant, x[0], x[1], x[0] * 2.0}, 0)));
     },
     kSecondOrder},
    {Op::cat, "stack along dim -1 (unsqueeze, then cat)", [] { return inputs(leaf({2, 3}, 6), leaf({2, 3}, 7)); },
     [](const Inputs& x) { return outputs(square(stack({x[0], x[1], x[0]}, -1))); }, kSecondOrder},

    // ---- index_select / index_add ------------------------------------------------------------------
    {Op::index_select, "index_select along dim -1 with a repeated index", [] { return inputs(leaf({3, 4}, 10)); },
     [](const Inputs& x) { return outputs(square(x[0].index_select(-1, index({3, 0, 3, 1}, {4})))); },
     kSecondOrder},
    {Op::index_select, "index_select of a transposed leaf with a 0-dim int32 index",
     [] { return inputs(transposed_leaf(3, 2, 11)); },
     [](const Inputs& x) { return outputs(square(x[0].index_select(0, scalar_tensor(2, kInt32)))); }, kSecondOrder},
    {Op::index_select, "index_select of a 0-dim tensor", [] { return inputs(leaf({}, 12)); },
     [](const Inputs& x) { return outputs(square(x[0].index_select(0, index({0}, {1})))); }, kSecondOrder},
    {Op::index_add, "index_add along dim 0 with a repeated index, both operands in the graph",
     [] { return inputs(leaf({4, 3}, 13), leaf({3, 3}, 14)); },
     [](const Inputs& x) { return outputs(square(index_add(x[0], 0, index({2, 0, 2}, {3}), x[1]))); },
     kSecondOrder},
    {Op::index_add, "index_add along dim -1 of a constant with a transposed src",
     [] { return inputs(transposed_leaf(2, 3, 15)); },
     [](const Inputs& x) {
       return outputs(square(index_add(make({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}), -1, index({1, 3, 1}, {3}), x[0])));
     },
     kSecondOrder},

    // ---- gather / scatter_add ----------------------------------------------------------------------
    {Op::gather, "gather along dim 1 with a smaller index and repeats", [] { return inputs(leaf({3, 4}, 20)); },
     [](const Inputs& x) { return outputs(square(x[0].gather(1, index({0, 0, 3, 2, 1, 1}, {2, 3})))); },
     kSecondOrder},
    {Op::gather, "gather along dim -2 of a transposed leaf", [] { return inputs(transposed_leaf(3, 3, 21)); },
     [](const Inputs& x) { return outputs(square(x[0].gather(-2, index({2, 0, 1, 2, 2, 0}, {2, 3})))); },
     kSecondOrder},
    {Op::scatter_add, "scatter_add with a src larger than the index and colliding positions",
     [] { return inputs(leaf({3, 4}, 22), leaf({3, 5}, 23)); },
     [](const Inputs& x) { return outputs(square(x[0].scatter_add(1, index({0, 0, 3, 2, 1, 1}, {2, 3}), x[1]))); },
     kSecondOrder},
    {Op::scatter_add, "scatter_add along dim 0 into a constant, src transposed",
     [] { return inputs(transposed_leaf(2, 3, 24)); },
     [](const Inputs& x) {
       Tensor base = make({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
       return outputs(square(base.scatter_add(0, index({2, 2, 0, 1, 2, 0}, {2, 3}), x[0])));
     },
     kSecondOrder},

    // ---- tril / triu -------------------------------------------------------------------------------
    {Op::tril, "tril of a batch of [3, 4] matrices, diagonals 0 and -1", [] { return inputs(leaf({2, 3, 4}, 30)); },
     [](const Inputs& x) { return outputs(square(x[0].tril()), x[0].tril(-1) * 2.0); }, kSecondOrder},
    {Op::triu, "triu of a transposed leaf, diagonal 1", [] { return inputs(transposed_leaf(4, 3, 31)); },
     [](const Inputs& x) { return outputs(square(x[0].triu(1))); }, kSecondOrder},

    // ---- flip --------------------------------------------------------------------------------------
    {Op::flip, "flip dims (0, -1) of [2, 3, 4]", [] { return inputs(leaf({2, 3, 4}, 40)); },
     [](const Inputs& x) { return outputs(square(x[0].flip({0, -1}))); }, kSecondOrder},
    {Op::flip, "flip of a transposed leaf", [] { return inputs(transposed_leaf(3, 2, 41)); },
     [](const Inputs& x) { return outputs(square(x[0].flip({1}))); }, kSecondOrder},

    // ---- pad ---------------------------------------------------------------------------------------
    {Op::pad, "constant pad with a value, crops and pads mixed", [] { return inputs(leaf({3, 4}, 50)); },
     [](const Inputs& x) { return outputs(square(pad(x[0], {1, -1, -1, 2}, "constant", 0.5))); }, kSecondOrder},
    {Op::pad, "constant pad of a transposed leaf over one dim", [] { return inputs(transposed_leaf(2, 3, 51)); },
     [](const Inputs& x) { return outputs(square(pad(x[0], {2, 1}))); }, kSecondOrder},
    {Op::pad, "reflect pad over two dims, second order through pad_backward",
     [] { return inputs(leaf({1, 3, 4}, 52)); },
     [](const Inputs& x) { return outputs(square(pad(x[0], {3, 2, 2, 1}, "reflect"))); }, kSecondOrder},
    {Op::pad, "reflect pad with a negative (cropping) side, transposed leaf",
     [] { return inputs(transposed_leaf(3, 5, 53)); },
     [](const Inputs& x) { return outputs(pad(x[0], {-1, 3}, "reflect") * 2.0); }},
    {Op::pad, "replicate pad over two dims, second order through pad_backward",
     [] { return inputs(leaf({1, 3, 4}, 54)); },
     [](const Inputs& x) { return outputs(square(pad(x[0], {3, 2, 2, 1}, "replicate"))); }, kSecondOrder},
    {Op::pad, "circular pad over two dims with a cropped side, transposed leaf, second order",
     [] { return inputs(transposed_leaf(3, 5, 55)); },
     [](const Inputs& x) { return outputs(square(pad(x[0], {-1, 3, 3, 2}, "circular"))); }, kSecondOrder},
    {Op::pad_backward, "pad_backward, reflect over two dims and constant with a crop",
     [] { return inputs(leaf({1, 6, 9}, 54), leaf({3, 5}, 55)); },
     [](const Inputs& x) {
       return outputs(square(pad_backward(x[0], {1, 3, 4}, {3, 2, 2, 1}, "reflect")),
                      square(pad_backward(x[1], {3, 4}, {2, -1}, "constant")));
     }, kSecondOrder},

    // ---- repeat (composite: reshape, expand, clone, view) -------------------------------------------
    {Op::expand, "repeat [2, 3] by (2, 1, 2)", [] { return inputs(leaf({2, 3}, 60)); },
     [](const Inputs& x) { return outputs(square(x[0].repeat({2, 1, 2}))); }, kSecondOrder},
}};

}  // namespace loom::test
