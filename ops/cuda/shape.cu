/*
 * CUDA shape kernels (filled in by the CUDA backend work).
 */
#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/launch.cuh"
