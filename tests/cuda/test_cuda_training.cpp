/*
 * Training end to end on CUDA (emulated CUDA in CI, the GPU where there is one): the MLP on a
 * Fashion-MNIST subset follows the CPU's loss curve step for step; the CNN and a small GPT train
 * a few steps with finite, decreasing loss; `train --device cuda` runs, and refuses clearly where
 * there is no CUDA backend or no GPU; `train --device cuda --amp bf16|fp16` trains under CUDA
 * autocast (fp16 through the GradScaler on CUDA gradients); CausalSelfAttention's fused CUDA
 * attention gives the CPU's output and gradients; `train --device cuda` follows
 * `train --device cpu`'s logged losses for every model of the zoo (mlp, cnn, resnet, gpt), and a
 * run stopped mid-epoch and resumed on CUDA ends bit-identical to one never stopped; a Sequential
 * fuses Linear + ReLU / tanh GELU into linear_activation, and Linear + tanh GELU + Linear into
 * linear_activation_linear, on CUDA only, with the CPU's numbers; `train --cuda-graph` (the step
 * captured once and replayed, with a capturable AdamW, a cosine schedule and clipping) logs the
 * eager CUDA run's losses for the MLP and a bf16 GPT, and a graphed run stopped and resumed ends
 * bit-identical to one never stopped.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/graph.h"
#include "autograd/node.h"
#include "core/cuda.h"
#include "core/random.h"
#include "data/builtin_datasets.h"
#include "data/dataset_writer.h"
#include "data/idx_reader.h"
#include "nn/layers/activation.h"
#include "nn/layers/attention.h"
#include "nn/layers/containers.h"
#include "nn/layers/linear.h"
#include "nn/loss.h"
#include "nn/models/gpt.h"
#include "nn/models/mlp.h"
#include "nn/models/small_cnn.h"
#include "nn/optim/adam.h"
#include "nn/optim/sgd.h"
#include "nn/serialize/safetensors.h"
#include "ops/ops.h"
#include "tests/gpu_test.h"
#include "tests/test_util.h"
#include "tools/train/options.h"
#include "tools/train/trainer.h"

using namespace loom;
namespace fs = std::filesystem;

namespace {

// The first n Fashion-MNIST training images as float [n, 784] (standardised) and labels [n].
std::pair<Tensor, Tensor> fashion_mnist_subset(int64_t n) {
  const std::string dir = data::kFashionMnistDir;
  data::IdxArray images = data::read_idx(dir + "/train-images-idx3-ubyte.gz");
  data::IdxArray labels = data::read_idx(dir + "/train-labels-idx1-ubyte.gz");
  std::vector<uint8_t> pixels(images.data.begin(), images.data.begin() + n * 784);
  std::vector<int64_t> classes(labels.data.begin(), labels.data.begin() + n);
  Tensor x = tensor<uint8_t>(pixels, {n, 784}).to(kFloat32).div(255.0).sub(0.286).div(0.353);
  return {x, tensor<int64_t>(classes, {n})};
}

// 48 random 1x8x8 images in 4 classes, as an HDF5 dataset in dir.
std::string tiny_images(const fs::path& dir) {
  Generator g(42);
  data::DatasetInfo info;
  info.name = "tiny";
  info.class_names = {"a", "b", "c", "d"};
  const std::string path = (dir / "tiny.h5").string();
  data::write_image_dataset(path, randint(0, 256, {48, 1, 8, 8}, DType::UInt8, &g),
                            randint(0, 4, {48}, DType::Int64, &g), info, {.chunk_rows = 16});
  return path;
}

// Each parameter's gradient on the GPU copy against the CPU one's (same names, same order).
void check_same_gradients(const nn::Module& gpu, const nn::Module& cpu, test::Tol tol) {
  auto cpu_params = cpu.named_parameters(), gpu_params = gpu.named_parameters();
  REQUIRE(cpu_params.size() == gpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    CAPTURE(cpu_params[i].first);
    test::check_close(gpu_params[i].second.grad().to(kCPU), test::values(cpu_params[i].second.grad()), tol);
  }
}

}  // namespace

TEST_CASE("training: the MLP on a Fashion-MNIST subset follows the CPU's loss curve on CUDA") {
  LOOM_REQUIRE_GPU();
  REQUIRE_MESSAGE(fs::exists(std::string(data::kFashionMnistDir) + "/train-images-idx3-ubyte.gz"),
                  "install Debian's dataset-fashion-mnist");
  auto [x, y] = fashion_mnist_subset(512);
  manual_seed(7);
  nn::MLP cpu_model({784, 64, 10});
  manual_seed(7);
  nn::MLP gpu_model({784, 64, 10});
  gpu_model.to(Device::cuda());
  nn::SGD cpu_opt(cpu_model.parameters(), {.lr = 0.05, .momentum = 0.9});
  nn::SGD gpu_opt(gpu_model.parameters(), {.lr = 0.05, .momentum = 0.9});
  Tensor gx = x.to(Device::cuda()), gy = y.to(Device::cuda());
  constexpr int64_t kBatch = 32, kSteps = 200;
  double first = 0, last = 0, worst = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    const int64_t begin = (step * kBatch) % 512;
    cpu_opt.zero_grad();
    gpu_opt.zero_grad();
    Tensor cpu_loss = nn::functional::cross_entropy(cpu_model.forward(x.slice(0, begin, begin + kBatch)),
                                                    y.slice(0, begin, begin + kBatch));
    Tensor gpu_loss = nn::functional::cross_entropy(gpu_model.forward(gx.slice(0, begin, begin + kBatch)),
                                                    gy.slice(0, begin, begin + kBatch));
    cpu_loss.backward();
    gpu_loss.backward();
    cpu_opt.step();
    gpu_opt.step();
    const double c = cpu_loss.item<double>(), g = gpu_loss.item<double>();
    REQUIRE(std::isfinite(g));
    worst = std::max(worst, std::abs(c - g) / std::max(1.0, std::abs(c)));
    if (step == 0) first = c;
    last = c;
  }
  MESSAGE("loss ", first, " -> ", last, " over ", kSteps, " steps; largest CPU/CUDA difference ", worst);
  CHECK(last < 0.5 * first);
  // f32 sums in a different order on each backend: the curves agree to far better than 1e-3.
  CHECK(worst < 1e-3);
  // The weights agree too, after 200 momentum steps of rounding differences.
  auto cpu_params = cpu_model.parameters(), gpu_params = gpu_model.parameters();
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    const double diff = (gpu_params[i].to(kCPU) - cpu_params[i]).abs().amax().item<double>();
    const double scale = cpu_params[i].abs().amax().item<double>();
    CAPTURE(i);
    CHECK(diff <= 1e-3 * scale);
  }
}

TEST_CASE("training: the CNN and a small GPT train on CUDA with finite, decreasing loss") {
  LOOM_REQUIRE_GPU();
  manual_seed(3);
  {
    nn::SmallCNN cnn(1, 10, 8);
    cnn.to(Device::cuda());
    nn::SGD opt(cnn.parameters(), {.lr = 0.05, .momentum = 0.9});
    Tensor x = randn({4, 1, 8, 8}).to(Device::cuda()), y = randint(0, 10, {4}).to(Device::cuda());
    std::vector<double> losses;
    for (int step = 0; step < 6; ++step) {
      opt.zero_grad();
      Tensor loss = nn::functional::cross_entropy(cnn.forward(x), y);
      loss.backward();
      opt.step();
      losses.push_back(loss.item<double>());
      REQUIRE(std::isfinite(losses.back()));
    }
    MESSAGE("CNN loss ", losses.front(), " -> ", losses.back());
    CHECK(losses.back() < losses.front());
  }
  {
    nn::GPT gpt(nn::GPTConfig{.vocab_size = 17, .context = 8, .n_layers = 1, .n_heads = 2, .d_model = 16});
    gpt.to(Device::cuda());
    nn::AdamW opt(gpt.parameters(), {.lr = 1e-2, .weight_decay = 0.0});
    Tensor tokens = randint(0, 17, {4, 9});
    Tensor input = tokens.slice(1, 0, 8).contiguous().to(Device::cuda());
    Tensor target = tokens.slice(1, 1).contiguous().to(Device::cuda());
    std::vector<double> losses;
    for (int step = 0; step < 6; ++step) {
      opt.zero_grad();
      Tensor logits = gpt.forward(input);
      Tensor loss = nn::functional::cross_entropy(logits.reshape({-1, 17}), target.reshape({-1}));
      loss.backward();
      opt.step();
      losses.push_back(loss.item<double>());
      REQUIRE(std::isfinite(losses.back()));
    }
    MESSAGE("GPT loss ", losses.front(), " -> ", losses.back());
    CHECK(losses.back() < losses.front());
  }
}

// The GPT's attention on CUDA is the fused flash-attention kernel; on the CPU it is written out.
// The same weights must give the same output and the same gradients (float32 sums in another
// order: torch's CUDA-vs-CPU tolerance).
TEST_CASE("training: CausalSelfAttention on CUDA (fused attention) matches the CPU, output and gradients") {
  LOOM_REQUIRE_GPU();
  const test::Tol kCudaTol{1e-5, 1e-5};
  manual_seed(11);
  nn::CausalSelfAttention cpu(16, 2, 12), gpu(16, 2, 12);
  gpu.load_state_dict(cpu.state_dict());
  gpu.to(Device::cuda());
  Tensor x = randn({3, 11, 16});
  Tensor x_gpu = x.to(Device::cuda()).detach().requires_grad_(true);
  Tensor x_cpu = x.detach().requires_grad_(true);
  Tensor out_cpu = cpu.forward(x_cpu), out_gpu = gpu.forward(x_gpu);
  test::check_close(out_gpu.to(kCPU), test::values(out_cpu), kCudaTol);
  Tensor weights = randn({3, 11, 16});  // a loss whose gradient differs per element
  out_cpu.mul(weights).sum().backward();
  out_gpu.mul(weights.to(Device::cuda())).sum().backward();
  test::check_close(x_gpu.grad().to(kCPU), test::values(x_cpu.grad()), kCudaTol);
  check_same_gradients(gpu, cpu, kCudaTol);
}

TEST_CASE("training: Sequential fuses Linear + ReLU / tanh GELU (+ Linear) on CUDA, as the CPU computes") {
  LOOM_REQUIRE_GPU();
  const test::Tol kCudaTol{1e-5, 1e-5};
  auto make = [] {
    manual_seed(12);
    return std::make_shared<nn::Sequential>(
        std::make_shared<nn::Linear>(10, 12), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(12, 8),
        std::make_shared<nn::GELU>("tanh"), std::make_shared<nn::Linear>(8, 6), std::make_shared<nn::GELU>());
  };
  auto cpu = make(), gpu = make();
  gpu->to(Device::cuda());
  Tensor x = randn({5, 10});
  Tensor out_cpu = cpu->forward(x), out_gpu = gpu->forward(x.to(Device::cuda()));
  test::check_close(out_gpu.to(kCPU), test::values(out_cpu), kCudaTol);
  // The last pair (the erf GELU) stays unfused everywhere; on the CPU nothing is fused at all.
  CHECK(out_gpu.grad_fn()->name().find("Gelu") != std::string::npos);
  Tensor weights = randn({5, 6});
  out_cpu.mul(weights).sum().backward();
  out_gpu.mul(weights.to(Device::cuda())).sum().backward();
  check_same_gradients(*gpu, *cpu, kCudaTol);
  // Linear + ReLU: one linear_activation node, where the CPU has the activation's node. It stays
  // a pair in front of Linear + tanh GELU + Linear, which is one linear_activation_linear node
  // (the last Linear is followed by an erf GELU, which it cannot fuse with).
  Tensor hidden_gpu = nn::Sequential((*gpu).ptr(0), (*gpu).ptr(1)).forward(x.to(Device::cuda()));
  Tensor hidden_cpu = nn::Sequential((*cpu).ptr(0), (*cpu).ptr(1)).forward(x);
  CAPTURE(hidden_gpu.grad_fn()->name());
  CHECK(hidden_gpu.grad_fn()->name() == "LinearActivationBackward");
  CHECK(hidden_cpu.grad_fn()->name().find("LinearActivation") == std::string::npos);
  const std::string graph = autograd::graph_to_string({out_gpu});
  CAPTURE(graph);
  CHECK(graph.find("LinearActivationLinearBackward") != std::string::npos);
  Tensor mlp_gpu = nn::Sequential((*gpu).ptr(2), (*gpu).ptr(3), (*gpu).ptr(4)).forward(hidden_gpu);
  CHECK(mlp_gpu.grad_fn()->name() == "LinearActivationLinearBackward");
  // Followed by a tanh GELU, the second Linear pairs with it instead.
  Tensor pairs_gpu =
      nn::Sequential((*gpu).ptr(2), (*gpu).ptr(3), (*gpu).ptr(4), std::make_shared<nn::GELU>("tanh"))
          .forward(hidden_gpu);
  CHECK(pairs_gpu.grad_fn()->name() == "LinearActivationBackward");
}

// GPT-2's tanh GELU makes each block's MLP one linear_activation_linear on CUDA (DGELU_BGRAD in
// backward: the hidden width 4 d = 64 is a multiple of 8), as the GPT-2 bench case runs it.
TEST_CASE("training: a GPT with the tanh GELU fuses each MLP on CUDA and matches the CPU") {
  LOOM_REQUIRE_GPU();
  const test::Tol kCudaTol{1e-5, 1e-5};
  const nn::GPTConfig config{
      .vocab_size = 17, .context = 8, .n_layers = 2, .n_heads = 2, .d_model = 16, .gelu_approximate = "tanh"};
  manual_seed(13);
  nn::GPT cpu(config), gpu(config);
  gpu.load_state_dict(cpu.state_dict());
  gpu.to(Device::cuda());
  Tensor tokens = randint(0, 17, {3, 9});
  Tensor input = tokens.slice(1, 0, 8).contiguous(), target = tokens.slice(1, 1).contiguous();
  Tensor logits_cpu = cpu.forward(input), logits_gpu = gpu.forward(input.to(Device::cuda()));
  test::check_close(logits_gpu.to(kCPU), test::values(logits_cpu), kCudaTol);
  const std::string graph = autograd::graph_to_string({logits_gpu});
  CAPTURE(graph);
  CHECK(graph.find("LinearActivationLinearBackward") != std::string::npos);
  nn::functional::cross_entropy(logits_cpu.reshape({-1, 17}), target.reshape({-1})).backward();
  nn::functional::cross_entropy(logits_gpu.reshape({-1, 17}), target.to(Device::cuda()).reshape({-1}))
      .backward();
  check_same_gradients(gpu, cpu, kCudaTol);
}

TEST_CASE("training: train --device cuda runs where CUDA is, and refuses clearly where it is not") {
  test::ScratchDir scratch("cuda_train");
  const fs::path& dir = scratch.path();
  const std::string data_path = tiny_images(dir);
  train::TrainOptions o;
  o.data = data_path;
  o.out = (dir / "run").string();
  o.hidden = "16";
  o.batch = 16;
  o.epochs = 2;
  o.workers = 1;
  o.device = train::DeviceKind::kCuda;
  std::ostringstream log;
  if (!LOOM_WITH_CUDA || !cuda::is_available()) {
    try {
      train::run_training(o, log, false);
      FAIL("train --device cuda ran without CUDA");
    } catch (const Error& e) {
      const std::string message = e.what();
      CHECK(message.find("--device cuda") != std::string::npos);
      CHECK(message.find(LOOM_WITH_CUDA ? "no usable GPU" : "built without the CUDA backend") !=
            std::string::npos);
    }
  } else {
    train::TrainSummary summary = train::run_training(o, log, false);
    CHECK(summary.steps == 6);
    CHECK(fs::exists(dir / "run" / "model.safetensors"));
    INFO(log.str());
    CHECK(log.str().find("nan") == std::string::npos);
  }
}

TEST_CASE("training: train --device cuda --amp bf16 and fp16 train under CUDA autocast") {
  LOOM_REQUIRE_GPU();
  test::ScratchDir scratch("cuda_amp");
  const fs::path& dir = scratch.path();
  const std::string data_path = tiny_images(dir);
  auto run = [&](train::AmpMode amp, const std::string& name) {
    train::TrainOptions o;
    o.data = data_path;
    o.val = data_path;
    o.out = (dir / name).string();
    o.hidden = "32";
    o.batch = 16;
    o.epochs = 8;
    o.workers = 1;
    o.device = train::DeviceKind::kCuda;
    o.amp = amp;
    std::ostringstream log;
    train::TrainSummary summary = train::run_training(o, log, false);
    INFO(name, ": ", log.str());
    CHECK(summary.steps == 24);
    REQUIRE(summary.val_loss.has_value());
    CHECK(std::isfinite(*summary.val_loss));
    CHECK(*summary.val_loss < std::log(4.0));  // it learns the 48 random labels it sees
    return nn::load_safetensors(dir / name / "model.safetensors").tensors;
  };
  const nn::StateDict f32 = run(train::AmpMode::kOff, "f32");
  const nn::StateDict bf16 = run(train::AmpMode::kBf16, "bf16");
  const nn::StateDict fp16 = run(train::AmpMode::kFp16, "fp16");
  // Autocast really ran on CUDA: the 16-bit matmuls end in other weights than float32's, and
  // the master weights stay float32.
  auto differs = [](const nn::StateDict& a, const nn::StateDict& b) {
    for (const auto& [name, t] : a)
      if (!equal(t, b.at(name))) return true;
    return false;
  };
  CHECK(differs(bf16, f32));
  CHECK(differs(fp16, f32));
  CHECK(differs(fp16, bf16));
  for (const auto& [name, t] : fp16) CHECK(t.dtype() == kFloat32);
}

namespace {

// 400 tokens over a 6-letter alphabet with runs to learn, as an HDF5 token dataset in dir.
std::string tiny_tokens(const fs::path& dir) {
  Generator g(5);
  Tensor jumps = randint(0, 6, {400}, DType::Int64, &g);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 400; ++i) ids.push_back((i % 3 == 0 ? jumps.data_ptr<int64_t>()[i] : ids.back() + 1) % 6);
  data::DatasetInfo info;
  info.name = "letters";
  for (char c : std::string("abcdef")) info.vocab.push_back(std::string(1, c));
  const std::string path = (dir / "tokens.h5").string();
  data::write_token_dataset(path, tensor(ids, {static_cast<int64_t>(ids.size())}), info);
  return path;
}

// The "loss" of every {"kind":"train"} line of a run's metrics.jsonl.
std::vector<double> logged_losses(const fs::path& run_dir) {
  std::vector<double> losses;
  std::ifstream in(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"kind\":\"train\"") == std::string::npos) continue;
    const size_t at = line.find("\"loss\":");
    REQUIRE(at != std::string::npos);
    losses.push_back(std::stod(line.substr(at + 7)));
  }
  return losses;
}

}  // namespace

TEST_CASE("training: train --device cuda follows train --device cpu for every model of the zoo") {
  LOOM_REQUIRE_GPU();
  test::ScratchDir scratch("cuda_zoo");
  const fs::path& dir = scratch.path();
  const std::string images = tiny_images(dir), tokens = tiny_tokens(dir);
  for (train::ModelKind model :
       {train::ModelKind::kMlp, train::ModelKind::kCnn, train::ModelKind::kResnet, train::ModelKind::kGpt}) {
    const std::string name(train::to_string(model));
    CAPTURE(name);
    auto run = [&](train::DeviceKind device) {
      train::TrainOptions o;
      o.model = model;
      o.data = model == train::ModelKind::kGpt ? tokens : images;
      o.hidden = "16";
      o.blocks = 1;
      o.layers = 1;
      o.heads = 2;
      o.d_model = 16;
      o.context = 8;
      o.batch = 8;
      o.epochs = 1;
      o.max_steps = 4;
      o.workers = 0;
      o.log_every = 1;
      o.seed = 11;
      o.device = device;
      o.out = (dir / (name + (device == train::DeviceKind::kCuda ? "_cuda" : "_cpu"))).string();
      std::ostringstream log;
      CHECK(train::run_training(o, log, false).steps == 4);
      return logged_losses(o.out);
    };
    const std::vector<double> cpu = run(train::DeviceKind::kCpu), gpu = run(train::DeviceKind::kCuda);
    REQUIRE(cpu.size() == 4);
    REQUIRE(gpu.size() == cpu.size());
    // The same initial weights (drawn on the CPU) and batches; float32 sums in another order.
    for (size_t i = 0; i < cpu.size(); ++i) CHECK(gpu[i] == doctest::Approx(cpu[i]).epsilon(1e-4));
  }
}

TEST_CASE("training: train --device cuda stopped mid-epoch and resumed ends bit-identical to one never stopped") {
  LOOM_REQUIRE_GPU();
  test::ScratchDir scratch("cuda_resume");
  const fs::path& dir = scratch.path();
  train::TrainOptions o;
  o.model = train::ModelKind::kCnn;
  o.data = tiny_images(dir);
  o.batch = 8;
  o.epochs = 2;
  o.workers = 1;
  o.seed = 5;
  o.optimizer = train::OptimizerKind::kAdamW;
  o.device = train::DeviceKind::kCuda;
  std::ostringstream log;
  train::TrainOptions whole = o;
  whole.out = (dir / "whole").string();
  CHECK(train::run_training(whole, log, false).steps == 12);
  train::TrainOptions first = o;
  first.out = (dir / "stopped").string();
  first.max_steps = 4;  // mid-epoch: 6 steps per epoch
  CHECK(train::run_training(first, log, false).steps == 4);
  train::TrainOptions rest = first;
  rest.max_steps = 0;
  rest.resume = rest.out;
  CHECK(train::run_training(rest, log, false).steps == 12);
  const nn::StateDict a = nn::load_safetensors(dir / "whole" / "model.safetensors").tensors;
  const nn::StateDict b = nn::load_safetensors(dir / "stopped" / "model.safetensors").tensors;
  REQUIRE(a.keys() == b.keys());
  for (const auto& [name, t] : a) {
    CAPTURE(name);
    CHECK(equal(t, b.at(name)));
  }
}

TEST_CASE(
    "training: train --device cuda --cuda-graph follows the eager CUDA run, schedule, clipping, dropout and "
    "fp16 loss scaling included") {
  LOOM_REQUIRE_GPU();
  test::ScratchDir scratch("cuda_graph_train");
  const fs::path& dir = scratch.path();
  const std::string images = tiny_images(dir), tokens = tiny_tokens(dir);
  struct Case {
    train::ModelKind model;
    train::AmpMode amp;
  };
  // AdamW (capturable SGD under a schedule: tests/cuda/test_cuda_graph_optim.cpp).
  for (const Case& c : {Case{train::ModelKind::kMlp, train::AmpMode::kOff},
                        Case{train::ModelKind::kMlp, train::AmpMode::kFp16},
                        Case{train::ModelKind::kGpt, train::AmpMode::kBf16}}) {
    const std::string name =
        std::string(train::to_string(c.model)) + "_" + std::string(train::to_string(c.amp));
    CAPTURE(name);
    auto options = [&](bool graph, const std::string& run_name) {
      train::TrainOptions o;
      o.model = c.model;
      o.optimizer = train::OptimizerKind::kAdamW;
      o.amp = c.amp;
      o.data = c.model == train::ModelKind::kGpt ? tokens : images;
      o.hidden = "16";
      o.layers = 1;
      o.heads = 2;
      o.d_model = 16;
      o.context = 8;
      o.batch = 10;  // 48 images: 4 batches of 10 and a short one of 8 (step 5), which runs eagerly
      o.epochs = 2;
      o.max_steps = 6;  // 2 eager, the capture and replays, the short batch, a replay in epoch 2
      o.workers = 0;
      o.log_every = 1;
      o.seed = 3;
      o.lr = 1e-2;
      o.schedule = train::LrSchedule::kCosine;  // a different lr at every step: a baked one would show
      o.warmup = 2;
      o.clip = 0.5;
      // Each replay draws the masks the eager step draws there; the capture's masks again would show.
      if (c.model == train::ModelKind::kGpt) o.dropout = 0.1;
      o.device = train::DeviceKind::kCuda;
      o.cuda_graph = graph;
      o.out = (dir / (name + "_" + run_name)).string();
      return o;
    };
    auto run = [](const train::TrainOptions& o) {
      std::ostringstream log;
      CHECK(train::run_training(o, log, false).steps == o.max_steps);
      return logged_losses(o.out);
    };
    const std::vector<double> eager = run(options(false, "eager")), graphed = run(options(true, "graph"));
    REQUIRE(eager.size() == 6);
    REQUIRE(graphed.size() == eager.size());
    // The same kernels replayed; Adam's bias corrections are computed on the device instead.
    for (size_t i = 0; i < eager.size(); ++i) {
      CAPTURE(i);
      CHECK(graphed[i] == doctest::Approx(eager[i]).epsilon(1e-5));
    }
    if (c.model != train::ModelKind::kMlp) continue;
    // Stopped after step 3 and resumed: the resumed run warms up eagerly and captures again, and an
    // eager capturable step computes what its replay does, so the model ends bit-identical.
    train::TrainOptions first = options(true, "stopped");
    first.max_steps = 3;
    run(first);
    train::TrainOptions rest = first;
    rest.max_steps = 6;
    rest.resume = rest.out;
    run(rest);
    const nn::StateDict a = nn::load_safetensors(dir / (name + "_graph") / "model.safetensors").tensors;
    const nn::StateDict b = nn::load_safetensors(dir / (name + "_stopped") / "model.safetensors").tensors;
    REQUIRE(a.keys() == b.keys());
    for (const auto& [key, t] : a) {
      CAPTURE(key);
      CHECK(equal(t, b.at(key)));
    }
  }
}
