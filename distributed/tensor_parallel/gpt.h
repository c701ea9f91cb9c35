/*
 * TensorParallelGPT: the zoo's GPT (nn/models/gpt.h) with its large matrices split over a
 * tensor-parallel group of t ranks, Megatron-style. Per block:
 *
 *   attention   qkv   ColumnParallelLinear: rank r computes the q, k and v of heads
 *                     [r h/t, (r+1) h/t) (its rows of each third of qkv's weight);
 *               the heads' attention is local (heads are independent);
 *               proj  RowParallelLinear over those heads' columns: one all-reduce (g).
 *   MLP         fc    ColumnParallelLinear (hidden units split), GELU (elementwise: local),
 *               proj  RowParallelLinear: one all-reduce.
 *   LayerNorms, position embedding and residual stream: replicated on every rank.
 *   token embedding  VocabParallelEmbedding; the tied output head multiplies by this rank's rows
 *                    only, giving logits [B, T, V/t], and vocab_parallel_cross_entropy reduces
 *                    them to the loss without any rank holding the full logits.
 *
 * Communication per block and step: 2 all-reduces of [B, T, d] in forward and 2 in backward
 * (f's conjugates), plus 3 of [B·T] for the loss. Built from a full nn::GPT (the same on every
 * rank, e.g. the same seed), it computes the same loss and its parameters get the slices of the
 * full model's gradients.
 */
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "distributed/tensor_parallel/layers.h"
#include "distributed/tensor_parallel/vocab_parallel.h"
#include "nn/layers/containers.h"
#include "nn/layers/embedding.h"
#include "nn/layers/layer_norm.h"
#include "nn/layers/transformer_block.h"
#include "nn/models/gpt.h"

namespace loom::distributed {

// One transformer block with its heads and hidden units split (see the header comment).
class TensorParallelBlock : public nn::Module {
 public:
  TensorParallelBlock(const nn::TransformerBlock& full, int64_t n_heads, std::shared_ptr<ProcessGroup> group);
  // x: [B, T, d] (replicated) -> [B, T, d] (replicated).
  Tensor forward(const Tensor& x) override;

  nn::LayerNorm ln1, ln2;
  std::shared_ptr<ColumnParallelLinear> qkv, fc;
  std::shared_ptr<RowParallelLinear> attn_proj, mlp_proj;

 private:
  int64_t local_heads_, head_dim_;
  std::string gelu_approximate_;  // the full block's GELU ("none" or "tanh")
  std::shared_ptr<ProcessGroup> group_;
};

class TensorParallelGPT : public nn::Module {
 public:
  // The shards of `full`, which must have tied weights and no dropout. Throws loom::Error when t
  // does not divide the heads, the MLP width or the vocabulary, naming which.
  TensorParallelGPT(const nn::GPT& full, std::shared_ptr<ProcessGroup> group);
  // A freshly initialised GPT of `config` (the draw of nn::GPT(config) from the current
  // generator state, the same on every rank), split: the zoo model with a tensor-parallel degree.
  TensorParallelGPT(const nn::GPTConfig& config, std::shared_ptr<ProcessGroup> group);

  // idx: int64 [B, T] -> this rank's logits [B, T, V / t].
  Tensor forward(const Tensor& idx) override;
  // The mean next-token cross entropy over the full vocabulary (collective).
  Tensor loss(const Tensor& idx, const Tensor& targets);

  std::shared_ptr<VocabParallelEmbedding> tok;
  nn::Embedding pos;
  nn::ModuleList blocks;
  nn::LayerNorm ln;

 private:
  nn::GPTConfig config_;
  std::shared_ptr<ProcessGroup> group_;
};

}  // namespace loom::distributed
