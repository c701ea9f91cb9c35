/* Device queries for a build without the CUDA backend: there are no devices, nothing is
 * allocated, and what would need a device says why it cannot. */
#include "core/cuda.h"
#include "core/error.h"

namespace loom::cuda {

bool is_available() { return false; }
int device_count() { return 0; }
DeviceProperties get_device_properties(int device) {
  LOOM_FAIL("cuda: no device ", device, ": Loom was built without the CUDA backend (LOOM_WITH_CUDA=OFF)");
}
void synchronize() {}

MemoryStats memory_stats() { return {}; }
size_t memory_allocated() { return 0; }
size_t memory_reserved() { return 0; }
size_t max_memory_allocated() { return 0; }
void reset_peak_memory_stats() {}
void empty_cache() {}

void record_stream(const void* data, StreamHandle stream) {
  (void)stream;
  LOOM_FAIL("cuda::record_stream(", data, "): Loom was built without the CUDA backend (LOOM_WITH_CUDA=OFF)");
}

Allocator* host_allocator() {
  LOOM_FAIL("cuda::host_allocator: pinned memory needs the CUDA backend; Loom was built without it "
            "(LOOM_WITH_CUDA=OFF)");
}

}  // namespace loom::cuda
