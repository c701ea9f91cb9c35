/*
 * Registration of the CUDA kernels (built only with the CUDA backend). Today: copies between
 * host and device and on the device (any strides, any dtypes) and fills; every other op
 * reports "<op> has no CUDA kernel" until the CUDA backend issue adds it.
 */
#pragma once

namespace loom::cuda {

void register_cuda_kernels();

}  // namespace loom::cuda
