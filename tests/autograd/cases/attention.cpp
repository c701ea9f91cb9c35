/*
 * Gradcheck cases of the fused attention's CPU kernels through flash_attention's formula
 * (causal, masked, L != S, Ev != E), and of scaled_dot_product_attention's written-out path
 * (filed under softmax, which it records), including a float mask that takes a gradient.
 */
#include <limits>

#include "tests/autograd/cases/gradcheck_case.h"

namespace loom::test {

namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// A float mask [L, S] with -inf in places (the diagonal always kept: no row is all masked).
Tensor float_mask(int64_t l, int64_t s, uint64_t seed) {
  Tensor keep = leaf({l, s}, seed).detach().gt(-0.5).logical_or(ones({l, s}, kBool).tril());
  return where(keep, leaf({l, s}, seed + 1).detach() * 0.3, kMinusInf);
}

std::vector<Tensor> flash(const Inputs& x, const Tensor& mask, double scale, bool is_causal) {
  return outputs(std::get<0>(flash_attention_forward(x[0], x[1], x[2], mask, scale, is_causal)));
}

}  // namespace

[[maybe_unused]] static RegisterCases attention_cases{{
    {Op::flash_attention, "flash_attention [2, 3, 4] x [2, 5, 4] x [2, 5, 3]",
     [] { return inputs(leaf({2, 3, 4}, 9001), leaf({2, 5, 4}, 9002), leaf({2, 5, 3}, 9003)); },
     [](const Inputs& x) { return flash(x, {}, 0.5, false); }},
    {Op::flash_attention, "flash_attention causal, L > S",
     [] { return inputs(leaf({2, 5, 3}, 9011), leaf({2, 4, 3}, 9012), leaf({2, 4, 2}, 9013)); },
     [](const Inputs& x) { return flash(x, {}, 0.7, true); }},
    {Op::flash_attention, "flash_attention with a float mask broadcast over the batch",
     [] { return inputs(leaf({2, 4, 3}, 9021), leaf({2, 4, 3}, 9022), leaf({2, 4, 3}, 9023)); },
     [](const Inputs& x) { return flash(x, float_mask(4, 4, 9024), 0.6, false); }},
    {Op::softmax, "scaled_dot_product_attention [2, 2, 3, 4], causal and not",
     [] { return inputs(leaf({2, 2, 3, 4}, 9031), leaf({2, 2, 3, 4}, 9032), leaf({2, 2, 3, 2}, 9033)); },
     [](const Inputs& x) {
       return outputs(scaled_dot_product_attention(x[0], x[1], x[2]),
                      scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.0, /*is_causal=*/true, 0.3));
     }},
    {Op::softmax, "scaled_dot_product_attention with a float mask that takes a gradient",
     [] {
       return inputs(leaf({2, 3, 4}, 9041), leaf({2, 5, 4}, 9042), leaf({2, 5, 3}, 9043), leaf({3, 5}, 9044));
     },
     [](const Inputs& x) { return outputs(scaled_dot_product_attention(x[0], x[1], x[2], x[3])); }},
}};

}  // namespace loom::test
