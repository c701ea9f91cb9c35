/*
 * Registration of the CUDA nn kernels (filled in by the CUDA backend work).
 */
#include "ops/cuda/cuda_kernels.h"

namespace loom::cuda {

void register_nn_cuda_kernels() {}

}  // namespace loom::cuda
