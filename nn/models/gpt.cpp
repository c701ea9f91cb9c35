/*
 * GPT (see gpt.h): construction with nanoGPT's initialisation, the forward pass, and
 * autoregressive sampling. Sampling draws from the categorical distribution by inverting its
 * cumulative sum on the host with one uniform number per row: one draw per step over a
 * vocabulary of tens of tokens is cheap there, and it keeps the generate() streams of earlier
 * releases (loom::multinomial, ops/sort_ops.h, draws with another method).
 */
#include "nn/models/gpt.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "core/grad_mode.h"
#include "nn/init.h"
#include "nn/layers/linear.h"
#include "nn/layers/transformer_block.h"
#include "ops/ops.h"

namespace loom::nn {
namespace {

const GPTConfig& checked(const GPTConfig& c) {
  LOOM_CHECK(c.vocab_size > 0 && c.context > 0 && c.n_layers > 0 && c.n_heads > 0 && c.d_model > 0,
             "GPT: expected positive vocab_size, context, n_layers, n_heads and d_model, got ", c.vocab_size, ", ",
             c.context, ", ", c.n_layers, ", ", c.n_heads, " and ", c.d_model);
  LOOM_CHECK(c.d_model % c.n_heads == 0, "GPT: d_model (", c.d_model, ") must be divisible by n_heads (",
             c.n_heads, ")");
  LOOM_CHECK(c.dropout >= 0.0 && c.dropout < 1.0, "GPT: expected dropout in [0, 1), got ", c.dropout);
  LOOM_CHECK(c.gelu_approximate == "none" || c.gelu_approximate == "tanh",
             "GPT: expected gelu_approximate 'none' or 'tanh', got '", c.gelu_approximate, "'");
  return c;
}

// One token per row of `logits` [B, V]: softmax(logits / temperature) restricted to the top_k
// largest logits (ties with the k-th kept, as torch.topk + masking does), sampled by finding
// where u * total falls in the cumulative sum of the unnormalised probabilities.
std::vector<int64_t> sample_rows(const Tensor& logits, double temperature, std::optional<int64_t> top_k,
                                 Generator* generator) {
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  const std::vector<double> values = logits.to_vector<double>();
  const std::vector<double> uniform = rand({rows}, kFloat64, generator).to_vector<double>();
  std::vector<int64_t> tokens(static_cast<size_t>(rows));
  std::vector<double> row(static_cast<size_t>(vocab)), sorted;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t v = 0; v < vocab; ++v) {
      row[v] = values[r * vocab + v] / temperature;
      // -inf is a token ruled out; NaN or +inf mean the model has diverged
      LOOM_CHECK(!std::isnan(row[v]) && row[v] != std::numeric_limits<double>::infinity(),
                 "GPT::generate: logit ", v, " of row ", r, " is ", values[r * vocab + v]);
    }
    double threshold = -std::numeric_limits<double>::infinity();
    if (top_k && *top_k < vocab) {
      sorted = row;
      std::nth_element(sorted.begin(), sorted.begin() + (*top_k - 1), sorted.end(), std::greater<>());
      threshold = sorted[*top_k - 1];
    }
    const double max = *std::max_element(row.begin(), row.end());
    LOOM_CHECK(std::isfinite(max), "GPT::generate: every logit of row ", r, " is -inf");
    double total = 0;
    for (double& x : row) {
      x = x >= threshold ? std::exp(x - max) : 0.0;
      total += x;
    }
    const double target = uniform[r] * total;
    // Rounding can leave target at (or a hair past) the end of the sum: fall back to the last
    // token with non-zero probability, never to one that was masked out.
    int64_t pick = -1;
    double cumulative = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      if (row[v] == 0.0) continue;
      pick = v;
      cumulative += row[v];
      if (cumulative > target) break;
    }
    tokens[r] = pick;
  }
  return tokens;
}

}  // namespace

// ---- TiedLinear ------------------------------------------------------------------------------

TiedLinear::TiedLinear(Tensor tied_weight) : weight(std::move(tied_weight)) {
  LOOM_CHECK(weight.defined() && weight.dim() == 2, "TiedLinear: expected a weight [out_features, in_features], got ",
             weight.defined() ? weight.sizes() : IntArrayRef{});
  register_parameter("weight", weight, weight.requires_grad());
}

Tensor TiedLinear::forward(const Tensor& input) {
  LOOM_CHECK(input.defined() && input.dim() >= 1 && input.size(-1) == weight.size(1),
             "TiedLinear: expected input [*, ", weight.size(1), "], got ",
             input.defined() ? input.sizes() : IntArrayRef{});
  return linear(input, weight);
}

std::string TiedLinear::extra_repr() const {
  return "in_features=" + std::to_string(weight.size(1)) + ", out_features=" + std::to_string(weight.size(0)) +
         ", bias=False";
}

// ---- GPT -------------------------------------------------------------------------------------

GPT::GPT(GPTConfig config)
    : tok(checked(config).vocab_size, config.d_model),
      pos(config.context, config.d_model),
      drop(config.dropout),
      ln(config.d_model),
      config_(config) {
  register_module("tok", tok);
  register_module("pos", pos);
  register_module("drop", drop);
  for (int64_t i = 0; i < config.n_layers; ++i) {
    blocks.push_back(std::make_shared<TransformerBlock>(config.d_model, config.n_heads, config.context,
                                                        config.dropout, /*mlp_ratio=*/4,
                                                        config.gelu_approximate));
  }
  register_module("blocks", blocks);
  register_module("ln", ln);
  if (config.tie_weights) {
    head = register_module("head", std::make_shared<TiedLinear>(tok.weight));
    head_weight_ = tok.weight;
  } else {
    auto untied = register_module("head", std::make_shared<Linear>(config.d_model, config.vocab_size, false));
    head = untied;
    head_weight_ = untied->weight;
  }

  // nanoGPT's _init_weights, then the scaled residual projections (see gpt.h).
  NoGradGuard no_grad;
  for (Module* m : modules()) {
    if (auto* l = dynamic_cast<Linear*>(m)) {
      init::normal_(l->weight, 0.0, 0.02);
      if (l->bias.defined()) init::zeros_(l->bias);
    } else if (auto* e = dynamic_cast<Embedding*>(m)) {
      init::normal_(e->weight, 0.0, 0.02);
    }
  }
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layers));
  for (auto& [name, p] : named_parameters()) {
    if (name.ends_with(".attn.proj.weight") || name.ends_with(".mlp.2.weight")) {
      init::normal_(p, 0.0, residual_std);
    }
  }
}

Tensor GPT::forward(const Tensor& idx) {
  LOOM_CHECK(idx.defined(), "GPT: idx is an undefined tensor");
  LOOM_CHECK(idx.dtype() == kInt64 && idx.dim() == 2, "GPT: expected idx of int64 token ids [B, T], got ",
             idx.dtype(), " ", idx.sizes());
  const int64_t T = idx.size(1);
  LOOM_CHECK(T <= config_.context, "GPT: sequence length ", T, " exceeds the context of ", config_.context,
             " (idx shape ", idx.sizes(), ")");
  Tensor positions = arange(T, TensorOptions(kInt64).device(idx.device()));
  Tensor x = drop(tok(idx) + pos(positions));  // [B, T, d] + [T, d]
  return (*head)(ln(blocks(x)));
}

Tensor GPT::generate(Tensor idx, int64_t max_new_tokens, double temperature, std::optional<int64_t> top_k,
                     Generator* generator) {
  LOOM_CHECK(idx.defined() && idx.dtype() == kInt64 && idx.dim() == 2 && idx.size(0) >= 1 && idx.size(1) >= 1,
             "GPT::generate: expected idx of int64 token ids [B, T] with B, T >= 1, got ",
             idx.defined() ? idx.dtype() : kInt64, " ", idx.defined() ? idx.sizes() : IntArrayRef{});
  LOOM_CHECK(max_new_tokens >= 0, "GPT::generate: expected max_new_tokens >= 0, got ", max_new_tokens);
  LOOM_CHECK(temperature > 0.0 && std::isfinite(temperature), "GPT::generate: expected a positive temperature, got ",
             temperature);
  LOOM_CHECK(!top_k || *top_k >= 1, "GPT::generate: expected top_k >= 1, got ", top_k.value_or(0));
  NoGradGuard no_grad;
  const int64_t batch = idx.size(0);
  for (int64_t step = 0; step < max_new_tokens; ++step) {
    const int64_t T = idx.size(1);
    Tensor window = T > config_.context ? idx.slice(1, T - config_.context) : idx;
    Tensor last = forward(window).select(1, window.size(1) - 1);  // [B, vocab]
    std::vector<int64_t> next = sample_rows(last, temperature, top_k, generator);
    idx = cat({idx, tensor<int64_t>(next, {batch, 1}).to(idx.device())}, 1);
  }
  return idx;
}

}  // namespace loom::nn
