/*
 * The coverage test of the CUDA op table: every op of ops/op_list.def that has a kernel must
 * have a CUDA kernel and at least one case in tests/cuda/ops comparing it with the CPU.
 */
#include <sstream>

#include "tests/cuda/ops/cuda_test_util.h"

using namespace loom;

LOOM_CUDA_COVERS(Op::copy, Op::fill);  // tests/cuda/test_cuda_basics.cpp and every case below

TEST_CASE("every op with a kernel has a CUDA kernel and a CUDA case") {
  std::ostringstream missing_kernel, missing_case;
  for (size_t i = 0; i < kNumOps; ++i) {
    if (!kOpHasKernel[i]) continue;
    const Op op = static_cast<Op>(i);
    if (!has_kernel(op, DeviceType::CUDA)) missing_kernel << ' ' << kOpNames[i];
    if (!test::cuda_covered_ops().count(op)) missing_case << ' ' << kOpNames[i];
  }
  CHECK_MESSAGE(missing_kernel.str().empty(), "ops without a CUDA kernel:", missing_kernel.str());
  CHECK_MESSAGE(missing_case.str().empty(), "ops without a case in tests/cuda/ops:", missing_case.str());
}
