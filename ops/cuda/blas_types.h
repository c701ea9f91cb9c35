/*
 * Internal to ops/cuda: Loom's floating dtypes as the cudaDataType_t that cuBLAS and cuBLASLt
 * take, written once for both wrappers (blas.cpp, blas_lt.cpp).
 */
#pragma once

#include <cublas_v2.h>

#include "core/dtype.h"
#include "core/error.h"

namespace loom::cuda {

// library names the caller in the error ("cuBLAS GEMM", "cuBLASLt GEMM").
inline cudaDataType_t gemm_data_type(DType t, const char* library) {
  switch (t) {
    case DType::Float32:
      return CUDA_R_32F;
    case DType::Float64:
      return CUDA_R_64F;
    case DType::Float16:
      return CUDA_R_16F;
    case DType::BFloat16:
      return CUDA_R_16BF;
    default:
      LOOM_FAIL(library, ": expected float32, float64, float16 or bfloat16, got ", t);
  }
}

}  // namespace loom::cuda
