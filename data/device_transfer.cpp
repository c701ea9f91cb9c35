/*
 * Pinned buffers and asynchronous host-to-device copies (see device_transfer.h). The CUDA
 * parts compile only with the CUDA backend (LOOM_WITH_CUDA, exported by loom_core).
 */
#include "data/device_transfer.h"

#include <algorithm>

#include "core/cuda.h"
#include "ops/ops.h"

#if LOOM_WITH_CUDA
#include <cuda_runtime_api.h>

#include "core/cuda/cuda_check.h"
#endif

namespace loom::data {

#if LOOM_WITH_CUDA

// The loader's copy stream; pinned buffers come from the process-wide pinned pool
// (cuda::host_allocator(), which caches them by size class: a loader's batches repeat a few sizes).
struct DeviceTransfer::State {
  int device = 0;
  cudaStream_t stream = nullptr;

  ~State() {
    if (stream) (void)cudaStreamDestroy(stream);  // destructor: nothing to do with an error
  }
  void* take(size_t bytes) { return cuda::host_allocator()->allocate(std::max<size_t>(bytes, 1)); }
  void give_back(void* p, size_t bytes) { cuda::host_allocator()->deallocate(p, std::max<size_t>(bytes, 1)); }
};

struct PendingCopy {
  cudaEvent_t done = nullptr;
  Tensor host_data, host_target;  // the pinned sources, alive until the copy has landed
  ~PendingCopy() {
    if (done) (void)cudaEventDestroy(done);
  }
};

DeviceTransfer::DeviceTransfer(Device device, bool pin_memory) : device_(device) {
  if (device.is_cuda()) {
    LOOM_CHECK(cuda::is_available(), "DataLoader: batches for ", device,
               " need a CUDA device, and none is available (no driver or no GPU)");
    LOOM_CHECK(device.index() < cuda::device_count(), "DataLoader: no device ", device, " (",
               cuda::device_count(), " available)");
  }
  if (!cuda::is_available() || (!pin_memory && !device.is_cuda())) return;
  // A CUDA destination always stages through pinned memory: a copy from pageable memory
  // is synchronous, which would serialise it with the training step.
  pinned_ = true;
  state_ = std::make_shared<State>();
  state_->device = device.is_cuda() ? device.index() : 0;
  LOOM_CUDA_CHECK(cudaSetDevice(state_->device));
  // Non-blocking: the copies do not wait for, nor hold up, work on the legacy default stream.
  LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking));
}

DeviceTransfer::~DeviceTransfer() = default;

BatchAllocator DeviceTransfer::host_allocator() const {
  if (!pinned_) return {};
  std::shared_ptr<State> state = state_;
  return [state](IntArrayRef sizes, DType dtype) {
    const size_t bytes = static_cast<size_t>(shape_numel(sizes)) * dtype_size(dtype);
    void* p = state->take(bytes);
    // The deleter holds the pool: a batch may outlive its loader.
    return from_blob(p, sizes, dtype, [state, bytes](void* q) { state->give_back(q, bytes); });
  };
}

std::shared_ptr<PendingCopy> DeviceTransfer::start(Batch& batch) const {
  if (!device_.is_cuda()) return nullptr;
  LOOM_CUDA_CHECK(cudaSetDevice(state_->device));  // per call: workers are different threads
  auto copy = std::make_shared<PendingCopy>();
  auto send = [&](Tensor& t, Tensor& keep) {
    if (!t.defined()) return;
    Tensor dev = empty(t.sizes(), TensorOptions(t.dtype()).device(device_));
    LOOM_CUDA_CHECK(
        cudaMemcpyAsync(dev.data_ptr(), t.data_ptr(), t.nbytes(), cudaMemcpyHostToDevice, state_->stream));
    keep = t;
    t = dev;
  };
  send(batch.data, copy->host_data);
  send(batch.target, copy->host_target);
  LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&copy->done, cudaEventDisableTiming));
  LOOM_CUDA_CHECK(cudaEventRecord(copy->done, state_->stream));
  return copy;
}

void DeviceTransfer::finish(const std::shared_ptr<PendingCopy>& copy) {
  if (!copy) return;
  // Waits for this batch's copies only (recorded on the loader's stream after them). The host
  // then knows the data has landed, so kernels on any stream may read it, and the pinned
  // sources can be reused.
  LOOM_CUDA_CHECK(cudaEventSynchronize(copy->done));
  copy->host_data = Tensor();
  copy->host_target = Tensor();
}

#else  // no CUDA backend: CPU batches only

struct DeviceTransfer::State {};
struct PendingCopy {};

DeviceTransfer::DeviceTransfer(Device device, bool /*pin_memory*/) : device_(device) {
  LOOM_CHECK(!device.is_cuda(), "DataLoader: batches for ", device,
             " need the CUDA backend, and this Loom was built without it (LOOM_WITH_CUDA=OFF)");
}

DeviceTransfer::~DeviceTransfer() = default;

BatchAllocator DeviceTransfer::host_allocator() const {
  return {};
}

std::shared_ptr<PendingCopy> DeviceTransfer::start(Batch&) const {
  return nullptr;
}

void DeviceTransfer::finish(const std::shared_ptr<PendingCopy>&) {}

#endif

}  // namespace loom::data
