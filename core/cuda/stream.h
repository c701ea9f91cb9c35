/*
 * CUDA streams and events (CUDA builds only; core/cuda.h is the part every build has).
 *
 * CudaStream is a non-owning handle, cheap to copy, like a cudaStream_t; OwnedCudaStream
 * creates one and destroys it with itself. Each thread has a current stream, the legacy
 * default stream (nullptr) unless a CudaStreamGuard says otherwise: the caching allocator
 * serves allocations from the current stream's pool, so a block is reused without any
 * synchronisation only by work on the stream it was allocated on (record_stream in
 * core/cuda.h covers the other case).
 */
#pragma once

#include <cuda_runtime_api.h>

#include "core/cuda.h"

namespace loom::cuda {

class CudaStream {
 public:
  CudaStream() = default;  // the legacy default stream
  explicit CudaStream(cudaStream_t stream) : stream_(stream) {}

  cudaStream_t handle() const { return stream_; }
  // Blocks until the work queued on this stream has finished.
  void synchronize() const;
  // True when the work queued on this stream has finished.
  bool query() const;

  friend bool operator==(CudaStream a, CudaStream b) { return a.stream_ == b.stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// A stream created by Loom and destroyed with this object (after its work has finished:
// cudaStreamDestroy lets queued work complete). Non-blocking by default: it neither waits for
// nor holds up the legacy default stream.
class OwnedCudaStream {
 public:
  explicit OwnedCudaStream(unsigned flags = cudaStreamNonBlocking);
  ~OwnedCudaStream();
  OwnedCudaStream(OwnedCudaStream&& other) noexcept : stream_(other.stream_) { other.stream_ = nullptr; }
  OwnedCudaStream& operator=(OwnedCudaStream&& other) noexcept;
  OwnedCudaStream(const OwnedCudaStream&) = delete;
  OwnedCudaStream& operator=(const OwnedCudaStream&) = delete;

  CudaStream stream() const { return CudaStream(stream_); }
  operator CudaStream() const { return stream(); }

 private:
  cudaStream_t stream_ = nullptr;
};

// The calling thread's current stream (the legacy default stream unless set).
CudaStream current_stream();
void set_current_stream(CudaStream stream);

// Makes `stream` current for the calling thread during its lifetime.
class CudaStreamGuard {
 public:
  explicit CudaStreamGuard(CudaStream stream) : previous_(current_stream()) { set_current_stream(stream); }
  ~CudaStreamGuard() { set_current_stream(previous_); }
  CudaStreamGuard(const CudaStreamGuard&) = delete;
  CudaStreamGuard& operator=(const CudaStreamGuard&) = delete;

 private:
  CudaStream previous_;
};

// Puts the calling thread in relaxed stream-capture mode during its lifetime. For calls that are
// not stream work (cudaMalloc, cudaFree, a one-off memset), which the default (global) capture
// mode refuses as "potentially unsafe" while any graph is being captured.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode();
  ~RelaxedCaptureMode();  // the previous mode again
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// A CUDA event: a marker in a stream's queue that completes when the work before it has.
class CudaEvent {
 public:
  // `timing`: whether elapsed_time can be asked (timing events cost a little more).
  explicit CudaEvent(bool timing = false);
  ~CudaEvent();
  CudaEvent(CudaEvent&& other) noexcept : event_(other.event_) { other.event_ = nullptr; }
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  // Marks the current end of `stream`'s queue.
  void record(CudaStream stream = current_stream());
  // Makes work queued on `stream` from now on wait until this event has completed (the host
  // does not wait).
  void block(CudaStream stream) const;
  // Blocks the host until the work before the recorded marker has finished.
  void synchronize() const;
  // True when that work has finished.
  bool query() const;
  // Milliseconds between this event and `end`, both recorded, timing events, completed.
  float elapsed_time(const CudaEvent& end) const;

  cudaEvent_t handle() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace loom::cuda
