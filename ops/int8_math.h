/*
 * The scalar arithmetic of the INT8 ops (ops/int8_ops.h), shared by the CPU kernels and the CUDA
 * kernels so that both round alike: the requantization after an int8 GEMM (Int8Epilogue in
 * ops/kernel_types.h) and per-tensor quantization. Every step is its own float32 operation:
 * on the device through __fmul_rn/__fadd_rn, which nvcc never fuses into an FMA; on the host
 * as separate statements, which neither GCC (-std=c++20: no contraction) nor clang (contracts
 * within one expression only) fuses. A fused multiply-add would round once where oneDNN's
 * int8 kernels, which quant's CPU layers run, round twice.
 */
#pragma once

#include <math.h>

#include <cstdint>

#include "core/host_device.h"

namespace loom {

LOOM_HOST_DEVICE inline float int8_fmul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

LOOM_HOST_DEVICE inline float int8_fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// acc already holds sum_k (x - input_zero_point) w (exact, in int32). Returns the real value.
LOOM_HOST_DEVICE inline float int8_dequantized_sum(int32_t acc, float bias, float scale, bool relu) {
  float f = int8_fadd(static_cast<float>(acc), bias);
  f = int8_fmul(f, scale);
  if (relu) f = f > 0.0f ? f : 0.0f;
  return f;
}

// v (in units of the output scale) + zero_point, clamped to [lo, hi] in float (so that the
// conversion cannot wrap; NaN goes to lo), rounded half to even (rintf in the default rounding
// mode, cvtps2dq's rule on the CPU).
LOOM_HOST_DEVICE inline int32_t int8_round_clamp(float v, int32_t zero_point, int32_t lo, int32_t hi) {
  v = int8_fadd(v, static_cast<float>(zero_point));
  v = v >= static_cast<float>(lo) ? v : static_cast<float>(lo);
  v = v <= static_cast<float>(hi) ? v : static_cast<float>(hi);
  return static_cast<int32_t>(rintf(v));
}

// quantize_per_tensor of one value, as quant/kernels/quantize_kernels.cpp: the clamp is on the
// zero-point-relative value, and the zero point is added after rounding (both exact).
LOOM_HOST_DEVICE inline int32_t int8_quantize(float x, float inv_scale, int32_t zero_point, int32_t lo, int32_t hi) {
  float v = int8_fmul(x, inv_scale);
  const float flo = static_cast<float>(lo - zero_point), fhi = static_cast<float>(hi - zero_point);
  v = v >= flo ? v : flo;
  v = v <= fhi ? v : fhi;
  return static_cast<int32_t>(rintf(v)) + zero_point;
}

}  // namespace loom
