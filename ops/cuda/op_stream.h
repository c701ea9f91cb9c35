/*
 * The stream a CUDA op's work goes to: the calling thread's current stream (core/cuda/stream.h),
 * as PyTorch's ops use getCurrentCUDAStream(). That is the legacy default stream unless a
 * CudaStreamGuard or a CUDA graph's capture (core/cuda_graph.h) made another one current; a
 * graph can only capture work on the stream it captures, never on the legacy stream.
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/cuda/stream.h"
#include "core/cuda_graph.h"

namespace loom::cuda {

inline cudaStream_t op_stream() {
  return current_stream().handle();
}

// A copy between host and device memory in the order of op_stream()'s work, which the host waits
// for (the caller reads the result, or frees its host buffer). A graph cannot hold a transfer to
// or from the host: during a capture this throws, naming `op`, before anything is queued.
void host_transfer(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, const char* op);

}  // namespace loom::cuda
