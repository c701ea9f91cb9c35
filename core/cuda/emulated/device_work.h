/*
 * How the emulator's device work meets its streams (streams.cpp): every kernel launch, copy,
 * memset and library call goes through submit(), which runs it at once or, while its stream is
 * being captured, records it as the next node of a CUDA graph. Internal to core/cuda/emulated.
 */
#pragma once

#include <functional>

#include "cuda_runtime_api.h"

namespace loom_emu {

// Makes e the calling thread's last error (cudaGetLastError) when it is one; returns e.
cudaError_t record_error(cudaError_t e);

// Device work queued on `stream`. Runs it now, in the calling thread (emulated streams execute
// what is enqueued at once), or appends it to the graph being captured on `stream`, to run at
// every launch of that graph. The work takes its own DeviceAccess and copies what it reads from
// the host (kernel arguments, by-value scalars) when it is built, as CUDA copies them at the call.
// Returns cudaErrorInvalidResourceHandle for an unknown stream, cudaErrorStreamCaptureInvalidated
// for a capture that an earlier call invalidated, and cudaErrorStreamCaptureImplicit for work on
// the legacy stream while a blocking stream is being captured (that capture is invalidated).
cudaError_t submit(cudaStream_t stream, std::function<void()> work);

// For the calls stream capture calls "potentially unsafe" (cudaMalloc, cudaFree, pinned memory,
// synchronous copies, device synchronisation, event queries): cudaSuccess when the calling thread may make
// one now; else cudaErrorStreamCaptureUnsupported, and the captures that forbid it are invalidated.
cudaError_t check_unsafe_call();

}  // namespace loom_emu
