/*
 * Emulated CUDA streams, events, stream capture and graphs.
 *
 * Streams run their work when it is enqueued, in the calling thread, so every stream is in order
 * and an event is complete as soon as it is recorded; the handles are still checked (a destroyed
 * stream or event is an error), and timing events measure the host time between their records.
 *
 * Stream capture is emulated with CUDA's rules, because a graph that captures the wrong thing
 * fails on a GPU only at replay, where it is hardest to see. While a stream is captured, the work
 * submitted to it becomes the next node of the capture's graph instead of running; a graph launch
 * runs the nodes in the order they were captured, which is one valid order of the real graph's
 * dependencies. What CUDA refuses, this refuses, with CUDA's error:
 *   - beginning a capture on the legacy stream (cudaErrorStreamCaptureUnsupported) or on a stream
 *     already capturing (cudaErrorIllegalState); ending one on a stream that is not capturing
 *     (cudaErrorIllegalState), on a stream that joined another's capture
 *     (cudaErrorStreamCaptureUnmatched), from another thread unless the mode was relaxed
 *     (cudaErrorStreamCaptureWrongThread), or while a forked stream has work the origin stream
 *     never waited for (cudaErrorStreamCaptureUnjoined);
 *   - synchronising or querying a capturing stream (cudaErrorStreamCaptureUnsupported), querying or
 *     synchronising an event last recorded in a capture (cudaErrorCapturedEvent);
 *   - "potentially unsafe" calls (cudaMalloc, cudaFree, pinned allocations, synchronous copies and
 *     memsets, cudaDeviceSynchronize, event queries and waits) by a thread whose capture mode forbids them:
 * in global mode, while this thread captures (not relaxed) or any thread captures in global mode; in
 *     thread-local mode, while this thread captures (cudaErrorStreamCaptureUnsupported);
 *   - work on the legacy stream while a blocking stream is captured: the legacy stream would wait
 *     for it (cudaErrorStreamCaptureImplicit);
 *   - waiting, inside a capture, on an event recorded outside it (cudaErrorStreamCaptureIsolation)
 *     or in another capture (cudaErrorStreamCaptureMerge).
 * Each refusal invalidates the capture, as on a GPU: later work on it fails with
 * cudaErrorStreamCaptureInvalidated and cudaStreamEndCapture returns that error and no graph.
 * A stream that waits on an event recorded in a capture joins that capture (a fork).
 * Emulator limit: capture on cudaStreamPerThread is not supported (cudaErrorInvalidValue).
 */
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/emulated/device_work.h"

struct CUstream_st {
  unsigned flags;
  uint64_t capture = 0;  // the capture this stream takes part in (0: none)
  uint64_t work = 0;     // nodes it has added to that capture
};
struct CUevent_st {
  unsigned flags;
  bool recorded = false;
  std::chrono::steady_clock::time_point when{};
  uint64_t capture = 0;           // the capture it was last recorded in (0: recorded outside)
  cudaStream_t stream = nullptr;  // where it was last recorded
  uint64_t stream_work = 0;       // that stream's node count at the record
};
struct CUgraphNode_st {
  std::function<void()> run;
};
// A graph and its executable share the nodes: instantiation checks nothing the capture did not.
struct CUgraph_st {
  std::shared_ptr<const std::vector<std::unique_ptr<CUgraphNode_st>>> nodes;
};
struct CUgraphExec_st {
  std::shared_ptr<const std::vector<std::unique_ptr<CUgraphNode_st>>> nodes;
};

namespace loom_emu {
namespace {

struct Capture {
  cudaStream_t origin = nullptr;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  bool invalidated = false;
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
  std::vector<cudaStream_t> members;  // the origin and every stream that joined
  std::set<cudaStream_t> unjoined;    // forked streams with work the origin has not waited for
};

struct Registry {
  std::mutex mutex;
  std::set<cudaStream_t> streams;
  std::set<cudaEvent_t> events;
  std::set<cudaGraph_t> graphs;
  std::set<cudaGraphExec_t> execs;
  std::map<uint64_t, Capture> captures;  // active captures by id
  uint64_t next_capture = 1;
};

Registry& registry() {
  static auto* r = new Registry();  // never destroyed: streams may be destroyed after main returns
  return *r;
}

thread_local cudaStreamCaptureMode thread_mode = cudaStreamCaptureModeGlobal;
// Device work running on this thread. What it submits (cuBLASLt's GEMM into its accumulator, a
// graph's nodes) and allocates is part of that work: it runs at once, never into a capture, and
// is not one of the host's "unsafe" calls.
thread_local int running_work = 0;

bool is_legacy(cudaStream_t s) {
  return s == nullptr || s == cudaStreamLegacy;
}

// registry().mutex held for the rest of these helpers.
bool known_stream(Registry& r, cudaStream_t s) {
  return is_legacy(s) || s == cudaStreamPerThread || r.streams.count(s) > 0;
}

Capture* capture_of(Registry& r, cudaStream_t s) {
  if (is_legacy(s) || s == cudaStreamPerThread || s->capture == 0) return nullptr;
  auto it = r.captures.find(s->capture);
  return it == r.captures.end() ? nullptr : &it->second;
}

Capture* capture_of(Registry& r, cudaEvent_t e) {
  if (e->capture == 0) return nullptr;
  auto it = r.captures.find(e->capture);
  return it == r.captures.end() ? nullptr : &it->second;
}

// Legacy-stream work waits for every blocking stream; one of them being captured would tie the
// legacy stream into the capture.
cudaError_t check_legacy_work(Registry& r) {
  cudaError_t result = cudaSuccess;
  for (auto& [id, c] : r.captures)
    for (cudaStream_t s : c.members)
      if ((s->flags & cudaStreamNonBlocking) == 0) {
        c.invalidated = true;
        result = cudaErrorStreamCaptureImplicit;
      }
  return result;
}

cudaError_t refuse_on_capturing_stream(Capture* c) {
  c->invalidated = true;
  return record_error(cudaErrorStreamCaptureUnsupported);
}

}  // namespace

cudaError_t submit(cudaStream_t stream, std::function<void()> work) {
  Registry& r = registry();
  if (running_work == 0) {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (!known_stream(r, stream)) return record_error(cudaErrorInvalidResourceHandle);
    if (is_legacy(stream)) {
      if (cudaError_t e = check_legacy_work(r); e != cudaSuccess) return record_error(e);
    } else if (Capture* c = capture_of(r, stream)) {
      if (c->invalidated) return record_error(cudaErrorStreamCaptureInvalidated);
      c->nodes.push_back(std::make_unique<CUgraphNode_st>(CUgraphNode_st{std::move(work)}));
      ++stream->work;
      if (stream != c->origin) c->unjoined.insert(stream);
      return cudaSuccess;
    }
  }
  // Outside the lock: the work may submit more (a graph's nodes) or take long.
  ++running_work;
  try {
    work();
  } catch (...) {
    --running_work;
    throw;
  }
  --running_work;
  return cudaSuccess;
}

cudaError_t check_unsafe_call() {
  if (thread_mode == cudaStreamCaptureModeRelaxed || running_work > 0) return cudaSuccess;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto me = std::this_thread::get_id();
  bool refused = false;
  for (auto& [id, c] : r.captures) {
    const bool own = c.thread == me && c.mode != cudaStreamCaptureModeRelaxed;
    const bool others_global =
        thread_mode == cudaStreamCaptureModeGlobal && c.thread != me && c.mode == cudaStreamCaptureModeGlobal;
    if (own || others_global) {
      c.invalidated = true;
      refused = true;
    }
  }
  return refused ? record_error(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

}  // namespace loom_emu

using loom_emu::record_error;
using loom_emu::registry;
using loom_emu::Registry;

// ---- streams ------------------------------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return cudaErrorNoDevice;
  *stream = new CUstream_st{flags};
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (r.streams.erase(stream) == 0) return record_error(cudaErrorInvalidResourceHandle);
    if (loom_emu::Capture* c = loom_emu::capture_of(r, stream)) {
      c->invalidated = true;  // its capture can no longer be joined or ended
      c->members.erase(std::remove(c->members.begin(), c->members.end(), stream), c->members.end());
      c->unjoined.erase(stream);
    }
  }
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!loom_emu::known_stream(r, stream)) return record_error(cudaErrorInvalidResourceHandle);
  if (loom_emu::Capture* c = loom_emu::capture_of(r, stream)) return loom_emu::refuse_on_capturing_stream(c);
  if (loom_emu::is_legacy(stream)) return record_error(loom_emu::check_legacy_work(r));
  return cudaSuccess;  // its work ran when it was enqueued
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return cudaStreamSynchronize(stream);
}

cudaError_t cudaDeviceSynchronize() {
  return loom_emu::check_unsafe_call();  // otherwise done: work ran when it was enqueued
}

// ---- events -------------------------------------------------------------------------------

namespace {
bool valid_event(Registry& r, cudaEvent_t event) {
  return r.events.count(event) > 0;
}
}  // namespace

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return cudaErrorNoDevice;
  *event = new CUevent_st{flags};
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().events.insert(*event);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    if (registry().events.erase(event) == 0) return record_error(cudaErrorInvalidResourceHandle);
  }
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!valid_event(r, event) || !loom_emu::known_stream(r, stream))
    return record_error(cudaErrorInvalidResourceHandle);
  if (loom_emu::Capture* c = loom_emu::capture_of(r, stream)) {
    if (c->invalidated) return record_error(cudaErrorStreamCaptureInvalidated);
    // A record inside a capture is a point in the graph that other streams can wait for.
    event->capture = stream->capture;
    event->stream = stream;
    event->stream_work = stream->work;
    return cudaSuccess;
  }
  if (loom_emu::is_legacy(stream))
    if (cudaError_t e = loom_emu::check_legacy_work(r); e != cudaSuccess) return record_error(e);
  event->capture = 0;
  event->stream = stream;
  event->recorded = true;
  event->when = std::chrono::steady_clock::now();
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!loom_emu::known_stream(r, stream) || !valid_event(r, event))
    return record_error(cudaErrorInvalidResourceHandle);
  loom_emu::Capture* waiting = loom_emu::capture_of(r, stream);
  loom_emu::Capture* recorded = loom_emu::capture_of(r, event);
  if (waiting && waiting->invalidated) return record_error(cudaErrorStreamCaptureInvalidated);
  if (recorded == nullptr) {
    // The recorded work has already run, or the event was never recorded (nothing to wait for).
    if (waiting == nullptr || !event->recorded) return cudaSuccess;
    waiting->invalidated = true;  // the graph cannot wait for work outside it
    return record_error(cudaErrorStreamCaptureIsolation);
  }
  if (waiting == nullptr) {
    if (loom_emu::is_legacy(stream) || stream == cudaStreamPerThread) {
      recorded->invalidated = true;
      return record_error(cudaErrorStreamCaptureImplicit);
    }
    // A fork: the stream joins the capture, and its work from now on is part of the graph.
    stream->capture = event->capture;
    stream->work = 0;
    recorded->members.push_back(stream);
    return cudaSuccess;
  }
  if (waiting != recorded) {
    waiting->invalidated = recorded->invalidated = true;
    return record_error(cudaErrorStreamCaptureMerge);
  }
  // A join: the origin now follows everything the event's stream had queued at the record.
  if (stream == waiting->origin && event->stream != stream && event->stream_work == event->stream->work)
    waiting->unjoined.erase(event->stream);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (!valid_event(r, event)) return record_error(cudaErrorInvalidResourceHandle);
    if (loom_emu::capture_of(r, event)) return record_error(cudaErrorCapturedEvent);
  }
  return loom_emu::check_unsafe_call();  // else complete: its work ran when it was enqueued
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return cudaEventQuery(event);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!valid_event(r, start) || !valid_event(r, end)) return record_error(cudaErrorInvalidResourceHandle);
  if (loom_emu::capture_of(r, start) || loom_emu::capture_of(r, end))
    return record_error(cudaErrorCapturedEvent);
  if ((start->flags | end->flags) & cudaEventDisableTiming)
    return record_error(cudaErrorInvalidResourceHandle);
  if (!start->recorded || !end->recorded) return record_error(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}

// ---- stream capture -----------------------------------------------------------------------

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!loom_emu::known_stream(r, stream)) return record_error(cudaErrorInvalidResourceHandle);
  if (loom_emu::is_legacy(stream)) return record_error(cudaErrorStreamCaptureUnsupported);
  if (stream == cudaStreamPerThread) return record_error(cudaErrorInvalidValue);  // emulator limit
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return record_error(cudaErrorInvalidValue);
  if (loom_emu::capture_of(r, stream)) return record_error(cudaErrorIllegalState);
  const uint64_t id = r.next_capture++;
  loom_emu::Capture& c = r.captures[id];
  c.origin = stream;
  c.mode = mode;
  c.thread = std::this_thread::get_id();
  c.members.push_back(stream);
  stream->capture = id;
  stream->work = 0;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (graph == nullptr) return record_error(cudaErrorInvalidValue);
  *graph = nullptr;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!loom_emu::known_stream(r, stream)) return record_error(cudaErrorInvalidResourceHandle);
  loom_emu::Capture* c = loom_emu::capture_of(r, stream);
  if (c == nullptr) return record_error(cudaErrorIllegalState);
  if (stream != c->origin) return record_error(cudaErrorStreamCaptureUnmatched);
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
    return record_error(cudaErrorStreamCaptureWrongThread);
  cudaError_t result = cudaSuccess;
  if (c->invalidated) {
    result = cudaErrorStreamCaptureInvalidated;
  } else if (!c->unjoined.empty()) {
    result = cudaErrorStreamCaptureUnjoined;
  } else {
    auto* g = new CUgraph_st();
    g->nodes = std::make_shared<const std::vector<std::unique_ptr<CUgraphNode_st>>>(std::move(c->nodes));
    r.graphs.insert(g);
    *graph = g;
  }
  const uint64_t id = stream->capture;
  for (cudaStream_t s : c->members) s->capture = 0;  // every joined stream leaves the capture too
  r.captures.erase(id);
  return record_error(result);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (status == nullptr) return record_error(cudaErrorInvalidValue);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!loom_emu::known_stream(r, stream)) return record_error(cudaErrorInvalidResourceHandle);
  const loom_emu::Capture* c = loom_emu::capture_of(r, stream);
  *status = c == nullptr     ? cudaStreamCaptureStatusNone
            : c->invalidated ? cudaStreamCaptureStatusInvalidated
                             : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (mode == nullptr || (*mode != cudaStreamCaptureModeGlobal && *mode != cudaStreamCaptureModeThreadLocal &&
                          *mode != cudaStreamCaptureModeRelaxed))
    return record_error(cudaErrorInvalidValue);
  std::swap(*mode, loom_emu::thread_mode);
  return cudaSuccess;
}

// ---- graphs -------------------------------------------------------------------------------

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  if (exec == nullptr || flags != 0) return record_error(cudaErrorInvalidValue);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.graphs.count(graph) == 0) return record_error(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->nodes};
  r.execs.insert(*exec);
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  std::shared_ptr<const std::vector<std::unique_ptr<CUgraphNode_st>>> nodes;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (r.execs.count(exec) == 0) return record_error(cudaErrorInvalidValue);
    nodes = exec->nodes;
  }
  // One piece of work on `stream`: the nodes in capture order (a child graph when `stream` is
  // itself being captured).
  return loom_emu::submit(stream, [nodes] {
    for (const auto& node : *nodes) node->run();
  });
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    if (registry().execs.erase(exec) == 0) return record_error(cudaErrorInvalidValue);
  }
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    if (registry().graphs.erase(graph) == 0) return record_error(cudaErrorInvalidValue);
  }
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* num_nodes) {
  if (num_nodes == nullptr) return record_error(cudaErrorInvalidValue);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.graphs.count(graph) == 0) return record_error(cudaErrorInvalidValue);
  const auto& all = *graph->nodes;
  if (nodes == nullptr) {
    *num_nodes = all.size();
    return cudaSuccess;
  }
  const size_t n = std::min(*num_nodes, all.size());
  for (size_t i = 0; i < n; ++i) nodes[i] = all[i].get();
  *num_nodes = n;
  return cudaSuccess;
}
