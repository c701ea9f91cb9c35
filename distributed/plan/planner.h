/*
 * The parallelism planner: for a model (model_spec.h) and a layout (dp x tp x pp ranks, ZeRO
 * stage, micro-batches, activation checkpointing, amp), what one rank holds in memory and sends
 * per optimizer step, and how much of the step a pipeline leaves idle. It predicts what Loom's
 * own implementations do (ddp.h, zero.h, zero3.h, tensor_parallel/, pipeline/), so that
 * tests/distributed/test_plan.cpp can hold it to measured runs, and it answers for sizes no
 * machine here can run (GPT-2 1.5B on 64 GPUs).
 *
 * Memory per rank, in bytes (Ψ: the parameters this rank's stage and tensor shard hold; N: dp):
 *   parameters        4Ψ (fp32: amp casts per op, the master weights stay fp32)   zero 3: 4Ψ/N
 *   gradients         4Ψ, as backward leaves them                                  zero 3: 4Ψ/N
 *   optimizer state   Adam 8Ψ (+ 8 bytes of step count per tensor), SGD momentum 4Ψ, SGD 0;
 *                     zero >= 1: of the shard, S = ceil(Ψ/N) elements
 *   activations       what backward needs, per micro-batch in flight (model_spec.h), at 2 bytes
 *                     per element under amp; with checkpointing only the units' inputs plus one
 *                     unit's recomputation; zero 3 always (zero3.h recomputes each layer)
 *   buffers           DDP: the buckets, a second copy of the gradients (4Ψ); zero 1: the last
 *                     step's averaged flat gradient [N·S], kept between steps; zero 2: the
 *                     shard's gradient [S]; zero 3: the largest layer's gathered parameters,
 *                     their gradient, its reduce-scatter buffers ([N·S_u] and [S_u]) and the
 *                     neighbour's prefetched parameters; micro-batches > 1: one more copy of the
 *                     largest layer's gradient (the accumulation's sum); pipeline: the messages
 *                     kept until the step ends; plus the batch itself
 *   step buffers      made in step(), when backward has freed the activations: the new flat
 *                     gradient [N·S] (zero 1 and 2), and the new shard gradient [S] (zero 2)
 *   peak = parameters + gradients + optimizer state + buffers + max(activations, step buffers):
 *   the end of backward (the last gradients arrive while the activations still live) or the
 *   optimizer step. Zero 3's peak is the largest layer's backward: its gradients are the
 *   shards of the layers after it only, its activations the units' outputs.
 *
 * Communication per step and rank, by the model of process_group.h (N: the group's size):
 *   dp (zero 0)    all-reduce of the gradients: 2(N-1)/N · 4Ψ
 *   zero 1         all-reduce of the flat gradient 2(N-1)/N · 4NS, all-gather (N-1) · 4S
 *   zero 2         reduce-scatter (N-1) · 4S, all-gather (N-1) · 4S
 *   zero 3         per layer u: 2 all-gathers and 1 reduce-scatter, 3 (N-1) · 4S_u
 *   tp             per micro-batch, the units' all-reduces 2(t-1)/t · bytes and all-gathers
 *                  (t-1)/t · bytes (model_spec.h)
 *   pp             per micro-batch: the activation to the next stage, the gradient to the
 *                  previous one (each with its 72-byte shape header), the loss broadcast
 *                  at the end of the step (8 bytes, from the last stage), and for a tied
 *                  GPT head the all-reduce of its gradient over the pipeline group (the last
 *                  stage holds a copy of the weight)
 * The bubble is the schedule simulator's (pipeline/schedule_simulator.h): the idle fraction of
 * the first stage (backward costing twice a forward), which the others match.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "distributed/plan/model_spec.h"

namespace loom::distributed::plan {

enum class Amp { None, Bf16, Fp16 };
enum class OptimizerKind { Adam, SgdMomentum, Sgd };
// ZeroBubbleH1: 1F1B's order with each backward split into B and W (pipeline/schedule.h); a stage
// keeps a micro-batch's activations until its W.
enum class PipelineKind { GPipe, OneFOneB, ZeroBubbleH1 };

struct Layout {
  int64_t dp = 1, tp = 1, pp = 1;
  int zero = 0;               // 0 (DDP), 1, 2, 3 (FullyShardedDataParallel)
  int64_t microbatches = 1;   // per step and data-parallel rank (the pipeline's m)
  bool checkpointing = false;
  Amp amp = Amp::None;
  int64_t batch = 1;          // samples per optimizer step, over all data-parallel ranks
  OptimizerKind optimizer = OptimizerKind::Adam;
  PipelineKind schedule = PipelineKind::OneFOneB;

  int64_t gpus() const { return dp * tp * pp; }
  // "dp 2 x tp 2 x pp 1, zero 1, m 4, ckpt, bf16"
  std::string describe() const;
};

// Bytes one rank holds at its peak, by kind (header comment).
struct MemoryBreakdown {
  double parameters = 0, gradients = 0, optimizer_state = 0, activations = 0, buffers = 0, step_buffers = 0;
  double total() const {
    return parameters + gradients + optimizer_state + buffers + (activations > step_buffers ? activations : step_buffers);
  }
};

// Bytes one rank sends per optimizer step, by kind of traffic.
struct CommBreakdown {
  double data_parallel = 0;    // DDP's all-reduce or ZeRO's collectives
  double tensor_parallel = 0;  // the TP all-reduces and all-gathers
  double pipeline = 0;         // the sends between stages and the loss broadcast
  double total() const { return data_parallel + tensor_parallel + pipeline; }
};

struct StagePrediction {
  int64_t first_unit = 0, end_unit = 0;  // the stage's units [first, end)
  int64_t params = 0;                     // Ψ of one tensor shard of the stage
  MemoryBreakdown memory;
  CommBreakdown comm;
};

struct Prediction {
  Layout layout;
  std::vector<StagePrediction> stages;  // one per pipeline stage
  double bubble = 0;                    // idle fraction of a step (0 without a pipeline)
  int64_t peak_live_microbatches = 1;   // on the first stage
  double step_seconds = 0;              // rough: compute / (1 - bubble) + communication
  // The stage with the largest memory (what must fit) and its numbers.
  const StagePrediction& worst_stage() const;
};

// Assumptions of the step-time estimate, for ranking layouts (not for the memory or bytes).
struct Hardware {
  double flops = 300e12 * 0.4;   // sustained per GPU: a bf16 peak of ~300 TFLOP/s at 40%
  double bandwidth = 100e9;      // bytes/s each rank sends (NVLink is more, Ethernet less)
};

// Throws loom::Error when the layout does not fit the model: a degree < 1, a tensor degree that
// does not divide the split widths, more stages than units, a batch not divisible by
// dp · microbatches, zero outside 0-3, zero > 0 with dp 1 or together with pp or tp (Loom's
// ZeRO wraps a whole model over the data-parallel group only), or microbatches > 1 without
// a pipeline.
Prediction predict(const ModelSpec& model, const Layout& layout, const Hardware& hardware = {});

// The pipeline stages' unit boundaries: pp + 1 indices, balanced by parameter count (as train's
// partition), 0 first and units.size() last.
std::vector<int64_t> stage_boundaries(const ModelSpec& model, int64_t pp);

// Every layout of `gpus` ranks (dp · tp · pp = gpus; every ZeRO stage; checkpointing on and off;
// micro-batches from 1 (or pp) up to 8·pp) whose worst stage fits `memory_bytes`, fastest
// first by step_seconds. `base` gives the batch, amp, optimizer and schedule. Empty when none fits.
std::vector<Prediction> rank_layouts(const ModelSpec& model, int64_t gpus, double memory_bytes, const Layout& base,
                                     const Hardware& hardware = {});
// Why rank_layouts found nothing, in a sentence: no layout of `gpus` splits base.batch (dp ·
// micro-batches must divide it), or the layout that needs the least memory and how much.
std::string why_none_fits(const ModelSpec& model, int64_t gpus, double memory_bytes, const Layout& base,
                          const Hardware& hardware = {});

}  // namespace loom::distributed::plan
