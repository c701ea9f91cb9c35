/*
 * GradScaler's ops on CUDA against the CPU kernels. amp_unscale_and_check_ (the fused pass):
 * float32, float64 and bfloat16 values; inf and NaN at the first, a middle and the last
 * position; more tensors than one launch takes (64) and empty ones; found_inf left alone when
 * every value is finite; inv_scale from a device tensor. amp_update_scale_: a sequence of clean
 * and overflowing steps against values worked out by hand, growth past float32's range
 * refused. GradScaler itself on CUDA: tests/cuda/test_cuda_grad_scaler.cpp.
 */
#include <cmath>
#include <limits>
#include <vector>

#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::pat;

LOOM_CUDA_COVERS(Op::amp_unscale_and_check_);
LOOM_CUDA_COVERS(Op::amp_update_scale_);

const Device kGpu = Device::cuda(0);

// Tensors of varied sizes (0 included), values scaled up as a scaled loss would make them.
std::vector<Tensor> gradients(int count, DType dt, double seed) {
  std::vector<Tensor> out;
  for (int i = 0; i < count; ++i) out.push_back(pat({(i * 37) % 300}, seed + i, 4096.0).to(dt));
  return out;
}

std::vector<Tensor> to_device(const std::vector<Tensor>& values, Device device) {
  std::vector<Tensor> out;
  for (const Tensor& v : values) out.push_back(v.to(device));
  return out;
}

// Runs the op on CPU copies and on CUDA copies; checks bitwise-equal values and equal flags.
void check_unscale_matches_cpu(const std::vector<Tensor>& values, float inv_scale, float flag_before) {
  std::vector<Tensor> cpu = to_device(values, kCPU), gpu = to_device(values, kGpu);
  for (Tensor& t : cpu) t = t.clone();
  Tensor cpu_flag = full({1}, flag_before), gpu_flag = full({1}, flag_before, kGpu);
  amp_unscale_and_check_(cpu, cpu_flag, inv_scale);
  amp_unscale_and_check_(gpu, gpu_flag, inv_scale);
  CHECK(gpu_flag.to(kCPU).item<float>() == cpu_flag.item<float>());
  for (size_t i = 0; i < cpu.size(); ++i) {
    CAPTURE(i);
    // One multiplication per value, rounded once: the same value on both backends, NaN where
    // the CPU has NaN.
    Tensor g = gpu[i].to(kCPU).to(kFloat64).contiguous(), c = cpu[i].to(kFloat64).contiguous();
    REQUIRE(g.numel() == c.numel());
    const double *gp = g.data_ptr<double>(), *cp = c.data_ptr<double>();
    int64_t mismatches = 0;
    for (int64_t k = 0; k < c.numel(); ++k)
      mismatches += std::isnan(cp[k]) ? !std::isnan(gp[k]) : gp[k] != cp[k];
    CHECK(mismatches == 0);
  }
}

TEST_CASE("amp: amp_unscale_and_check_ matches the CPU, every dtype, inf and NaN anywhere") {
  LOOM_REQUIRE_GPU();
  const float inv_scale = static_cast<float>(1.0 / 65536.0);
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    CAPTURE(dt);
    check_unscale_matches_cpu(gradients(5, dt, 0.3), inv_scale, 0.0f);    // all finite: flag stays 0
    check_unscale_matches_cpu(gradients(150, dt, 0.7), inv_scale, 0.0f);  // three launches of <= 64
    for (double bad : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                       std::numeric_limits<double>::quiet_NaN()}) {
      for (int64_t position : {int64_t{0}, int64_t{123}, int64_t{299}}) {
        CAPTURE(bad);
        CAPTURE(position);
        std::vector<Tensor> values = gradients(70, dt, 1.1);
        Tensor target = pat({300}, 0.2, 1.0).to(dt);
        target.narrow(0, position, 1).fill_(bad);
        values.insert(values.begin() + 40, target);
        check_unscale_matches_cpu(values, inv_scale, 0.0f);
      }
    }
  }
  // A flag already set stays set (one flag can collect several calls).
  check_unscale_matches_cpu(gradients(3, kFloat32, 2.0), inv_scale, 1.0f);
}

TEST_CASE("amp: amp_unscale_and_check_ refuses what it cannot scale, naming the value") {
  LOOM_REQUIRE_GPU();
  Tensor flag = zeros({1}, kGpu);
  CHECK_THROWS_WITH(amp_unscale_and_check_({ones({4}, kGpu), ones({4})}, flag, 1.0f),
                    doctest::Contains("value 1 is on cpu"));
  CHECK_THROWS_WITH(amp_unscale_and_check_({ones({4}, kGpu).to(kFloat16)}, flag, 1.0f),
                    doctest::Contains("value 0 has dtype float16"));
  CHECK_THROWS_WITH(amp_unscale_and_check_({ones({4, 4}, kGpu).t()}, flag, 1.0f),
                    doctest::Contains("not contiguous"));
  CHECK_THROWS_WITH(amp_unscale_and_check_({ones({4}, kGpu)}, zeros({2}, kGpu), 1.0f),
                    doctest::Contains("found_inf must be a float32 tensor of one element"));
}

TEST_CASE("amp: amp_unscale_and_check_ reads inv_scale from a device tensor") {
  LOOM_REQUIRE_GPU();
  const float inv_scale = 0.125f;
  std::vector<Tensor> by_value = to_device(gradients(5, kFloat32, 0.9), kGpu);
  std::vector<Tensor> by_tensor = to_device(gradients(5, kFloat32, 0.9), kGpu);
  Tensor flag_a = zeros({1}, kGpu), flag_b = zeros({1}, kGpu);
  amp_unscale_and_check_(by_value, flag_a, inv_scale);
  amp_unscale_and_check_(by_tensor, flag_b, full({1}, inv_scale, kGpu));
  for (size_t i = 0; i < by_value.size(); ++i) CHECK(equal(by_value[i].to(kCPU), by_tensor[i].to(kCPU)));
  CHECK_THROWS_WITH(amp_unscale_and_check_(by_tensor, flag_b, full({1}, inv_scale)),
                    doctest::Contains("inv_scale is on cpu"));
  CHECK_THROWS_WITH(
      amp_unscale_and_check_(by_tensor, flag_b, full({1}, 0.5, TensorOptions(kFloat64).device(kGpu))),
      doctest::Contains("inv_scale must be a float32 tensor of one element"));
}

TEST_CASE("amp: amp_update_scale_ backs off, counts and grows as torch, on both backends") {
  LOOM_REQUIRE_GPU();
  // growth_interval 3, growth 2, backoff 0.25, from 1024: by hand, step by step.
  struct Step {
    float found_inf;
    float scale;
    int32_t tracker;
  };
  const Step steps[] = {{0, 1024, 1}, {0, 1024, 2}, {0, 2048, 0}, {1, 512, 0}, {0, 512, 1},
                        {1, 128, 0},  {0, 128, 1},  {0, 128, 2},  {0, 256, 0}, {2, 64, 0}};
  for (Device device : {Device(kCPU), kGpu}) {
    CAPTURE(device);
    Tensor scale = full({1}, 1024.0f, TensorOptions(kFloat32).device(device));
    Tensor tracker = zeros({1}, TensorOptions(kInt32).device(device));
    for (const Step& step : steps) {
      CAPTURE(step.found_inf);
      amp_update_scale_(scale, tracker, full({1}, step.found_inf, TensorOptions(kFloat32).device(device)),
                        2.0, 0.25, 3);
      CHECK(scale.to(kCPU).item<float>() == step.scale);
      CHECK(tracker.to(kCPU).item<int32_t>() == step.tracker);
    }
    // A growth past float32's largest value keeps the scale and restarts the count.
    scale.fill_(std::numeric_limits<float>::max() / 1.5f);
    tracker.fill_(2);
    amp_update_scale_(scale, tracker, zeros({1}, TensorOptions(kFloat32).device(device)), 2.0, 0.5, 3);
    CHECK(scale.to(kCPU).item<float>() == std::numeric_limits<float>::max() / 1.5f);
    CHECK(tracker.to(kCPU).item<int32_t>() == 0);
  }
}

TEST_CASE("amp: amp_update_scale_ refuses a tensor of another dtype or device, naming it") {
  LOOM_REQUIRE_GPU();
  Tensor scale = ones({1}, kGpu), tracker = zeros({1}, TensorOptions(kInt32).device(kGpu)),
         flag = zeros({1}, kGpu);
  CHECK_THROWS_WITH(
      amp_update_scale_(scale, zeros({1}, TensorOptions(kInt64).device(kGpu)), flag, 2.0, 0.5, 10),
      doctest::Contains("growth_tracker must be a int32 tensor of one element"));
  CHECK_THROWS_WITH(amp_update_scale_(scale, tracker, zeros({1}), 2.0, 0.5, 10),
                    doctest::Contains("found_inf is on cpu but the call runs on cuda:0"));
  CHECK_THROWS_WITH(amp_update_scale_(scale, tracker, flag, 1.0, 0.5, 10),
                    doctest::Contains("growth_factor must be a finite number > 1"));
  CHECK_THROWS_WITH(amp_update_scale_(scale, tracker, flag, 2.0, 0.5, 0),
                    doctest::Contains("growth_interval must be >= 1"));
}

}  // namespace
}  // namespace loom
