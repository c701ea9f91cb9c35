/* CUDA streams and events (see stream.h). */
#include "core/cuda/stream.h"

#include "core/cuda/cuda_check.h"

namespace loom::cuda {

namespace {
thread_local cudaStream_t current = nullptr;  // per thread, like PyTorch's current stream
}

void CudaStream::synchronize() const { LOOM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

bool CudaStream::query() const {
  cudaError_t status = cudaStreamQuery(stream_);
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" is an answer, not an error to keep
    return false;
  }
  LOOM_CUDA_CHECK(status);
  return true;
}

OwnedCudaStream::OwnedCudaStream(unsigned flags) {
  LOOM_CHECK(device_count() > 0, "cuda: cannot create a stream: no CUDA device is available");
  LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, flags));
}

OwnedCudaStream::~OwnedCudaStream() {
  if (stream_) (void)cudaStreamDestroy(stream_);  // destructor: nothing to do with an error
}

OwnedCudaStream& OwnedCudaStream::operator=(OwnedCudaStream&& other) noexcept {
  if (this != &other) {
    if (stream_) (void)cudaStreamDestroy(stream_);
    stream_ = other.stream_;
    other.stream_ = nullptr;
  }
  return *this;
}

RelaxedCaptureMode::RelaxedCaptureMode() {
  LOOM_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode_));
}
RelaxedCaptureMode::~RelaxedCaptureMode() {
  (void)cudaThreadExchangeStreamCaptureMode(&mode_);
}

CudaStream current_stream() { return CudaStream(current); }
void set_current_stream(CudaStream stream) { current = stream.handle(); }

CudaEvent::CudaEvent(bool timing) {
  LOOM_CHECK(device_count() > 0, "cuda: cannot create an event: no CUDA device is available");
  LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  if (event_) (void)cudaEventDestroy(event_);
}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    if (event_) (void)cudaEventDestroy(event_);
    event_ = other.event_;
    other.event_ = nullptr;
  }
  return *this;
}

void CudaEvent::record(CudaStream stream) { LOOM_CUDA_CHECK(cudaEventRecord(event_, stream.handle())); }

void CudaEvent::block(CudaStream stream) const { LOOM_CUDA_CHECK(cudaStreamWaitEvent(stream.handle(), event_, 0)); }

void CudaEvent::synchronize() const { LOOM_CUDA_CHECK(cudaEventSynchronize(event_)); }

bool CudaEvent::query() const {
  cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  LOOM_CUDA_CHECK(status);
  return true;
}

float CudaEvent::elapsed_time(const CudaEvent& end) const {
  float ms = 0;
  LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

}  // namespace loom::cuda
