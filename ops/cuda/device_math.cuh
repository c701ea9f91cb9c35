/*
 * Device math with one name per function for float and double (m_exp(float) is expf,
 * m_exp(double) is exp), so that a kernel templated on its opmath type calls the right one.
 * Qualified calls: an unqualified exp inside namespace loom could find the tensor op instead.
 * Shared by the CUDA kernel families (elementwise.cu, factories.cu, nn.cu, norm.cu).
 */
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace loom::cuda {

#define LOOM_DEVICE_MATH(name, fname, dname) \
  __device__ inline float name(float x) {    \
    return ::fname(x);                       \
  }                                          \
  __device__ inline double name(double x) {  \
    return ::dname(x);                       \
  }
LOOM_DEVICE_MATH(m_exp, expf, exp)
LOOM_DEVICE_MATH(m_log, logf, log)
LOOM_DEVICE_MATH(m_log1p, log1pf, log1p)
LOOM_DEVICE_MATH(m_sqrt, sqrtf, sqrt)
LOOM_DEVICE_MATH(m_sin, sinf, sin)
LOOM_DEVICE_MATH(m_cos, cosf, cos)
LOOM_DEVICE_MATH(m_tanh, tanhf, tanh)
LOOM_DEVICE_MATH(m_erf, erff, erf)
LOOM_DEVICE_MATH(m_fabs, fabsf, fabs)
#undef LOOM_DEVICE_MATH
__device__ inline float m_pow(float a, float b) {
  return ::powf(a, b);
}
__device__ inline double m_pow(double a, double b) {
  return ::pow(a, b);
}

__device__ inline float quiet_nan(float) {
  return __int_as_float(0x7fc00000);
}
__device__ inline double quiet_nan(double) {
  return __longlong_as_double(0x7ff8000000000000ll);
}

// a * b rounded on its own: keeps nvcc from fusing it with a following add (the CPU build
// compiles with -ffp-contract=off semantics), so the random fills match bit for bit.
__device__ inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
__device__ inline double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

// -infinity of an opmath type: the identity of a max.
template <class A>
__device__ inline A neg_infinity() {
  return -static_cast<A>(INFINITY);
}

}  // namespace loom::cuda
