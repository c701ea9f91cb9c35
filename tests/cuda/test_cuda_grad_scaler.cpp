/*
 * GradScaler on CUDA gradients (its unscale pass is amp_unscale_and_check_'s CUDA kernel,
 * tests/cuda/ops/amp.cpp) against the same steps on the CPU; and float16 training steps with
 * loss scaling captured into a CUDA graph against the same steps run eagerly.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/autocast.h"
#include "core/cuda_graph.h"
#include "nn/graphed_step.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "tests/gpu_test.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using test::pat;

const Device kGpu = Device::cuda(0);

// The same MLP, weights, batches and GradScaler schedule on both devices, in float32 (autocast's
// dtypes differ between the CPU and CUDA, so they would not compare); step 3 overflows on
// purpose and must be skipped on both.
TEST_CASE("amp: GradScaler on CUDA gradients takes the CPU's steps and skips the same ones") {
  LOOM_REQUIRE_GPU();
  manual_seed(3);
  auto cpu_model = std::make_shared<nn::MLP>(std::vector<int64_t>{12, 16, 4});
  auto gpu_model = std::make_shared<nn::MLP>(std::vector<int64_t>{12, 16, 4});
  gpu_model->load_state_dict(cpu_model->state_dict());
  gpu_model->to(kGpu);
  nn::SGDOptions sgd;
  sgd.lr = 0.1;
  sgd.momentum = 0.9;
  nn::SGD cpu_opt(cpu_model->parameters(), sgd);
  nn::SGD gpu_opt(gpu_model->parameters(), sgd);
  nn::GradScalerOptions options;
  options.growth_interval = 2;
  nn::GradScaler cpu_scaler(options), gpu_scaler(options);
  for (int step = 0; step < 6; ++step) {
    CAPTURE(step);
    Tensor x = pat({8, 12}, 0.1 * step, 1.0);
    Tensor y = test::make({0, 1, 2, 3, 0, 1, 2, 3}, {8}, kInt64);
    // Step 3's loss is scaled past float32's range: every gradient overflows to inf.
    const double blow_up = step == 3 ? 1e38 : 1.0;
    bool stepped[2];
    int k = 0;
    for (auto [model, opt, scaler, device] : {std::tuple{cpu_model, &cpu_opt, &cpu_scaler, Device(kCPU)},
                                              {gpu_model, &gpu_opt, &gpu_scaler, kGpu}}) {
      opt->zero_grad();
      Tensor loss = nn::functional::cross_entropy(model->forward(x.to(device)), y.to(device)) * blow_up;
      scaler->scale(loss).backward();
      stepped[k++] = scaler->step(*opt);
      scaler->update();
    }
    CHECK(stepped[0] == stepped[1]);
    CHECK(stepped[0] == (step != 3));
    CHECK(gpu_scaler.get_scale() == cpu_scaler.get_scale());
  }
  auto cpu_params = cpu_model->parameters(), gpu_params = gpu_model->parameters();
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    CAPTURE(i);
    CHECK(allclose(gpu_params[i].to(kCPU), cpu_params[i], 1e-5, 1e-6));
  }
}

// One float16 step with loss scaling, as a user writes it: the body that GraphedStep captures.
Tensor scaled_step(nn::MLP& model, nn::Optimizer& opt, nn::GradScaler& scaler, const Tensor& x,
                   const Tensor& y) {
  opt.zero_grad();
  Tensor loss;
  {
    AutocastGuard autocast(kGpu, kFloat16);
    loss = nn::functional::cross_entropy(model.forward(x), y);
  }
  scaler.scale(loss).backward();
  scaler.unscale_(opt);
  nn::clip_grad_norm_on_device_(model.parameters(), 1.0);
  scaler.step(opt);
  scaler.update();
  return loss;
}

std::unique_ptr<nn::Optimizer> make_optimizer(bool adamw, nn::MLP& model, bool capturable = true) {
  if (adamw)
    return std::make_unique<nn::AdamW>(model.parameters(),
                                       nn::AdamWOptions{.lr = 1e-2, .capturable = capturable});
  return std::make_unique<nn::SGD>(model.parameters(),
                                   nn::SGDOptions{.lr = 0.05, .momentum = 0.9, .capturable = capturable});
}

// Batches 0, 5 and 6 hold a value past float16's range: under autocast the first linear layer
// makes inf, so every gradient is NaN. The graph is captured at batch 2; batches 5 and 6 are
// replays, which must skip their optimizer step and back the scale off twice, on the device;
// batches 3-4 and 7-9 grow it (growth_interval 2). Batch 0 is a skipped eager warm-up step, so the
// optimizer's state is made by batch 1.
TEST_CASE(
    "amp: a float16 step with GradScaler replayed from a CUDA graph skips and rescales as the eager steps") {
  LOOM_REQUIRE_GPU();
  manual_seed(12);
  const Tensor data = randn({10, 8, 20});
  const Tensor labels = randint(0, 5, {10, 8}, DType::Int64);
  for (int64_t bad : {0, 5, 6}) data[bad][3][7].fill_(1e6);
  for (bool adamw : {true, false}) {
    CAPTURE(adamw);
    manual_seed(6);
    nn::MLP eager_model({20, 16, 5});
    manual_seed(6);
    nn::MLP graph_model({20, 16, 5});
    eager_model.to(kGpu);
    graph_model.to(kGpu);
    auto eager_opt = make_optimizer(adamw, eager_model), graph_opt = make_optimizer(adamw, graph_model);
    const nn::GradScalerOptions options{.init_scale = 1024.0, .growth_interval = 2};
    nn::GradScaler eager_scaler(options), graph_scaler(options);
    nn::GraphedStep step(kGpu, [&](const Tensor& x, const Tensor& y) {
      return scaled_step(graph_model, *graph_opt, graph_scaler, x, y);
    });
    std::vector<double> scales;
    for (int64_t i = 0; i < 10; ++i) {
      CAPTURE(i);
      const Tensor x = data[i].to(kGpu), y = labels[i].to(kGpu);
      const Tensor expected = scaled_step(eager_model, *eager_opt, eager_scaler, x, y);
      const Tensor got = step(x, y);
      CHECK(step.captured() == (i >= 2));
      // The loss is computed before the step, so an overflowing batch's is not finite on both.
      const double e = expected.item<double>(), g = got.item<double>();
      CHECK((std::isfinite(e) ? g == e : !std::isfinite(g)));
      CHECK(graph_scaler.get_scale() == eager_scaler.get_scale());
      scales.push_back(graph_scaler.get_scale());
    }
    // By hand: 1024 -> 512 (batch 0), then x2 after every two clean steps, /2 at 5 and at 6.
    CHECK(scales == std::vector<double>{512, 512, 1024, 1024, 2048, 1024, 512, 512, 1024, 1024});
    CHECK(step.replays() == 8);  // the capture's own run at batch 2, then 3-9
    // The same kernels eagerly and replayed: the models end bit-identical.
    auto a = eager_model.parameters(), b = graph_model.parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      CAPTURE(i);
      CHECK(equal(a[i].to(kCPU), b[i].to(kCPU)));
    }
    // And the scaler's checkpoint holds what the replays left.
    CHECK(graph_scaler.state_dict().at("scale").item<double>() == 1024.0);
    CHECK(graph_scaler.state_dict().at("_growth_tracker").item<int64_t>() == 1);
  }
}

// An eager float16 step whose batch overflows (every gradient NaN) and whose targets hold a class
// out of range. The target's device check fails, and a failed check is reported at the host's next
// wait for the GPU (core/cuda/device_checks.h): whether a call waits shows as whether it reports.
// A capturable optimizer takes the inf/NaN flag on the device, so neither step() nor update()
// waits, and the first wait is the explicit one; another optimizer has step() wait for the flag.
// Either way the step is skipped and the scale backs off.
TEST_CASE("amp: an eager step with a capturable optimizer on CUDA is skipped on the device, without a wait") {
  LOOM_REQUIRE_GPU();
  for (bool capturable : {true, false}) {
    CAPTURE(capturable);
    manual_seed(8);
    nn::MLP model({6, 4, 3});
    model.to(kGpu);
    auto opt = make_optimizer(false, model, capturable);
    nn::GradScaler scaler(nn::GradScalerOptions{.init_scale = 1024.0});
    const Tensor x = randn({4, 6}).to(kGpu), y = randint(0, 3, {4}, DType::Int64).to(kGpu);
    scaled_step(model, *opt, scaler, x, y);  // warm-up: the scale, the lr tensor and the momentum exist
    const Tensor bad_x = x.clone(), bad_y = test::make({0, 7, 1, 2}, {4}, kInt64).to(kGpu);
    bad_x[0][0].fill_(1e6);  // past float16's range: the first layer makes inf under autocast
    std::vector<Tensor> before;
    for (const Tensor& p : model.parameters()) before.push_back(p.detach().clone());
    CHECK(scaler.get_scale() == 1024.0);  // a wait: everything before it is checked and clean

    opt->zero_grad();
    Tensor loss;
    {
      AutocastGuard autocast(kGpu, kFloat16);
      loss = nn::functional::cross_entropy(model.forward(bad_x), bad_y);  // class 7 of 3: the check fails
    }
    scaler.scale(loss).backward();
    if (capturable) {
      CHECK(scaler.step(*opt));  // queued: the GPU skips it
      scaler.update();
      CHECK_THROWS_WITH_AS(cuda::synchronize(), doctest::Contains("nll_loss: a target out of bounds"), Error);
    } else {
      CHECK_THROWS_WITH_AS(scaler.step(*opt), doctest::Contains("nll_loss: a target out of bounds"), Error);
      CHECK_FALSE(scaler.step(*opt));  // the unscaled gradients hold NaN: skipped on the host
      scaler.update();
    }
    const std::vector<Tensor> after = model.parameters();
    for (size_t i = 0; i < after.size(); ++i) {
      CAPTURE(i);
      CHECK(equal(after[i].detach().to(kCPU), before[i].to(kCPU)));
    }
    CHECK(scaler.get_scale() == 512.0);
  }
}

TEST_CASE("amp: inside a capture GradScaler.step refuses an optimizer that cannot skip on the device") {
  LOOM_REQUIRE_GPU();
  manual_seed(5);
  nn::MLP model({6, 4, 3});
  model.to(kGpu);
  auto opt = make_optimizer(false, model, /*capturable=*/false);
  nn::GradScaler scaler;
  const Tensor x = randn({4, 6}).to(kGpu), y = randint(0, 3, {4}, DType::Int64).to(kGpu);
  scaled_step(model, *opt, scaler, x, y);  // warm-up: the scale and the momentum buffers exist
  cuda::CudaGraph graph;
  CHECK_THROWS_WITH_AS(cuda::capture(graph, [&] { scaled_step(model, *opt, scaler, x, y); }),
                       doctest::Contains("construct SGD, Adam or AdamW with capturable = true"), Error);
  // A scaler whose scale was never made cannot make it inside the capture.
  nn::GradScaler fresh;
  cuda::CudaGraph other;
  CHECK_THROWS_WITH_AS(cuda::capture(other, [&] { (void)fresh.scale(ones({}, kGpu)); }),
                       doctest::Contains("the scale does not exist on cuda:0 yet"), Error);
  CHECK_THROWS_WITH_AS(opt->step_unless_found_inf(zeros({1}, kGpu)),
                       doctest::Contains("needs capturable = true"), Error);
}

}  // namespace
}  // namespace loom
