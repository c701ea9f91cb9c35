/*
 * Bench cases on the GPU (`bench --device cuda`), with the shapes of the CUDA backend issue and
 * of the PyTorch anchors (../shared/anchors/gpu/torch_gpu_anchors.py and
 * tools/bench/torch_cuda_extra.py), so that both sides run the same workload:
 *   cuda_copy_f32_256M       device-to-device copy of 2^28 float32 (the bandwidth ceiling),
 *                            GB/s = 2 * 4 * 2^28 / t
 *   cuda_add_f32_256M        c = a + b over 2^28 float32, GB/s = 3 * 4 * 2^28 / t; the bar is
 *                            >= 70% of the copy rate
 *   cuda_softmax_bf16_8192   softmax over the last dim of 8192 x 8192 bf16, GB/s = 2 * 2 * 8192^2 / t
 *   cuda_layer_norm_bf16_8192  layer norm (affine) over the last dim, same traffic
 *   cuda_matmul_bf16_8192    C = A B, 8192^3 bf16 (cuBLAS, f32 accumulation), TFLOP/s
 *   cuda_matmul_f32_4096     the same in float32 with TF32 off
 *   cuda_mlp_train           MLP 784-512-512-10 training step, SGD momentum, batch 128
 *   cuda_mlp_train_graph     the same step captured into a CUDA graph (core/cuda_graph.h) and
 *                            replayed: one launch per step instead of one per kernel
 *   cuda_cnn_train, _graph   SmallCNN (conv 5x5 3->32, ReLU, max pool 2, conv 5x5 32->64, ReLU,
 *                            max pool 2, Linear 4096->10) on 3 x 32 x 32 images, SGD momentum,
 *                            batch 64: the anchor's small CNN step, eagerly and from a CUDA graph
 *   cuda_mlp_block_bf16      GPT-2 small's MLP block (768 -> 3072, tanh GELU, -> 768) in bf16,
 *                            forward + backward over 8 x 1024 tokens, tokens/s: one
 *                            linear_activation_linear (DGELU_BGRAD in backward)
 *   cuda_batch_norm_train_f32_cl  batch norm training forward + backward of [32, 64, 56, 56]
 *                            float32 channels_last (cuDNN's batch norm), images/s
 *   cuda_gpt2_small_train_b8, _b32  the anchor's GPT-2 small training step (12 layers, 12 heads,
 *                            d 768, context 1024, vocab 50304, tied head, tanh GELU): forward under
 *                            bf16 autocast, float32 cross entropy, fused AdamW(3e-4); tokens/s =
 *                            B * 1024 / t, against PyTorch eager with scaled_dot_product_attention
 *                            (gpt2_small_eager_sdpa_b8, _b32). Per token, nanoGPT's estimate of
 *                            the work is 6 * 124,475,904 + 12 * 12 * 1024 * 768 = 8.60e8 FLOP, so
 *                            MFU = tokens/s * 8.60e8 / 989e12 on an H100.
 *   cuda_gpt2_small_train_b8_graph  the b8 step replayed from a CUDA graph, AdamW capturable (its
 *                            step counts and lr on the GPU): what launch overhead costs at b8
 * Every workload ends with cuda::synchronize(), so a timed call covers the kernels it queued.
 */
#include <memory>
#include <string>

#include "core/autocast.h"
#include "core/cuda.h"
#include "core/cuda_graph.h"
#include "nn/layers/activation.h"
#include "nn/layers/containers.h"
#include "nn/layers/linear.h"
#include "nn/loss.h"
#include "nn/models/gpt.h"
#include "nn/models/mlp.h"
#include "nn/models/small_cnn.h"
#include "nn/optim/adam.h"
#include "nn/optim/sgd.h"
#include "ops/ops.h"
#include "tools/bench/bench.h"

namespace loom::bench {

namespace {

constexpr int64_t n256m = int64_t{1} << 28;

Device gpu() { return Device::cuda(); }

BenchCase gpu_case(std::string name, std::string metric, std::string unit, double scale, std::string description,
                   std::function<Workload()> prepare) {
  BenchCase c(std::move(name), std::move(metric), std::move(unit), scale, std::move(description),
              [prepare] {
                Workload w = prepare();
                auto run = w.run;
                w.run = [run] {
                  run();
                  cuda::synchronize();  // the kernels of this call have finished
                };
                return w;
              });
  c.device = "cuda";
  return c;
}

// torch_gpu_anchors.py's gpt2 case, step for step: zero_grad (to none), forward under bf16
// autocast, cross entropy on float32 logits, backward, fused AdamW step; with cuda_graph, the
// step with a capturable AdamW, captured after two warm-up steps and replayed.
Workload gpt2_small_train(int64_t batch, bool cuda_graph) {
  const nn::GPTConfig config{.vocab_size = 50304,
                             .context = 1024,
                             .n_layers = 12,
                             .n_heads = 12,
                             .d_model = 768,
                             .gelu_approximate = "tanh"};
  auto model = std::make_shared<nn::GPT>(config);
  model->to(gpu());
  auto optimizer =
      std::make_shared<nn::AdamW>(model->parameters(), nn::AdamWOptions{.lr = 3e-4, .capturable = cuda_graph});
  Tensor tokens = randint(0, config.vocab_size, {batch, config.context + 1}).to(gpu());
  Tensor input = tokens.slice(1, 0, config.context).contiguous(), target = tokens.slice(1, 1).contiguous();
  auto step = [model, optimizer, input, target, vocab = config.vocab_size] {
    optimizer->zero_grad();
    Tensor logits;
    {
      AutocastGuard autocast(DeviceType::CUDA, kBFloat16);
      logits = model->forward(input);
    }
    nn::functional::cross_entropy(logits.reshape({-1, vocab}).to(kFloat32), target.reshape({-1})).backward();
    optimizer->step();
  };
  const double tokens_per_step = static_cast<double>(batch * config.context);
  if (!cuda_graph) return Workload{step, tokens_per_step};
  for (int i = 0; i < 2; ++i) step();
  auto graph = std::make_shared<cuda::CudaGraph>();
  cuda::capture(*graph, step);
  return Workload{[graph] { graph->replay(); }, tokens_per_step};
}

// A small model's training step on `input` (cross entropy over 10 classes, SGD(0.01, momentum
// 0.9)), eagerly or replayed from a CUDA graph captured after two warm-up steps (torch.cuda.graph's
// recipe: the momentum buffers exist before the capture).
template <class Model>
Workload small_train(std::shared_ptr<Model> model, Tensor input, bool cuda_graph) {
  model->to(gpu());
  auto optimizer =
      std::make_shared<nn::SGD>(model->parameters(), nn::SGDOptions{.lr = 0.01, .momentum = 0.9});
  const int64_t batch = input.size(0);
  Tensor target = randint(0, 10, {batch}).to(gpu());
  auto step = [model, optimizer, input, target] {
    optimizer->zero_grad();
    nn::functional::cross_entropy(model->forward(input), target).backward();
    optimizer->step();
  };
  if (!cuda_graph) return Workload{step, static_cast<double>(batch)};
  for (int i = 0; i < 2; ++i) step();
  auto graph = std::make_shared<cuda::CudaGraph>();
  cuda::capture(*graph, step);
  return Workload{[graph] { graph->replay(); }, static_cast<double>(batch)};
}

// The MLP 784-512-512-10 at batch 128.
Workload mlp_train(bool cuda_graph) {
  return small_train(std::make_shared<nn::MLP>(std::vector<int64_t>{784, 512, 512, 10}),
                     randn({128, 784}, gpu()), cuda_graph);
}

// SmallCNN (the anchor's CNN: two 5x5 convolutions, ReLU, 2x2 max pools, 94,666 parameters) on
// 3 x 32 x 32 images at batch 64.
Workload cnn_train(bool cuda_graph) {
  return small_train(std::make_shared<nn::SmallCNN>(3, 10, 32), randn({64, 3, 32, 32}, gpu()), cuda_graph);
}

}  // namespace

std::vector<BenchCase> cuda_cases() {
  std::vector<BenchCase> c;
  c.push_back(gpu_case("cuda_copy_f32_256M", "gbytes_per_s", "GB/s", 1e9, "device-to-device copy of 2^28 float32", [] {
    Tensor a = randn({n256m}, gpu()), b = empty({n256m}, gpu());
    return Workload{[a, b]() mutable { b.copy_(a); }, 2.0 * 4 * n256m};
  }));
  c.push_back(gpu_case("cuda_add_f32_256M", "gbytes_per_s", "GB/s", 1e9, "c = a + b over 2^28 float32", [] {
    Tensor a = randn({n256m}, gpu()), b = randn({n256m}, gpu());
    return Workload{[a, b] { (void)add(a, b); }, 3.0 * 4 * n256m};
  }));
  c.push_back(gpu_case("cuda_softmax_bf16_8192", "gbytes_per_s", "GB/s", 1e9, "softmax over the last dim, 8192 x 8192 bf16",
                       [] {
                         Tensor x = randn({8192, 8192}, gpu()).to(kBFloat16);
                         return Workload{[x] { (void)softmax(x, -1); }, 2.0 * 2 * 8192 * 8192};
                       }));
  c.push_back(gpu_case("cuda_layer_norm_bf16_8192", "gbytes_per_s", "GB/s", 1e9,
                       "layer norm over the last dim with weight and bias, 8192 x 8192 bf16", [] {
                         Tensor x = randn({8192, 8192}, gpu()).to(kBFloat16);
                         Tensor w = ones({8192}, gpu()).to(kBFloat16), b = zeros({8192}, gpu()).to(kBFloat16);
                         return Workload{[x, w, b] { (void)layer_norm(x, {8192}, w, b, 1e-5); }, 2.0 * 2 * 8192 * 8192};
                       }));
  for (auto [name, dtype, n] : {std::tuple{"cuda_matmul_bf16_8192", kBFloat16, int64_t{8192}},
                                std::tuple{"cuda_matmul_f32_4096", kFloat32, int64_t{4096}}}) {
    c.push_back(gpu_case(name, "tflops", "TFLOP/s", 1e12, "square matmul C = A B on cuBLAS", [dtype, n] {
      Tensor a = randn({n, n}, gpu()).to(dtype), b = randn({n, n}, gpu()).to(dtype);
      return Workload{[a, b] { (void)matmul(a, b); }, 2.0 * n * n * n};
    }));
  }
  c.push_back(gpu_case(
      "cuda_batch_norm_train_f32_cl", "images_per_s", "images/s", 1,
      "batch norm forward (training) + backward, [32, 64, 56, 56] float32 channels_last", [] {
        const int64_t n = 32, ch = 64;
        auto activation = [=] {
          Tensor t = randn({n, ch, 56, 56}, gpu());
          return contiguous(t.permute({0, 2, 3, 1})).permute({0, 3, 1, 2});
        };
        Tensor x = activation(), grad_out = activation();
        Tensor w = ones({ch}, gpu()), b = zeros({ch}, gpu()), rm = zeros({ch}, gpu()), rv = ones({ch}, gpu());
        return Workload{[=] {
                          auto [y, mean, invstd] = batch_norm_forward(x, w, b, rm, rv, true, 0.1, 1e-5);
                          (void)batch_norm_backward(grad_out, x, w, mean, invstd);
                        },
                        static_cast<double>(n)};
      }));
  c.push_back(gpu_case("cuda_mlp_train", "samples_per_s", "samples/s", 1,
                       "MLP 784-512-512-10 training step on the GPU, SGD momentum, batch 128",
                       [] { return mlp_train(false); }));
  c.push_back(gpu_case("cuda_mlp_train_graph", "samples_per_s", "samples/s", 1,
                       "the same MLP training step captured once into a CUDA graph and replayed",
                       [] { return mlp_train(true); }));
  c.push_back(
      gpu_case("cuda_cnn_train", "samples_per_s", "samples/s", 1,
               "SmallCNN (3x32x32, 94,666 parameters) training step on the GPU, SGD momentum, batch 64",
               [] { return cnn_train(false); }));
  c.push_back(gpu_case("cuda_cnn_train_graph", "samples_per_s", "samples/s", 1,
                       "the same CNN training step captured once into a CUDA graph and replayed",
                       [] { return cnn_train(true); }));
  c.push_back(gpu_case("cuda_mlp_block_bf16", "tokens_per_s", "tokens/s", 1,
                       "GPT-2 small's MLP block 768-3072-768 with the tanh GELU, bf16, forward + backward, "
                       "8 x 1024 tokens",
                       [] {
                         constexpr int64_t kTokens = 8 * 1024, kModel = 768;
                         auto block = std::make_shared<nn::Sequential>(
                             std::make_shared<nn::Linear>(kModel, 4 * kModel),
                             std::make_shared<nn::GELU>("tanh"),
                             std::make_shared<nn::Linear>(4 * kModel, kModel));
                         block->to(gpu(), kBFloat16);
                         Tensor x = randn({8, 1024, kModel}, gpu()).to(kBFloat16).requires_grad_(true);
                         Tensor grad = randn({8, 1024, kModel}, gpu()).to(kBFloat16);
                         return Workload{[block, x, grad]() mutable {
                                           block->zero_grad();
                                           x.mutable_grad() = Tensor();
                                           block->forward(x).backward(grad);
                                         },
                                         static_cast<double>(kTokens)};
                       }));
  for (int64_t batch : {8, 32}) {
    c.push_back(
        gpu_case("cuda_gpt2_small_train_b" + std::to_string(batch), "tokens_per_s", "tokens/s", 1,
                 "GPT-2 small training step (124M parameters, context 1024, tanh GELU), bf16 autocast, "
                 "fused AdamW, batch " +
                     std::to_string(batch),
                 [batch] { return gpt2_small_train(batch, false); }));
  }
  c.push_back(gpu_case("cuda_gpt2_small_train_b8_graph", "tokens_per_s", "tokens/s", 1,
                       "the GPT-2 small step at batch 8 with a capturable AdamW, captured once into a CUDA "
                       "graph and replayed",
                       [] { return gpt2_small_train(8, true); }));
  return c;
}

}  // namespace loom::bench
