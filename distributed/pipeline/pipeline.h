/*
 * Pipeline parallelism: a sequential model cut into p stages, one per rank of a pipeline group,
 * trained on m micro-batches per step by running a schedule (schedule.h: GPipe, 1F1B,
 * interleaved 1F1B or ZB-H1) with point-to-point messages between neighbouring stages.
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
 *
 * Interleaved 1F1B: the model is cut into p·v stages and rank r runs v of them ("chunks"
 * r, r + p, ..., given in that order to the chunks constructor); schedule.h has the order.
 *
 * Messages: a send is posted without waiting for it (its buffer is kept until the step ends),
 * and a receive waits. With one stage per rank either way works (the order on every link agrees,
 * schedule.h), but interleaved chunks pass activations around the ring of ranks, and there two
 * neighbours can both be sending when each waits for the other's receive; posted sends cannot
 * block, so only the per-direction order has to agree, which simulate(..., CommModel::Eager)
 * checks (schedule_simulator.h). Each model-stage boundary uses its own tag, so messages of
 * different chunks between two ranks never meet.
 */
#pragma once

#include <chrono>
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
// Each layer's measured seconds for one micro-batch like `sample` (its forward and backward, the
// median of `repeats` runs after one warm-up), in this process. Parameter counts miss what costs
// time without parameters (a convolution's cost grows with the image, an attention's with the
// sequence) and what has parameters but little work (an embedding lookup). Leaves no gradients
// behind. Throws loom::Error for repeats < 1 or a layer that fails on the sample.
std::vector<double> measured_times(nn::Sequential& model, const Tensor& sample, int repeats = 3);

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
  // From the step's start on this rank to its last action (and its posted sends received). The
  // ranks start together only when tracing (a barrier first); otherwise each from its own call.
  double step_seconds = 0;
  // When the step started on this rank: the time origin of last_events()' start_us.
  std::chrono::steady_clock::time_point started;
  // This rank's idle share of the step, the measured counterpart of SimulationResult's
  // bubble_fraction: 1 - compute / step (0 for an empty step).
  double bubble_fraction() const { return step_seconds > 0 ? 1.0 - compute_seconds / step_seconds : 0.0; }
};

class PipelineStageRunner {
 public:
  // stage: this rank's layers; group: the pipeline group (stage s = group rank s). kind is GPipe,
  // OneFOneB or ZeroBubbleH1 (Interleaved1F1B with this constructor is 1F1B: one chunk). Under
  // ZeroBubbleH1, B keeps what W needs (the saved tensors of the nodes that owe a weight
  // gradient, autograd/split_backward.h) until W, so the stage holds up to p micro-batches
  // (SimulationResult::peak_live_until_weight_grad), and StepStats::peak_live_microbatches counts
  // them so.
  PipelineStageRunner(std::shared_ptr<nn::Sequential> stage, std::shared_ptr<ProcessGroup> group, ScheduleKind kind,
                      int64_t microbatches);
  // Interleaved 1F1B over v = chunks.size() chunks: chunks[c] is model stage c·p + rank of the
  // p·v. Throws loom::Error for no chunks, a null one, or what make_schedule throws (m not a
  // multiple of p).
  PipelineStageRunner(std::vector<std::shared_ptr<nn::Sequential>> chunks, std::shared_ptr<ProcessGroup> group,
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
  // This rank's (first) stage; chunks() has all of an interleaved runner's.
  nn::Sequential& stage() { return *chunks_.front(); }
  const std::vector<std::shared_ptr<nn::Sequential>>& chunks() const { return chunks_; }
  // The parameters of every chunk of this rank, in chunk order (what its optimizer steps).
  std::vector<Tensor> parameters() const;

 private:
  std::vector<std::shared_ptr<nn::Sequential>> chunks_;
  std::shared_ptr<ProcessGroup> group_;
  int64_t microbatches_;
  Schedule schedule_;
  bool tracing_ = false;
  std::vector<TraceEvent> events_;
};

}  // namespace loom::distributed::pipeline
