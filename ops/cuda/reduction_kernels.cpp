/*
 * Registration of the CUDA reduction kernels (filled in by the CUDA backend work).
 */
#include "ops/cuda/cuda_kernels.h"

namespace loom::cuda {

void register_reduction_cuda_kernels() {}

}  // namespace loom::cuda
