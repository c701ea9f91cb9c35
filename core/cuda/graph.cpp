/* CUDA graph capture and replay (see core/cuda_graph.h). */
#include <cuda_runtime_api.h>

#include <optional>

#include "core/cuda/caching_allocator.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "core/cuda_graph.h"

namespace loom::cuda {

struct CudaGraph::Impl {
  std::optional<OwnedCudaStream> stream;  // where the capture runs; made by the first capture
  CudaStream previous;                    // the thread's current stream before capture_begin
  CudaCachingAllocator::PoolId pool = 0;
  bool capturing = false;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

CudaGraph::CudaGraph() : impl_(std::make_unique<Impl>()) {}

CudaGraph::~CudaGraph() {
  try {
    reset();
  } catch (...) {  // a destructor: the capture is gone either way
  }
}

bool CudaGraph::capturing() const {
  return impl_->capturing;
}
bool CudaGraph::captured() const {
  return impl_->exec != nullptr;
}

void CudaGraph::capture_begin() {
  Impl& g = *impl_;
  LOOM_CHECK(!g.capturing, "CudaGraph::capture_begin: this graph is already capturing");
  LOOM_CHECK(g.exec == nullptr,
             "CudaGraph::capture_begin: this graph already holds a capture; reset() it first");
  LOOM_CHECK(device_count() > 0, "CudaGraph::capture_begin: no CUDA device is available");
  if (!g.stream) g.stream.emplace();
  // The captured work reads what the current stream's queued work (input copies, warm-up steps)
  // writes: the capture stream waits for it here, outside the capture.
  CudaEvent queued;
  queued.record(current_stream());
  queued.block(*g.stream);
  g.pool = caching_allocator().create_pool();
  caching_allocator().begin_allocate_to_pool(g.pool, g.stream->stream().handle());
  g.previous = current_stream();
  set_current_stream(*g.stream);
  const cudaError_t status = cudaStreamBeginCapture(g.stream->stream().handle(), cudaStreamCaptureModeGlobal);
  if (status != cudaSuccess) {
    set_current_stream(g.previous);
    caching_allocator().end_allocate_to_pool(g.pool);
    caching_allocator().release_pool(g.pool);
    g.pool = 0;
    LOOM_CUDA_CHECK(status);
  }
  g.capturing = true;
}

void CudaGraph::capture_end() {
  Impl& g = *impl_;
  LOOM_CHECK(g.capturing, "CudaGraph::capture_end: capture_begin was not called");
  set_current_stream(g.previous);
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaStreamEndCapture(g.stream->stream().handle(), &graph);
  caching_allocator().end_allocate_to_pool(g.pool);
  g.capturing = false;
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    caching_allocator().release_pool(g.pool);
    g.pool = 0;
    LOOM_FAIL(
        "CudaGraph::capture_end: the capture failed (", cudaGetErrorName(status), ": ",
        cudaGetErrorString(status),
        "). The captured code made a call a CUDA graph cannot hold: a wait for the GPU (.item(), "
        ".to(kCPU), printing a CUDA tensor, cuda::synchronize()), work on the legacy default stream, or "
        "work forked to another stream and never joined. Nothing was kept; reset() and capture again");
  }
  g.graph = graph;
  const cudaError_t instantiated = cudaGraphInstantiate(&g.exec, graph, 0);
  if (instantiated != cudaSuccess) {
    g.exec = nullptr;
    reset();
    LOOM_CUDA_CHECK(instantiated);
  }
}

void CudaGraph::replay() {
  Impl& g = *impl_;
  LOOM_CHECK(g.exec != nullptr, "CudaGraph::replay: nothing was captured (capture_begin, then capture_end)");
  // Ordered after the work queued on the current stream; later work there follows the replay.
  LOOM_CUDA_CHECK(cudaGraphLaunch(g.exec, current_stream().handle()));
}

void CudaGraph::reset() {
  Impl& g = *impl_;
  if (g.capturing) {
    set_current_stream(g.previous);
    cudaGraph_t discarded = nullptr;
    if (cudaStreamEndCapture(g.stream->stream().handle(), &discarded) != cudaSuccess)
      (void)cudaGetLastError();
    if (discarded != nullptr) (void)cudaGraphDestroy(discarded);
    caching_allocator().end_allocate_to_pool(g.pool);
    g.capturing = false;
  }
  if (g.exec != nullptr) (void)cudaGraphExecDestroy(g.exec);
  if (g.graph != nullptr) (void)cudaGraphDestroy(g.graph);
  g.exec = nullptr;
  g.graph = nullptr;
  if (g.pool != 0) caching_allocator().release_pool(g.pool);
  g.pool = 0;
}

bool current_stream_capturing() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t e = cudaStreamIsCapturing(current_stream().handle(), &status);
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e == cudaSuccess && status != cudaStreamCaptureStatusNone;
}

size_t CudaGraph::num_nodes() const {
  if (impl_->graph == nullptr) return 0;
  size_t n = 0;
  LOOM_CUDA_CHECK(cudaGraphGetNodes(impl_->graph, nullptr, &n));
  return n;
}

}  // namespace loom::cuda
