/*
 * Embedding: a lookup through loom::embedding. padding_idx is implemented by zeroing, in a
 * hook on the output, the gradient rows that come from padding positions: the embedding op
 * itself has no padding argument, and the hook costs one masked_fill of the gradient, only
 * when a padding index is set and only when a backward runs.
 */
#include "nn/layers/embedding.h"

#include "core/grad_mode.h"
#include "nn/init.h"
#include "ops/ops.h"

namespace loom::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx)
    : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {
  LOOM_CHECK(num_embeddings >= 0 && embedding_dim >= 0, "Embedding: expected non-negative sizes, got ",
             "num_embeddings=", num_embeddings, ", embedding_dim=", embedding_dim);
  if (padding_idx) {
    LOOM_CHECK(*padding_idx >= -num_embeddings && *padding_idx < num_embeddings,
               "Embedding: padding_idx must be within [", -num_embeddings, ", ", num_embeddings, "), got ",
               *padding_idx);
    padding_idx_ = *padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx;
  }
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  reset_parameters();
}

void Embedding::reset_parameters() {
  init::normal_(weight);
  if (padding_idx_) {
    NoGradGuard no_grad;
    weight.select(0, *padding_idx_).fill_(0);
  }
}

Tensor Embedding::forward(const Tensor& indices) {
  LOOM_CHECK(indices.defined(), "Embedding: the indices are undefined");
  LOOM_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32, "Embedding(", extra_repr(),
             "): expected int64 or int32 indices, got ", indices.dtype(), " of shape ", indices.sizes());
  Tensor out = embedding(weight, indices);
  if (padding_idx_ && out.requires_grad()) {
    // [*, 1]: true where the index is the padding row, broadcast over the embedding dim.
    Tensor is_padding = indices.eq(*padding_idx_).unsqueeze(-1);
    out.register_hook([is_padding](const Tensor& grad) { return grad.masked_fill(is_padding, 0); });
  }
  return out;
}

std::string Embedding::extra_repr() const {
  std::string s = std::to_string(num_embeddings_) + ", " + std::to_string(embedding_dim_);
  if (padding_idx_) s += ", padding_idx=" + std::to_string(*padding_idx_);
  return s;
}

}  // namespace loom::nn
