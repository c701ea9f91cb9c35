/*
 * The multi-tensor optimizer ops (fused_adam_, fused_sgd_, foreach_norm_reduce, foreach_mul_)
 * on CUDA against their CPU kernels on the same inputs: every variant (Adam and AdamW, amsgrad,
 * maximize, weight decay; SGD with momentum, dampening, nesterov, the first step), float32 and
 * float64, more tensors than one launch takes, and empty tensors. The tolerance is a few ulps,
 * not bitwise: nvcc contracts a * b + c into one FMA where the CPU loop may round twice, and
 * the norm is summed in another order. nn::Adam/SGD/clip_grad_norm_ on CUDA:
 * tests/nn/test_optim_cuda.cpp.
 */
#include <cmath>
#include <limits>
#include <vector>

#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::pat;
using test::Tol;

LOOM_CUDA_COVERS(Op::fused_adam_, Op::fused_sgd_, Op::foreach_norm_reduce, Op::foreach_mul_);

const Device kGpu = Device::cuda(0);

// A few ulps of each dtype, relative, with an absolute floor for values that cancel to ~0.
Tol ulps_tol(DType dt) { return dt == kFloat32 ? Tol{1e-6, 1e-7} : Tol{1e-14, 1e-16}; }

// `count` tensors of varied sizes, 0 among them; seed varies the values.
std::vector<Tensor> tensors(int count, DType dt, double seed, double scale = 0.5) {
  std::vector<Tensor> out;
  for (int i = 0; i < count; ++i) out.push_back(pat({(i * 53) % 400}, seed + 0.37 * i, scale).to(dt));
  return out;
}

std::vector<Tensor> copy_to(const std::vector<Tensor>& values, Device device) {
  std::vector<Tensor> out;
  for (const Tensor& v : values) out.push_back(v.to(device).clone());
  return out;
}

void check_lists(const std::vector<Tensor>& gpu, const std::vector<Tensor>& cpu, const char* what) {
  REQUIRE(gpu.size() == cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) test::check_same(gpu[i], cpu[i], ulps_tol(cpu[i].dtype()),
                                                          std::string(what) + "[" + std::to_string(i) + "]");
}

// Three Adam steps on the CPU and on CUDA from the same state, tensors at different step counts.
void check_adam(DType dt, int count, bool decoupled, bool amsgrad, bool maximize, double weight_decay) {
  AdamStepOptions o;
  o.lr = 1e-2, o.beta1 = 0.9, o.beta2 = 0.99, o.eps = 1e-8, o.weight_decay = weight_decay;
  o.decoupled = decoupled, o.amsgrad = amsgrad, o.maximize = maximize;
  const std::vector<Tensor> p0 = tensors(count, dt, 0.1), m0 = tensors(count, dt, 0.7, 0.05),
                            v0 = tensors(count, dt, 1.3, 0.1);
  std::vector<Tensor> v_abs;
  for (const Tensor& v : v0) v_abs.push_back(v.abs());  // second moments are >= 0
  std::vector<int64_t> steps;
  for (int i = 0; i < count; ++i) steps.push_back(1 + i % 3);
  std::vector<Tensor> p[2], m[2], v[2], vmax[2];
  for (int d = 0; d < 2; ++d) {
    const Device device = d == 0 ? Device(kCPU) : kGpu;
    p[d] = copy_to(p0, device), m[d] = copy_to(m0, device), v[d] = copy_to(v_abs, device);
    if (amsgrad) vmax[d] = copy_to(v_abs, device);
    for (int s = 0; s < 3; ++s) {
      std::vector<int64_t> now = steps;
      for (int64_t& t : now) t += s;
      const std::vector<Tensor> g = copy_to(tensors(count, dt, 2.9 + s), device);
      fused_adam_(p[d], g, m[d], v[d], vmax[d], now, o);
    }
  }
  check_lists(p[1], p[0], "param");
  check_lists(m[1], m[0], "exp_avg");
  check_lists(v[1], v[0], "exp_avg_sq");
  if (amsgrad) check_lists(vmax[1], vmax[0], "max_exp_avg_sq");
}

TEST_CASE("optim: fused_adam_ matches the CPU, Adam and AdamW, every option, float32 and float64") {
  LOOM_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64}) {
    for (bool decoupled : {false, true}) {
      for (bool amsgrad : {false, true}) {
        for (bool maximize : {false, true}) {
          for (double wd : {0.0, 0.1}) {
            CAPTURE(dt);
            CAPTURE(decoupled);
            CAPTURE(amsgrad);
            CAPTURE(maximize);
            CAPTURE(wd);
            check_adam(dt, 5, decoupled, amsgrad, maximize, wd);
          }
        }
      }
    }
  }
}

TEST_CASE("optim: fused_adam_ over more tensors than one launch takes, empty ones among them") {
  LOOM_REQUIRE_GPU();
  check_adam(kFloat32, 70, true, true, false, 0.01);  // 3 launches of <= 32
  check_adam(kFloat64, 40, false, false, true, 0.1);
}

// The capturable form on CUDA (step counts and lr read on the device) against the host form on the
// CPU: three steps from counts that differ per tensor, the lr changed between steps by writing
// its tensor, as a schedule does between replays.
void check_adam_capturable(DType dt, int count, bool decoupled, bool amsgrad) {
  AdamStepOptions o;
  o.lr = 0, o.beta1 = 0.9, o.beta2 = 0.99, o.eps = 1e-8, o.weight_decay = 0.05;  // lr: not read, the tensor's
  o.decoupled = decoupled, o.amsgrad = amsgrad;
  const std::vector<Tensor> p0 = tensors(count, dt, 0.2), m0 = tensors(count, dt, 0.8, 0.05);
  std::vector<Tensor> v0;
  for (const Tensor& v : tensors(count, dt, 1.1, 0.1)) v0.push_back(v.abs());
  std::vector<Tensor> p[2], m[2], v[2], vmax[2], counts;
  for (int d = 0; d < 2; ++d) {
    const Device device = d == 0 ? Device(kCPU) : kGpu;
    p[d] = copy_to(p0, device), m[d] = copy_to(m0, device), v[d] = copy_to(v0, device);
    if (amsgrad) vmax[d] = copy_to(v0, device);
  }
  for (int i = 0; i < count; ++i) counts.push_back(full({}, i % 4, TensorOptions(kInt64).device(kGpu)));
  Tensor lr = empty({}, TensorOptions(kFloat64).device(kGpu));
  for (int s = 0; s < 3; ++s) {
    const double step_lr = 1e-2 / (s + 1);
    std::vector<int64_t> now;
    for (int i = 0; i < count; ++i) now.push_back(i % 4 + s + 1);
    AdamStepOptions host = o;
    host.lr = step_lr;
    fused_adam_(p[0], tensors(count, dt, 3.7 + s), m[0], v[0], vmax[0], now, host);
    lr.fill_(step_lr);
    fused_adam_(p[1], copy_to(tensors(count, dt, 3.7 + s), kGpu), m[1], v[1], vmax[1], counts, lr, o);
  }
  check_lists(p[1], p[0], "param");
  check_lists(m[1], m[0], "exp_avg");
  check_lists(v[1], v[0], "exp_avg_sq");
  if (amsgrad) check_lists(vmax[1], vmax[0], "max_exp_avg_sq");
  for (int i = 0; i < count; ++i) {
    CAPTURE(i);
    CHECK(counts[i].to(kCPU).item<int64_t>() == i % 4 + 3);  // empty tensors' counts advance too
  }
}

TEST_CASE("optim: fused_adam_'s capturable form on CUDA matches the host form on the CPU") {
  LOOM_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64}) {
    for (bool decoupled : {false, true}) {
      CAPTURE(dt);
      CAPTURE(decoupled);
      check_adam_capturable(dt, 6, decoupled, !decoupled);
    }
  }
  check_adam_capturable(kFloat32, 70, true, false);  // 3 launches of <= 32, empty tensors among them
  AdamStepOptions o;
  o.beta1 = 0.9, o.beta2 = 0.99;
  const std::vector<Tensor> one = {zeros({3}, kGpu)};
  const Tensor lr = full({}, 0.1, TensorOptions(kFloat64).device(kGpu));
  CHECK_THROWS_WITH_AS(
      fused_adam_(one, one, one, one, {}, {zeros({}, kInt64)}, lr, o),
      doctest::Contains("fused_adam_: step_counts[0] must be a 0-dim int64 on cuda:0, got int64 [] on cpu"),
      Error);
  CHECK_THROWS_WITH_AS(fused_adam_(one, one, one, one, {}, {zeros({}, TensorOptions(kInt64).device(kGpu))},
                                   full({}, 0.1, TensorOptions(kFloat32).device(kGpu)), o),
                       doctest::Contains("fused_adam_: lr must be a 0-dim float64 on cuda:0, got float32"),
                       Error);
}

TEST_CASE("optim: fused_sgd_ with the lr on the device matches the host lr on the CPU") {
  LOOM_REQUIRE_GPU();
  SgdStepOptions o;
  o.lr = 0, o.momentum = 0.9, o.nesterov = true;  // lr: not read, the tensor's
  const std::vector<Tensor> p0 = tensors(70, kFloat32, 0.6);
  std::vector<Tensor> p[2] = {copy_to(p0, kCPU), copy_to(p0, kGpu)}, buf[2];
  for (int d = 0; d < 2; ++d)
    for (const Tensor& t : p0)
      buf[d].push_back(empty(t.sizes(), TensorOptions(kFloat32).device(p[d][0].device())));
  Tensor lr = empty({}, TensorOptions(kFloat64).device(kGpu));
  for (int s = 0; s < 3; ++s) {
    SgdStepOptions host = o;
    host.lr = 0.1 * (s + 1), host.first_step = s == 0;
    fused_sgd_(p[0], tensors(70, kFloat32, 4.4 + s), buf[0], host);
    lr.fill_(host.lr);
    SgdStepOptions device = o;
    device.first_step = s == 0;
    fused_sgd_(p[1], copy_to(tensors(70, kFloat32, 4.4 + s), kGpu), buf[1], lr, device);
  }
  check_lists(p[1], p[0], "param");
  check_lists(buf[1], buf[0], "momentum_buffer");
}

// Three SGD steps (the first one starting the momentum buffers) on the CPU and on CUDA.
void check_sgd(DType dt, int count, double momentum, double dampening, bool nesterov, bool maximize,
               double weight_decay) {
  SgdStepOptions o;
  o.lr = 0.05, o.momentum = momentum, o.dampening = dampening, o.weight_decay = weight_decay;
  o.nesterov = nesterov, o.maximize = maximize;
  const std::vector<Tensor> p0 = tensors(count, dt, 0.4);
  std::vector<Tensor> p[2], buf[2];
  for (int d = 0; d < 2; ++d) {
    const Device device = d == 0 ? Device(kCPU) : kGpu;
    p[d] = copy_to(p0, device);
    if (momentum != 0)
      for (const Tensor& t : p0) buf[d].push_back(empty(t.sizes(), TensorOptions(dt).device(device)));
    for (int s = 0; s < 3; ++s) {
      SgdStepOptions call = o;
      call.first_step = s == 0;
      fused_sgd_(p[d], copy_to(tensors(count, dt, 5.1 + s), device), buf[d], call);
    }
  }
  check_lists(p[1], p[0], "param");
  if (momentum != 0) check_lists(buf[1], buf[0], "momentum_buffer");
}

TEST_CASE("optim: fused_sgd_ matches the CPU: momentum, dampening, nesterov, maximize, weight decay") {
  LOOM_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64}) {
    for (bool maximize : {false, true}) {
      for (double wd : {0.0, 0.01}) {
        CAPTURE(dt);
        CAPTURE(maximize);
        CAPTURE(wd);
        check_sgd(dt, 4, 0.0, 0.0, false, maximize, wd);
        check_sgd(dt, 4, 0.9, 0.0, false, maximize, wd);
        check_sgd(dt, 4, 0.9, 0.2, false, maximize, wd);
        check_sgd(dt, 4, 0.9, 0.0, true, maximize, wd);
      }
    }
  }
  check_sgd(kFloat32, 150, 0.9, 0.0, true, false, 0.0);  // 3 launches of <= 64, empty tensors
}

TEST_CASE("optim: foreach_norm_reduce matches the CPU for p = 1, 2, 3, infinity; NaN wins the max") {
  LOOM_REQUIRE_GPU();
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dt : {kFloat32, kFloat64}) {
    for (int count : {1, 3, 150}) {
      std::vector<Tensor> cpu = tensors(count, dt, 0.9, 3.0);
      if (count == 3) cpu.push_back(pat({5000}, 0.2, 1.0).to(dt));  // several blocks for one tensor
      const std::vector<Tensor> gpu = copy_to(cpu, kGpu);
      for (double p : {1.0, 2.0, 3.0, inf}) {
        CAPTURE(dt);
        CAPTURE(count);
        CAPTURE(p);
        const Tensor g = foreach_norm_reduce(gpu, p, kGpu), c = foreach_norm_reduce(cpu, p, kCPU);
        CHECK(g.is_cuda());
        // float64 sums of float64 terms in another order: agreement to ~1e-13 relative.
        test::check_same(g, c, Tol{1e-12, 0}, "norm");
      }
    }
  }
  std::vector<Tensor> with_nan = copy_to(tensors(4, kFloat32, 0.5), kCPU);
  with_nan[2].narrow(0, 7, 1).fill_(std::numeric_limits<double>::quiet_NaN());
  for (double p : {2.0, inf}) CHECK(std::isnan(foreach_norm_reduce(copy_to(with_nan, kGpu), p, kGpu).to(kCPU).item<double>()));
  CHECK(foreach_norm_reduce({}, 2.0, kGpu).to(kCPU).item<double>() == 0.0);
  CHECK(foreach_norm_reduce(copy_to({zeros({0})}, kGpu), 2.0, kGpu).to(kCPU).item<double>() == 0.0);
}

TEST_CASE("optim: foreach_mul_ by a device scalar matches the CPU exactly") {
  LOOM_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat64}) {
    const std::vector<Tensor> values = tensors(150, dt, 0.3, 2.0);
    std::vector<Tensor> cpu = copy_to(values, kCPU), gpu = copy_to(values, kGpu);
    foreach_mul_(cpu, full({}, 0.3, kFloat64));
    foreach_mul_(gpu, full({}, 0.3, TensorOptions(kFloat64).device(kGpu)));
    // One multiplication by the same rounded factor: bitwise the same.
    for (size_t i = 0; i < cpu.size(); ++i) test::check_same(gpu[i], cpu[i], Tol{0, 0}, "scaled");
  }
}

TEST_CASE("optim: the CUDA ops refuse tensors on two devices") {
  LOOM_REQUIRE_GPU();
  std::vector<Tensor> mixed = {zeros({3}, kGpu), zeros({3})};
  CHECK_THROWS_WITH_AS(foreach_mul_(mixed, full({}, 1.0, TensorOptions(kFloat64).device(kGpu))),
                       doctest::Contains("foreach_mul_: tensors[1] is on cpu"), Error);
  SgdStepOptions o;
  o.lr = 0.1;
  CHECK_THROWS_WITH_AS(fused_sgd_({zeros({3}, kGpu)}, {zeros({3})}, {}, o),
                       doctest::Contains("fused_sgd_: grads[0] is float32 [3] on cpu"), Error);
}

}  // namespace
}  // namespace loom
