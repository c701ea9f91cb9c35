/*
 * GPT: a small decoder-only transformer in the style of nanoGPT (Karpathy), the twin of the
 * PyTorch anchor TinyGPT that the gpt_train benchmark trains on character-level text:
 *
 *   x = tok(idx) + pos(0..T-1)            token and position embeddings     [B, T, d]
 *   x = blocks(drop(x))                   n_layers pre-LN TransformerBlocks
 *   logits = head(ln(x))                  d -> vocab, no bias               [B, T, vocab]
 *
 * With tie_weights the head's weight is the token embedding itself (Press & Wolf, 2017): the
 * same tensor, registered once, so it appears once in parameters() and in the optimizer, and
 * its gradient is the sum of both uses. The default config has exactly the anchor's
 * 809,856 parameters (the anchor's causal masks are buffers, not parameters).
 *
 * Initialisation as nanoGPT: Linear and Embedding weights N(0, 0.02^2), biases 0, LayerNorm
 * weight 1 and bias 0, and the projections that write into the residual stream (attn.proj and
 * the MLP's second Linear) N(0, (0.02 / sqrt(2 n_layers))^2), so that the residual's variance
 * does not grow with depth (GPT-2 paper, section 2.3).
 *
 * Parameter names: tok.weight, pos.weight, blocks.<i>.{ln1, attn.qkv, attn.proj, ln2, mlp.0,
 * mlp.2}.{weight, bias}, ln.{weight, bias} (and head.weight when untied). The anchor's blocks
 * hold qkv and proj directly (blocks.<i>.qkv.weight); here they are in the "attn" child.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/random.h"
#include "nn/layers/containers.h"
#include "nn/layers/dropout.h"
#include "nn/layers/embedding.h"
#include "nn/layers/layer_norm.h"
#include "nn/module.h"

namespace loom::nn {

struct GPTConfig {
  int64_t vocab_size = 65;  // tiny Shakespeare's characters
  int64_t context = 64;     // the longest sequence (block size)
  int64_t n_layers = 4;
  int64_t n_heads = 4;
  int64_t d_model = 128;    // divisible by n_heads
  double dropout = 0.0;     // after the embeddings and inside every block
  bool tie_weights = true;  // head.weight is tok.weight
  // The MLPs' GELU: "none" (erf, nanoGPT's nn.GELU()) or "tanh" (GPT-2's "gelu_new", and what
  // lets CUDA fuse each MLP's backward into cuBLASLt's DGELU_BGRAD epilogue).
  std::string gelu_approximate = "none";
};

// x W^T with a weight owned by another module — the tied output projection of GPT. It
// registers that same tensor as its "weight", so the tree lists it once (under the first name,
// tok.weight) while the head still reads as a layer of its own in printouts.
class TiedLinear : public Module {
 public:
  // weight: [out_features, in_features], already a parameter of another module.
  explicit TiedLinear(Tensor weight);
  // [*, in_features] -> [*, out_features]. Throws if the last dim is not in_features.
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;  // "in_features=128, out_features=65, bias=False"

  Tensor weight;
};

class GPT : public Module {
 public:
  // Throws loom::Error unless the sizes are positive, d_model is divisible by n_heads and
  // dropout is in [0, 1).
  explicit GPT(GPTConfig config = {});

  // idx: int64 token ids [B, T] with T <= context -> logits [B, T, vocab_size].
  // Throws loom::Error for another dtype or rank, T > context, or an id outside the vocabulary.
  Tensor forward(const Tensor& idx) override;

  // Extends idx (int64 [B, T], T >= 1) by max_new_tokens tokens sampled one at a time from
  // softmax(logits / temperature) of the last position, keeping only the top_k most likely
  // tokens when given. The model sees at most the last `context` tokens. Runs without
  // recording autograd and in the current mode (call eval() first when dropout > 0, as in
  // torch). Draws from `generator` (the default generator when null), so a seed fixes the
  // result. Returns int64 [B, T + max_new_tokens] on idx's device.
  // Throws loom::Error if temperature <= 0, top_k < 1, max_new_tokens < 0 or idx is not as above.
  Tensor generate(Tensor idx, int64_t max_new_tokens, double temperature = 1.0,
                  std::optional<int64_t> top_k = {}, Generator* generator = nullptr);

  const GPTConfig& config() const { return config_; }
  // The output projection's weight [vocab_size, d_model] (tok.weight when tied).
  Tensor head_weight() const { return head_weight_; }

  Embedding tok;
  Embedding pos;
  Dropout drop;
  Sequential blocks;
  LayerNorm ln;
  std::shared_ptr<Module> head;  // TiedLinear over tok.weight, or Linear(d_model, vocab, no bias)

 private:
  GPTConfig config_;
  Tensor head_weight_;
};

}  // namespace loom::nn
