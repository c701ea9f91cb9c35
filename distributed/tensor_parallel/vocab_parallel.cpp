/* Vocabulary-parallel embedding and cross entropy (see vocab_parallel.h). */
#include "distributed/tensor_parallel/vocab_parallel.h"

#include <sstream>

#include "core/error.h"
#include "core/grad_mode.h"
#include "distributed/tensor_parallel/regions.h"
#include "nn/layers/embedding.h"
#include "ops/ops.h"

namespace loom::distributed {
namespace {

// Which of `indices` fall in [begin, end) (as 0/1 of `dtype`), and their row in the shard (0
// where they do not).
std::pair<Tensor, Tensor> shard_rows(const Tensor& indices, int64_t begin, int64_t end, DType dtype) {
  Tensor inside = indices.ge(begin).logical_and(indices.lt(end));
  Tensor local = (indices - begin) * inside.to(indices.dtype());
  return {inside.to(dtype), local};
}

}  // namespace

VocabParallelEmbedding::VocabParallelEmbedding(int64_t num_embeddings, int64_t embedding_dim,
                                               std::shared_ptr<ProcessGroup> group)
    : VocabParallelEmbedding(nn::Embedding(num_embeddings, embedding_dim).weight,  // the single-process draw
                             std::move(group)) {}

VocabParallelEmbedding::VocabParallelEmbedding(const Tensor& full_weight, std::shared_ptr<ProcessGroup> group)
    : group_(std::move(group)) {
  LOOM_CHECK(group_ != nullptr, "VocabParallelEmbedding: null tensor-parallel group");
  LOOM_CHECK(full_weight.defined() && full_weight.dim() == 2, "VocabParallelEmbedding: expected a full weight [V, D]");
  vocab_ = full_weight.size(0);
  dim_ = full_weight.size(1);
  LOOM_CHECK(vocab_ % group_->size() == 0, "VocabParallelEmbedding: the vocabulary (", vocab_,
             ") is not divisible by the ", group_->size(), " ranks of the tensor-parallel group");
  const int64_t n = vocab_ / group_->size();
  begin_ = group_->rank() * n;
  end_ = begin_ + n;
  NoGradGuard no_grad;
  weight = register_parameter("weight", full_weight.slice(0, begin_, end_).contiguous().clone());
}

Tensor VocabParallelEmbedding::forward(const Tensor& indices) {
  LOOM_CHECK(indices.defined() && indices.dtype() == DType::Int64, "VocabParallelEmbedding: expected int64 indices");
  LOOM_CHECK(indices.numel() == 0 || (indices.min().item<int64_t>() >= 0 && indices.max().item<int64_t>() < vocab_),
             "VocabParallelEmbedding: indices must lie in [0, ", vocab_, ")");
  auto [inside, local] = shard_rows(indices, begin_, end_, weight.dtype());
  // Rows held by other ranks come out as zeros here and as their values there: the sum is the
  // full lookup.
  Tensor part = embedding(weight, local) * inside.unsqueeze(-1);
  return reduce_from_tensor_parallel_region(part, group_);
}

std::string VocabParallelEmbedding::extra_repr() const {
  std::ostringstream os;
  os << vocab_ << ", " << dim_ << " (rows " << begin_ << " to " << end_ << " on this rank)";
  return os.str();
}

Tensor vocab_parallel_cross_entropy(const Tensor& local_logits, const Tensor& target,
                                    std::shared_ptr<ProcessGroup> group) {
  LOOM_CHECK(group != nullptr, "vocab_parallel_cross_entropy: null tensor-parallel group");
  LOOM_CHECK(local_logits.defined() && local_logits.dim() == 2, "vocab_parallel_cross_entropy: expected logits [N, V/t]");
  LOOM_CHECK(target.defined() && target.dtype() == DType::Int64 && target.dim() == 1 &&
                 target.size(0) == local_logits.size(0),
             "vocab_parallel_cross_entropy: expected an int64 target [", local_logits.size(0), "], got ",
             target.defined() ? target.sizes() : IntArrayRef{});
  const int64_t n = local_logits.size(1), begin = group->rank() * n;
  const int64_t vocab = n * group->size();
  LOOM_CHECK(target.numel() == 0 || (target.min().item<int64_t>() >= 0 && target.max().item<int64_t>() < vocab),
             "vocab_parallel_cross_entropy: targets must lie in [0, ", vocab, ")");
  // m: the row maxima over the whole vocabulary, a constant for the gradient (any m gives the
  // same loss; the max keeps exp() from overflowing).
  Tensor m;
  {
    NoGradGuard no_grad;
    m = std::get<0>(local_logits.max(1)).contiguous().clone();
    group->all_reduce(m, ReduceOp::Max);  // waits for every rank's maxima
  }
  Tensor shifted = local_logits - m.unsqueeze(1);
  Tensor sum_exp = reduce_from_tensor_parallel_region(shifted.exp().sum({1}), group);
  auto [inside, local] = shard_rows(target, begin, begin + n, local_logits.dtype());
  Tensor picked = shifted.gather(1, local.unsqueeze(1)).squeeze(1) * inside;
  Tensor target_logit = reduce_from_tensor_parallel_region(picked, group);
  return (sum_exp.log() - target_logit).mean();
}

}  // namespace loom::distributed
