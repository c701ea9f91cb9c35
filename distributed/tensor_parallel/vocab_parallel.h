/*
 * The vocabulary split over a tensor-parallel group (Megatron-LM): a language model's largest
 * matrices are the [V, D] embedding and the output projection to V logits, and with V = 50k the
 * full [tokens, V] logits would dominate activation memory. Rank r holds vocabulary rows
 * [r V/t, (r+1) V/t) and never sees the full logits:
 *
 *   VocabParallelEmbedding   each rank looks up the tokens that fall in its rows (zeros for the
 *                            others); g (an all-reduce) sums the parts into the full embedding.
 *
 *   vocab_parallel_cross_entropy(z_r, y)   with z_r this rank's logits [N, V/t]:
 *       m     = max over all ranks of max_j z_r[:, j]             all-reduce MAX (a constant)
 *       S     = Σ_ranks Σ_j exp(z_r[:, j] - m)                    g: all-reduce SUM of [N]
 *       z_y   = Σ_ranks (z_r[:, y - r V/t] if y is in my rows)    g: all-reduce SUM of [N]
 *       loss  = mean(log S - (z_y - m))
 *   Three all-reduces of N numbers instead of gathering N × V logits; the backward of g is the
 *   identity, so each rank's logits get exactly softmax_r - onehot_r (divided by N).
 */
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "distributed/process_group.h"
#include "nn/module.h"

namespace loom::distributed {

class VocabParallelEmbedding : public nn::Module {
 public:
  // weight [V / t, D]: this rank's rows of the N(0, 1) matrix nn::Embedding(V, D) would draw
  // from the same generator state. Throws for a null group or t not dividing V.
  VocabParallelEmbedding(int64_t num_embeddings, int64_t embedding_dim, std::shared_ptr<ProcessGroup> group);
  // This rank's rows of a given full weight [V, D] (a trained nn::Embedding's).
  VocabParallelEmbedding(const Tensor& full_weight, std::shared_ptr<ProcessGroup> group);
  // indices (int64) [*] in [0, V) -> [*, D], the same on every rank of the group. Throws for an
  // index outside [0, V).
  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;
  int64_t vocab_begin() const { return begin_; }
  int64_t vocab_end() const { return end_; }

  Tensor weight;

 private:
  int64_t vocab_, dim_, begin_, end_;
  std::shared_ptr<ProcessGroup> group_;
};

// Mean cross entropy of the full-vocabulary logits whose columns [r V/t, (r+1) V/t) are this
// rank's `local_logits` [N, V/t]; target: int64 [N] in [0, V). Every rank gets the same loss.
// Collective over `group`. Throws naming the shapes on a mismatch or a target out of range.
Tensor vocab_parallel_cross_entropy(const Tensor& local_logits, const Tensor& target,
                                    std::shared_ptr<ProcessGroup> group);

}  // namespace loom::distributed
