/*
 * Loom's cuBLASLt wrapper: one strided batched GEMM with an epilogue (bias, bias + ReLU,
 * bias + tanh-GELU keeping the GELU input for backward, the bias gradient of B, and the
 * tanh-GELU's backward with the bias gradient of its result), in cuBLAS's
 * column-major terms like blas.h. Descriptors, layouts and the heuristic's algorithm are cached
 * per problem (shapes, leading dimensions, dtype, epilogue); the workspace comes from the caching
 * allocator. The same code runs on a GPU and in the emulated build (core/cuda/emulated/cublasLt.h).
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"
#include "ops/cuda/blas.h"

namespace loom::cuda {

enum class LtEpilogue {
  kNone,          // D = op(A) op(B)
  kBias,          // D = op(A) op(B) + bias[row]
  kGeluTanhBias,  // D = gelu_tanh(op(A) op(B) + bias[row]); bias may be null; aux (if set) gets the GELU input
  kBiasGradB,     // D = op(A) op(B); bias[col] = the sum over k of op(B)[:, col] (BGRADB)
  kDGeluTanh,     // D = op(A) op(B) * gelu_tanh'(aux); bias (if set) gets D's row sums (DGELU_BGRAD)
};

struct LtGemm {
  BlasOp transa = BlasOp::kN, transb = BlasOp::kN;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* d = nullptr;
  int64_t ldd = 0, stride_d = 0;
  int64_t batch = 1;
  DType dtype = DType::Float32;  // of A, B, D, the bias and aux
  LtEpilogue epilogue = LtEpilogue::kNone;
  void* bias = nullptr;  // packed; read (kBias, kGeluTanhBias) or written (kBiasGradB, kDGeluTanh)
  void* aux = nullptr;   // m x n column-major, ld aux_ld (a multiple of 8): written by kGeluTanhBias, read by
                         // kDGeluTanh
  int64_t aux_ld = 0, aux_stride = 0;
};

// Runs g on `stream`. False (nothing written) when cuBLASLt's heuristic has no algorithm for it,
// so that the caller can fall back to cuBLAS; throws loom::Error when a cuBLASLt call fails.
bool lt_matmul(const LtGemm& g, cudaStream_t stream = op_stream());

// cuBLASLt's INT8 GEMM (the IMMA tensor-core kernels), column-major: D (int32, m x n, ld ldd) =
// A^T B for A int8 k x m (ld lda) and B int8 k x n (ld ldb), exact in int32. "TN" is the only
// form cuBLASLt offers for int8 in its regular ordering, and it asks for m, k and every leading
// dimension to be multiples of 4 and the pointers 4-byte aligned: the caller pads (see
// ops/cuda/int8_kernels.cpp). Throws loom::Error naming the problem otherwise, or when a
// cuBLASLt call fails.
struct LtInt8Gemm {
  int64_t m = 0, n = 0, k = 0;
  const int8_t* a = nullptr;
  int64_t lda = 0;
  const int8_t* b = nullptr;
  int64_t ldb = 0;
  int32_t* d = nullptr;
  int64_t ldd = 0;
};
void lt_matmul_int8(const LtInt8Gemm& g, cudaStream_t stream = op_stream());

}  // namespace loom::cuda
