/*
 * Registration of the CUDA conv_pool kernels (filled in by the CUDA backend work).
 */
#include "ops/cuda/cuda_kernels.h"

namespace loom::cuda {

void register_conv_pool_cuda_kernels() {}

}  // namespace loom::cuda
