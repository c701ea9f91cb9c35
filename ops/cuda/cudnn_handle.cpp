/*
 * The cuDNN handles of cudnn_handle.h: one per device, kept in a map that is never destroyed.
 */
#include "ops/cuda/cudnn_handle.h"

#include <map>

#include "core/cuda/cuda_check.h"
#include "core/error.h"

namespace loom::cuda {

void cudnn_fail(cudnnStatus_t status, const char* call, const char* file, int line) {
  char message[512] = {};
  cudnnGetLastErrorString(message, sizeof(message));
  ::loom::detail::throw_error(
      file, line,
      ::loom::detail::concat("cuDNN error ", cudnnGetErrorString(status), " (", static_cast<int>(status),
                             ") in ", call, message[0] != '\0' ? ": " : "", message));
}

std::mutex& cudnn_mutex() {
  static std::mutex m;
  return m;
}

cudnnHandle_t cudnn_handle(cudaStream_t stream) {
  static auto& handles = *new std::map<int, cudnnHandle_t>();
  int device = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&device));
  cudnnHandle_t& h = handles[device];
  if (h == nullptr) LOOM_CUDNN_CHECK(cudnnCreate(&h));
  LOOM_CUDNN_CHECK(cudnnSetStream(h, stream));
  return h;
}

}  // namespace loom::cuda
