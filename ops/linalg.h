/*
 * Matrix products through oneDNN's matmul primitive (f32, f64 via a reference path, bf16, f16).
 * matmul follows torch.matmul: 1-D x 1-D is a dot product, 1-D operands are promoted
 * by a unit dim that is removed afterwards, N-D batch dims broadcast.
 * Throws loom::Error naming both shapes when the inner dimensions differ.
 */
#pragma once

#include "core/tensor.h"

namespace loom {

Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);   // [M, K] x [K, N] -> [M, N]
Tensor bmm(const Tensor& a, const Tensor& b);  // [B, M, K] x [B, K, N] -> [B, M, N]
// x [*, in] , weight [out, in], bias undefined or [out] -> [*, out]  (x W^T + b)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

namespace cuda {
// Whether float32 matmuls on CUDA may use TF32 (inputs rounded to a 10-bit mantissa, float
// accumulation): faster on tensor cores, about 1e-3 relative error. Off by default, as
// torch.backends.cuda.matmul.allow_tf32; process-wide. No effect on the CPU.
void set_allow_tf32(bool allow);
bool allow_tf32();
}  // namespace cuda

}  // namespace loom
