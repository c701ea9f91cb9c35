/*
 * CUDA copies between any strides and dtypes, and fills.
 *
 * Kernels: one thread per element (grid-stride), the strided offset computed from the
 * linear index. Conversions go through float/double for floating types and int64 for
 * integers; 16-bit floats round to nearest even (__float2half_rn, __float2bfloat16_rn), as
 * on the CPU.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ops/cuda/launchers.h"

namespace loom::cuda {

// ---- kernels -------------------------------------------------------------------------------

namespace {

template <class T>
struct Convert {  // arithmetic types
  __device__ static double to_double(T v) { return static_cast<double>(v); }
  __device__ static T from_double(double v) { return static_cast<T>(v); }
};
template <>
struct Convert<__half> {
  __device__ static double to_double(__half v) { return static_cast<double>(__half2float(v)); }
  __device__ static __half from_double(double v) { return __float2half_rn(static_cast<float>(v)); }
};
template <>
struct Convert<__nv_bfloat16> {
  __device__ static double to_double(__nv_bfloat16 v) { return static_cast<double>(__bfloat162float(v)); }
  __device__ static __nv_bfloat16 from_double(double v) { return __float2bfloat16_rn(static_cast<float>(v)); }
};

template <class T>
constexpr bool kIsInteger = std::is_integral<T>::value;

template <class D, class S>
__device__ D convert(S v) {
  if constexpr (std::is_same<D, S>::value) {
    return v;
  } else if constexpr (std::is_same<D, bool>::value) {
    return Convert<S>::to_double(v) != 0.0;
  } else if constexpr (kIsInteger<D> && kIsInteger<S>) {
    return static_cast<D>(static_cast<int64_t>(v));  // exact for 64-bit values
  } else {
    return Convert<D>::from_double(Convert<S>::to_double(v));
  }
}

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

// Calls f(T{}) for the CUDA storage type of a dtype code.
template <class F>
cudaError_t visit_code(int code, F&& f) {
  switch (code) {
    case kCodeFloat32: return f(float{});
    case kCodeFloat64: return f(double{});
    case kCodeFloat16: return f(__half{});
    case kCodeBFloat16: return f(__nv_bfloat16{});
    case kCodeInt8: return f(int8_t{});
    case kCodeUInt8: return f(uint8_t{});
    case kCodeInt32: return f(int32_t{});
    case kCodeInt64: return f(int64_t{});
    case kCodeBool: return f(bool{});
    default: return cudaErrorInvalidValue;
  }
}

unsigned grid_for(int64_t numel) {
  constexpr int64_t kBlock = 256, kMaxGrid = 65535;
  int64_t blocks = (numel + kBlock - 1) / kBlock;
  return static_cast<unsigned>(blocks < kMaxGrid ? (blocks > 0 ? blocks : 1) : kMaxGrid);
}

}  // namespace

// ---- launchers -----------------------------------------------------------------------------

cudaError_t launch_copy(void* dst, int dst_dtype, const void* src, int src_dtype, const StridedLayout& layout,
                        int64_t numel, cudaStream_t stream) {
  return visit_code(dst_dtype, [&](auto d) {
    using D = decltype(d);
    return visit_code(src_dtype, [&](auto s) {
      using S = decltype(s);
      copy_kernel<D, S><<<grid_for(numel), 256, 0, stream>>>(static_cast<D*>(dst), static_cast<const S*>(src), layout,
                                                               numel);
      return cudaGetLastError();
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
    } else if constexpr (kIsInteger<T>) {
      value = static_cast<T>(value_int);
    } else if constexpr (std::is_same<T, __half>::value) {
      value = __float2half_rn(static_cast<float>(value_float));
    } else if constexpr (std::is_same<T, __nv_bfloat16>::value) {
      value = __float2bfloat16_rn(static_cast<float>(value_float));
    } else {
      value = static_cast<T>(value_float);
    }
    fill_kernel<T><<<grid_for(numel), 256, 0, stream>>>(static_cast<T*>(dst), value, layout, numel);
    return cudaGetLastError();
  });
}

}  // namespace loom::cuda
