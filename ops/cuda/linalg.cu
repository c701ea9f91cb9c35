/*
 * CUDA linalg kernels: none. matmul, linear_activation and linear_weight_grad run entirely in
 * cuBLAS and cuBLASLt (ops/cuda/blas.cpp, blas_lt.cpp, called from linalg_kernels.cpp): the bias,
 * the ReLU / tanh GELU and the bias gradient are cuBLASLt epilogues, so no elementwise epilogue
 * kernel is needed. This file stays as the family's home for
 * kernels that cuBLAS does not provide.
 */
#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/launch.cuh"
