/*
 * Registration of the CUDA shape kernels (filled in by the CUDA backend work).
 */
#include "ops/cuda/cuda_kernels.h"

namespace loom::cuda {

void register_shape_cuda_kernels() {}

}  // namespace loom::cuda
