/*
 * nn::Adam, nn::AdamW, nn::SGD and nn::clip_grad_norm_ on CUDA parameters (the fused ops of
 * ops/optim_ops.h) against the same optimizers on CPU copies fed the same gradients: several
 * steps, parameters at different step counts, a non-contiguous parameter (the per-op path)
 * beside contiguous ones; the clipped norm and gradients for several orders; bad inputs.
 * CUDA and CPU agree to float32's CUDA-vs-CPU tolerance, not bitwise (nvcc contracts to FMA).
 * The ops themselves, variant by variant: tests/cuda/ops/optim.cpp.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "autograd/autograd.h"
#include "nn/optim/adam.h"
#include "nn/optim/clip_grad.h"
#include "nn/optim/sgd.h"
#include "tests/gpu_test.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

const Device kGpu = Device::cuda(0);

// Parameters of several shapes (one empty, one a transposed, non-contiguous view) on `device`.
std::vector<Tensor> make_params(Device device, DType dt) {
  std::vector<Tensor> ps{pat({3, 4}, 0.1).to(dt), pat({5}, 0.2).to(dt), pat({0}, 0.3).to(dt),
                         pat({70}, 0.4).to(dt)};
  for (Tensor& p : ps) p = p.to(device).clone();
  ps.push_back(pat({4, 3}, 0.5).to(dt).to(device).t());
  for (Tensor& p : ps) p.requires_grad_();
  return ps;
}

// Gradients for step s; parameter 1 gets none on step 1, so its step count lags behind.
void set_grads(std::vector<Tensor>& ps, int s) {
  for (size_t i = 0; i < ps.size(); ++i) {
    if (i == 1 && s == 1) {
      ps[i].mutable_grad() = Tensor();
      continue;
    }
    Tensor g = pat(ps[i].sizes(), 1.7 * s + 0.3 * static_cast<double>(i), 0.8).to(ps[i].dtype());
    ps[i].mutable_grad() = g.to(ps[i].device());
  }
}

using MakeOptimizer = std::function<std::unique_ptr<nn::Optimizer>(std::vector<Tensor>)>;

void check_optimizer_matches_cpu(const MakeOptimizer& make, DType dt) {
  std::vector<Tensor> cpu = make_params(kCPU, dt), gpu = make_params(kGpu, dt);
  auto cpu_opt = make(cpu), gpu_opt = make(gpu);
  for (int s = 0; s < 4; ++s) {
    set_grads(cpu, s);
    set_grads(gpu, s);
    cpu_opt->step();
    gpu_opt->step();
  }
  const Tol tol = dt == kFloat32 ? Tol{1e-5, 1e-6} : Tol{1e-12, 1e-14};
  for (size_t i = 0; i < cpu.size(); ++i) {
    CAPTURE(i);
    CHECK(gpu[i].is_cuda());
    const std::string bad = mismatch(values(gpu[i].to(kCPU)), values(cpu[i]), tol);
    CHECK_MESSAGE(bad.empty(), bad);
  }
}

TEST_CASE("optim on CUDA: Adam, AdamW and SGD steps equal the CPU optimizer's on the same gradients") {
  LOOM_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64}) {
    CAPTURE(dt);
    check_optimizer_matches_cpu(
        [](std::vector<Tensor> ps) {
          return std::make_unique<nn::Adam>(std::move(ps), nn::AdamOptions{.lr = 1e-2, .weight_decay = 0.1});
        },
        dt);
    check_optimizer_matches_cpu(
        [](std::vector<Tensor> ps) {
          return std::make_unique<nn::Adam>(std::move(ps), nn::AdamOptions{.lr = 1e-2, .amsgrad = true, .maximize = true});
        },
        dt);
    check_optimizer_matches_cpu(
        [](std::vector<Tensor> ps) {
          return std::make_unique<nn::AdamW>(std::move(ps), nn::AdamWOptions{.lr = 1e-2, .amsgrad = true});
        },
        dt);
    check_optimizer_matches_cpu(
        [](std::vector<Tensor> ps) {
          return std::make_unique<nn::SGD>(std::move(ps), nn::SGDOptions{.lr = 0.1, .weight_decay = 0.01});
        },
        dt);
    check_optimizer_matches_cpu(
        [](std::vector<Tensor> ps) {
          return std::make_unique<nn::SGD>(std::move(ps),
                                           nn::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
        },
        dt);
    check_optimizer_matches_cpu(
        [](std::vector<Tensor> ps) {
          return std::make_unique<nn::SGD>(
              std::move(ps), nn::SGDOptions{.lr = 0.1, .momentum = 0.8, .dampening = 0.1, .maximize = true});
        },
        dt);
  }
}

TEST_CASE(
    "optim on CUDA: capturable Adam, AdamW and SGD (counts and lr on the device) equal the CPU's steps") {
  LOOM_REQUIRE_GPU();
  // The CPU side is the plain optimizer; on CUDA the capturable one (its non-contiguous parameter
  // takes the per-op path, with its count read back from the device).
  auto capturable_on_gpu = [](std::vector<Tensor>& ps) { return ps.front().is_cuda(); };
  for (DType dt : {kFloat32, kFloat64}) {
    CAPTURE(dt);
    check_optimizer_matches_cpu(
        [&](std::vector<Tensor> ps) {
          const bool c = capturable_on_gpu(ps);
          return std::make_unique<nn::Adam>(
              std::move(ps), nn::AdamOptions{.lr = 1e-2, .weight_decay = 0.1, .capturable = c});
        },
        dt);
    check_optimizer_matches_cpu(
        [&](std::vector<Tensor> ps) {
          const bool c = capturable_on_gpu(ps);
          return std::make_unique<nn::AdamW>(std::move(ps),
                                             nn::AdamWOptions{.lr = 1e-2, .amsgrad = true, .capturable = c});
        },
        dt);
    check_optimizer_matches_cpu(
        [&](std::vector<Tensor> ps) {
          const bool c = capturable_on_gpu(ps);
          return std::make_unique<nn::SGD>(std::move(ps),
                                           nn::SGDOptions{.lr = 0.1, .momentum = 0.9, .capturable = c});
        },
        dt);
  }
}

TEST_CASE(
    "optim on CUDA: a capturable AdamW's state loads into a plain one and back, and training continues "
    "alike") {
  LOOM_REQUIRE_GPU();
  std::vector<Tensor> a = make_params(kGpu, kFloat32), b = make_params(kGpu, kFloat32);
  a.pop_back(), b.pop_back();  // contiguous parameters only
  nn::AdamW capturable(a, {.lr = 1e-2, .capturable = true});
  nn::AdamW plain(b, {.lr = 1e-2});
  for (int s = 0; s < 3; ++s) {
    set_grads(a, s);
    capturable.step();
  }
  const nn::StateDict saved = capturable.state_dict();
  CHECK(saved.at("state.0.step").is_cuda());
  CHECK(saved.at("state.0.step").to(kCPU).item<int64_t>() == 3);
  CHECK(saved.at("state.1.step").to(kCPU).item<int64_t>() == 2);  // parameter 1 had no gradient on step 1
  for (size_t i = 0; i < a.size(); ++i) b[i].detach().copy_(a[i].detach());
  plain.load_state_dict(saved);
  // Both continue from step 3; the plain one moves its counts to the CPU, and the capturable one,
  // restored from the plain one's state, moves them back to the device.
  nn::AdamW restored(std::vector<Tensor>(a), {.lr = 1e-2, .capturable = true});
  for (int s = 3; s < 5; ++s) {
    set_grads(a, s);
    set_grads(b, s);
    capturable.step();
    plain.step();
  }
  CHECK_FALSE(plain.state_dict().at("state.0.step").is_cuda());
  CHECK(plain.state_dict().at("state.0.step").item<int64_t>() == 5);
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    const std::string bad = mismatch(values(a[i].to(kCPU)), values(b[i].to(kCPU)), Tol{1e-6, 1e-7});
    CHECK_MESSAGE(bad.empty(), bad);
  }
  restored.load_state_dict(plain.state_dict());
  set_grads(a, 5);
  restored.step();
  CHECK(restored.state_dict().at("state.0.step").is_cuda());
  CHECK(restored.state_dict().at("state.0.step").to(kCPU).item<int64_t>() == 6);
}

TEST_CASE("optim on CUDA: clip_grad_norm_ equals the CPU's norm and scaled gradients") {
  LOOM_REQUIRE_GPU();
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dt : {kFloat32, kFloat64}) {
    for (double p : {1.0, 2.0, 3.0, inf}) {
      for (double max_norm : {0.5, 1e6}) {  // clipped, and left alone
        for (bool with_view : {false, true}) {  // one device's fused ops, or the general path
          CAPTURE(dt);
          CAPTURE(p);
          CAPTURE(max_norm);
          CAPTURE(with_view);
          std::vector<Tensor> cpu = make_params(kCPU, dt), gpu = make_params(kGpu, dt);
          if (!with_view) cpu.pop_back(), gpu.pop_back();
          set_grads(cpu, 0);
          set_grads(gpu, 0);
          const double cpu_norm = nn::clip_grad_norm_(cpu, max_norm, p);
          const double gpu_norm = nn::clip_grad_norm_(gpu, max_norm, p);
          CHECK(gpu_norm == doctest::Approx(cpu_norm).epsilon(1e-12));
          for (size_t i = 0; i < cpu.size(); ++i) {
            const std::string bad = mismatch(values(gpu[i].grad().to(kCPU)), values(cpu[i].grad()),
                                             Tol{1e-6, 1e-7});
            CHECK_MESSAGE(bad.empty(), "grad ", i, ": ", bad);
          }
        }
      }
    }
  }
}

TEST_CASE("optim on CUDA: a NaN gradient gives a NaN norm and NaN gradients, or the error when asked") {
  LOOM_REQUIRE_GPU();
  std::vector<Tensor> gpu = make_params(kGpu, kFloat32);
  gpu.pop_back();
  set_grads(gpu, 0);
  gpu[3].mutable_grad().narrow(0, 5, 1).fill_(std::numeric_limits<double>::quiet_NaN());
  CHECK_THROWS_WITH_AS(nn::clip_grad_norm_(gpu, 1.0, 2.0, true), doctest::Contains("clip_grad_norm_: the total norm"),
                       Error);
  CHECK(std::isnan(nn::clip_grad_norm_(gpu, 1.0, 2.0)));
  CHECK(std::isnan(values(gpu[0].grad().to(kCPU))[0]));
}

TEST_CASE("optim on CUDA: bad inputs throw naming the optimizer or the op") {
  LOOM_REQUIRE_GPU();
  Tensor p = zeros({3}, kGpu).requires_grad_();
  p.mutable_grad() = zeros({3});
  nn::AdamW adamw({p});
  CHECK_THROWS_WITH_AS(adamw.step(), doctest::Contains("AdamW: parameter 0 of group 0 is on cuda:0"), Error);
  nn::SGD sgd({p}, {.lr = 0.1});
  CHECK_THROWS_WITH_AS(sgd.step(), doctest::Contains("SGD: parameter 0 of group 0 is on cuda:0"), Error);
  p.mutable_grad() = zeros({3}, TensorOptions(kInt64).device(kGpu));
  CHECK_THROWS_WITH_AS(nn::clip_grad_norm_({p}, 1.0), doctest::Contains("clip_grad_norm_: the gradient of parameter 0"),
                       Error);
  AdamStepOptions o;
  o.lr = 1e-3, o.beta1 = 0.9, o.beta2 = 0.999;
  CHECK_THROWS_WITH_AS(fused_adam_({zeros({3}, kGpu)}, {zeros({3}, kGpu)}, {zeros({3}, kGpu)}, {zeros({2}, kGpu)}, {},
                                   {1}, o),
                       doctest::Contains("fused_adam_: exp_avg_sqs[0] is float32 [2]"), Error);
}

}  // namespace
