/*
 * Bench cases of the nn layer: whole training steps of the model zoo, as a user writes them
 * (zero_grad, forward, loss, backward, optimizer step), on random data. The PyTorch side is
 * ../shared/anchors/{mlp,cnn,gpt}_train.py, with the same models, batch sizes and optimizers.
 *   mlp_train  MLP 784-512-512-10 (ReLU), cross entropy, SGD(lr 0.01, momentum 0.9), batch 128
 *   cnn_train  SmallCNN (3x32x32, 94,666 params), cross entropy, SGD(0.01, 0.9), batch 64
 *   gpt_train  GPT vocab 65, context 64, 4 layers, 4 heads, d_model 128 (809,856 params, tied
 *              head), AdamW(lr 3e-4, weight decay 0.01), batch 16: tokens/s counts B * T
 *   mlp_train_bf16, cnn_train_bf16  the same steps with the forward under bf16 autocast (the
 *              matmuls and convolutions in bf16, float32 weights and optimizer), as
 *              torch.autocast("cpu", torch.bfloat16); PyTorch's side is in tools/bench/torch_extra.py
 *   sgd_step_f32_4M, adamw_step_f32_4M  one optimizer step alone, over 16 tensors of 256K floats
 *              with gradients: SGD(0.01, momentum 0.9) moves 5 x 4 bytes a parameter (reads p, g,
 *              buffer; writes p, buffer), AdamW 7 x 4 (p, g, m, v; p, m, v): GB/s. PyTorch's side
 *              (foreach and fused) is in tools/bench/torch_extra.py
 */
#include <memory>

#include "core/autocast.h"
#include "nn/loss.h"
#include "ops/ops.h"
#include "nn/models/gpt.h"
#include "nn/models/mlp.h"
#include "nn/models/small_cnn.h"
#include "nn/optim/adam.h"
#include "nn/optim/sgd.h"
#include "tools/bench/bench.h"

namespace loom::bench {
namespace {

// Model, optimizer and batch live as long as the workload that steps them.
// bf16_autocast: the forward and loss under AutocastGuard(kCPU, bf16), backward and step outside
// it, as a torch.autocast training loop.
template <class Model, class Optim>
Workload training_step(std::shared_ptr<Model> model, std::shared_ptr<Optim> optimizer, Tensor input,
                       Tensor target, double amount, bool bf16_autocast = false) {
  auto run = [model, optimizer, input, target, bf16_autocast] {
    optimizer->zero_grad();
    Tensor logits;
    {
      AutocastGuard autocast(kCPU, kBFloat16, bf16_autocast);
      logits = model->forward(input);
    }
    nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1})).backward();
    optimizer->step();
  };
  return {run, amount};
}

Workload mlp_train(bool bf16_autocast) {
  constexpr int64_t kBatch = 128;
  auto model = std::make_shared<nn::MLP>(std::vector<int64_t>{784, 512, 512, 10});
  auto optimizer = std::make_shared<nn::SGD>(model->parameters(), nn::SGDOptions{.lr = 0.01, .momentum = 0.9});
  return training_step(model, optimizer, randn({kBatch, 784}), randint(0, 10, {kBatch}), kBatch, bf16_autocast);
}

Workload cnn_train(bool bf16_autocast) {
  constexpr int64_t kBatch = 64;
  auto model = std::make_shared<nn::SmallCNN>(3, 10, 32);
  auto optimizer = std::make_shared<nn::SGD>(model->parameters(), nn::SGDOptions{.lr = 0.01, .momentum = 0.9});
  return training_step(model, optimizer, randn({kBatch, 3, 32, 32}), randint(0, 10, {kBatch}), kBatch,
                       bf16_autocast);
}

Workload gpt_train() {
  constexpr int64_t kBatch = 16, kContext = 64, kVocab = 65;
  auto model = std::make_shared<nn::GPT>(nn::GPTConfig{.vocab_size = kVocab, .context = kContext});
  auto optimizer =
      std::make_shared<nn::AdamW>(model->parameters(), nn::AdamWOptions{.lr = 3e-4, .weight_decay = 0.01});
  Tensor tokens = randint(0, kVocab, {kBatch, kContext + 1});
  Tensor input = tokens.slice(1, 0, kContext).contiguous(), target = tokens.slice(1, 1).contiguous();
  return training_step(model, optimizer, input, target, static_cast<double>(kBatch * kContext));
}

// Parameters with gradients, as an optimizer meets them after backward.
std::vector<Tensor> parameters_with_grads(int64_t tensors, int64_t numel) {
  std::vector<Tensor> params;
  for (int64_t i = 0; i < tensors; ++i) {
    Tensor p = randn({numel}).set_requires_grad(true);
    p.mutable_grad() = randn({numel});
    params.push_back(p);
  }
  return params;
}

template <class Optim, class Options>
Workload optimizer_step(Options options, double bytes_per_param) {
  constexpr int64_t kTensors = 16, kNumel = int64_t{1} << 18;
  auto optimizer = std::make_shared<Optim>(parameters_with_grads(kTensors, kNumel), options);
  return Workload{[optimizer] { optimizer->step(); }, bytes_per_param * kTensors * kNumel};
}

}  // namespace

std::vector<BenchCase> nn_cases() {
  return {
      BenchCase("mlp_train", "samples_per_s", "samples/s", 1,
                "MLP 784-512-512-10 training step, SGD momentum, batch 128", [] { return mlp_train(false); }),
      BenchCase("cnn_train", "samples_per_s", "samples/s", 1,
                "small CNN (conv5x5 3-32-64, pools, linear) training step, SGD momentum, batch 64",
                [] { return cnn_train(false); }),
      BenchCase("mlp_train_bf16", "samples_per_s", "samples/s", 1,
                "MLP 784-512-512-10 training step under bf16 autocast, SGD momentum, batch 128",
                [] { return mlp_train(true); }),
      BenchCase("cnn_train_bf16", "samples_per_s", "samples/s", 1,
                "small CNN training step under bf16 autocast, SGD momentum, batch 64",
                [] { return cnn_train(true); }),
      BenchCase("gpt_train", "tokens_per_s", "tokens/s", 1,
                "GPT L4 H4 d128 T64 vocab 65 training step, AdamW, batch 16", gpt_train),
      BenchCase("sgd_step_f32_4M", "gbytes_per_s", "GB/s", 1e9,
                "SGD momentum step alone over 16 x 256K float32 parameters (5 x 4 bytes each)",
                [] { return optimizer_step<nn::SGD>(nn::SGDOptions{.lr = 0.01, .momentum = 0.9}, 5.0 * 4); }),
      BenchCase("adamw_step_f32_4M", "gbytes_per_s", "GB/s", 1e9,
                "AdamW step alone over 16 x 256K float32 parameters (7 x 4 bytes each)",
                [] {
                  return optimizer_step<nn::AdamW>(nn::AdamWOptions{.lr = 3e-4, .weight_decay = 0.01},
                                                   7.0 * 4);
                }),
  };
}

}  // namespace loom::bench
