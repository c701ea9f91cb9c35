/*
 * Gradcheck cases of conv2d and the pools: stride, padding, dilation, groups, with and without
 * bias, ceil_mode and count_include_pad, channels_last and other non-contiguous inputs; second
 * order through their backward functions, which have cases of their own. Random inputs have
 * no ties, so max pooling is differentiable there.
 */
#include "tests/autograd/cases/gradcheck_case.h"

namespace loom::test {

namespace {
// x [N, C, H, W] laid out channels_last (NHWC in memory), as a leaf.
Tensor channels_last_leaf(IntArrayRef nchw, uint64_t seed) {
  Tensor nhwc = make(random_values(shape_numel(nchw), seed), {nchw[0], nchw[2], nchw[3], nchw[1]});
  return nhwc.permute({0, 3, 1, 2}).requires_grad_();
}

Tensor square(const Tensor& t) { return t * t; }

Pool2dParams pool_params(std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                         std::array<int64_t, 2> padding, bool ceil_mode = false, bool count_include_pad = true) {
  return make_pool2d_params(kernel, stride, padding, {1, 1}, ceil_mode, count_include_pad);
}

// The indices max_pool2d picks in a fixed random input (a constant of the backward cases).
Tensor max_indices(IntArrayRef input_sizes, const Pool2dParams& p, uint64_t seed) {
  return std::get<1>(max_pool2d_with_indices(make(random_values(shape_numel(input_sizes), seed), input_sizes), p));
}
}  // namespace

[[maybe_unused]] static RegisterCases conv_pool_cases{{
    // ---- conv2d ---------------------------------------------------------------------------------
    {Op::conv2d, "conv2d 3x3 with bias",
     [] { return inputs(leaf({1, 2, 5, 5}, 301), leaf({3, 2, 3, 3}, 302), leaf({3}, 303)); },
     [](const Inputs& x) { return outputs(square(conv2d(x[0], x[1], x[2]))); }, kSecondOrder},
    {Op::conv2d, "conv2d stride 2, padding 1, no bias, batch 2",
     [] { return inputs(leaf({2, 2, 5, 4}, 304), leaf({2, 2, 3, 3}, 305)); },
     [](const Inputs& x) { return outputs(conv2d(x[0], x[1], Tensor(), {2, 2}, {1, 1})); }, kSecondOrder},
    {Op::conv2d, "conv2d dilation 2, padding (2, 1), rectangular kernel",
     [] { return inputs(leaf({1, 2, 6, 5}, 306), leaf({2, 2, 3, 2}, 307), leaf({2}, 308)); },
     [](const Inputs& x) { return outputs(conv2d(x[0], x[1], x[2], {1, 1}, {2, 1}, {2, 2})); }},
    {Op::conv2d, "conv2d groups 2, stride (1, 2)",
     [] { return inputs(leaf({1, 4, 4, 5}, 309), leaf({4, 2, 2, 2}, 310), leaf({4}, 311)); },
     [](const Inputs& x) { return outputs(conv2d(x[0], x[1], x[2], {1, 2}, {0, 1}, {1, 1}, 2)); }, kSecondOrder},
    {Op::conv2d, "conv2d depthwise (groups = channels)",
     [] { return inputs(leaf({1, 3, 4, 4}, 312), leaf({3, 1, 3, 3}, 313)); },
     [](const Inputs& x) { return outputs(conv2d(x[0], x[1], Tensor(), {1, 1}, {1, 1}, {1, 1}, 3)); }},
    {Op::conv2d, "conv2d of a channels_last input and a transposed-spatial weight",
     [] { return inputs(channels_last_leaf({1, 3, 4, 4}, 314), leaf({2, 3, 2, 3}, 315), leaf({2}, 316)); },
     [](const Inputs& x) { return outputs(conv2d(x[0], x[1].transpose(2, 3), x[2], {1, 1}, {1, 1})); }},
    {Op::conv2d, "conv2d where only the weight needs a gradient",
     [] { return inputs(leaf({1, 2, 4, 4}, 317).detach(), leaf({2, 2, 3, 3}, 318)); },
     [](const Inputs& x) { return outputs(conv2d(x[0], x[1])); }},
    {Op::conv2d, "conv2d where only the bias needs a gradient",
     [] {
       return inputs(leaf({1, 2, 4, 4}, 319).detach(), leaf({2, 2, 3, 3}, 320).detach(), leaf({2}, 321));
     },
     [](const Inputs& x) { return outputs(conv2d(x[0], x[1], x[2])); }},

    // ---- max_pool2d -----------------------------------------------------------------------------
    {Op::max_pool2d, "max_pool2d 2x2", [] { return inputs(leaf({1, 2, 4, 4}, 331)); },
     [](const Inputs& x) { return outputs(max_pool2d(x[0], {2, 2})); }},
    {Op::max_pool2d, "max_pool2d 3x3 stride 2 padding 1", [] { return inputs(leaf({2, 2, 5, 5}, 332)); },
     [](const Inputs& x) { return outputs(square(max_pool2d(x[0], {3, 3}, {2, 2}, {1, 1}))); }, kSecondOrder},
    {Op::max_pool2d, "max_pool2d ceil_mode, overlapping windows",
     [] { return inputs(leaf({1, 2, 5, 6}, 333)); },
     [](const Inputs& x) { return outputs(max_pool2d(x[0], {2, 3}, {2, 2}, {0, 1}, {1, 1}, true)); }},
    {Op::max_pool2d, "max_pool2d dilation 2 of a channels_last input",
     [] { return inputs(channels_last_leaf({1, 3, 6, 6}, 334)); },
     [](const Inputs& x) { return outputs(square(max_pool2d(x[0], {2, 2}, {1, 1}, {0, 0}, {2, 2}))); }, kSecondOrder},
    {Op::max_pool2d, "max_pool2d_with_indices", [] { return inputs(leaf({1, 1, 4, 6}, 335)); },
     [](const Inputs& x) {
       Pool2dParams p = make_pool2d_params({2, 2}, {2, 2}, {0, 0}, {1, 1}, false, true);
       auto [values, indices] = max_pool2d_with_indices(x[0], p);
       return outputs(values, indices);
     }},

    // ---- avg_pool2d -----------------------------------------------------------------------------
    {Op::avg_pool2d, "avg_pool2d 2x2", [] { return inputs(leaf({1, 2, 4, 4}, 341)); },
     [](const Inputs& x) { return outputs(avg_pool2d(x[0], {2, 2})); }},
    {Op::avg_pool2d, "avg_pool2d 3x3 stride 2 padding 1, count_include_pad",
     [] { return inputs(leaf({2, 1, 5, 5}, 342)); },
     [](const Inputs& x) { return outputs(avg_pool2d(x[0], {3, 3}, {2, 2}, {1, 1})); }},
    {Op::avg_pool2d, "avg_pool2d padding 1 without count_include_pad, ceil_mode",
     [] { return inputs(leaf({1, 2, 5, 6}, 343)); },
     [](const Inputs& x) { return outputs(square(avg_pool2d(x[0], {3, 2}, {2, 2}, {1, 1}, true, false))); }, kSecondOrder},
    {Op::avg_pool2d, "avg_pool2d of a channels_last input",
     [] { return inputs(channels_last_leaf({1, 3, 4, 4}, 344)); },
     [](const Inputs& x) { return outputs(avg_pool2d(x[0], {2, 2}, {1, 1})); }},

    // ---- adaptive_avg_pool2d --------------------------------------------------------------------
    {Op::adaptive_avg_pool2d, "adaptive_avg_pool2d 5x7 -> 2x3 (overlapping bins)",
     [] { return inputs(leaf({1, 2, 5, 7}, 351)); },
     [](const Inputs& x) { return outputs(square(adaptive_avg_pool2d(x[0], {2, 3}))); }, kSecondOrder},
    {Op::adaptive_avg_pool2d, "adaptive_avg_pool2d -> 1x1 (global) of a transposed input",
     [] { return inputs(leaf({2, 2, 3, 4}, 352)); },
     [](const Inputs& x) { return outputs(adaptive_avg_pool2d(x[0].transpose(2, 3), {1, 1})); }},

    // ---- the backward functions (what a second derivative goes through) ---------------------
    {Op::conv2d_backward_input, "conv2d_backward_input stride 2, padding 1, groups 2",
     [] { return inputs(leaf({1, 4, 3, 3}, 361), leaf({4, 2, 3, 3}, 362)); },
     [](const Inputs& x) {
       return outputs(square(conv2d_backward_input(x[0], x[1], {1, 4, 5, 6}, Conv2dParams{{2, 2}, {1, 1}, {1, 1}, 2})));
     }, kSecondOrder},
    {Op::conv2d_backward_weight, "conv2d_backward_weight with the bias gradient, dilation 2",
     [] { return inputs(leaf({2, 3, 3, 3}, 363), leaf({2, 2, 5, 5}, 364)); },
     [](const Inputs& x) {
       auto [grad_w, grad_b] = conv2d_backward_weight(x[0], x[1], {3, 2, 2, 2}, true, Conv2dParams{{1, 1}, {0, 0}, {2, 2}, 1});
       return outputs(square(grad_w), square(grad_b));
     }, kSecondOrder},
    {Op::max_pool2d_backward, "max_pool2d_backward 3x3 stride 2 padding 1, overlapping windows",
     [] { return inputs(leaf({1, 2, 3, 3}, 365)); },
     [](const Inputs& x) {
       Pool2dParams p = pool_params({3, 3}, {2, 2}, {1, 1});
       return outputs(square(max_pool2d_backward(x[0], max_indices({1, 2, 5, 5}, p, 366), {1, 2, 5, 5}, p)));
     }, kSecondOrder},
    {Op::avg_pool2d_backward, "avg_pool2d_backward padding 1 without count_include_pad, ceil_mode",
     [] { return inputs(leaf({1, 2, 3, 4}, 367)); },
     [](const Inputs& x) {
       return outputs(square(avg_pool2d_backward(x[0], {1, 2, 5, 6}, pool_params({3, 2}, {2, 2}, {1, 1}, true, false))));
     }, kSecondOrder},
    {Op::adaptive_avg_pool2d_backward, "adaptive_avg_pool2d_backward 2x3 -> 5x7",
     [] { return inputs(leaf({1, 2, 2, 3}, 368)); },
     [](const Inputs& x) { return outputs(square(adaptive_avg_pool2d_backward(x[0], {1, 2, 5, 7}))); }, kSecondOrder},
}};

}  // namespace loom::test
