/*
 * CUDA device queries and the device allocator.
 *
 * The allocator here is the plain one: cudaMalloc/cudaFree on the current device. The
 * caching allocator (per-stream free lists, size classes, block splitting) replaces it in
 * the CUDA backend issue. cudaFree synchronises the device, which is why that one matters.
 */
#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>

#include "core/allocator.h"
#include "core/cuda.h"
#include "core/cuda/cuda_check.h"

namespace loom::cuda {

bool is_available() { return device_count() > 0; }

int device_count() {
  // No driver, no device or an old driver are all "no GPU" here, not errors.
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

DeviceProperties get_device_properties(int device) {
  LOOM_CHECK(device >= 0 && device < device_count(), "cuda: no device ", device, " (", device_count(),
             " device(s) available)");
  cudaDeviceProp prop{};
  LOOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return {prop.name, prop.major, prop.minor, prop.totalGlobalMem, prop.multiProcessorCount};
}

void synchronize() {
  if (device_count() > 0) LOOM_CUDA_CHECK(cudaDeviceSynchronize());  // waits for every stream's work
}

namespace {

class CudaDeviceAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    LOOM_CHECK(device_count() > 0, "cuda: cannot allocate ", nbytes,
               " bytes: no CUDA device is available (no driver or no GPU on this machine)");
    void* p = nullptr;
    if (nbytes > 0) LOOM_CUDA_CHECK(cudaMalloc(&p, nbytes));
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.num_allocs;
    stats_.allocated_bytes += nbytes;
    stats_.reserved_bytes = stats_.allocated_bytes;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr) (void)cudaFree(ptr);  // never throw from a destructor path
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.allocated_bytes -= nbytes;
    stats_.reserved_bytes = stats_.allocated_bytes;
  }
  Device device() const override { return Device::cuda(0); }
  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void empty_cache() override {}  // nothing is cached

 private:
  mutable std::mutex mutex_;
  AllocatorStats stats_;
};

}  // namespace

Allocator* device_allocator() {
  static auto* allocator = new CudaDeviceAllocator();  // never destroyed: storages may outlive main
  return allocator;
}

}  // namespace loom::cuda
