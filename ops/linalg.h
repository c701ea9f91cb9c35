/*
 * Matrix products through oneDNN's matmul primitive (f32, f64 via a reference path, bf16, f16).
 * matmul follows torch.matmul: 1-D x 1-D is a dot product, 1-D operands are promoted
 * by a unit dim that is removed afterwards, N-D batch dims broadcast.
 * Throws loom::Error naming both shapes when the inner dimensions differ.
 */
#pragma once

#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "ops/kernel_types.h"

namespace loom {

Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);   // [M, K] x [K, N] -> [M, N]
Tensor bmm(const Tensor& a, const Tensor& b);  // [B, M, K] x [B, K, N] -> [B, M, N]
// x [*, in] , weight [out, in], bias undefined or [out] -> [*, out]  (x W^T + b)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// Einstein summation, as torch.einsum: "ij,jk->ik"; without "->" the output is the labels that
// appear once, in alphabetical order; "..." stands for broadcast dims; a label repeated within
// one operand takes its diagonal ("ii->i", "ii" the trace). Operands are contracted left to
// right, each pair with one bmm (so autocast runs them in lower precision). Throws naming the
// equation for a malformed equation, a wrong number of operands or of dims, and sizes that
// disagree for one label.
Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands);
// activation(linear(x, weight, bias)), one op: x [*, in], weight [out, in], bias undefined or
// [out] -> [*, out]. On the CPU the numbers are exactly linear's followed by relu / gelu (erf) /
// gelu(tanh); on CUDA the tanh GELU runs in cuBLASLt's epilogue (GELU_AUX_BIAS), and relu and the
// erf GELU after the GEMM (cuBLASLt's relu would turn NaN into 0: relu keeps NaN on every
// backend). Throws as linear does.
Tensor linear_activation(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation activation);
// linear_activation and its pre-activation x W^T + b (undefined for relu, whose gradient reads
// the output): what autograd records. The pre-activation is saved for backward only and carries
// no gradient history.
std::pair<Tensor, Tensor> linear_activation_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                                    Activation activation);
// linear's weight and bias gradients in one op: grad [R, out], x [R, in] (same dtype and device)
// -> (grad^T x [out, in], the column sums of grad [out], undefined unless with_bias). On CUDA
// the bias gradient comes from the GEMM's BGRADB epilogue.
std::pair<Tensor, Tensor> linear_weight_grad(const Tensor& grad, const Tensor& x, bool with_bias);

// Two linears with an activation between them, one op (a transformer's or an MLP's block):
// linear(activation(linear(x, weight1, bias1)), weight2, bias2), x [*, in], weight1 [hidden, in],
// weight2 [out, hidden], biases undefined or of the weights' rows -> [*, out]. Forward is
// linear_activation then linear, the same numbers. Backward is where it differs: the gradient
// at the hidden layer's pre-activation comes from one op (linear_input_grad_activation), which on
// CUDA is one cuBLASLt GEMM with the DGELU_BGRAD epilogue for the tanh GELU (the product,
// the GELU's derivative and the bias gradient in one pass). Throws as linear does, naming the
// layer whose shapes do not fit.
Tensor linear_activation_linear(const Tensor& x, const Tensor& weight1, const Tensor& bias1,
                                const Tensor& weight2, const Tensor& bias2, Activation activation);
// The same and what autograd records with it: (output, hidden = activation(pre), pre, undefined
// for relu). hidden and pre are saved for backward only and carry no gradient history.
std::tuple<Tensor, Tensor, Tensor> linear_activation_linear_forward(const Tensor& x, const Tensor& weight1,
                                                                    const Tensor& bias1,
                                                                    const Tensor& weight2,
                                                                    const Tensor& bias2,
                                                                    Activation activation);
// grad * activation'(pre) as relu's and gelu's own formulas compute it: relu's derivative reads
// its output, the GELUs' their input pre (the other may be undefined).
Tensor activation_backward(const Tensor& grad, const Tensor& pre, const Tensor& output,
                           Activation activation);
// linear_activation_linear's backward at its hidden layer: grad [R, out] and weight2 [out, hidden]
// -> (grad_pre = (grad @ weight2) * activation'(pre) [R, hidden], its column sums [hidden] or
// undefined unless with_bias). pre [R, hidden] is the GELUs' pre-activation (undefined for relu),
// hidden [R, hidden] the activation's output (relu's derivative reads it). Not differentiable:
// it refuses to be recorded (a second derivative goes through the unfused ops, see
// autograd/formulas/linalg.cpp).
std::pair<Tensor, Tensor> linear_input_grad_activation(const Tensor& grad, const Tensor& weight2,
                                                       const Tensor& pre, const Tensor& hidden,
                                                       Activation activation, bool with_bias);

namespace cuda {
// Whether float32 matmuls on CUDA may use TF32 (inputs rounded to a 10-bit mantissa, float
// accumulation): faster on tensor cores, about 1e-3 relative error. Off by default, as
// torch.backends.cuda.matmul.allow_tf32; process-wide. No effect on the CPU.
void set_allow_tf32(bool allow);
bool allow_tf32();
}  // namespace cuda

}  // namespace loom
