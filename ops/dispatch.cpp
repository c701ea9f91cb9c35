/* Kernel lookup failures and one-time registration of all backends' kernels. */
#include "ops/dispatch.h"

#include <mutex>

#include "ops/cpu/cpu_kernels.h"
#if LOOM_WITH_CUDA
#include "ops/cuda/cuda_kernels.h"
#endif

namespace loom {

void ensure_kernels_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    cpu::register_cpu_kernels();
#if LOOM_WITH_CUDA
    cuda::register_cuda_kernels();
#endif
  });
}

bool has_kernel(Op op, DeviceType device) {
  ensure_kernels_registered();
  return kernel_table().get(static_cast<size_t>(op), device) != nullptr;
}

void throw_missing_kernel(Op op, DeviceType device) {
  LOOM_FAIL(op_name(op), " has no ", device == DeviceType::CUDA ? "CUDA" : "CPU", " kernel",
            device == DeviceType::CUDA ? " (is Loom built with the CUDA backend?)" : "");
}

}  // namespace loom
