/*
 * Device-side building blocks shared by every kernel file of ops/cuda: the dtype visitor, value
 * conversions (core/numeric_cast.h semantics on every backend), the strided-offset arithmetic,
 * grid sizing, dynamic shared memory and the warp/block reductions.
 *
 * Compiled by nvcc (C++17) and, in the emulated build, by the host compiler against
 * core/cuda/emulated; nothing here may depend on either.
 */
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/numeric_cast.h"
#include "ops/cuda/launchers.h"

namespace loom::cuda {

// ---- element types ------------------------------------------------------------------------

// The type arithmetic happens in: float for the 16-bit types, the type itself otherwise.
template <class T>
struct OpMath {
  using type = T;
};
template <>
struct OpMath<__half> {
  using type = float;
};
template <>
struct OpMath<__nv_bfloat16> {
  using type = float;
};
template <class T>
using opmath_t = typename OpMath<T>::type;

template <class T>
__host__ __device__ inline opmath_t<T> to_opmath(T v) {
  if constexpr (std::is_same<T, __half>::value) {
    return __half2float(v);
  } else if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    return __bfloat162float(v);
  } else {
    return v;
  }
}

// A value of any arithmetic or 16-bit type to storage type D, with numeric_cast's rules.
template <class D, class S>
__host__ __device__ inline D convert(S v) {
  if constexpr (std::is_same<D, S>::value) {
    return v;
  } else if constexpr (std::is_same<D, __half>::value) {
    return __float2half_rn(static_cast<float>(to_opmath(v)));
  } else if constexpr (std::is_same<D, __nv_bfloat16>::value) {
    return __float2bfloat16_rn(static_cast<float>(to_opmath(v)));
  } else {
    return ::loom::numeric_cast<D>(to_opmath(v));
  }
}

// Calls f(T{}) for the CUDA storage type of a dtype code other than bool, for kernels that
// have no bool instantiation; other codes return cudaErrorInvalidValue.
template <class F>
cudaError_t visit_numeric_code(int code, F&& f) {
  switch (code) {
    case kCodeFloat32: return f(float{});
    case kCodeFloat64: return f(double{});
    case kCodeFloat16: return f(__half{});
    case kCodeBFloat16: return f(__nv_bfloat16{});
    case kCodeInt8: return f(int8_t{});
    case kCodeUInt8: return f(uint8_t{});
    case kCodeInt32: return f(int32_t{});
    case kCodeInt64: return f(int64_t{});
    default: return cudaErrorInvalidValue;
  }
}

// The same for every dtype code, bool included.
template <class F>
cudaError_t visit_code(int code, F&& f) {
  return code == kCodeBool ? f(bool{}) : visit_numeric_code(code, f);
}

// Floating codes only (float, double, half, bfloat16).
template <class F>
cudaError_t visit_floating_code(int code, F&& f) {
  switch (code) {
    case kCodeFloat32: return f(float{});
    case kCodeFloat64: return f(double{});
    case kCodeFloat16: return f(__half{});
    case kCodeBFloat16: return f(__nv_bfloat16{});
    default: return cudaErrorInvalidValue;
  }
}

// ---- indexing -----------------------------------------------------------------------------

// Element offset of row-major position i in a tensor of `sizes` (innermost last) and `strides`.
__host__ __device__ inline int64_t strided_offset(int64_t i, int ndim, const int64_t* sizes, const int64_t* strides) {
  int64_t offset = 0;
  for (int d = ndim - 1; d >= 0; --d) {
    int64_t idx = i % sizes[d];
    i /= sizes[d];
    offset += idx * strides[d];
  }
  return offset;
}

// ---- shared memory ------------------------------------------------------------------------

template <class T>
__device__ inline T* dynamic_shared() {
#if defined(LOOM_CUDA_EMULATED)
  return static_cast<T*>(loom_emu::dynamic_shared_memory());
#else
  extern __shared__ __align__(16) unsigned char loom_dynamic_shared[];
  return reinterpret_cast<T*>(loom_dynamic_shared);
#endif
}

// ---- reductions ---------------------------------------------------------------------------

struct SumOp {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  template <class T>
  __device__ T operator()(T a, T b) const { return a > b || a != a ? a : b; }  // NaN wins, as torch.max
};

// Reduces v over the 32 lanes of a full warp; every lane gets the result.
template <class T, class Op>
__device__ inline T warp_reduce(T v, Op op) {
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Reduces v over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets
// the result. `scratch` is 32 elements of shared memory, free again when this returns.
template <class T, class Op>
__device__ inline T block_reduce(T v, Op op, T identity, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_reduce(v, op);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();  // every warp's partial is in scratch
  T total = lane < warps ? scratch[lane] : identity;
  total = warp_reduce(total, op);
  __syncthreads();  // every warp has read scratch: it may be reused
  return total;
}

// ---- input checks ----------------------------------------------------------------------------

// The value of a bad-index word that no kernel has written (see core/cuda/device_checks.h).
constexpr unsigned long long kNoBadIndex = ~0ull;

// *bad = min(*bad, i), with compare-and-swap only (no plain read races the other writers).
__device__ inline void record_bad_index(unsigned long long* bad, unsigned long long i) {
  unsigned long long expected = kNoBadIndex;
  while (i < expected) {
    const unsigned long long old = atomicCAS(bad, expected, i);
    if (old == expected) break;
    expected = old;
  }
}

}  // namespace loom::cuda
