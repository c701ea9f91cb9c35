/*
 * Pipeline parallelism: a sequential model cut into p stages, one per rank of a pipeline group,
 * trained on m micro-batches per step by running a schedule (schedule.h: GPipe or 1F1B) with
 * blocking send/recv between neighbouring stages.
 *
 *   rank 0: layers [0, b1)     rank 1: layers [b1, b2)   ...   rank p-1: layers [b_{p-1}, L) + loss
 *      x_mb ─► stage 0 ─ send act ─► stage 1 ─ ... ─► stage p-1 ─► loss_mb / m
 *      grad ◄─ stage 0 ◄ send grad ─ stage 1 ◄ ... ◄─ stage p-1 ◄─ backward
 *
 * Each micro-batch's loss is divided by m and the parameters' gradients accumulate over the m
 * backwards, so after a step every stage holds exactly the gradients of the mean loss over the
 * whole batch: the same as one process computing the batch at once (up to reassociation). The
 * optimizer then steps each stage's own parameters; no parameter lives on two stages.
 *
 * Partitioning: by layer count, by parameter count, or by measured time (partition_balanced
 * over any per-layer cost: contiguous stages minimising the most expensive one).
 */
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/pipeline/schedule.h"
#include "distributed/pipeline/trace.h"
#include "distributed/process_group.h"
#include "nn/layers/containers.h"

namespace loom::distributed::pipeline {

// Stage boundaries for `costs` (one per layer) cut into `stages` contiguous, non-empty parts
// that minimise the largest part's total cost: returns stages + 1 indices, 0 first and
// costs.size() last. Throws loom::Error for stages < 1, more stages than layers, or a negative
// cost.
std::vector<int64_t> partition_balanced(const std::vector<double>& costs, int64_t stages);
// Costs for partition_balanced: 1 per layer (by count) or each layer's parameter count.
std::vector<double> layer_counts(const nn::Sequential& model);
std::vector<double> parameter_counts(const nn::Sequential& model);

// The layers [begin, end) of `model` as a Sequential of their own (sharing the layers).
std::shared_ptr<nn::Sequential> stage_of(const nn::Sequential& model, int64_t begin, int64_t end);

// loss(output, target) of one micro-batch: a scalar tensor (the mean over its examples).
using LossFn = std::function<Tensor(const Tensor&, const Tensor&)>;

// Peak micro-batches whose activations a stage held, and what it did, per step.
struct StepStats {
  double loss = 0;                  // the batch's mean loss (every rank gets it)
  int64_t peak_live_microbatches = 0;
  // The most memory the stage held for backward during the step: the high-water mark, sampled
  // after each forward and each received activation, of the stage's allocator's live bytes above
  // their value when the step began (parameters and optimizer state are in that baseline, and
  // parameter gradients are left out, so what remains is activations, the graph's saved tensors
  // and messages in flight).
  // Process-wide: a data loader allocating on other threads at the same time adds to it.
  int64_t peak_activation_bytes = 0;
  double compute_seconds = 0, wait_seconds = 0;  // forward/backward vs send/recv time of this rank
};

class PipelineStageRunner {
 public:
  // stage: this rank's layers; group: the pipeline group (stage s = group rank s).
  PipelineStageRunner(std::shared_ptr<nn::Sequential> stage, std::shared_ptr<ProcessGroup> group, ScheduleKind kind,
                      int64_t microbatches);
  // One step's forwards and backwards. input: the whole batch [N, ...] (read on the first stage
  // only; N divisible by m), target: [N, ...] (read on the last stage only). Leaves the stage's
  // parameter gradients accumulated (zero them before, step after). Collective over the group.
  StepStats train_step(const Tensor& input, const Tensor& target, const LossFn& loss);

  // The events of the last train_step on this rank (gather_trace collects all ranks'), when
  // set_tracing(true): each compute action and message with its time and bytes.
  void set_tracing(bool on) { tracing_ = on; }
  const std::vector<TraceEvent>& last_events() const { return events_; }

  const Schedule& schedule() const { return schedule_; }
  nn::Sequential& stage() { return *stage_; }

 private:
  std::shared_ptr<nn::Sequential> stage_;
  std::shared_ptr<ProcessGroup> group_;
  int64_t microbatches_;
  Schedule schedule_;
  bool tracing_ = false;
  std::vector<TraceEvent> events_;
};

}  // namespace loom::distributed::pipeline
