/*
 * Loom's one cuBLAS wrapper: a strided batched GEMM in cuBLAS's own column-major terms, on a
 * lazily created handle, every cuBLAS status checked (a failure throws loom::Error naming the
 * call and the status, e.g. CUBLAS_STATUS_INVALID_VALUE). The same code runs on a GPU and in the
 * emulated build (core/cuda/emulated/cublas_v2.h).
 *
 * Compute types: f64 in double, f32 in float (TF32 tensor cores only after set_allow_tf32(true),
 * as torch.backends.cuda.matmul.allow_tf32, off by default), f16 and bf16 in float with the
 * result rounded once to the 16-bit type.
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "ops/cuda/op_stream.h"

namespace loom::cuda {

enum class BlasOp { kN, kT };  // op(X) = X or X^T, as CUBLAS_OP_N / CUBLAS_OP_T

// For each i < batch: C_i = alpha * op(A_i) op(B_i) + beta * C_i, column-major, where X_i = x + i *
// stride_x elements (stride 0 reuses one matrix). op(A) is m x k, op(B) k x n, C m x n; lda, ldb,
// ldc are the leading dimensions (cuBLAS requires lda >= max(1, rows of A as stored), and so on).
// a, b and c hold `dtype` (f32, f64, f16, bf16) in device memory. Arguments are passed to cuBLAS
// unchanged, so cuBLAS's own checks apply. Throws loom::Error if cuBLAS fails or a size does not
// fit cuBLAS's 32-bit arguments.
void gemm_strided_batched(BlasOp transa, BlasOp transb, int64_t m, int64_t n, int64_t k, double alpha,
                          const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb,
                          int64_t stride_b, double beta, void* c, int64_t ldc, int64_t stride_c,
                          int64_t batch, DType dtype, cudaStream_t stream = op_stream());

}  // namespace loom::cuda
