/*
 * The job one `train` process is a rank of, and the piece of the model that rank trains.
 *
 * `mpirun -np N train ... --dp D --tp T --pp P` (N = D·T·P) arranges the ranks as a DeviceMesh
 * (distributed/mesh.h, Megatron order: tensor fastest, then data, then pipeline). Every rank
 * builds the whole model from the same seed and keeps its piece of it:
 *
 *   --tp   mlp: the Linear layers alternate ColumnParallelLinear / RowParallelLinear (the last
 *          one, when column-parallel, gathers its outputs); gpt: TensorParallelGPT.
 *   --pp   the layers cut into P contiguous stages, run by PipelineStageRunner with
 *          --microbatches and --pipeline-schedule. mlp: stages of about equal parameter counts
 *          (with --tp, of the tensor-parallel layers); gpt: [embedding, blocks, head], the token
 *          embedding on the first stage and, as the tied head, on the last (tie_gradients).
 *   --dp   the DistributedSampler shards every epoch by DATA rank: all tensor and pipeline ranks
 *          of one replica read the same batch. Gradients are averaged over the data group: by
 *          DDP during backward when the model is whole (tp = pp = 1, no --zero), after the
 *          step's backwards otherwise, or inside ZeroOptimizer with --zero 1|2.
 *   --zero 3  FullyShardedDataParallel (distributed/zero3.h) over the data group: the model as a
 *          sequence of layers (mlp: its own; gpt: [embedding, blocks, head], the head's weight tied
 *          to the embedding), each rank keeping 1/dp of every layer's parameters, gathering a
 *          layer while it computes (the next one prefetched), and reduce-scattering its gradients
 *          in backward. local() is the sharded module, so checkpoints hold the shards; evaluation
 *          and model.safetensors see the whole model, gathered for them (whole_model()).
 *
 * A single process (N = 1) never touches MPI; collectives on it are no-ops, so the training
 * loop calls them unconditionally. docs/train.md shows the flags, docs/parallelism.md the
 * algorithms.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "data/data.h"
#include "nn/nn.h"
#include "tools/train/options.h"
#include "tools/train/trace.h"

#if LOOM_TRAIN_WITH_MPI
#include "distributed/ddp.h"
#include "distributed/mesh.h"
#include "distributed/pipeline/pipeline.h"
#include "distributed/reshard.h"
#include "distributed/shard_placement.h"
#include "distributed/tensor_parallel/gpt.h"
#include "distributed/zero.h"
#include "distributed/zero3.h"
#endif

namespace loom::train {

// Sums over the predictions one rank evaluated; the job's are their sums over the ranks.
struct Eval {
  double loss_sum = 0, correct = 0, count = 0;
  double loss() const { return loss_sum / count; }
  double accuracy() const { return correct / count; }
};

// The mean cross entropy of `output` ([N, C], or [B, T, V] for tokens) against `target`.
Tensor loss_of(const Tensor& output, const Tensor& target, bool tokens);

// What the pipeline (--pp) did: its memory per stage over the run, and its bubble measured over
// the steps --trace recorded.
struct PipelineReport {
  int64_t stages = 0, microbatches = 0;
  int64_t traced_steps = 0;    // 0 without --trace: no bubble measured
  double measured_bubble = 0;  // mean idle fraction of the stages over the traced steps
  double ideal_bubble = 0;     // (p - 1) / (m + p - 1); v·m for interleaved, 3m for zb-h1 (schedule.h)
  // Per stage (index = stage), the most over all steps: micro-batches whose activations the
  // stage held at once, and bytes it held for backward (StepStats::peak_activation_bytes).
  std::vector<int64_t> peak_live_microbatches, peak_activation_bytes;
};

using OptimizerFactory = std::function<std::unique_ptr<nn::Optimizer>(std::vector<Tensor> params)>;

class Parallelism {
 public:
  // Joins the job: MPI and the mesh when dp·tp·pp > 1, with every group's timeout set to
  // --collective-timeout. Throws loom::Error when the world size is not dp·tp·pp (naming the
  // mpirun -np the flags need) or when train was built without MPI.
  explicit Parallelism(const TrainOptions& options);
  ~Parallelism();
  Parallelism(const Parallelism&) = delete;
  Parallelism& operator=(const Parallelism&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool main() const { return rank_ == 0; }  // rank 0 alone writes the run directory and prints
  int data_rank() const { return coord_dp_; }
  int data_size() const { return static_cast<int>(options_.dp); }
  // True when this rank holds a piece of the model rather than all of it (--tp or --pp).
  bool sharded() const { return options_.tp > 1 || options_.pp > 1; }
  std::string describe() const;  // "data parallel over 2 ranks x tensor parallel over 2 ranks"

  // Every rank waits here until all ranks arrived (world).
  void barrier();
  // Element-wise sum or maximum of `values` over all ranks, in place.
  void sum(std::vector<double>& values);
  void max(std::vector<double>& values);
  // Records every communication of this process in `trace` (distributed/comm_trace.h): each
  // wait as a span named by the operation and the group ("all_reduce data"), each whole flight as
  // an async slice, both with the bytes; and with --pp each traced step's forwards and backwards
  // per micro-batch ("F3", "B3", "W3"). nullptr stops it. Not while collectives are in flight.
  void trace_communication(Trace* trace);
  // "rank 1 (dp 0, tp 1, pp 0)": the process name of this rank in a merged trace.
  std::string rank_name() const;
  // Every rank's `text`, on rank 0 in rank order (empty elsewhere); collective over the world.
  std::vector<std::string> gather_text(const std::string& text);
  // True when `ok` is true on every rank (a barrier): a step that only some ranks do tells the
  // others whether to go on, instead of leaving them in the next collective.
  bool all_ok(bool ok);

  // Builds this rank's piece of `full` (the whole model, built from the same seed on every
  // rank; kept for model.safetensors). Throws loom::Error when --tp does not divide what it
  // must split (classes, vocabulary), naming it and the fix.
  void build(std::shared_ptr<nn::Module> full);
  // The module whose parameters this rank trains and whose state dict its checkpoint holds.
  nn::Module& local() { return *local_; }
  // What the plain path's forward runs through: local(), or its DDP wrapper.
  nn::Module& trained() { return ddp_module_ ? *ddp_module_ : *local_; }
  nn::Module& full() { return *full_; }

  // The optimizer over local()'s parameters: `make` over all of them, or with --zero over this
  // rank's shard inside a ZeroOptimizer (collective: broadcasts rank 0's parameters).
  void make_optimizer(const OptimizerFactory& make);
  // The optimizer whose state is checkpointed and whose learning rate the schedule sets.
  nn::Optimizer& optimizer();

  // The sharded path (sharded() true): one loader batch's forward and backward, the loss
  // weighted by `weight` (1 / the step's batches). Returns the batch's mean loss (unweighted),
  // the same on every rank of the replica.
  double forward_backward(const Tensor& data, const Tensor& target, double weight);
  // The plain path: loss.backward(), inside DDP's no_sync() when `sync` is false (a batch before
  // the step's last: gradients accumulate locally and the last backward all-reduces the sum).
  void backward(const Tensor& loss, bool sync);

  // The optimizer step after the step's backwards: averages the gradients over the data group
  // where DDP did not, clips to `clip` (> 0) by the norm over the whole model, steps (through
  // the scaler), and zeroes the gradients.
  void step(nn::GradScaler& scaler, double clip);

  // Evaluates every batch of `loader` (this rank's shard) with the job's pieces; returns the
  // sums counted once per replica (the tensor ranks and pipeline stages of one replica share a
  // batch; only one of them counts it). Collective over the job when sharded.
  Eval evaluate(data::DataLoader& loader, bool tokens, std::optional<DType> amp);

  // The whole model's state dict, single-process keys, assembled from every rank's piece on
  // every rank (collective: an all-reduce per tensor). Only needed when sharded().
  nn::StateDict full_state_dict();

  // --zero 3: full() holds its parameters only while gathered. Gathers them on every rank until
  // the returned handle goes (collective); without --zero 3 the model is whole and it does
  // nothing.
  std::shared_ptr<void> whole_model();
  // --zero 3: the gathers and reduce-scatters this rank waited for (nullopt otherwise).
  struct ShardedTimings {
    double gather_wait_seconds = 0, reduce_seconds = 0;
    int64_t gathers = 0, prefetched = 0;
  };
  std::optional<ShardedTimings> sharded_timings() const;

#if LOOM_TRAIN_WITH_MPI
  // This rank's piece as data (distributed/reshard.h): what a checkpoint records so that a job of
  // another layout can load it.
  distributed::RankLayout layout() const;
  // The whole model's parameter shapes (what a resharded checkpoint must fit).
  distributed::FullShapes full_shapes() const;
#endif

  // The checkpoint group of this job (nn::CheckpointManager).
  nn::CheckpointGroup checkpoint_group();

  // True when any rank asked to stop (one all-reduce over the job when it has several ranks).
  bool any(bool mine);

  // --pp with --trace: the traced steps' events of the pipeline group of rank 0, as Chrome trace
  // JSON (rank 0; empty elsewhere).
  std::string pipeline_trace_json() const;
  // --pp: what the pipeline of this rank did (nullopt without --pp). Collective over the
  // pipeline group (the stages' peaks are gathered).
  std::optional<PipelineReport> pipeline_report();

 private:
  void build_mlp(const nn::Sequential& full_mlp);
  void build_gpt(const nn::GPT& full_gpt);
  void build_gpt_pipeline(nn::GPT& full_gpt);
  void build_gpt_tensor_pipeline(const nn::GPT& full_gpt);  // --tp and --pp together
  void build_fully_sharded();                                // --zero 3
#if LOOM_TRAIN_WITH_MPI
  std::map<std::string, std::string> fully_sharded_names() const;
#endif
  void check_gpt_vocabulary_divides(const nn::GPT& full_gpt) const;
  // Makes this rank's stage of `net` (pipeline stages of about equal `costs`, one per layer)
  // local_, renaming the pieces to the stage's names and dropping the other stages'.
  void cut_pipeline(const std::shared_ptr<nn::Sequential>& net, const std::vector<double>& costs);
  // --pipeline-schedule interleaved: this rank's --pipeline-chunks stages of pp x chunks.
  void cut_interleaved_pipeline(const std::shared_ptr<nn::Sequential>& net, const std::vector<double>& costs);
  // gpt with --pp: the token embedding is on the first stage and, as the output head's tied
  // weight, on the last; each gets the other's gradient added (an all-reduce over the pipeline).
  void tie_gradients();
  void check_mlp_divides(const nn::Sequential& full_mlp) const;
  double clip_global_norm(double max_norm);
  Eval evaluate_pipeline(data::DataLoader& loader, bool tokens);
  Eval evaluate_tensor_parallel(data::DataLoader& loader, bool tokens);
  // A GPT split over the tensor group: the loss and the correct predictions of this rank's
  // vocabulary slice of the logits [B, T, V / t] (collective over the tensor group).
  Eval score_vocabulary_slice(const Tensor& logits, const Tensor& target);
  // gpt with --tp: the last stage's output is this rank's vocabulary slice, not all logits.
  bool vocabulary_parallel() const { return options_.model == ModelKind::kGpt && options_.tp > 1; }
  bool counts_evaluation() const;  // the rank that counts its replica's predictions

  TrainOptions options_;
  int rank_ = 0, size_ = 1, coord_dp_ = 0, coord_tp_ = 0, coord_pp_ = 0;
  std::shared_ptr<nn::Module> full_, local_, ddp_module_;
  std::set<std::string> tied_copies_;  // the last stage's copy of the tied token embedding
  Tensor tied_weight_;                 // gpt with --pp: the token embedding (on every rank)
  std::unique_ptr<nn::Optimizer> optimizer_;
  int64_t steps_run_ = 0;  // forward_backward calls, for choosing the traced ones
  Trace* run_trace_ = nullptr;  // trace_communication's
#if LOOM_TRAIN_WITH_MPI
  distributed::ModelPlacement placement_;  // where this rank's parameters sit in full_
  // world_: the MPI group of every rank, for the job's own agreements on host values (sums,
  // maxima, the checkpoint's). tensor_world_: the same ranks for the model's tensors: world_
  // itself on the CPU, an NCCL group with --device cuda; the mesh is cut from it.
  std::shared_ptr<distributed::ProcessGroup> world_, tensor_world_;
  std::unique_ptr<distributed::DeviceMesh> mesh_;
  std::shared_ptr<distributed::DistributedDataParallel> ddp_;
  std::unique_ptr<distributed::ZeroOptimizer> zero_;
  std::shared_ptr<distributed::FullyShardedDataParallel> fsdp_;  // --zero 3
  std::shared_ptr<distributed::TensorParallelGPT> tp_gpt_;
  // gpt with --tp and --pp: the whole split GPT, whose layers of this stage local_ holds.
  std::shared_ptr<distributed::TensorParallelGPT> split_gpt_;
  int64_t vocab_begin_ = 0;  // gpt with --tp: the first token of this rank's vocabulary slice
  std::unique_ptr<distributed::pipeline::PipelineStageRunner> runner_;
  std::vector<std::vector<distributed::pipeline::TraceEvent>> trace_;  // per stage, traced steps merged
  double bubble_sum_ = 0;
  int64_t traced_steps_ = 0, peak_live_ = 0, peak_bytes_ = 0;
#endif
};

}  // namespace loom::train
