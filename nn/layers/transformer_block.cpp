/*
 * TransformerBlock: the pre-LN residual wiring of attention and MLP.
 */
#include "nn/layers/transformer_block.h"

#include "nn/layers/activation.h"
#include "nn/layers/linear.h"
#include "ops/ops.h"

namespace loom::nn {
namespace {

int64_t checked_hidden(int64_t d_model, int64_t mlp_ratio) {
  LOOM_CHECK(mlp_ratio >= 1, "TransformerBlock: expected mlp_ratio >= 1, got ", mlp_ratio);
  return mlp_ratio * d_model;
}

}  // namespace

TransformerBlock::TransformerBlock(int64_t d_model, int64_t n_heads, int64_t max_context, double dropout,
                                   int64_t mlp_ratio, const std::string& gelu_approximate)
    // attn is built first (declared first): its constructor validates the shared arguments.
    : attn(d_model, n_heads, max_context, dropout),
      ln1(d_model),
      ln2(d_model),
      mlp(std::make_shared<Linear>(d_model, checked_hidden(d_model, mlp_ratio)),
          std::make_shared<GELU>(gelu_approximate),
          std::make_shared<Linear>(checked_hidden(d_model, mlp_ratio), d_model)),
      dropout_(dropout) {
  register_module("ln1", ln1);
  register_module("attn", attn);
  register_module("ln2", ln2);
  register_module("mlp", mlp);
}

Tensor TransformerBlock::forward(const Tensor& input) {
  Tensor x = input + attn(ln1(input));
  Tensor m = mlp(ln2(x));
  if (dropout_ > 0.0) m = dropout(m, dropout_, is_training());
  return x + m;
}

}  // namespace loom::nn
