/*
 * Embedding, as torch.nn.Embedding: a lookup table weight [num_embeddings, embedding_dim],
 * initialised N(0, 1), with torch's optional padding_idx (that row starts at zero and gets no
 * gradient, so it stays whatever it is set to).
 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "nn/module.h"

namespace loom::nn {

class Embedding : public Module {
 public:
  // padding_idx may be negative (counted from the end, as torch). Throws if a size is negative
  // or padding_idx is outside [-num_embeddings, num_embeddings).
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = {});

  // integer indices [*] (int64 or int32) -> [*, embedding_dim]. Throws if an index is outside
  // [0, num_embeddings) or the indices are not integers.
  Tensor forward(const Tensor& indices) override;
  // weight ~ N(0, 1), and the padding row zeroed.
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t num_embeddings() const { return num_embeddings_; }
  int64_t embedding_dim() const { return embedding_dim_; }
  std::optional<int64_t> padding_idx() const { return padding_idx_; }

  Tensor weight;  // [num_embeddings, embedding_dim]

 private:
  int64_t num_embeddings_, embedding_dim_;
  std::optional<int64_t> padding_idx_;  // normalised to [0, num_embeddings)
};

}  // namespace loom::nn
