/* Device queries for a build without the CUDA backend: there are no devices, nothing is
 * allocated, and what would need a device says why it cannot. */
#include "core/cuda.h"
#include "core/cuda_graph.h"
#include "core/error.h"

namespace loom::cuda {

bool is_available() { return false; }
int device_count() { return 0; }
DeviceProperties get_device_properties(int device) {
  LOOM_FAIL("cuda: no device ", device, ": Loom was built without the CUDA backend (LOOM_WITH_CUDA=OFF)");
}
void synchronize() {}
void set_blocking_checks(bool) {}
bool blocking_checks() {
  return false;
}

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

struct CudaGraph::Impl {};
CudaGraph::CudaGraph() = default;
CudaGraph::~CudaGraph() = default;
void CudaGraph::capture_begin() {
  LOOM_FAIL(
      "CudaGraph::capture_begin: CUDA graphs need the CUDA backend; Loom was built without it "
      "(LOOM_WITH_CUDA=OFF)");
}
void CudaGraph::capture_end() {
  LOOM_FAIL("CudaGraph::capture_end: capture_begin was not called");
}
void CudaGraph::replay() {
  LOOM_FAIL("CudaGraph::replay: nothing was captured (Loom was built without CUDA)");
}
void CudaGraph::reset() {}
bool CudaGraph::capturing() const {
  return false;
}
bool CudaGraph::captured() const {
  return false;
}
size_t CudaGraph::num_nodes() const {
  return 0;
}
bool current_stream_capturing() {
  return false;
}
PhiloxArgs capture_philox_args(Generator&, uint64_t) {
  LOOM_FAIL("capture_philox_args: no CUDA-graph capture is possible (Loom was built without CUDA)");
}

}  // namespace loom::cuda
