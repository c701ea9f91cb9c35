/*
 * Gradcheck cases of matmul (which mm, bmm and linear record): every operand rank torch.matmul
 * takes, batch broadcasting, non-contiguous operands, linear with and without bias and with 1-D
 * and 3-D inputs, and second order; linear_activation (each activation, with and without bias)
 * and linear_weight_grad, which linear's formula calls; linear_activation_linear (each
 * activation; its first-order gradient through linear_input_grad_activation, its second order
 * through the unfused ops).
 */
#include "tests/autograd/cases/gradcheck_case.h"

namespace loom::test {

[[maybe_unused]] static RegisterCases linalg_cases{{
    {Op::matmul, "matmul 1-D x 1-D (dot)", [] { return inputs(leaf({4}, 201), leaf({4}, 202)); },
     [](const Inputs& x) { return outputs(matmul(x[0], x[1])); }, kSecondOrder},
    {Op::matmul, "matmul 1-D x 2-D",
     [] {
       return inputs(leaf({3}, 203), leaf({3, 4}, 204));
     },
     [](const Inputs& x) { return outputs(matmul(x[0], x[1])); }},
    {Op::matmul, "matmul 2-D x 1-D",
     [] {
       return inputs(leaf({4, 3}, 205), leaf({3}, 206));
     },
     [](const Inputs& x) { return outputs(matmul(x[0], x[1])); }},
    {Op::matmul, "matmul 2-D x 2-D, second order",
     [] {
       return inputs(leaf({3, 4}, 207), leaf({4, 2}, 208));
     },
     [](const Inputs& x) { return outputs(matmul(x[0], x[1])); }, kSecondOrder},
    {Op::matmul, "matmul batched broadcast [2,1,3,4] x [3,4,5], second order",
     [] {
       return inputs(leaf({2, 1, 3, 4}, 209), leaf({3, 4, 5}, 210));
     },
     [](const Inputs& x) { return outputs(matmul(x[0], x[1])); }, kSecondOrder},
    {Op::matmul, "matmul [2,3,4] x [4,2] (batch folded into rows)",
     [] {
       return inputs(leaf({2, 3, 4}, 211), leaf({4, 2}, 212));
     },
     [](const Inputs& x) { return outputs(matmul(x[0], x[1])); }, kSecondOrder},
    {Op::matmul, "matmul [4,3] x [2,3,2] (a broadcast over b's batch)",
     [] {
       return inputs(leaf({4, 3}, 213), leaf({2, 3, 2}, 214));
     },
     [](const Inputs& x) { return outputs(matmul(x[0], x[1])); }},
    {Op::matmul, "matmul 3-D x 1-D",
     [] {
       return inputs(leaf({2, 3, 4}, 215), leaf({4}, 216));
     },
     [](const Inputs& x) { return outputs(matmul(x[0], x[1])); }},
    {Op::matmul, "matmul 1-D x 3-D",
     [] {
       return inputs(leaf({3}, 217), leaf({2, 3, 4}, 218));
     },
     [](const Inputs& x) { return outputs(matmul(x[0], x[1])); }},
    {Op::matmul, "matmul of transposes and a sliced view",
     [] {
       return inputs(transposed_leaf(3, 4, 219), leaf({5, 4}, 220));
     },
     [](const Inputs& x) { return outputs(matmul(x[0], x[1].narrow(0, 1, 4).t())); }},
    {Op::matmul, "mm of a transpose",
     [] {
       return inputs(transposed_leaf(2, 3, 221), leaf({3, 4}, 222));
     },
     [](const Inputs& x) { return outputs(mm(x[0], x[1])); }, kSecondOrder},
    {Op::matmul, "bmm",
     [] {
       return inputs(leaf({2, 3, 4}, 223), leaf({2, 4, 2}, 224));
     },
     [](const Inputs& x) { return outputs(bmm(x[0], x[1])); }, kSecondOrder},
    {Op::matmul, "bmm of transposed batches",
     [] {
       return inputs(leaf({2, 4, 3}, 225), leaf({2, 4, 2}, 226));
     },
     [](const Inputs& x) { return outputs(bmm(x[0].transpose(1, 2), x[1])); }},
    {Op::matmul, "linear with bias, second order",
     [] {
       return inputs(leaf({3, 4}, 227), leaf({2, 4}, 228), leaf({2}, 229));
     },
     [](const Inputs& x) { return outputs(linear(x[0], x[1], x[2])); }, kSecondOrder},
    {Op::matmul, "linear without bias",
     [] {
       return inputs(leaf({3, 4}, 230), leaf({2, 4}, 231));
     },
     [](const Inputs& x) { return outputs(linear(x[0], x[1])); }},
    {Op::matmul, "linear of a 3-D input with bias, second order",
     [] {
       return inputs(leaf({2, 3, 4}, 232), leaf({3, 4}, 233), leaf({3}, 234));
     },
     [](const Inputs& x) { return outputs(linear(x[0], x[1], x[2])); }, kSecondOrder},
    {Op::matmul, "linear of a 1-D input, transposed weight",
     [] { return inputs(leaf({4}, 235), transposed_leaf(3, 4, 236), leaf({3}, 237)); },
     [](const Inputs& x) { return outputs(linear(x[0], x[1], x[2])); }},
    {Op::matmul, "linear of a non-contiguous 3-D input, bias broadcast by a view",
     [] {
       return inputs(leaf({3, 2, 4}, 238), leaf({2, 4}, 239), leaf({1, 2}, 240));
     },
     [](const Inputs& x) { return outputs(linear(x[0].transpose(0, 1), x[1], x[2].view({2}))); }},
    {Op::linear_activation, "linear_activation relu of a 3-D input with bias",
     [] {
       return inputs(leaf({2, 3, 4}, 241), leaf({3, 4}, 242), leaf({3}, 243));
     },
     [](const Inputs& x) { return outputs(linear_activation(x[0], x[1], x[2], Activation::Relu)); }},
    {Op::linear_activation, "linear_activation gelu (erf) with bias, second order",
     [] {
       return inputs(leaf({3, 4}, 244), leaf({2, 4}, 245), leaf({2}, 246));
     },
     [](const Inputs& x) { return outputs(linear_activation(x[0], x[1], x[2], Activation::Gelu)); },
     kSecondOrder},
    {Op::linear_activation, "linear_activation tanh gelu without bias, second order",
     [] {
       return inputs(leaf({2, 3, 4}, 247), leaf({3, 4}, 248));
     },
     [](const Inputs& x) { return outputs(linear_activation(x[0], x[1], Tensor(), Activation::GeluTanh)); },
     kSecondOrder},
    {Op::linear_weight_grad, "linear_weight_grad with the bias gradient, second order",
     [] {
       return inputs(leaf({5, 3}, 249), leaf({5, 4}, 250));
     },
     [](const Inputs& x) {
       auto [gw, gb] = linear_weight_grad(x[0], x[1], true);
       return outputs(gw, gb);
     },
     kSecondOrder},
    {Op::linear_weight_grad, "linear_weight_grad without the bias gradient",
     [] {
       return inputs(leaf({5, 3}, 251), leaf({5, 4}, 252));
     },
     [](const Inputs& x) { return outputs(linear_weight_grad(x[0], x[1], false).first); }},
    {Op::linear_activation_linear, "linear_activation_linear relu of a 3-D input with both biases",
     [] {
       return inputs(leaf({2, 3, 4}, 253), leaf({5, 4}, 254), leaf({5}, 255), leaf({3, 5}, 256),
                     leaf({3}, 257));
     },
     [](const Inputs& x) {
       return outputs(linear_activation_linear(x[0], x[1], x[2], x[3], x[4], Activation::Relu));
     }},
    {Op::linear_activation_linear, "linear_activation_linear tanh gelu with both biases, second order",
     [] {
       return inputs(leaf({3, 4}, 258), leaf({8, 4}, 259), leaf({8}, 260), leaf({2, 8}, 261), leaf({2}, 262));
     },
     [](const Inputs& x) {
       return outputs(linear_activation_linear(x[0], x[1], x[2], x[3], x[4], Activation::GeluTanh));
     },
     kSecondOrder},
    {Op::linear_activation_linear,
     "linear_activation_linear gelu (erf) of a 1-D input without biases, second order",
     [] {
       return inputs(leaf({4}, 263), leaf({3, 4}, 264), leaf({2, 3}, 265));
     },
     [](const Inputs& x) {
       return outputs(linear_activation_linear(x[0], x[1], Tensor(), x[2], Tensor(), Activation::Gelu));
     },
     kSecondOrder},
}};

}  // namespace loom::test
