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
 * The gradients are averaged over the group (a data-parallel mean, as DDP): wrap the plain model,
 * not a DistributedDataParallel. Every rank runs the same layers in the same order, which is what
 * keeps the collectives of all ranks in step.
 */
#pragma once

#include <memory>
#include <vector>

#include "distributed/process_group.h"
#include "distributed/zero.h"
#include "nn/layers/containers.h"

namespace loom::distributed {

class FullyShardedDataParallel : public nn::Module {
 public:
  // Shards `model` over `group`: broadcasts rank 0's parameters (collective, so that all start
  // equal), keeps this rank's shard of every layer's parameters and frees the rest. Throws
  // loom::Error for a null model or group, a model without parameters, parameters that are not
  // float32/float64 on one device, or a parameter shared by two layers (a tied weight would be
  // gathered and reduced twice).
  FullyShardedDataParallel(std::shared_ptr<nn::Sequential> model, std::shared_ptr<ProcessGroup> group);

  // The wrapped model's forward, layer by layer, gathering each layer's parameters around it
  // (collective: every rank must call it, with the same layers in use).
  Tensor forward(const Tensor& input) override;
  void train(bool on = true) override;

  // parameters() of this module are the shards: one 1-D tensor [S_u] per layer with parameters
  // ("shard_<layer index>"). Build the optimizer on them; state_dict() saves this rank's shards.
  // The full parameters under the wrapped model's names, gathered on every rank (collective).
  nn::StateDict full_state_dict();

  // Bytes this rank holds between steps (parameters: the shards; gradients: the shards'
  // gradients; optimizer state: measure it with optimizer_state_bytes on your optimizer).
  ZeroMemoryReport memory_report() const;
  // The largest layer's gathered parameters (what a forward or backward holds on top).
  int64_t peak_gathered_bytes() const;

 private:
  struct Layer;
  void gather(Layer& layer);
  void release(Layer& layer);
  void reduce_gradients(Layer& layer);

  std::shared_ptr<nn::Sequential> model_;  // not a registered child: its parameters are released
  std::shared_ptr<ProcessGroup> group_;
  std::vector<std::shared_ptr<Layer>> layers_;  // one per child of model_, in order
};

}  // namespace loom::distributed
