/*
 * CUDA linalg kernels: none. matmul runs entirely in cuBLAS (ops/cuda/blas.cpp, called from
 * linalg_kernels.cpp); its bias is added by the GEMM itself (beta = 1 over a broadcast copy of the
 * bias), so no elementwise epilogue kernel is needed. This file stays as the family's home for
 * kernels that cuBLAS does not provide.
 */
#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/launch.cuh"
