/*
 * CausalSelfAttention: multi-head self-attention in which each position attends only to
 * itself and earlier positions, the attention of a GPT decoder. It computes what the anchor
 * GPT (shared/anchors/models.py) writes inline in its Block:
 *
 *   q, k, v = qkv(x).view(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)       # [B, H, T, hd] each
 *   att = softmax((q @ k^T) * hd^-0.5, masked to -inf above the diagonal)  # [B, H, T, T]
 *   y = proj((att @ v).transpose(1, 2).reshape(B, T, C))
 *
 * As a module of its own it gives the parameter names attn.qkv.weight, attn.proj.bias, ...
 */
#pragma once

#include <cstdint>
#include <string>

#include "nn/layers/linear.h"
#include "nn/module.h"

namespace loom::nn {

class CausalSelfAttention : public Module {
 public:
  // Children qkv (Linear d_model -> 3 d_model, the q, k and v projections side by side) and
  // proj (Linear d_model -> d_model); buffer "causal": bool [max_context, max_context], true on
  // and below the diagonal. The buffer is non-persistent (moved by to(), not saved): it is a
  // constant of the architecture, so checkpoints hold only weights. (The torch anchor registers
  // it as a persistent buffer, so its state dict also has a "causal" entry per block.)
  // dropout: probability of dropping attention weights and the output projection while
  // training (nanoGPT's attn_dropout and resid_dropout).
  // Throws if n_heads does not divide d_model, or a size is below 1, or dropout is outside [0, 1].
  CausalSelfAttention(int64_t d_model, int64_t n_heads, int64_t max_context, double dropout = 0.0,
                      bool bias = true);

  // [B, T, d_model] -> [B, T, d_model]; output t depends on inputs 0..t only.
  // Throws if the input is not 3-D, its last dim is not d_model, or T > max_context.
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  int64_t d_model() const { return d_model_; }
  int64_t n_heads() const { return n_heads_; }
  int64_t max_context() const { return max_context_; }

  // [*, d] -> [*, 3d]: q, k, v side by side, each split into n_heads heads of d / n_heads.
  // forward() uses its weight and bias in thirds (for speed) rather than calling qkv itself.
  Linear qkv;
  Linear proj;    // [*, d] -> [*, d]: the merged heads back into the residual stream
  // bool [max_context, max_context], lower triangular. forward() passes is_causal to
  // scaled_dot_product_attention instead; the buffer stays for code that reads the mask.
  Tensor causal;

 private:
  int64_t d_model_, n_heads_, max_context_;
  double dropout_;
};

}  // namespace loom::nn
