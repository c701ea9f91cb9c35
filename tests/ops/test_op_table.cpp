/* The op table is complete: every op with a kernel signature has a CPU kernel. */
#include <doctest/doctest.h>

#include "ops/dispatch.h"

using namespace loom;

TEST_CASE("every primitive op with a kernel signature has a CPU kernel") {
  for (size_t i = 0; i < kNumOps; ++i) {
    if (!kOpHasKernel[i]) continue;
    CAPTURE(kOpNames[i]);
    CHECK(has_kernel(static_cast<Op>(i), DeviceType::CPU));
  }
}

TEST_CASE("a missing kernel is an error that names the op and the device") {
  if (has_kernel(Op::gelu, DeviceType::CUDA)) return;  // built and registered with CUDA
  CHECK_THROWS_WITH_AS(get_kernel<Op::gelu>(Device::cuda()), doctest::Contains("gelu has no CUDA kernel"), Error);
}
