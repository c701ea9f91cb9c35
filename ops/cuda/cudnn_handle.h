/*
 * Internal to ops/cuda: the cuDNN handle and the check macro, shared by Loom's cuDNN wrappers
 * (cudnn_conv.cpp). The same code runs on a GPU and in the emulated build
 * (core/cuda/emulated/cudnn.h).
 */
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <mutex>

namespace loom::cuda {

// Throws loom::Error naming the call, cuDNN's status and cuDNN's own message for the failure
// (cudnnGetLastErrorString), with file:line.
[[noreturn]] void cudnn_fail(cudnnStatus_t status, const char* call, const char* file, int line);

// Guards the handles and every use of them: a cuDNN handle is not safe in two threads at once.
std::mutex& cudnn_mutex();

// The current device's handle, created on first use and never destroyed (as blas.cpp's cuBLAS
// handle: at static destruction the runtime may be gone), bound to `stream`. Call with
// cudnn_mutex() held.
cudnnHandle_t cudnn_handle(cudaStream_t stream);

}  // namespace loom::cuda

#define LOOM_CUDNN_CHECK(call)                                                 \
  do {                                                                         \
    cudnnStatus_t loom_cudnn_status_ = (call);                                 \
    if (loom_cudnn_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]]               \
      ::loom::cuda::cudnn_fail(loom_cudnn_status_, #call, __FILE__, __LINE__); \
  } while (0)
