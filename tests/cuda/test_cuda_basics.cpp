/* The CUDA plumbing: device queries, clear errors without a GPU, copies and fills on the
 * device checked against the CPU. */
#include <doctest/doctest.h>

#include "ops/dispatch.h"
#include "ops/ops.h"
#include "tests/gpu_test.h"

using namespace loom;

TEST_CASE("asking for CUDA without a usable GPU is a clear error") {
  if (cuda::is_available()) return;  // the positive cases below cover a machine with a GPU
  CHECK(cuda::device_count() == 0);
  CHECK_THROWS_WITH_AS(empty({4}, Device::cuda()), doctest::Contains("cuda"), Error);
  CHECK_THROWS_WITH_AS(zeros({4}).to(Device::cuda()), doctest::Contains("cuda"), Error);
  CHECK_THROWS_AS(cuda::get_device_properties(0), Error);
}

TEST_CASE("device properties") {
  LOOM_REQUIRE_GPU();
  auto p = cuda::get_device_properties(0);
  MESSAGE("GPU 0: ", p.name, " sm_", p.major, p.minor, ", ", p.total_memory >> 20, " MiB");
  CHECK(p.major >= 7);
  CHECK(p.total_memory > 0);
  CHECK_THROWS_AS(cuda::get_device_properties(cuda::device_count()), Error);
}

TEST_CASE("host <-> device copies with casts and strides match the CPU") {
  LOOM_REQUIRE_GPU();
  Tensor x = randn({5, 7}, kFloat64);
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kInt8, kUInt8, kBool}) {
    CAPTURE(dt);
    Tensor on_gpu = x.t().to(Device::cuda()).to(dt);  // strided upload, then a device-side cast
    CHECK(on_gpu.is_cuda());
    Tensor back = on_gpu.to(kCPU);
    CHECK(back.dtype() == dt);
    CHECK(equal(back, x.t().to(dt)));
  }
  Tensor g = zeros({4, 6}, Device::cuda());
  g.slice(1, 0, 6, 2).fill_(3.0);             // strided device fill
  g.select(0, 1).copy_(tensor<float>({1, 2, 3, 4, 5, 6}));  // host -> strided device view
  std::vector<float> expect{3, 0, 3, 0, 3, 0, 1, 2, 3, 4, 5, 6, 3, 0, 3, 0, 3, 0, 3, 0, 3, 0, 3, 0};
  CHECK(g.to_vector<float>() == expect);
  CHECK(g.t().contiguous().to(kCPU).t().to_vector<float>() == expect);  // device-side transpose copy
}

TEST_CASE("a device copy between overlapping views gives the CPU's result (the source as it was)") {
  LOOM_REQUIRE_GPU();
  // A kernel copying in place would read elements it had already written, in an order of its own.
  for (auto [dst_at, src_at] : {std::pair<int64_t, int64_t>{1, 0}, {0, 1}}) {
    CAPTURE(dst_at);
    Tensor cpu = arange(0, 4096, 1, kFloat32), gpu = cpu.to(Device::cuda());
    cpu.narrow(0, dst_at, 4095).copy_(cpu.narrow(0, src_at, 4095));
    gpu.narrow(0, dst_at, 4095).copy_(gpu.narrow(0, src_at, 4095));
    CHECK(equal(gpu.to(kCPU), cpu));
    CHECK(cpu[dst_at == 1 ? 4095 : 0].item<float>() == (dst_at == 1 ? 4094.0f : 1.0f));
  }
  Tensor m = arange(0, 64 * 64, 1, TensorOptions(kFloat32).device(Device::cuda())).view({64, 64});
  Tensor expected = m.t().contiguous().to(kCPU);
  m.copy_(m.t());
  CHECK(equal(m.to(kCPU), expected));
}

TEST_CASE("ops without a CUDA kernel say so") {
  LOOM_REQUIRE_GPU();
  Tensor g = ones({3}, Device::cuda());
  if (!has_kernel(Op::gelu, DeviceType::CUDA))
    CHECK_THROWS_WITH_AS(gelu(g), doctest::Contains("gelu has no CUDA kernel"), Error);
}
