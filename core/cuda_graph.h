/*
 * CUDA graphs: GPU work captured once and replayed with one launch, as torch.cuda.CUDAGraph
 * does. A small model's training step is hundreds of short kernels; launched one by one from
 * the host, the GPU waits for the host between them. Replayed as a graph, the whole step is one
 * launch.
 *
 *   loom::cuda::CudaGraph graph;
 *   for (int i = 0; i < 3; ++i) step();       // warm up: optimizer state, caches, workspaces
 *   graph.capture_begin();
 *   step();                                   // recorded, not run
 *   graph.capture_end();
 *   for (...) { copy the next batch into the static inputs; graph.replay(); }
 *
 * What a replay does is exactly the captured work, on the same addresses:
 *   - inputs are "static": the tensors the captured code read. Copy new data into them
 *     (x.copy_(batch)) instead of making new tensors;
 *   - tensors created during the capture (activations, the loss, gradients that did not exist)
 *     live in the graph's private memory pool and are rewritten by each replay: read the loss
 *     from the tensor the capture returned;
 *   - host values are frozen: a learning rate passed as a number, a step count, a random seed.
 *     Optimizers built with capturable = true (SGD, Adam, AdamW) read their step counts and lrs
 *     on the device, so a captured step follows an LR schedule stepped between replays
 *     (nn/optim/device_lr.h); a plain SGD captures with the capture's lr, and a plain Adam or
 *     AdamW refuses to be captured;
 *   - random ops on the GPU (dropout, rand, randn) draw fresh numbers at every replay: each replay
 *     reserves from the generator the counters the captured draws use, as many as they would take
 *     eagerly, and the kernels read the seed and first counter from the device. A replayed step
 *     draws what the same step would draw eagerly at that point (capture_philox_args below);
 *   - the captured code may not wait for the GPU: .item(), .to(kCPU), printing a CUDA tensor,
 *     cuda::synchronize() fail during the capture (a copy to or from the host says so at once;
 *     a synchronisation invalidates the capture, and capture_end says that);
 *   - input that ops check (cross_entropy's class indices, the indices of embedding,
 *     index_select, gather, scatter_add, index_add and max_pool2d_backward) is still checked at
 *     each replay, on the GPU: a bad value is reported at the host's next wait for the GPU,
 *     .item() or cuda::synchronize() (core/cuda/device_checks.h), naming the check and the first
 *     bad position, as the same checks are reported when the ops run eagerly.
 * The capture runs on a stream of the graph's own (made current until capture_end) that first
 * waits for the work queued on the current stream. Built without CUDA, capture_begin throws.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/random.h"

namespace loom::cuda {

class CudaGraph {
 public:
  CudaGraph();
  ~CudaGraph();  // reset()
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Starts recording the calling thread's GPU work into this graph. Throws when this graph
  // already holds a capture (reset() it first) or there is no GPU.
  void capture_begin();
  // Stops recording and makes the graph launchable. Throws loom::Error naming the reason when the
  // capture was invalidated (a host synchronisation or another call a graph cannot hold).
  void capture_end();
  // Launches the captured work on the current stream, after what is queued there.
  void replay();
  // Forgets the capture (ending it if it is still going) and releases the private memory pool
  // once no tensor made during the capture is alive.
  void reset();

  bool capturing() const;
  bool captured() const;
  // The captured graph's nodes: kernels, copies, memsets and library calls.
  size_t num_nodes() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// True while the calling thread's current CUDA stream is being captured into a graph: its work
// is recorded, not run, so no code may wait for it or bake a host value that changes per step
// into it. False without CUDA.
bool current_stream_capturing();

// The Philox arguments of a random kernel recorded on the current stream's capture, drawing
// `counters` counters from `generator`. The graph keeps the generator: each replay reserves from it
// what the capture drew and writes the seed and first counter where the kernels read them. The
// generator's own counter is where it was before the capture once capture_end returns (the
// captured draws happen at the replays). Throws loom::Error when the current stream is not being
// captured by a cuda::CudaGraph, or when the generator was reseeded or rewound during the capture.
PhiloxArgs capture_philox_args(Generator& generator, uint64_t counters);

// Records f() into `graph`: capture_begin(), f(), capture_end(). When f throws, the capture is
// ended and discarded before the exception goes on, so the thread's current stream is restored.
template <class F>
void capture(CudaGraph& graph, F&& f) {
  graph.capture_begin();
  try {
    f();
  } catch (...) {
    graph.reset();
    throw;
  }
  graph.capture_end();
}

}  // namespace loom::cuda
