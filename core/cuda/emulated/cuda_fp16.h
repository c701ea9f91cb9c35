/*
 * Emulated cuda_fp16.h: __half as a 16-bit IEEE binary16 storage type with the conversion
 * intrinsics Loom's kernels use. Conversions from float round to nearest even, like the
 * hardware's cvt.rn.f16.f32 (the bit manipulation is core/half.h's, shared with the CPU).
 */
#pragma once

#include "cuda_runtime.h"
#include "core/half_bits.h"

struct __half {
  unsigned short __x;
  __half() = default;
  __half(float f) : __x(::loom::detail::float_to_half_bits(f)) {}  // NOLINT: implicit, as in CUDA
  operator float() const { return ::loom::detail::half_bits_to_float(__x); }
};
struct alignas(4) __half2 {
  __half x, y;
};

inline __half __float2half_rn(float f) { return __half(f); }
inline __half __float2half(float f) { return __half(f); }
inline __half __double2half(double d) { return __half(static_cast<float>(d)); }
inline float __half2float(__half h) { return static_cast<float>(h); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short b) {
  __half h;
  h.__x = b;
  return h;
}
