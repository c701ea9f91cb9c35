/*
 * What PipelineStageRunner::train_step measures about a step, kept apart from the step so that
 * the schedule's loop reads on its own (pipeline.cpp): the time of every action (compute or
 * waiting for a message), the most micro-batches and activation bytes the stage held, and, when
 * tracing, one TraceEvent per action.
 */
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "core/allocator.h"
#include "distributed/pipeline/pipeline.h"

namespace loom::distributed::pipeline {

class StepRecorder {
 public:
  // Call when the step begins, after the ranks have met if tracing (the trace's time origin).
  // params: the stage's parameters (their gradients are not activations); ranks: p, for the
  // labels of interleaved chunks; events: cleared, then filled when `tracing`.
  StepRecorder(std::vector<Tensor> params, int64_t ranks, bool interleaved, bool tracing,
               std::vector<TraceEvent>& events);

  // Around each action of the schedule: its start, and its end with a message's payload (0 for
  // compute actions).
  void action_started();
  void action_finished(const Action& a, int64_t bytes);

  // A forward made one more micro-batch hold activations, a backward (zero-bubble: its W, which
  // frees the graph) freed one; a received activation is held too (only its memory counts).
  void forward_done();
  void backward_done() { --live_microbatches_; }
  // The rank has done its last action: the step's length.
  void step_finished();
  void activation_received() { sample_memory(); }

  // Everything but the loss.
  const StepStats& stats() const { return stats_; }

 private:
  using Clock = std::chrono::steady_clock;

  int64_t gradient_bytes() const;
  void sample_memory();

  std::vector<Tensor> params_;
  int64_t ranks_;
  bool interleaved_, tracing_;
  std::vector<TraceEvent>& events_;
  Allocator* allocator_;
  int64_t baseline_bytes_;
  Clock::time_point step_start_, action_start_;
  int64_t live_microbatches_ = 0;
  StepStats stats_;
};

}  // namespace loom::distributed::pipeline
