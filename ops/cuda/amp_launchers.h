/*
 * The interface of the CUDA mixed-precision kernels (ops/cuda/amp.cu) for the C++20 side
 * (amp_kernels.cpp). Plain C++17, like launchers.h.
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/launchers.h"

namespace loom::cuda {

// Tensors one launch of the unscale kernel takes: their pointers and sizes travel by value in
// the kernel's parameters (4 KB at most on sm_90; 64 x 16 bytes here).
inline constexpr int kMaxUnscaleTensors = 64;

struct UnscaleList {
  void* data[kMaxUnscaleTensors] = {};
  int64_t numel[kMaxUnscaleTensors] = {};
  int count = 0;
};

// Multiplies every value of the list's tensors (all of dtype `dtype`: float32, float64 or
// bfloat16) by *inv_scale in place; stores 1.0f into *found_inf if any value was inf or NaN
// before, and leaves it otherwise. Both pointers in device memory.
cudaError_t launch_amp_unscale_and_check(const UnscaleList& list, int dtype, float* found_inf,
                                         const float* inv_scale, cudaStream_t stream);

// One update of the loss scale from *found_inf (ops/amp_ops.h's amp_update_scale_), one thread;
// every pointer in device memory.
cudaError_t launch_amp_update_scale(float* scale, int* growth_tracker, const float* found_inf,
                                    double growth_factor, double backoff_factor, int64_t growth_interval,
                                    cudaStream_t stream);

}  // namespace loom::cuda
