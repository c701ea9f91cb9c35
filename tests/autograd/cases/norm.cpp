/*
 * Gradcheck cases of the normalisation ops. batch_norm in training mode (with and without
 * weight and bias, [N, C] and [N, C, H, W], non-contiguous input) and in eval mode (constant
 * running statistics; second order, since its gradient is written with forward ops);
 * layer_norm over one and several trailing dims, with and without weight and bias, on a
 * transpose and on a view; second order through the fused backward kernels, whose own cases
 * give the statistics freely (not those of x).
 */
#include "tests/autograd/cases/gradcheck_case.h"

namespace loom::test {

namespace {

// Running statistics for eval mode: constants (buffers, not inputs), var > 0.
Tensor running_mean(int64_t c) { return make(random_values(c, 3001, 0.5), {c}); }
Tensor running_var(int64_t c) { return make(random_values(c, 3002, 0.3), {c}).abs() + 0.5; }

// A [N, C, L] leaf stored as [N, L, C] (non-contiguous).
Tensor channels_last_leaf(int64_t n, int64_t c, int64_t l, uint64_t seed) {
  return make(random_values(n * l * c, seed), {n, l, c}).permute({0, 2, 1}).requires_grad_();
}

}  // namespace

[[maybe_unused]] static RegisterCases norm_cases{{
    // ---- batch_norm, training -------------------------------------------------------------------
    {Op::batch_norm, "batch_norm train [3, 2, 2, 2] with weight and bias",
     [] { return inputs(leaf({3, 2, 2, 2}, 3011), leaf({2}, 3012, 0.5, 1.0), leaf({2}, 3013)); },
     [](const Inputs& x) { return outputs(batch_norm(x[0], x[1], x[2], {}, {}, true)); }, kSecondOrder},
    {Op::batch_norm, "batch_norm train [4, 3] without weight and bias, updating running stats",
     [] { return inputs(leaf({4, 3}, 3014)); },
     [](const Inputs& x) {
       Tensor rm = zeros({3}, TensorOptions(kFloat64)), rv = ones({3}, TensorOptions(kFloat64));
       return outputs(batch_norm(x[0], {}, {}, rm, rv, true, 0.1, 1e-3));
     }, kSecondOrder},
    {Op::batch_norm, "batch_norm train, bias only, non-contiguous [2, 3, 4]",
     [] { return inputs(channels_last_leaf(2, 3, 4, 3015), leaf({3}, 3016)); },
     [](const Inputs& x) { return outputs(batch_norm(x[0], {}, x[1], {}, {}, true) * x[0]); }, kSecondOrder},
    {Op::batch_norm, "batch_norm train, weight only, output times a view of x",
     [] { return inputs(leaf({4, 2, 3}, 3017), leaf({2}, 3018, 0.5, 1.0)); },
     [](const Inputs& x) { return outputs(batch_norm(x[0], x[1], {}, {}, {}, true).narrow(2, 1, 2)); }, kSecondOrder},

    // ---- batch_norm, eval ------------------------------------------------------------------------
    {Op::batch_norm, "batch_norm eval [3, 2, 2, 2] with weight and bias, second order",
     [] { return inputs(leaf({3, 2, 2, 2}, 3021), leaf({2}, 3022, 0.5, 1.0), leaf({2}, 3023)); },
     [](const Inputs& x) {
       return outputs(batch_norm(x[0], x[1], x[2], running_mean(2), running_var(2), false) * x[0]);
     }, kSecondOrder},
    {Op::batch_norm, "batch_norm eval [4, 3] without weight and bias, second order",
     [] { return inputs(leaf({4, 3}, 3024)); },
     [](const Inputs& x) {
       return outputs(batch_norm(x[0], {}, {}, running_mean(3), running_var(3), false));
     },
     kSecondOrder},
    {Op::batch_norm, "batch_norm eval, non-contiguous input, bias only",
     [] { return inputs(channels_last_leaf(2, 3, 4, 3025), leaf({3}, 3026)); },
     [](const Inputs& x) {
       return outputs(batch_norm(x[0], {}, x[1], running_mean(3), running_var(3), false, 0.1, 1e-2));
     }, kSecondOrder},

    // ---- layer_norm -------------------------------------------------------------------------------
    {Op::layer_norm, "layer_norm [2, 3, 4] over {4} with weight and bias",
     [] { return inputs(leaf({2, 3, 4}, 3031), leaf({4}, 3032, 0.5, 1.0), leaf({4}, 3033)); },
     [](const Inputs& x) { return outputs(layer_norm(x[0], {4}, x[1], x[2])); }, kSecondOrder},
    {Op::layer_norm, "layer_norm [2, 3, 4] over {3, 4} with weight and bias",
     [] { return inputs(leaf({2, 3, 4}, 3034), leaf({3, 4}, 3035, 0.5, 1.0), leaf({3, 4}, 3036)); },
     [](const Inputs& x) { return outputs(layer_norm(x[0], {3, 4}, x[1], x[2]) * x[0]); }, kSecondOrder},
    {Op::layer_norm, "layer_norm of a transpose over {4}, no weight or bias",
     [] { return inputs(transposed_leaf(3, 4, 3037)); },
     [](const Inputs& x) { return outputs(layer_norm(x[0], {4})); }, kSecondOrder},
    {Op::layer_norm, "layer_norm weight only, eps 1e-2",
     [] { return inputs(leaf({3, 5}, 3038), leaf({5}, 3039, 0.5, 1.0)); },
     [](const Inputs& x) { return outputs(layer_norm(x[0], {5}, x[1], {}, 1e-2)); }},
    {Op::layer_norm, "layer_norm bias only, of a strided view",
     [] { return inputs(leaf({3, 6}, 3040), leaf({3}, 3041)); },
     [](const Inputs& x) { return outputs(layer_norm(x[0].narrow(1, 1, 3), {3}, {}, x[1])); }, kSecondOrder},
    {Op::layer_norm, "layer_norm over all dims of a [2, 3]",
     [] { return inputs(leaf({2, 3}, 3042), leaf({2, 3}, 3043, 0.5, 1.0), leaf({2, 3}, 3044)); },
     [](const Inputs& x) { return outputs(layer_norm(x[0], {2, 3}, x[1], x[2])); }, kSecondOrder},

    // ---- the fused backward kernels (what a second derivative goes through) ---------------------
    {Op::batch_norm_backward, "batch_norm_backward [3, 2, 2] with a weight, statistics as inputs",
     [] {
       return inputs(leaf({3, 2, 2}, 3051), leaf({3, 2, 2}, 3052), leaf({2}, 3053, 0.5, 1.0), leaf({2}, 3054, 0.3),
                     leaf({2}, 3055, 0.3, 1.0));
     },
     [](const Inputs& x) {
       auto [gx, gw, gb] = batch_norm_backward(x[0], x[1], x[2], x[3], x[4]);
       return outputs(gx * x[1], gw * gw, gb * gb);
     }, kSecondOrder},
    {Op::batch_norm_backward, "batch_norm_backward [4, 3] without a weight",
     [] { return inputs(leaf({4, 3}, 3056), leaf({4, 3}, 3057), leaf({3}, 3058, 0.3), leaf({3}, 3059, 0.3, 1.0)); },
     [](const Inputs& x) { return outputs(std::get<0>(batch_norm_backward(x[0], x[1], {}, x[2], x[3])) * x[0]); },
     kSecondOrder},
    {Op::layer_norm_backward, "layer_norm_backward [2, 3, 4] over {3, 4} with a weight, statistics as inputs",
     [] {
       return inputs(leaf({2, 3, 4}, 3061), leaf({2, 3, 4}, 3062), leaf({2}, 3063, 0.3), leaf({2}, 3064, 0.3, 1.0),
                     leaf({3, 4}, 3065, 0.5, 1.0));
     },
     [](const Inputs& x) {
       auto [gx, gw, gb] = layer_norm_backward(x[0], x[1], {3, 4}, x[2], x[3], x[4]);
       return outputs(gx * x[1], gw * gw, gb * gb);
     }, kSecondOrder},
    {Op::layer_norm_backward, "layer_norm_backward over all dims of a [2, 3], no weight",
     [] { return inputs(leaf({2, 3}, 3066), leaf({2, 3}, 3067), leaf({}, 3068, 0.3), leaf({}, 3069, 0.3, 1.0)); },
     [](const Inputs& x) {
       auto [gx, gw, gb] = layer_norm_backward(x[0], x[1], {2, 3}, x[2], x[3], {});
       return outputs(gx * x[0], gw * x[1], gb);
     }, kSecondOrder},
}};

}  // namespace loom::test
