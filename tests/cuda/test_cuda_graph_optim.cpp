/*
 * Capturable optimizers in CUDA graphs (nn/optim/device_lr.h, AdamOptions/SGDOptions'
 * capturable): a whole training step (forward, backward, optimizer step) captured once and
 * replayed, with an LR schedule stepped between replays, against the same model trained eagerly
 * on the CPU by the non-capturable optimizer (the independent reference). A step that baked its
 * step counts or lr into the graph would drift from the CPU at the first replay. Also the
 * refusals: a capture before the first step, a schedule stepped inside a capture, a
 * non-contiguous parameter (random ops: test_cuda_graph_random.cpp). nn::GraphedStep: warm-up, capture,
 * replays, and eager steps for batches of another shape.
 */
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

#include "core/cuda.h"
#include "core/cuda_graph.h"
#include "core/random.h"
#include "nn/graphed_step.h"
#include "nn/loss.h"
#include "nn/models/mlp.h"
#include "nn/optim/adam.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/optim/sgd.h"
#include "ops/ops.h"
#include "tests/gpu_test.h"

using namespace loom;

namespace {

const Device kGpu = Device::cuda();

using MakeOptimizer = std::function<std::unique_ptr<nn::Optimizer>(std::vector<Tensor>, bool capturable)>;
using MakeSchedule = std::function<std::unique_ptr<nn::LRScheduler>(nn::Optimizer&)>;

Tensor train_step(nn::MLP& model, nn::Optimizer& opt, const Tensor& x, const Tensor& y) {
  opt.zero_grad();
  Tensor loss = nn::functional::cross_entropy(model.forward(x), y);
  loss.backward();
  opt.step();
  return loss;
}

// Trains one MLP eagerly on the CPU and one on CUDA from a graph captured after two eager steps,
// both with the schedule stepped after every step; the losses and parameters must agree.
void check_replays_match_cpu(const MakeOptimizer& make_optimizer, const MakeSchedule& make_schedule) {
  constexpr int64_t kSteps = 8, kWarmUp = 2;
  manual_seed(11);
  const Tensor data = randn({kSteps, 16, 20});
  const Tensor labels = randint(0, 5, {kSteps, 16}, DType::Int64);
  manual_seed(5);
  nn::MLP cpu_model({20, 32, 5});
  manual_seed(5);
  nn::MLP gpu_model({20, 32, 5});
  gpu_model.to(kGpu);
  auto cpu_opt = make_optimizer(cpu_model.parameters(), false);
  auto gpu_opt = make_optimizer(gpu_model.parameters(), true);
  auto cpu_schedule = make_schedule(*cpu_opt), gpu_schedule = make_schedule(*gpu_opt);

  Tensor static_x = empty({16, 20}, kGpu);
  Tensor static_y = empty({16}, TensorOptions(DType::Int64).device(kGpu));
  cuda::CudaGraph graph;
  Tensor static_loss;
  double worst_loss = 0;
  for (int64_t i = 0; i < kSteps; ++i) {
    const double cpu_loss = train_step(cpu_model, *cpu_opt, data[i], labels[i]).item<double>();
    cpu_schedule->step();
    static_x.copy_(data[i]);
    static_y.copy_(labels[i]);
    double gpu_loss;
    if (i < kWarmUp) {
      gpu_loss = train_step(gpu_model, *gpu_opt, static_x, static_y).item<double>();
    } else {
      if (!graph.captured())
        cuda::capture(graph, [&] { static_loss = train_step(gpu_model, *gpu_opt, static_x, static_y); });
      graph.replay();
      gpu_loss = static_loss.item<double>();
    }
    gpu_schedule->step();  // between replays: the next one reads the new lr
    CAPTURE(i);
    CHECK(std::isfinite(gpu_loss));
    worst_loss = std::max(worst_loss, std::abs(cpu_loss - gpu_loss));
  }
  MESSAGE("largest loss difference, CPU eager against CUDA replayed: ", worst_loss);
  CHECK(worst_loss <= 1e-5);
  auto cp = cpu_model.parameters(), gp = gpu_model.parameters();
  REQUIRE(cp.size() == gp.size());
  for (size_t i = 0; i < cp.size(); ++i) {
    CAPTURE(i);
    CHECK(cp[i].sub(gp[i].to(kCPU)).abs().max().item<double>() <= 1e-5);
  }
}

}  // namespace

TEST_CASE("capturable AdamW with a warm-up cosine schedule: replayed steps equal the CPU's eager steps") {
  LOOM_REQUIRE_GPU();
  check_replays_match_cpu(
      [](std::vector<Tensor> ps, bool capturable) {
        return std::make_unique<nn::AdamW>(
            std::move(ps), nn::AdamWOptions{.lr = 2e-2, .weight_decay = 0.1, .capturable = capturable});
      },
      [](nn::Optimizer& opt) { return std::make_unique<nn::CosineWithWarmup>(opt, 3, 8); });
}

TEST_CASE("capturable Adam (amsgrad) and SGD with StepLR: replayed steps equal the CPU's eager steps") {
  LOOM_REQUIRE_GPU();
  auto step_lr = [](nn::Optimizer& opt) { return std::make_unique<nn::StepLR>(opt, 2, 0.5); };
  check_replays_match_cpu(
      [](std::vector<Tensor> ps, bool capturable) {
        return std::make_unique<nn::Adam>(
            std::move(ps), nn::AdamOptions{.lr = 1e-2, .amsgrad = true, .capturable = capturable});
      },
      step_lr);
  check_replays_match_cpu(
      [](std::vector<Tensor> ps, bool capturable) {
        return std::make_unique<nn::SGD>(
            std::move(ps), nn::SGDOptions{.lr = 0.2, .momentum = 0.9, .capturable = capturable});
      },
      step_lr);
}

TEST_CASE("capturable optimizers in a capture: warm-up first, schedules outside, contiguous parameters") {
  LOOM_REQUIRE_GPU();
  manual_seed(2);
  nn::MLP model({8, 4});
  model.to(kGpu);
  Tensor x = randn({3, 8}).to(kGpu);
  auto backward = [&] { model.forward(x).sum().backward(); };
  backward();
  nn::AdamW adamw(model.parameters(), {.capturable = true});
  cuda::CudaGraph graph;
  CHECK_THROWS_WITH_AS(
      cuda::capture(graph, [&] { adamw.step(); }),
      doctest::Contains("AdamW: parameter 0 of group 0 has no step count on cuda:0 yet; run a step "
                        "before capturing"),
      Error);
  adamw.step();
  nn::StepLR schedule(adamw, 1, 0.5);
  CHECK_THROWS_WITH_AS(cuda::capture(graph, [&] { schedule.step(); }),
                       doctest::Contains("LRScheduler: stepped while a CUDA graph is being captured"), Error);
  CHECK(schedule.last_step() == 0);
  CHECK_THROWS_WITH_AS(
      cuda::capture(graph, [&] { adamw.hyperparameters_changed(); }),
      doctest::Contains("AdamW: its learning rates were changed while a CUDA graph is being captured"),
      Error);
  cuda::capture(graph, [&] { adamw.step(); });
  CHECK(graph.captured());

  Tensor weight = randn({4, 3}).to(kGpu).t().requires_grad_();  // a non-contiguous parameter
  weight.mutable_grad() = ones({3, 4}, kGpu);
  nn::SGD sgd({weight}, {.lr = 0.1, .capturable = true});
  sgd.step();  // eagerly, by tensor ops
  cuda::CudaGraph second;
  CHECK_THROWS_WITH_AS(cuda::capture(second, [&] { sgd.step(); }),
                       doctest::Contains("SGD: parameter 0 of group 0 (shape [3, 4]) is not contiguous"),
                       Error);
}

TEST_CASE("GraphedStep: warm-up steps, one capture, then replays, and a batch of another shape runs eagerly") {
  LOOM_REQUIRE_GPU();
  manual_seed(8);
  const Tensor data = randn({7, 12, 20});
  const Tensor labels = randint(0, 5, {7, 12}, DType::Int64);
  manual_seed(6);
  nn::MLP cpu_model({20, 16, 5});
  manual_seed(6);
  nn::MLP gpu_model({20, 16, 5});
  gpu_model.to(kGpu);
  nn::SGD cpu_opt(cpu_model.parameters(), {.lr = 0.1, .momentum = 0.9});
  nn::SGD gpu_opt(gpu_model.parameters(), {.lr = 0.1, .momentum = 0.9, .capturable = true});
  nn::GraphedStep step(
      kGpu, [&](const Tensor& x, const Tensor& y) { return train_step(gpu_model, gpu_opt, x, y); });
  CHECK(step.num_nodes() == 0);
  for (int64_t i = 0; i < 7; ++i) {
    // Batch 5 is cut short: another shape, so an eager step between replays.
    const int64_t rows = i == 5 ? 9 : 12;
    const Tensor x = data[i].narrow(0, 0, rows), y = labels[i].narrow(0, 0, rows);
    const double expected = train_step(cpu_model, cpu_opt, x, y).item<double>();
    const double got = step(x, y).item<double>();  // CPU batches: copied to the GPU
    CAPTURE(i);
    CHECK(got == doctest::Approx(expected).epsilon(1e-5));
    CHECK(step.captured() == (i >= 2));
  }
  CHECK(step.eager_steps() == 3);
  CHECK(step.replays() == 4);
  CHECK(step.num_nodes() > 10);
  CHECK_THROWS_WITH_AS(nn::GraphedStep(kCPU, [](const Tensor& x, const Tensor&) { return x; }),
                       doctest::Contains("GraphedStep: CUDA graphs run on a CUDA device, got cpu"), Error);
  CHECK_THROWS_WITH_AS(nn::GraphedStep(
                           kGpu, [](const Tensor& x, const Tensor&) { return x; }, 0),
                       doctest::Contains("warm_up_steps must be >= 1"), Error);
}
