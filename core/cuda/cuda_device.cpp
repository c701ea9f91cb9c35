/*
 * CUDA device queries, and the public memory functions of core/cuda.h over the process's
 * caching allocator (core/cuda/caching_allocator.h), which is the allocator registered for
 * DeviceType::CUDA (core/allocator.cpp asks device_allocator() for it).
 */
#include <cuda_runtime_api.h>

#include "core/allocator.h"
#include "core/cuda.h"
#include "core/cuda/caching_allocator.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_checks.h"

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
  if (device_count() == 0) return;
  LOOM_CUDA_CHECK(cudaDeviceSynchronize());  // waits for every stream's work
  report_failed_device_checks();             // what the checks among that work found
}

CudaCachingAllocator& caching_allocator() {
  static auto* allocator = new CudaCachingAllocator();  // never destroyed: storages may outlive main
  return *allocator;
}

Allocator* device_allocator() { return &caching_allocator(); }

MemoryStats memory_stats() { return caching_allocator().memory_stats(); }
size_t memory_allocated() { return memory_stats().allocated_bytes; }
size_t memory_reserved() { return memory_stats().reserved_bytes; }
size_t max_memory_allocated() { return memory_stats().peak_allocated_bytes; }
void reset_peak_memory_stats() { caching_allocator().reset_peak_stats(); }
void empty_cache() { caching_allocator().empty_cache(); }

void record_stream(const void* data, StreamHandle stream) { caching_allocator().record_stream(data, stream); }

}  // namespace loom::cuda
