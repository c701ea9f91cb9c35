/*
 * ZeRO stage 3 (Rajbhandari et al., SC 2020: P_os+g+p; PyTorch's FullyShardedDataParallel):
 * every rank of the data-parallel group keeps only its 1/N of the parameters, of their
 * gradients and (through an optimizer built on the shards) of the optimizer state. The full
 * parameters of one layer exist only while that layer computes:
 *
 *   for each layer u (a child of the wrapped Sequential that has parameters), with its Ψ_u
 *   parameters flattened and padded to N·S_u, S_u = ceil(Ψ_u / N):
 *
 *     forward   all_gather the N shards [S_u] -> the full flat parameters [N·S_u]; the layer's
 *               parameter handles point into them (set_data); run the layer WITHOUT recording
 *               (activation checkpointing: only its input is kept); free the full parameters
 *     backward  all_gather again; re-run the layer recording; backpropagate through it;
 *               reduce_scatter(avg) its full gradient into the shard's gradient [S_u]; free
 *               the full parameters and their gradients
 *     step      the optimizer updates the shards (this module's parameters()) in place; the
 *               next forward gathers the new values
 *
 * Memory per rank (Ψ parameters, fp32, Adam): 4Ψ/N parameters + 4Ψ/N gradients + 8Ψ/N optimizer
 * state, plus one layer's gathered parameters and gradient at a time (peak_gathered_bytes), plus
 * the layers' inputs (activations at layer boundaries only: the recomputation is the price, one
 * extra forward per step). Communication per step: 2 all-gathers and 1 reduce-scatter of Ψ
 * elements, 3Ψ·(N-1)/N per rank, 1.5x plain DDP's all-reduce (2Ψ·(N-1)/N), as the paper says.
 *
 * Prefetch (on by default, set_prefetch): a layer's all-gather is posted before it is needed, so
 * that it travels while the layer before it computes. In forward, once layer u is gathered, the
 * all-gather of the next layer with parameters (u+1, ...) is posted; in backward, that of the
 * previous one (u-1, ...), whose backward comes next. Without prefetch every gather is posted
 * when its layer starts and the layer waits for all of it: the whole all-gather time is exposed.
 * With it, only the part that the previous layer's compute did not cover is. The cost is one more
 * layer's gathered parameters held at a time (2 x peak_gathered_bytes). A prefetch never crosses
 * an optimizer step: the last backward layer (layer 0) posts none, as its neighbour would be
 * gathered before the step changes the shards.
 *
 * The gradients' reduce-scatters are asynchronous too: layer u's is posted when its backward
 * ends and waited for when layer u-1's backward ends (one in flight at a time, since each holds
 * a layer's whole gradient), and the backward's last layer waits for its own, so that the
 * optimizer finds every shard's gradient complete. timings() counts what stayed exposed: the
 * seconds spent waiting for gathers and for reduce-scatters.
 *
 * Tied weights (a GPT's token embedding reused by its output head): a parameter used by several
 * layers belongs to the first of them, its owner. A later layer that uses it gathers the owner
 * too; in forward it frees it again with its own, in backward it leaves it gathered, because the
 * owner's backward comes later and reduces the gradient that both uses accumulated.
 *
 * Evaluation: gather_all() gathers every layer until release_all(), so a forward then needs no
 * collective (FullParameters does both as a scope). Ranks that evaluate different numbers of
 * batches, as data shards of unequal length do, cannot then hang in each other's gathers.
 *
 * The gradients are averaged over the group (a data-parallel mean, as DDP): wrap the plain model,
 * not a DistributedDataParallel. Every rank runs the same layers in the same order, which is what
 * keeps the collectives of all ranks in step.
 */
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "distributed/shard_placement.h"
#include "distributed/zero.h"
#include "nn/layers/containers.h"

namespace loom::distributed {

class FullyShardedDataParallel : public nn::Module {
 public:
  // Shards `model` over `group`: broadcasts rank 0's parameters (collective, so that all start
  // equal), keeps this rank's shard of every layer's parameters and frees the rest. Throws
  // loom::Error for a null model or group, a model without parameters, or parameters that are not
  // float32/float64 on one device. A parameter shared by several layers is tied (header).
  FullyShardedDataParallel(std::shared_ptr<nn::Sequential> model, std::shared_ptr<ProcessGroup> group);

  // The wrapped model's forward, layer by layer, gathering each layer's parameters around it
  // (collective: every rank must call it, with the same layers in use).
  Tensor forward(const Tensor& input) override;
  void train(bool on = true) override;

  // parameters() of this module are the shards: one 1-D tensor [S_u] per layer with parameters
  // ("shard_<layer index>"). Build the optimizer on them; state_dict() saves this rank's shards.
  // The full parameters under the wrapped model's names, gathered on every rank (collective).
  nn::StateDict full_state_dict();

  // Where this rank's shards sit in the wrapped model, for checkpoints that reshard
  // (distributed/reshard.h): flat pieces (dim -1) of "shard_<layer>" against the wrapped model's
  // parameter names ("<layer>.<name>"), a tied parameter under its owner's name only.
  std::vector<ShardPlacement> placement() const;
  // The full shapes of the parameters, by those names (the wrapped model's are released).
  std::map<std::string, std::vector<int64_t>> full_shapes() const;
  const nn::Sequential& wrapped() const { return *model_; }

  // Bytes this rank holds between steps (parameters: the shards; gradients: the shards'
  // gradients; optimizer state: measure it with optimizer_state_bytes on your optimizer).
  ZeroMemoryReport memory_report() const;
  // The largest layer's gathered parameters (what a forward or backward holds on top; twice
  // that with prefetch).
  int64_t peak_gathered_bytes() const;

  // Prefetch the next layer's parameters (header); on by default.
  void set_prefetch(bool on) { prefetch_ = on; }
  bool prefetch() const { return prefetch_; }

  // Communication this rank waited for, since construction or reset_timings().
  struct Timings {
    double gather_wait_seconds = 0;    // blocked until a layer's all-gather completed
    double reduce_seconds = 0;         // blocked until a gradient's reduce-scatter completed
    int64_t gathers = 0, prefetched = 0;  // all-gathers waited for; of them, posted ahead
  };
  Timings timings() const { return timings_; }
  void reset_timings() { timings_ = {}; }

  // Called for every wait on a collective: "all-gather 3" or "reduce-scatter 3" (layer index),
  // its start and end, and the bytes this rank receives (all-gather) or sends (reduce-scatter)
  // in it. For traces (train --trace); empty by default.
  using SpanObserver = std::function<void(const std::string& name, std::chrono::steady_clock::time_point begin,
                                          std::chrono::steady_clock::time_point end, int64_t bytes)>;
  void set_span_observer(SpanObserver observer) { observer_ = std::move(observer); }

  // Every layer's full parameters on every rank until release_all(): the wrapped model (and any
  // module sharing its layers) is whole meanwhile, and forwards run without collectives.
  // Collective (each layer's all-gather). Not while gradients are being computed. Pairs nest.
  void gather_all();
  void release_all();

 private:
  struct Layer;
  void start_gather(Layer& layer);  // posts the layer's all-gather, if not gathered or posted
  void gather(Layer& layer);        // waits for it, and for the layers whose parameters it uses
  void release(Layer& layer, bool with_borrowed);
  // Posts the reduce-scatter of the layer's gradient, after finishing the one posted before it;
  // the first layer with parameters (the last of a backward) finishes its own too.
  void reduce_gradients(Layer& layer);
  void finish_reduce();  // waits for the posted reduce-scatter; adds it to its shard's gradient
  // The next layer with parameters from `index` in the direction of travel, or nullptr.
  Layer* neighbour(size_t index, bool backward) const;
  void observe(const std::string& name, std::chrono::steady_clock::time_point begin, int64_t bytes);

  std::shared_ptr<nn::Sequential> model_;  // not a registered child: its parameters are released
  std::shared_ptr<ProcessGroup> group_;
  std::vector<std::shared_ptr<Layer>> layers_;  // one per child of model_, in order
  bool prefetch_ = true;
  int all_gathered_ = 0;  // gather_all calls not yet released (they nest)
  Timings timings_;
  // The reduce-scatter in flight (at most one: each holds a layer's whole flat gradient).
  struct PendingReduce {
    Layer* layer = nullptr;
    WorkPtr work;
    Tensor input, output;
  };
  PendingReduce pending_reduce_;
  size_t first_layer_ = 0;  // the lowest index of a layer with parameters
  SpanObserver observer_;
};

// gather_all() for a scope: the sharded model whole, e.g. for evaluating or saving it.
class FullParameters {
 public:
  explicit FullParameters(FullyShardedDataParallel& model) : model_(model) { model_.gather_all(); }
  ~FullParameters() { model_.release_all(); }
  FullParameters(const FullParameters&) = delete;
  FullParameters& operator=(const FullParameters&) = delete;

 private:
  FullyShardedDataParallel& model_;
};

}  // namespace loom::distributed
