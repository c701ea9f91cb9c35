/*
 * LOOM_HOST_DEVICE marks a function that CUDA kernels call as well as CPU code: __host__
 * __device__ under nvcc, nothing for the host compiler (the emulated CUDA build included, where
 * kernels are host code).
 */
#pragma once

#if defined(__CUDACC__)
#define LOOM_HOST_DEVICE __host__ __device__
#else
#define LOOM_HOST_DEVICE
#endif
