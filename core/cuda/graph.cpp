/* CUDA graph capture and replay (see core/cuda_graph.h). */
#include <cuda_runtime_api.h>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/cuda/caching_allocator.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/graph_checks.h"
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

namespace {

// The device words of captured checks (graph_checks.h), and which graph captures on which stream.
struct CheckWord {
  const CudaGraph::Impl* graph;
  std::string what, position;
  unsigned long long* word;
};
struct Checks {
  std::mutex mutex;
  std::vector<CheckWord> words;
  std::atomic<size_t> count{0};
  std::map<cudaStream_t, const CudaGraph::Impl*> capturing;
};
Checks& checks() {
  static auto* c = new Checks();  // never destroyed: graphs may be reset after main returns
  return *c;
}

void free_check_words(const CudaGraph::Impl* graph) {
  Checks& c = checks();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto it = c.words.begin(); it != c.words.end();) {
    if (it->graph != graph) {
      ++it;
      continue;
    }
    RelaxedCaptureMode relaxed;
    if (cudaFree(it->word) != cudaSuccess) (void)cudaGetLastError();
    it = c.words.erase(it);
  }
  c.count = c.words.size();
}

}  // namespace

unsigned long long* capture_check_word(std::string what, std::string position) {
  Checks& c = checks();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto graph = c.capturing.find(current_stream().handle());
  LOOM_CHECK(graph != c.capturing.end(), "capture_check_word(", what,
             "): the current stream is not being captured by a cuda::CudaGraph");
  void* word = nullptr;
  {
    RelaxedCaptureMode relaxed;
    LOOM_CUDA_CHECK(cudaMalloc(&word, sizeof(unsigned long long)));
    // A synchronous memset on the legacy stream: done before any replay can write the word.
    LOOM_CUDA_CHECK(cudaMemset(word, 0xff, sizeof(unsigned long long)));
  }
  c.words.push_back(
      {graph->second, std::move(what), std::move(position), static_cast<unsigned long long*>(word)});
  c.count = c.words.size();
  return static_cast<unsigned long long*>(word);
}

void report_failed_graph_checks() {
  Checks& c = checks();
  if (c.count == 0) return;
  std::lock_guard<std::mutex> lock(c.mutex);
  std::string first;
  size_t failed = 0;
  for (CheckWord& w : c.words) {
    unsigned long long value = 0;
    // Synchronous copies: they wait for the replays that write the word (the callers have
    // waited for their own stream already).
    LOOM_CUDA_CHECK(cudaMemcpy(&value, w.word, sizeof value, cudaMemcpyDeviceToHost));
    if (value == ~0ull) continue;
    LOOM_CUDA_CHECK(cudaMemset(w.word, 0xff, sizeof(unsigned long long)));  // reported once
    if (failed++ == 0) first = detail::concat(w.what, " (at ", w.position, " ", value, ")");
  }
  if (failed > 0)
    LOOM_FAIL(first, ", in a replay of a CUDA graph",
              failed > 1 ? detail::concat(" (and ", failed - 1, " more check(s))") : "",
              "; the check ran on the GPU and is reported at this synchronisation");
}

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
  std::lock_guard<std::mutex> lock(checks().mutex);
  checks().capturing[g.stream->stream().handle()] = &g;
}

void CudaGraph::capture_end() {
  Impl& g = *impl_;
  LOOM_CHECK(g.capturing, "CudaGraph::capture_end: capture_begin was not called");
  set_current_stream(g.previous);
  cudaGraph_t graph = nullptr;
  const cudaError_t status = cudaStreamEndCapture(g.stream->stream().handle(), &graph);
  caching_allocator().end_allocate_to_pool(g.pool);
  g.capturing = false;
  {
    std::lock_guard<std::mutex> lock(checks().mutex);
    checks().capturing.erase(g.stream->stream().handle());
  }
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    caching_allocator().release_pool(g.pool);
    g.pool = 0;
    free_check_words(&g);
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
    std::lock_guard<std::mutex> lock(checks().mutex);
    checks().capturing.erase(g.stream->stream().handle());
  }
  free_check_words(&g);
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
