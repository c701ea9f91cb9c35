/*
 * TransformerBlock: one pre-LayerNorm GPT decoder block (GPT-2, nanoGPT, the anchor's Block):
 *
 *   x = x + attn(ln1(x))
 *   x = x + mlp(ln2(x))      mlp = Linear(d, r d) -> GELU -> Linear(r d, d)
 *
 * The GELU is the exact (erf) one by default, as nanoGPT's nn.GELU(); GPT-2 itself used the tanh
 * approximation ("gelu_new"), which gelu_approximate = "tanh" selects.
 *
 * Normalising before each sublayer keeps the residual stream an unnormalised sum, which is
 * what lets deep stacks train without warm-up tricks.
 */
#pragma once

#include <cstdint>
#include <string>

#include "nn/layers/attention.h"
#include "nn/layers/containers.h"
#include "nn/layers/layer_norm.h"
#include "nn/module.h"

namespace loom::nn {

class TransformerBlock : public Module {
 public:
  // Children ln1 (LayerNorm d_model), attn (CausalSelfAttention), ln2 (LayerNorm d_model), mlp
  // (Sequential of Linear(d, mlp_ratio d), GELU, Linear(mlp_ratio d, d): parameters mlp.0.*,
  // mlp.2.*). dropout: the attention's dropouts, and one on the MLP's output while training.
  // gelu_approximate: the MLP's GELU, "none" (erf) or "tanh" (nn::GELU's argument).
  // Throws if n_heads does not divide d_model, a size or mlp_ratio is below 1, dropout is
  // outside [0, 1], or gelu_approximate is neither "none" nor "tanh".
  TransformerBlock(int64_t d_model, int64_t n_heads, int64_t max_context, double dropout = 0.0,
                   int64_t mlp_ratio = 4, const std::string& gelu_approximate = "none");

  // [B, T, d_model] -> [B, T, d_model]. Throws as CausalSelfAttention::forward.
  Tensor forward(const Tensor& input) override;

  // Declared (and so built) attention first, whose constructor checks the arguments; the
  // children are registered in the order ln1, attn, ln2, mlp, which is the order of
  // parameters(), state_dict() and printing.
  CausalSelfAttention attn;
  LayerNorm ln1;
  LayerNorm ln2;
  Sequential mlp;

 private:
  double dropout_;
};

}  // namespace loom::nn
