/*
 * LOOM_CUDA_CHECK(call): throws loom::Error with file:line, the call and CUDA's own error
 * string when a CUDA runtime call fails (llm.c's cudaCheck, but throwing instead of exiting).
 */
#pragma once

#include <cuda_runtime_api.h>

#include "core/error.h"

#define LOOM_CUDA_CHECK(call)                                                                          \
  do {                                                                                                 \
    cudaError_t loom_cuda_status_ = (call);                                                            \
    if (loom_cuda_status_ != cudaSuccess) [[unlikely]] {                                               \
      (void)cudaGetLastError(); /* clear the sticky-free error so later calls are not poisoned */      \
      LOOM_FAIL("CUDA error ", cudaGetErrorName(loom_cuda_status_), ": ", cudaGetErrorString(loom_cuda_status_), \
                " in ", #call);                                                                        \
    }                                                                                                  \
  } while (0)
