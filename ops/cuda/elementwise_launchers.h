/*
 * The interface of the CUDA elementwise kernels (ops/cuda/elementwise.cu, and factories.cu for
 * arange and the random fills) for the C++20 side
 * (elementwise_kernels.cpp): op codes, a layout of up to four same-shaped operands, and the
 * launchers. Plain C++17, like launchers.h, because the .cu files see no Loom headers.
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/philox.h"
#include "ops/cuda/launchers.h"

namespace loom::cuda {

// Operand 0 is the output. Sizes innermost last; strides in elements (0 where broadcast).
// The host coalesces dims first, so a contiguous operand set arrives as one dim.
inline constexpr int kMaxOperands = 4;
struct ElementwiseLayout {
  int ndim = 0;
  int noperands = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxOperands][kMaxDims] = {};
};

enum class UnaryOp : int {
  kNeg, kExp, kLog, kLog1p, kSqrt, kRsqrt, kAbs, kSign, kSin, kCos, kTanh, kSigmoid, kRelu, kSilu,
  kGelu, kGeluTanh,
  kLogicalNot,  // out is bool, in any dtype
};

enum class BinaryOp : int {
  kAdd, kSub, kMul, kDiv, kPow, kMaximum, kMinimum,
  kEq, kNe, kLt, kLe, kGt, kGe, kLogicalAnd, kLogicalOr,  // out is bool
};

enum class RandomOp : int { kUniform, kNormal, kRandint, kBernoulli };

// out = op(in); `dtype` is in's dtype (and out's, except logical_not: bool).
cudaError_t launch_unary(UnaryOp op, int dtype, void* out, const void* in, const ElementwiseLayout& layout,
                         int64_t numel, cudaStream_t stream);

// out = op(a, b); `dtype` is a's and b's (and out's, except predicates: bool). pow_scalar_b
// says b is one broadcast value, which enables pow's shortcuts (x*x for 2, ...) as on the CPU.
cudaError_t launch_binary(BinaryOp op, int dtype, void* out, const void* a, const void* b,
                          const ElementwiseLayout& layout, int64_t numel, bool pow_scalar_b, cudaStream_t stream);

// out = clamp(in, lo, hi); an absent bound is the dtype's lowest/max. Integer dtypes read the
// *_int values, floating ones the *_float values; a NaN floating bound makes every result NaN.
struct ClampBounds {
  bool has_min = false, has_max = false;
  double min_float = 0, max_float = 0;
  int64_t min_int = 0, max_int = 0;
};
cudaError_t launch_clamp(int dtype, void* out, const void* in, const ElementwiseLayout& layout, int64_t numel,
                         const ClampBounds& bounds, cudaStream_t stream);

// out = grad * gelu'(x) (floating dtypes).
cudaError_t launch_gelu_backward(int dtype, void* out, const void* grad, const void* x, const ElementwiseLayout& layout,
                                 int64_t numel, bool tanh_approximation, cudaStream_t stream);

// out = self <= threshold ? 0 : grad (floating dtypes; threshold rounded to the dtype first).
cudaError_t launch_threshold_backward(int dtype, void* out, const void* grad, const void* self,
                                      const ElementwiseLayout& layout, int64_t numel, double threshold,
                                      cudaStream_t stream);

// out = cond ? a : b (cond bool, a, b and out `dtype`).
cudaError_t launch_where(int dtype, void* out, const void* cond, const void* a, const void* b,
                         const ElementwiseLayout& layout, int64_t numel, cudaStream_t stream);

// ---- factories (ops/cuda/factories.cu)

// out[i] = start + i * step for a contiguous out.
cudaError_t launch_arange(int dtype, void* out, int64_t numel, double start, double step, cudaStream_t stream);

// Counter-based random fill of a contiguous out, element i equal to the CPU kernel's for the
// same (seed, offset): see ops/cpu/copy_kernels.cpp. A captured draw's seed and offset are read on
// the device when the kernel runs (PhiloxArgs::replay_state).
cudaError_t launch_random(RandomOp op, int dtype, void* out, int64_t numel, double a, double b,
                          PhiloxArgs philox, cudaStream_t stream);

}  // namespace loom::cuda
