/*
 * CUDA copies between any strides and dtypes, and fills.
 *
 * Kernels: one thread per element (grid-stride), the strided offset computed from the
 * linear index. Conversions follow core/numeric_cast.h, as on the CPU: 16-bit floats round to
 * nearest even, and a float that does not fit an integer type wraps through int64.
 */
#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/launchers.h"

namespace loom::cuda {

// ---- kernels -------------------------------------------------------------------------------

namespace {

struct Offsets {
  int64_t dst, src;
};

__device__ Offsets offsets_of(int64_t i, const StridedLayout& l) {
  Offsets o{0, 0};
  for (int d = l.ndim - 1; d >= 0; --d) {
    int64_t idx = i % l.sizes[d];
    i /= l.sizes[d];
    o.dst += idx * l.dst_strides[d];
    o.src += idx * l.src_strides[d];
  }
  return o;
}

template <class D, class S>
__global__ void copy_kernel(D* dst, const S* src, StridedLayout layout, int64_t numel) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < numel; i += int64_t{gridDim.x} * blockDim.x) {
    Offsets o = offsets_of(i, layout);
    dst[o.dst] = convert<D>(src[o.src]);
  }
}

template <class T>
__global__ void fill_kernel(T* dst, T value, StridedLayout layout, int64_t numel) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < numel; i += int64_t{gridDim.x} * blockDim.x)
    dst[offsets_of(i, layout).dst] = value;
}

}  // namespace

// ---- launchers -----------------------------------------------------------------------------

cudaError_t launch_copy(void* dst, int dst_dtype, const void* src, int src_dtype, const StridedLayout& layout,
                        int64_t numel, cudaStream_t stream) {
  return visit_code(dst_dtype, [&](auto d) {
    using D = decltype(d);
    return visit_code(src_dtype, [&](auto s) {
      using S = decltype(s);
      return launch<copy_kernel<D, S>>(grid_stride(numel, stream),
                                       static_cast<D*>(dst), static_cast<const S*>(src), layout, numel);
    });
  });
}

cudaError_t launch_fill(void* dst, int dtype, const StridedLayout& layout, int64_t numel, double value_float,
                        int64_t value_int, cudaStream_t stream) {
  return visit_code(dtype, [&](auto t) {
    using T = decltype(t);
    T value;
    if constexpr (std::is_same<T, bool>::value) {
      value = value_int != 0 || value_float != 0.0;
    } else if constexpr (std::is_integral<T>::value) {
      value = static_cast<T>(value_int);
    } else {
      value = convert<T>(value_float);
    }
    return launch<fill_kernel<T>>(grid_stride(numel, stream), static_cast<T*>(dst),
                                  value, layout, numel);
  });
}

}  // namespace loom::cuda
