/*
 * Reading and writing one element of a cudaDataType matrix by index, for the emulated BLAS
 * libraries (cublas.cpp, cublasLt.cpp): 16-bit values are widened exactly and rounded to
 * nearest even when stored, as the real libraries' conversions do.
 */
#pragma once

#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>

#include "core/half_bits.h"

namespace loom_emu {

inline bool known_type(cudaDataType t) {
  return t == CUDA_R_32F || t == CUDA_R_64F || t == CUDA_R_16F || t == CUDA_R_16BF;
}

inline size_t type_size(cudaDataType t) {
  switch (t) {
    case CUDA_R_64F:
      return 8;
    case CUDA_R_32F:
    case CUDA_R_32I:
      return 4;
    case CUDA_R_8I:
      return 1;
    default:
      return 2;
  }
}

inline double load(cudaDataType t, const void* p, int64_t i) {
  switch (t) {
    case CUDA_R_32F:
      return static_cast<const float*>(p)[i];
    case CUDA_R_64F:
      return static_cast<const double*>(p)[i];
    case CUDA_R_16F:
      return loom::detail::half_bits_to_float(static_cast<const uint16_t*>(p)[i]);
    case CUDA_R_16BF:
      return loom::detail::bf16_bits_to_float(static_cast<const uint16_t*>(p)[i]);
    case CUDA_R_8I:
    case CUDA_R_32I:
      break;  // known_type() keeps them out: the INT8 product (cublasLt.cpp) reads its integers itself
  }
  return 0;
}

inline void store(cudaDataType t, void* p, int64_t i, double v) {
  switch (t) {
    case CUDA_R_32F:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case CUDA_R_64F:
      static_cast<double*>(p)[i] = v;
      break;
    case CUDA_R_16F:
      static_cast<uint16_t*>(p)[i] = loom::detail::float_to_half_bits(static_cast<float>(v));
      break;
    case CUDA_R_16BF:
      static_cast<uint16_t*>(p)[i] = loom::detail::float_to_bf16_bits(static_cast<float>(v));
      break;
    case CUDA_R_8I:
    case CUDA_R_32I:
      break;  // as in load()
  }
}

}  // namespace loom_emu
