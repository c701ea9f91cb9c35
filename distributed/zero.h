/*
 * ZeRO (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
 * Models", SC 2020): data parallelism without N copies of the optimizer state and gradients.
 *
 * Plain data parallelism keeps everything on every rank. For a model of Ψ parameters trained
 * with Adam in mixed precision the paper counts, per rank,
 *
 *     2Ψ (fp16 params) + 2Ψ (fp16 grads) + KΨ (optimizer state; K = 12: fp32 master params,
 *                                              exp_avg, exp_avg_sq)      = 16Ψ bytes for K=12.
 *
 * Loom trains in fp32 here, so the same three terms are
 *
 *     4Ψ (params)      + 4Ψ (grads)      + 8Ψ (Adam's exp_avg + exp_avg_sq)   = 16Ψ bytes.
 *
 * The stages partition these terms over the N ranks of the group:
 *
 *     stage 1 (P_os):     4Ψ + 4Ψ   + 8Ψ/N   each rank keeps the optimizer state of its shard only
 *     stage 2 (P_os+g):   4Ψ + 4Ψ/N + 8Ψ/N   ... and only its shard's (reduced) gradient
 *     stage 3 (P_os+g+p): (4Ψ + 4Ψ + 8Ψ)/N   ... and only its shard of the parameters
 *                                             (gathered layer by layer for forward/backward)
 *
 * Here: the parameters are laid end to end in one flat buffer (the module's parameters become
 * views into it), padded to N equal shards of S = ceil(Ψ/N) elements; rank r owns elements
 * [r*S, (r+1)*S). The inner optimizer is built by the factory from views of the parts of the
 * parameters that fall in the shard, so its state exists for the shard only. One step:
 *
 *     stage 1: all_reduce(avg) of the flat gradient [N*S]; the shard's views read their part
 *     stage 2: reduce_scatter(avg) of the flat gradient into the shard gradient [S]; the
 *              full gradients are freed
 *     inner optimizer step on the shard
 *     all_gather of the updated shards into the full flat parameters (every rank's replica)
 *
 * ZeroOptimizer averages the gradients itself: use it with the plain module, not with a
 * DistributedDataParallel wrapper (which would all-reduce them a second time).
 *
 * Stage 3 is FullyShardedDataParallel (zero3.h), a module rather than an optimizer: the
 * parameters it shards have to be gathered around each layer's forward and backward, which only
 * the module that runs the layers can do. ZeroOptimizer is stages 1 and 2. In stage 2 the full
 * gradients still exist during backward (a bucketed reduce-scatter inside backward, as DDP does
 * with all-reduce, would cap them at a bucket); they are freed at step(), so what a rank holds
 * between iterations is 4Ψ/N.
 */
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "distributed/process_group.h"
#include "nn/optim/optimizer.h"

namespace loom::distributed {

// Bytes this rank holds, by kind (ZeroOptimizer::memory_report, and
// FullyShardedDataParallel::memory_report for stage 3).
struct ZeroMemoryReport {
  int64_t parameter_bytes = 0;        // all the flat parameters in stages 1 and 2, the shard in stage 3
  int64_t gradient_bytes = 0;         // gradient storage held after the last step's reduction
  int64_t optimizer_state_bytes = 0;  // the inner optimizer's per-parameter state
};

// The bytes of every per-parameter state tensor of `optimizer` ("state.*" of its state dict):
// momentum buffers, Adam moments and step counters.
int64_t optimizer_state_bytes(const nn::Optimizer& optimizer);

using ShardOptimizerFactory = std::function<std::unique_ptr<nn::Optimizer>(std::vector<Tensor> shard_params)>;

class ZeroOptimizer {
 public:
  // params: the model's trainable parameters (same order on every rank), contiguous, one
  // floating dtype and one device. Their storage moves into one flat buffer (their handles stay
  // valid; the module sees the same tensors). Broadcasts rank 0's values so that all replicas
  // start equal (collective). make_optimizer receives the shard's parameter views (1-D, one
  // per parameter that overlaps the shard); it is not called on a rank whose shard is empty.
  // Throws loom::Error for stage outside {1, 2}, an empty or mixed parameter list, or a
  // factory that returns null.
  ZeroOptimizer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> group, int stage,
                ShardOptimizerFactory make_optimizer);

  // Averages the gradients over the group (all-reduce or reduce-scatter by stage), steps the
  // inner optimizer on this rank's shard and all-gathers the shards into every replica.
  // Collective. A parameter without a gradient counts as zero. Throws if no parameter has a
  // gradient.
  void step();
  // Drops (set_to_none) or zeroes the full parameters' gradients.
  void zero_grad(bool set_to_none = true);

  ZeroMemoryReport memory_report() const;

  int stage() const { return stage_; }
  int64_t numel() const { return numel_; }            // Ψ
  int64_t shard_size() const { return shard_size_; }  // S = ceil(Ψ / N)
  // This rank's elements of the flat parameter space: [shard_begin, shard_end).
  int64_t shard_begin() const { return shard_begin_; }
  int64_t shard_end() const { return shard_end_; }
  // The optimizer of this rank's shard (its param_groups are where an LR schedule writes).
  // Throws on a rank whose shard is empty (fewer elements than ranks), which has none.
  nn::Optimizer& inner();
  const std::vector<Tensor>& shard_params() const { return shard_params_; }

 private:
  Tensor gather_flat_gradient() const;

  std::vector<Tensor> params_;
  std::vector<int64_t> offsets_;  // element offset of each parameter in flat_params_
  std::shared_ptr<ProcessGroup> group_;
  int stage_;
  int64_t numel_ = 0, shard_size_ = 0, shard_begin_ = 0, shard_end_ = 0;
  Tensor flat_params_;                // [N * S]: every parameter's storage, then padding
  Tensor flat_grad_;                  // stage 1: [N * S], the averaged gradients (the params' grads view it)
  Tensor shard_grad_;                 // stage 2: [S], this rank's part of the averaged gradient
  std::vector<Tensor> shard_params_;  // views of flat_params_ inside the shard
  std::vector<int64_t> shard_param_begin_;  // their flat offsets
  std::unique_ptr<nn::Optimizer> inner_;
};

}  // namespace loom::distributed
