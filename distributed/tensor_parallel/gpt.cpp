/* The tensor-parallel GPT (see gpt.h). */
#include "distributed/tensor_parallel/gpt.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/grad_mode.h"
#include "distributed/tensor_parallel/regions.h"
#include "nn/layers/activation.h"
#include "nn/layers/transformer_block.h"
#include "ops/ops.h"

namespace loom::distributed {
namespace {

void copy_layer_norm(nn::LayerNorm& to, const nn::LayerNorm& from) {
  NoGradGuard no_grad;
  if (from.weight.defined()) to.weight.copy_(from.weight);
  if (from.bias.defined()) to.bias.copy_(from.bias);
}

// qkv's weight [3d, d] (or bias [3d]) reordered so that rank r's contiguous block of rows holds its
// heads' q, then k, then v: what ColumnParallelLinear's plain row split then hands to rank r.
Tensor heads_grouped_by_rank(const Tensor& full, int64_t d, int t) {
  if (!full.defined()) return {};
  const int64_t n = d / t;
  std::vector<Tensor> parts;
  for (int r = 0; r < t; ++r)
    for (int64_t third = 0; third < 3; ++third) parts.push_back(full.slice(0, third * d + r * n, third * d + (r + 1) * n));
  return cat(parts, 0);
}

const nn::Linear& mlp_linear(const nn::TransformerBlock& block, int64_t index) {
  return block.mlp.at<nn::Linear>(index);
}

}  // namespace

TensorParallelBlock::TensorParallelBlock(const nn::TransformerBlock& full, int64_t n_heads,
                                         std::shared_ptr<ProcessGroup> group)
    : ln1(full.ln1.normalized_shape(), full.ln1.eps()),
      ln2(full.ln2.normalized_shape(), full.ln2.eps()),
      gelu_approximate_(full.mlp.at<nn::GELU>(1).approximate()),
      group_(std::move(group)) {
  const int t = group_->size();
  const int64_t d = full.attn.qkv.weight.size(1);
  LOOM_CHECK(n_heads % t == 0, "TensorParallelGPT: ", n_heads, " heads cannot be split over ", t,
             " tensor-parallel ranks (t must divide the heads)");
  local_heads_ = n_heads / t;
  head_dim_ = d / n_heads;
  copy_layer_norm(ln1, full.ln1);
  copy_layer_norm(ln2, full.ln2);
  {
    NoGradGuard no_grad;
    qkv = std::make_shared<ColumnParallelLinear>(heads_grouped_by_rank(full.attn.qkv.weight, d, t),
                                                 heads_grouped_by_rank(full.attn.qkv.bias, d, t), group_);
  }
  attn_proj = std::make_shared<RowParallelLinear>(full.attn.proj, group_);
  fc = std::make_shared<ColumnParallelLinear>(mlp_linear(full, 0), group_);
  mlp_proj = std::make_shared<RowParallelLinear>(mlp_linear(full, 2), group_);
  register_module("ln1", ln1);
  register_module("qkv", qkv);
  register_module("attn_proj", attn_proj);
  register_module("ln2", ln2);
  register_module("fc", fc);
  register_module("mlp_proj", mlp_proj);
}

Tensor TensorParallelBlock::forward(const Tensor& x) {
  const int64_t b = x.size(0), t = x.size(1), h = local_heads_, hd = head_dim_, c = h * hd;
  // This rank's heads: [B, T, 3c] -> q, k, v as [B*h, T, hd].
  Tensor qkv_local = (*qkv)(ln1(x));
  auto heads = [&](int64_t part) {
    return qkv_local.slice(2, part * c, (part + 1) * c).reshape({b, t, h, hd}).transpose(1, 2).reshape({b * h, t, hd});
  };
  Tensor q = heads(0).mul(std::pow(static_cast<double>(hd), -0.5)), k = heads(1), v = heads(2);
  Tensor allowed = ones({t, t}, TensorOptions(kBool).device(q.device())).tril();
  Tensor mask = where(allowed, zeros({t, t}, q.options()), -std::numeric_limits<double>::infinity());
  Tensor att = q.bmm(k.transpose(1, 2)).add(mask).softmax(-1);
  Tensor y = att.bmm(v).reshape({b, h, t, hd}).transpose(1, 2).reshape({b, t, c});
  Tensor h1 = x + (*attn_proj)(y);
  return h1 + (*mlp_proj)((*fc)(ln2(h1)).gelu(gelu_approximate_));
}

TensorParallelGPT::TensorParallelGPT(const nn::GPT& full, std::shared_ptr<ProcessGroup> group)
    : pos(full.config().context, full.config().d_model),
      ln(full.ln.normalized_shape(), full.ln.eps()),
      config_(full.config()),
      group_(std::move(group)) {
  LOOM_CHECK(group_ != nullptr, "TensorParallelGPT: null tensor-parallel group");
  LOOM_CHECK(config_.tie_weights && config_.dropout == 0.0,
             "TensorParallelGPT: expected a GPT with tied weights and no dropout");
  LOOM_CHECK(config_.vocab_size % group_->size() == 0, "TensorParallelGPT: the vocabulary (", config_.vocab_size,
             ") cannot be split over ", group_->size(), " tensor-parallel ranks");
  tok = std::make_shared<VocabParallelEmbedding>(full.tok.weight, group_);
  {
    NoGradGuard no_grad;
    pos.weight.copy_(full.pos.weight);
  }
  for (const auto& block : full.blocks)
    blocks.push_back(std::make_shared<TensorParallelBlock>(dynamic_cast<const nn::TransformerBlock&>(*block),
                                                           config_.n_heads, group_));
  copy_layer_norm(ln, full.ln);
  register_module("tok", tok);
  register_module("pos", pos);
  register_module("blocks", blocks);
  register_module("ln", ln);
}

TensorParallelGPT::TensorParallelGPT(const nn::GPTConfig& config, std::shared_ptr<ProcessGroup> group)
    : TensorParallelGPT(nn::GPT(config), std::move(group)) {}

Tensor TensorParallelGPT::forward(const Tensor& idx) {
  LOOM_CHECK(idx.defined() && idx.dtype() == kInt64 && idx.dim() == 2 && idx.size(1) <= config_.context,
             "TensorParallelGPT: expected int64 token ids [B, T] with T <= ", config_.context);
  Tensor x = (*tok)(idx) + pos(arange(idx.size(1), TensorOptions(kInt64).device(idx.device())));
  for (const auto& block : blocks) x = (*block)(x);
  // The tied head: this rank's vocabulary rows only. x is replicated and every rank's logits
  // depend on it, so its gradient is the sum over ranks: f before the product.
  return linear(copy_to_tensor_parallel_region(ln(x), group_), tok->weight);
}

Tensor TensorParallelGPT::loss(const Tensor& idx, const Tensor& targets) {
  Tensor logits = forward(idx);
  return vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}), group_);
}

}  // namespace loom::distributed
