/*
 * The autocast policy: which ops run in lower precision and which in float32 while autocast is
 * on (core/autocast.h holds the per-thread switch; torch keeps the same lists in
 * aten/src/ATen/autocast_mode.cpp). All of it is here, so that the policy reads as one table.
 *
 * Lower precision (floating inputs cast to the autocast dtype, bf16 on the CPU; output in it):
 *   matmul, mm, bmm, linear, linear_activation, linear_activation_linear, conv2d,
 *   scaled_dot_product_attention and its fused flash_attention (two bmm's around a softmax:
 *   torch lists it there too; the fused kernels keep the softmax statistics in float32).
 *   These are where the time goes and where bf16/f16 hardware paths pay (oneDNN's bf16 GEMM
 *   and convolution, tensor cores). They accumulate in float32 inside the kernel, so rounding
 *   the inputs costs relative error ~2^-8 per product term but does not grow with K.
 *
 * Float32 (bf16/f16 inputs cast up to float32; output in float32):
 *   softmax, log_softmax — exp() of the largest logits and log-sum-exp: the small probabilities
 *     and log-probabilities that a loss reads would keep only 8 bits of mantissa, and in f16
 *     exp() overflows above 11;
 *   layer_norm — a mean and variance per row that the residual stream then adds back in;
 *     a bf16 output adds rounding error at every block of a deep network;
 *   cross_entropy, nll_loss, mse_loss — the loss is a sum over the whole batch and its value
 *     (and the gradient that backward starts from) should not be rounded to 2-3 digits.
 *   This follows torch's CUDA list. torch 1.13's CPU list leaves softmax, log_softmax and
 *   layer_norm in the input dtype; Loom uses one policy for both devices so that a model
 *   trains the same way on either.
 *
 * Everything else runs in the dtype of its inputs: elementwise ops, reductions and
 * batch_norm compute bf16/f16 inputs in float32 inside their kernels and round once at the end,
 * and binary ops of a bf16 and a float32 tensor promote to float32 (as torch). float64 tensors
 * are never cast (torch does not either): float64 code is asking for precision.
 *
 * How an op opts in: the first line of its function is
 *
 *   LOOM_AUTOCAST_LOWER(matmul, a, b);          // or LOOM_AUTOCAST_FP32(...)
 *
 * When autocast is on for the device of one of the tensor arguments, that line casts the
 * tensor arguments through the recorded to(dtype) — autograd carries gradients back through the
 * cast, so float32 master weights get float32 gradients — and calls the op again with the cast
 * arguments and autocast off (AutocastExcludeGuard), so that the ops it is built from are not
 * cast again. The line sits before the op's validation and its autograd seam, which then see
 * the cast inputs. With autocast off it costs one thread-local load.
 */
#pragma once

#include <tuple>

#include "core/autocast.h"
#include "core/tensor.h"

namespace loom {

enum class CastPolicy { LowerPrecision, Float32 };

// x in the autocast dtype of its device when autocast is on there and x is float32, float16 or
// bfloat16; else x itself (undefined, integral, float64, or autocast off). The cast is recorded.
Tensor autocast_lower(const Tensor& x);
// x in float32 when autocast is on for its device and x is float16 or bfloat16; else x itself.
Tensor autocast_fp32(const Tensor& x);

namespace detail {

inline bool autocast_on_device_of(const Tensor& t) {
  return t.defined() && autocast_enabled(t.device());
}
template <class T>
bool autocast_on_device_of(const T&) {
  return false;
}

inline Tensor autocast_arg(CastPolicy policy, const Tensor& t) {
  return policy == CastPolicy::LowerPrecision ? autocast_lower(t) : autocast_fp32(t);
}
template <class T>
const T& autocast_arg(CastPolicy, const T& value) {
  return value;
}

}  // namespace detail

// Whether an op called with `args` runs under autocast: autocast is on for the device of one
// of its tensor arguments. One thread-local load when autocast is off everywhere.
template <class... Args>
bool autocast_active(const Args&... args) {
  if (!AutocastMode::any_enabled()) [[likely]]
    return false;
  return (detail::autocast_on_device_of(args) || ...);
}

// op(args...) with every tensor argument cast by `policy` and autocast off inside the call.
template <class Op, class... Args>
auto autocast_call(CastPolicy policy, const Op& op, const Args&... args) {
  // Cast first, while autocast is still on (the casts read its dtype), then switch it off.
  auto cast = std::make_tuple(detail::autocast_arg(policy, args)...);
  AutocastExcludeGuard autocast_off;
  return std::apply(op, cast);
}

}  // namespace loom

// The first line of a lower-precision op: `LOOM_AUTOCAST_LOWER(op_name, arg1, arg2, ...);` with
// the op's own arguments in order (see the comment at the top of this file).
#define LOOM_AUTOCAST_LOWER(fn, ...) LOOM_AUTOCAST_IMPL(::loom::CastPolicy::LowerPrecision, fn, __VA_ARGS__)
// The first line of a float32 op: `LOOM_AUTOCAST_FP32(op_name, arg1, arg2, ...);`.
#define LOOM_AUTOCAST_FP32(fn, ...) LOOM_AUTOCAST_IMPL(::loom::CastPolicy::Float32, fn, __VA_ARGS__)

// clang-format off
#define LOOM_AUTOCAST_IMPL(policy, fn, ...)                                                          \
  if (::loom::autocast_active(__VA_ARGS__)) [[unlikely]]                                             \
    return ::loom::autocast_call(policy, [](const auto&... cast) { return fn(cast...); }, __VA_ARGS__)
// clang-format on
