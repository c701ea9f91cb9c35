/*
 * The tensor-parallel GPT over the whole world (t = 2 or 4) against the zoo's GPT in one process:
 * the same full model (same seed) on every rank, then the loss, a training step's gradients
 * (each rank's parameters against its slices of the full model's), and the loss after three SGD
 * steps, up to float reassociation.
 */
#include <doctest/doctest.h>

#include "autograd/autograd.h"
#include "core/grad_mode.h"
#include "core/random.h"
#include "distributed/tensor_parallel/gpt.h"
#include "nn/loss.h"
#include "nn/optim/sgd.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"
#include "tests/test_util.h"

namespace loom::distributed {
namespace {

using test::world;

double max_diff(const Tensor& a, const Tensor& b) { return (a - b).abs().max().item<double>(); }

Tensor full_loss(nn::GPT& gpt, const Tensor& idx, const Tensor& targets) {
  Tensor logits = gpt(idx);
  return nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

TEST_CASE("tensor-parallel GPT: loss, gradients and three SGD steps equal the single-process GPT") {
  const int t = world()->size(), r = world()->rank();
  const nn::GPTConfig config{.vocab_size = 12, .context = 8, .n_layers = 2, .n_heads = 4, .d_model = 16};
  manual_seed(21);
  nn::GPT full(config);
  TensorParallelGPT tp(full, world());
  Generator g(4);
  Tensor tokens = randint(0, config.vocab_size, {3, 9}, DType::Int64, &g);
  Tensor idx = tokens.slice(1, 0, 8).contiguous(), targets = tokens.slice(1, 1).contiguous();

  Tensor expected = full_loss(full, idx, targets);
  Tensor loss = tp.loss(idx, targets);
  CHECK(std::abs(loss.item<double>() - expected.item<double>()) < 1e-5);
  expected.backward();
  loss.backward();
  const int64_t v = config.vocab_size / t, d = config.d_model, n = d / t, hidden = 4 * d / t;
  CHECK(max_diff(tp.tok->weight.grad(), full.tok.weight.grad().slice(0, r * v, (r + 1) * v)) < 1e-5);
  CHECK(max_diff(tp.pos.weight.grad(), full.pos.weight.grad()) < 1e-5);
  CHECK(max_diff(tp.ln.weight.grad(), full.ln.weight.grad()) < 1e-5);
  for (int64_t layer = 0; layer < config.n_layers; ++layer) {
    CAPTURE(layer);
    auto& block = tp.blocks.at<TensorParallelBlock>(layer);
    auto& ref = full.blocks.at<nn::TransformerBlock>(layer);
    // Rank r's qkv rows are its heads' q, k and v rows of the full weight.
    for (int64_t third = 0; third < 3; ++third)
      CHECK(max_diff(block.qkv->weight.grad().slice(0, third * n, (third + 1) * n),
                     ref.attn.qkv.weight.grad().slice(0, third * d + r * n, third * d + (r + 1) * n)) < 1e-5);
    CHECK(max_diff(block.attn_proj->weight.grad(), ref.attn.proj.weight.grad().slice(1, r * n, (r + 1) * n)) < 1e-5);
    CHECK(max_diff(block.attn_proj->bias.grad(), ref.attn.proj.bias.grad()) < 1e-5);
    CHECK(max_diff(block.fc->weight.grad(),
                   ref.mlp.at<nn::Linear>(0).weight.grad().slice(0, r * hidden, (r + 1) * hidden)) < 1e-5);
    CHECK(max_diff(block.mlp_proj->weight.grad(),
                   ref.mlp.at<nn::Linear>(2).weight.grad().slice(1, r * hidden, (r + 1) * hidden)) < 1e-5);
    CHECK(max_diff(block.ln1.weight.grad(), ref.ln1.weight.grad()) < 1e-5);
  }

  // Three SGD steps each: the losses stay equal.
  nn::SGD full_sgd(full.parameters(), nn::SGDOptions{.lr = 0.1, .momentum = 0.9});
  nn::SGD tp_sgd(tp.parameters(), nn::SGDOptions{.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    full_sgd.step();
    tp_sgd.step();
    full_sgd.zero_grad();
    tp_sgd.zero_grad();
    Tensor a = full_loss(full, idx, targets), b = tp.loss(idx, targets);
    CHECK(std::abs(a.item<double>() - b.item<double>()) < 1e-4);
    a.backward();
    b.backward();
  }
}

TEST_CASE("tensor-parallel GPT: a GPT with GPT-2's tanh GELU keeps it") {
  const nn::GPTConfig config{
      .vocab_size = 12, .context = 8, .n_layers = 1, .n_heads = 4, .d_model = 16, .gelu_approximate = "tanh"};
  manual_seed(22);
  nn::GPT full(config);
  auto& ref = full.blocks.at<nn::TransformerBlock>(0);
  {
    // Hidden units of ~2 rather than the initialisation's ~0.1: where the two GELUs differ (by
    // ~1e-3 at |x| ~ 2), so that the erf GELU in the split block would move its output by ~1e-3.
    NoGradGuard no_grad;
    ref.mlp.at<nn::Linear>(0).weight.mul_(25.0);
    ref.mlp.at<nn::Linear>(2).weight.mul_(10.0);
  }
  TensorParallelGPT tp(full, world());
  Generator g(5);
  const Tensor x = randn({2, 8, config.d_model}, {}, &g);
  NoGradGuard no_grad;
  CHECK(max_diff(tp.blocks.at<TensorParallelBlock>(0).forward(x), ref.forward(x)) < 1e-5);
}

TEST_CASE("tensor-parallel GPT: degrees that do not divide the heads or the vocabulary are named") {
  const int t = world()->size();
  manual_seed(1);
  nn::GPT odd_heads(nn::GPTConfig{.vocab_size = 12, .context = 4, .n_layers = 1, .n_heads = 1, .d_model = 8});
  CHECK(test::error_of([&] { TensorParallelGPT(odd_heads, world()); }).find("heads cannot be split over " + std::to_string(t)) !=
        std::string::npos);
  nn::GPT odd_vocab(nn::GPTConfig{.vocab_size = 13, .context = 4, .n_layers = 1, .n_heads = 4, .d_model = 8});
  CHECK(test::error_of([&] { TensorParallelGPT(odd_vocab, world()); }).find("vocabulary (13)") != std::string::npos);
}

}  // namespace
}  // namespace loom::distributed
