/*
 * Emulated cuda_bf16.h: __nv_bfloat16 as the upper half of a float with the conversion
 * intrinsics Loom's kernels use; float -> bf16 rounds to nearest even, NaN stays NaN.
 */
#pragma once

#include "cuda_fp16.h"
#include "core/half_bits.h"

struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : __x(::loom::detail::float_to_bf16_bits(f)) {}  // NOLINT: implicit, as in CUDA
  operator float() const { return ::loom::detail::bf16_bits_to_float(__x); }
};
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __double2bfloat16(double d) { return __nv_bfloat16(static_cast<float>(d)); }
inline float __bfloat162float(__nv_bfloat16 h) { return static_cast<float>(h); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short b) {
  __nv_bfloat16 h;
  h.__x = b;
  return h;
}
