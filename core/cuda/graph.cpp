/* CUDA graph capture and replay (see core/cuda_graph.h). */
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/cuda/caching_allocator.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_checks.h"
#include "core/cuda/stream.h"
#include "core/cuda_graph.h"
#include "core/random.h"

namespace loom::cuda {

namespace {

// How many replays' generator states may be on their way to the device at once: a replay waits
// for the copy of the one this many replays before it, which has long finished in a training loop.
constexpr int kStagingSlots = 4;

// A generator that the capture drew from (capture_philox_args): where the replays' kernels read its
// seed and first counter, and how many counters one replay draws.
struct GraphRng {
  std::shared_ptr<Generator::State> generator;
  // The generator's counter when the capture first drew from it.
  uint64_t capture_start = 0;
  // The counters one replay draws; known at capture_end.
  uint64_t counters = 0;
  // [seed, first counter], read by the captured kernels.
  uint64_t* device_state = nullptr;
  // Pinned host words, kStagingSlots x [seed, first counter], and the copy out of each slot.
  uint64_t* staging = nullptr;
  std::array<CudaEvent, kStagingSlots> staged;
  int next_slot = 0;

  GraphRng() = default;
  GraphRng(const GraphRng&) = delete;
  GraphRng& operator=(const GraphRng&) = delete;
  ~GraphRng() {
    RelaxedCaptureMode relaxed;
    // The host words may still be on their way to the device.
    for (const CudaEvent& copy : staged)
      if (cudaEventSynchronize(copy.handle()) != cudaSuccess) (void)cudaGetLastError();
    if (cudaFree(device_state) != cudaSuccess) (void)cudaGetLastError();
    if (cudaFreeHost(staging) != cudaSuccess) (void)cudaGetLastError();
  }
};

}  // namespace

struct CudaGraph::Impl {
  std::optional<OwnedCudaStream> stream;  // where the capture runs; made by the first capture
  CudaStream previous;                    // the thread's current stream before capture_begin
  CudaCachingAllocator::PoolId pool = 0;
  bool capturing = false;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::vector<std::unique_ptr<GraphRng>> rngs;
};

namespace {

// The device words of captured checks (device_checks.h), and which graph captures on which stream.
struct CheckWord {
  const CudaGraph::Impl* graph;
  std::string what, position;
  unsigned long long* word;
};
struct Checks {
  std::mutex mutex;
  std::vector<CheckWord> words;
  std::atomic<size_t> count{0};
  std::map<cudaStream_t, CudaGraph::Impl*> capturing;
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

// The graph capturing the current stream, or null when no cuda::CudaGraph captures it.
CudaGraph::Impl* graph_capturing_current_stream() {
  Checks& c = checks();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto graph = c.capturing.find(current_stream().handle());
  return graph == c.capturing.end() ? nullptr : graph->second;
}

// At the end of a capture, kept or not: how many counters the captured work drew from each
// generator, and each generator's counter put back where the capture found it, since the
// captured kernels have not run (the replays draw them).
void rewind_generators(CudaGraph::Impl& g) {
  for (const auto& rng : g.rngs) {
    const auto [seed, offset] = rng->generator->get();
    rng->counters = offset >= rng->capture_start ? offset - rng->capture_start : 0;
    rng->generator->set(seed, rng->capture_start);
  }
}

// Before a replay, on `stream`: each generator's seed and the first of this replay's counters,
// reserved now as the captured draws would reserve them eagerly, copied to where the kernels read
// them. Replays on one stream run in order, so a replay's words are not overwritten before its
// kernels have read them.
void stage_generator_states(CudaGraph::Impl& g, CudaStream stream) {
  if (g.rngs.empty()) return;
  // Launched into another capture, the copy below would become a node of that graph, reading the
  // host words at its replays and not this reservation's.
  LOOM_CHECK(
      !current_stream_capturing(),
      "CudaGraph::replay: a graph that draws random numbers cannot be replayed inside another capture");
  for (const auto& rng : g.rngs) {
    const auto [seed, first] = rng->generator->reserve(rng->counters);
    const int slot = rng->next_slot;
    rng->next_slot = (slot + 1) % kStagingSlots;
    // Waits for the copy out of this slot, kStagingSlots replays ago, before overwriting it.
    rng->staged[slot].synchronize();
    uint64_t* words = rng->staging + 2 * slot;
    words[0] = seed;
    words[1] = first;
    LOOM_CUDA_CHECK(cudaMemcpyAsync(rng->device_state, words, 2 * sizeof(uint64_t), cudaMemcpyHostToDevice,
                                    stream.handle()));
    rng->staged[slot].record(stream);
  }
}

}  // namespace

PhiloxArgs capture_philox_args(Generator& generator, uint64_t counters) {
  CudaGraph::Impl* graph = graph_capturing_current_stream();
  LOOM_CHECK(
      graph != nullptr,
      "a random op in a CUDA-graph capture: the current stream is not being captured by a cuda::CudaGraph");
  CudaGraph::Impl& g = *graph;
  const std::shared_ptr<Generator::State>& state = generator.shared_state();
  GraphRng* rng = nullptr;
  for (const auto& r : g.rngs)
    if (r->generator == state) rng = r.get();
  if (rng == nullptr) {
    RelaxedCaptureMode relaxed;  // events and allocations are no stream work
    auto added = std::make_unique<GraphRng>();
    added->generator = state;
    added->capture_start = state->get()[1];
    void* device = nullptr;
    void* host = nullptr;
    LOOM_CUDA_CHECK(cudaMalloc(&device, 2 * sizeof(uint64_t)));
    added->device_state = static_cast<uint64_t*>(device);
    LOOM_CUDA_CHECK(cudaMallocHost(&host, kStagingSlots * 2 * sizeof(uint64_t)));
    added->staging = static_cast<uint64_t*>(host);
    rng = added.get();
    g.rngs.push_back(std::move(added));
  }
  const auto [seed, first] = state->reserve(counters);
  LOOM_CHECK(first >= rng->capture_start,
             "a random op in a CUDA-graph capture: its generator was reseeded or ",
             "rewound during the capture (to counter ", first, ", before counter ", rng->capture_start,
             " where the capture started); seed it before capture_begin");
  return PhiloxArgs{seed, first - rng->capture_start, rng->device_state};
}

unsigned long long* graph_check_word(const std::string& what, const std::string& position) {
  CudaGraph::Impl* graph = graph_capturing_current_stream();
  LOOM_CHECK(graph != nullptr, what,
             ": a check in a CUDA-graph capture, but the current stream is not being ",
             "captured by a cuda::CudaGraph");
  Checks& c = checks();
  std::lock_guard<std::mutex> lock(c.mutex);
  void* word = nullptr;
  {
    RelaxedCaptureMode relaxed;
    LOOM_CUDA_CHECK(cudaMalloc(&word, sizeof(unsigned long long)));
    // A synchronous memset on the legacy stream: done before any replay can write the word.
    LOOM_CUDA_CHECK(cudaMemset(word, 0xff, sizeof(unsigned long long)));
  }
  c.words.push_back({graph, what, position, static_cast<unsigned long long*>(word)});
  c.count = c.words.size();
  return static_cast<unsigned long long*>(word);
}

void collect_failed_graph_checks(std::vector<std::string>& failures) {
  Checks& c = checks();
  if (c.count == 0) return;
  std::lock_guard<std::mutex> lock(c.mutex);
  for (CheckWord& w : c.words) {
    unsigned long long value = 0;
    // Synchronous copies: they wait for the replays that write the word (the callers have
    // waited for their own stream already).
    LOOM_CUDA_CHECK(cudaMemcpy(&value, w.word, sizeof value, cudaMemcpyDeviceToHost));
    if (value == ~0ull) continue;
    LOOM_CUDA_CHECK(cudaMemset(w.word, 0xff, sizeof(unsigned long long)));  // reported once
    failures.push_back(
        detail::concat(w.what, " (at ", w.position, " ", value, "), in a replay of a CUDA graph"));
  }
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
  rewind_generators(g);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    caching_allocator().release_pool(g.pool);
    g.pool = 0;
    free_check_words(&g);
    g.rngs.clear();
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
  // Ordered after the work queued on the current stream (the generator states staged just before
  // it among them); later work there follows the replay.
  stage_generator_states(g, current_stream());
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
    {
      std::lock_guard<std::mutex> lock(checks().mutex);
      checks().capturing.erase(g.stream->stream().handle());
    }
    rewind_generators(g);
  }
  free_check_words(&g);
  g.rngs.clear();
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
