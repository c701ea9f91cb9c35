/*
 * The interface between the C++20 ops layer and the CUDA translation units, which are
 * compiled as C++17 (CMake 3.25 has no CUDA20) and therefore see no Loom headers: plain
 * pointers, dtype codes and a fixed-size strided layout.
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace loom::cuda {

// Codes equal to static_cast<int>(loom::DType) (checked in ops/cuda/cuda_kernels.cpp).
enum DTypeCode : int {
  kCodeFloat32 = 0,
  kCodeFloat64 = 1,
  kCodeFloat16 = 2,
  kCodeBFloat16 = 3,
  kCodeInt8 = 4,
  kCodeUInt8 = 5,
  kCodeInt32 = 6,
  kCodeInt64 = 7,
  kCodeBool = 8,
};

inline constexpr int kMaxDims = 10;

// Sizes (innermost last) and element strides of a destination and a source of equal shape.
struct StridedLayout {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t dst_strides[kMaxDims] = {};
  int64_t src_strides[kMaxDims] = {};
};

// dst[i] = convert(src[i]) for every index of the layout (both pointers on the device).
// Returns the launch status.
cudaError_t launch_copy(void* dst, int dst_dtype, const void* src, int src_dtype, const StridedLayout& layout,
                        int64_t numel, cudaStream_t stream);

// dst[i] = value for every index (only dst_strides are used). Integers use value_int, floating
// types value_float, so 64-bit integers are exact.
cudaError_t launch_fill(void* dst, int dtype, const StridedLayout& layout, int64_t numel, double value_float,
                        int64_t value_int, cudaStream_t stream);

}  // namespace loom::cuda
