/*
 * CUDA kernels of GradScaler's ops (see ops/cuda/amp_launchers.h, CPU twins in
 * ops/cpu/amp_kernels.cpp). Both read the scale from device memory when they run, so a captured
 * step with loss scaling uses each replay's scale.
 *
 * amp_unscale_and_check_ (the fused pass): many tensors per launch, torch's multi_tensor_apply
 * idea without its chunk table. blockIdx.y picks the tensor, and the blocks along x walk it in
 * a grid-stride loop, so a launch costs one kernel whatever the number of small gradients.
 * Each thread tests its values for inf/NaN by their exponent bits (as the CPU kernel: right
 * under fast-math too), scales them, and, if it saw one, sets the flag once with an atomic
 * exchange: every writer stores the same 1.0f, so the order does not matter.
 */
#include <cstdint>
#include <cstring>

#include "ops/cuda/amp_launchers.h"
#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/launch.cuh"

namespace loom::cuda {

// ---- kernels -------------------------------------------------------------------------------

namespace {

constexpr unsigned kOneFloatBits = 0x3f800000u;  // 1.0f

__device__ inline bool non_finite(float v) {
  return (__float_as_uint(v) & 0x7f800000u) == 0x7f800000u;
}
__device__ inline bool non_finite(double v) {
  return (static_cast<unsigned long long>(__double_as_longlong(v)) & 0x7ff0000000000000ull) ==
         0x7ff0000000000000ull;
}

// T the storage type; the product is taken in opmath (float for bfloat16; double times the
// float inv_scale for double, as torch's opmath).
template <class T>
__global__ void amp_unscale_kernel(UnscaleList list, float* found_inf, const float* inv_scale) {
  using A = opmath_t<T>;
  T* data = static_cast<T*>(list.data[blockIdx.y]);
  const int64_t numel = list.numel[blockIdx.y];
  const A inv = static_cast<A>(*inv_scale);
  bool bad = false;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < numel;
       i += int64_t{gridDim.x} * blockDim.x) {
    const A v = to_opmath(data[i]);
    bad |= non_finite(v);
    data[i] = convert<T>(v * inv);
  }
  if (bad) atomicExch(reinterpret_cast<unsigned*>(found_inf), kOneFloatBits);
}

// One thread: torch's amp_update_scale_cuda_kernel, the products in double stored in float32.
__global__ void amp_update_scale_kernel(float* scale, int* growth_tracker, const float* found_inf,
                                        double growth_factor, double backoff_factor, int64_t growth_interval) {
  if (*found_inf != 0.0f) {
    *scale = static_cast<float>(static_cast<double>(*scale) * backoff_factor);
    *growth_tracker = 0;
  } else if (*growth_tracker + 1 == growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(*scale) * growth_factor);
    if (!non_finite(grown)) *scale = grown;
    *growth_tracker = 0;
  } else {
    ++*growth_tracker;
  }
}

}  // namespace

// ---- launchers -----------------------------------------------------------------------------

cudaError_t launch_amp_unscale_and_check(const UnscaleList& list, int dtype, float* found_inf,
                                         const float* inv_scale, cudaStream_t stream) {
  if (list.count == 0) return cudaSuccess;
  int64_t longest = 0;
  for (int i = 0; i < list.count; ++i) longest = list.numel[i] > longest ? list.numel[i] : longest;
  if (longest == 0) return cudaSuccess;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    LaunchConfig config = grid_stride(longest, stream);
    config.grid.y = static_cast<unsigned>(list.count);
    return launch<amp_unscale_kernel<T>>(config, list, found_inf, inv_scale);
  };
  switch (dtype) {
    case kCodeFloat32:
      return go(float{});
    case kCodeFloat64:
      return go(double{});
    case kCodeBFloat16:
      return go(__nv_bfloat16{});
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t launch_amp_update_scale(float* scale, int* growth_tracker, const float* found_inf,
                                    double growth_factor, double backoff_factor, int64_t growth_interval,
                                    cudaStream_t stream) {
  const LaunchConfig config{1, 1, 0, stream, BlockThreads::kIndependent};
  return launch<amp_update_scale_kernel>(config, scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                                         growth_interval);
}

}  // namespace loom::cuda
