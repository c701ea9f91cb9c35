/*
 * The ways the CPU computes a 2-D convolution, and the tensor layouts they share:
 *  - oneDNN's primitives (conv_onednn.cpp): f32 and bf16, and f16 widened to f32;
 *  - the input gradient as a GEMM + col2im when there are few input channels
 *    (conv_small_cin.cpp), where oneDNN's channel padding wastes most of its work;
 *  - an im2col + Eigen GEMM reference for f64 (conv_reference.cpp).
 * conv_kernels.cpp picks one per dtype and registers the kernels. Tensors: x [N, Cin, H, W],
 * w [Cout, Cin / groups, kh, kw], y [N, Cout, Ho, Wo], NCHW or channels_last (NHWC strides).
 */
#pragma once

#include "core/tensor.h"
#include "ops/kernel_types.h"

namespace loom::cpu::conv {

enum class Layout : int64_t { Nchw, Nhwc, Strided };

// NCHW sizes with NHWC strides (PyTorch's channels_last), ignoring size-1 dims.
bool is_channels_last(const Tensor& t);
Layout layout_of(const Tensor& t);

// oneDNN (f32, bf16). The weight gradient reuses the reordered x and grad_out that the forward
// and input-gradient calls of the same step left behind.
void onednn_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p);
void onednn_backward_data(const Tensor& grad_input, const Tensor& grad_out, const Tensor& w, const Conv2dParams& p);
void onednn_backward_weights(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                             const Tensor& x, const Conv2dParams& p);

// The GEMM + col2im input gradient: f32, no groups, at most 8 input channels, and activations
// in one plain format (both NCHW or both NHWC).
bool use_small_cin(const Tensor& x, const Tensor& grad_out, const Conv2dParams& p);
void small_cin_backward_data(const Tensor& grad_input, const Tensor& grad_out, const Tensor& w,
                             const Conv2dParams& p);

// The f64 reference (any layout; non-contiguous tensors go through contiguous copies).
void reference_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                       const Conv2dParams& p);
void reference_backward_data(const Tensor& grad_input, const Tensor& grad_out, const Tensor& w,
                             const Conv2dParams& p);
void reference_backward_weights(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                                const Tensor& x, const Conv2dParams& p);

}  // namespace loom::cpu::conv
