/*
 * GradScaler on CUDA gradients (its unscale pass is amp_unscale_and_check_'s CUDA kernel,
 * tests/cuda/ops/amp.cpp) against the same steps on the CPU.
 */
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

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

}  // namespace
}  // namespace loom
