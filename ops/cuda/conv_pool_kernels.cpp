/*
 * The C++ side of the CUDA convolution and pooling kernels (ops/cuda/conv_pool.cu): turns tensors
 * into a ConvGeometry or PoolGeometry and per-operand strides, and registers the kernels. The
 * convolutions go to cuDNN (cudnn_conv.h) first and to Loom's kernels where cuDNN has no engine. The ops
 * layer (ops/conv_pool.cpp) has validated shapes and parameters and allocated the outputs; tensors
 * arrive NCHW-contiguous or channels_last, and pooling inputs as any view, all of which the
 * kernels read through their strides.
 *
 * Synchronisation: every launch and cuDNN call is on the current stream (op_stream.h). The index check of
 * max_pool2d_backward does not wait: the host reads its word at its next wait for the GPU.
 */
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_checks.h"
#include "ops/copy_ops.h"
#include "ops/cuda/conv_pool_launchers.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cudnn_conv.h"
#include "ops/cuda/op_stream.h"
#include "ops/dispatch.h"
#include "ops/factories.h"

namespace loom::cuda {

namespace {

// The dtype code of a floating tensor; the same message as the CPU kernels otherwise.
int floating_code(const Tensor& t, std::string_view op) {
  LOOM_CHECK(t.is_floating_point(), op, ": expected a floating-point tensor, got ", t.dtype());
  return static_cast<int>(t.dtype());
}

Strides4 strides_of(const Tensor& t) {
  LOOM_CHECK(t.dim() == 4, "CUDA conv/pool: expected a 4-D tensor, got shape ", t.sizes());
  Strides4 s;
  for (int d = 0; d < 4; ++d) s.v[d] = t.stride(d);
  return s;
}

ConvGeometry conv_geometry(IntArrayRef x, IntArrayRef w, IntArrayRef y, const Conv2dParams& p) {
  ConvGeometry g;
  g.n = x[0];
  g.cin = x[1];
  g.h = x[2];
  g.w = x[3];
  g.cout = w[0];
  g.kh = w[2];
  g.kw = w[3];
  g.ho = y[2];
  g.wo = y[3];
  for (int d = 0; d < 2; ++d) {
    g.stride[d] = p.stride[d];
    g.padding[d] = p.padding[d];
    g.dilation[d] = p.dilation[d];
  }
  g.groups = p.groups;
  return g;
}

// in: the pooled tensor's sizes [N, C, H, W]; out: the pooled sizes.
PoolGeometry pool_geometry(IntArrayRef in, IntArrayRef out, const Pool2dParams* p) {
  PoolGeometry g;
  g.n = in[0];
  g.c = in[1];
  g.h = in[2];
  g.w = in[3];
  g.ho = out[2];
  g.wo = out[3];
  if (p != nullptr) {
    for (int d = 0; d < 2; ++d) {
      g.kernel[d] = p->kernel[d];
      g.stride[d] = p->stride[d];
      g.padding[d] = p->padding[d];
      g.dilation[d] = p->dilation[d];
    }
    g.count_include_pad = p->count_include_pad;
  }
  return g;
}

// ---- convolution ----------------------------------------------------------------------------
//
// cuDNN first (cudnn_conv.h). Loom's own kernels (conv_pool.cu) stay for what cuDNN does not take:
// when its heuristic has no engine for the problem (a dtype, layout or shape it does not run; in
// the emulated build, for instance, no engine mixes data types), when an operand is empty (cuDNN's
// tensors have no empty dims; the kernels write the zeros), and when cuDNN is switched off.

// NCHW sizes with packed NHWC strides (size-1 dims ignored), and not plain contiguous.
bool channels_last(const Tensor& t) {
  if (t.is_contiguous()) return false;
  const int64_t c = t.size(1), h = t.size(2), w = t.size(3);
  const int64_t nhwc[4] = {h * w * c, 1, w * c, c};
  for (int d = 0; d < 4; ++d)
    if (t.size(d) > 1 && t.stride(d) != nhwc[d]) return false;
  return true;
}

// An uninitialised [K, C, R, S] tensor with NHWC strides.
Tensor empty_channels_last(IntArrayRef sizes, TensorOptions options) {
  return empty({sizes[0], sizes[2], sizes[3], sizes[1]}, options).permute({0, 3, 1, 2});
}

// The weight in the activations' layout: cuDNN's engines take the operands of one convolution
// in one layout, and a weight is small next to the activations it meets.
Tensor weight_like(const Tensor& w, const Tensor& activations) {
  const bool cl = channels_last(activations);
  if (channels_last(w) == cl) return w;
  if (!cl) return contiguous(w);
  Tensor out = empty_channels_last(w.sizes(), w.options());
  copy_(out, w);
  return out;
}

void conv2d_kernel(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                   const Conv2dParams& p) {
  if (out.numel() == 0) return;
  if (cudnn_enabled() && x.numel() > 0) {
    // The bias goes in first and cuDNN adds the convolution to it (beta = 1), so that bias and
    // sum are rounded once to a 16-bit type, as Loom's kernel and the CPU do; a bias added after
    // would round twice.
    if (bias.defined()) copy_(out, bias.view({1, bias.size(0), 1, 1}));
    if (cudnn_convolution(CudnnConvKind::kForward, x, weight_like(w, x), out, p, bias.defined())) return;
  }
  const int code = floating_code(x, "conv2d");
  LOOM_CUDA_CHECK(launch_conv2d(code, out.data_ptr(), strides_of(out), x.data_ptr(), strides_of(x),
                                w.data_ptr(), strides_of(w), bias.defined() ? bias.data_ptr() : nullptr,
                                bias.defined() ? bias.stride(0) : 0,
                                conv_geometry(x.sizes(), w.sizes(), out.sizes(), p), op_stream()));
}

void conv2d_backward_input_kernel(const Tensor& grad_input, const Tensor& grad_out, const Tensor& w,
                                  const Conv2dParams& p) {
  if (grad_input.numel() == 0) return;
  if (cudnn_enabled() && grad_out.numel() > 0 &&
      cudnn_convolution(CudnnConvKind::kBackwardData, grad_input, weight_like(w, grad_input), grad_out, p))
    return;
  const int code = floating_code(grad_out, "conv2d_backward_input");
  LOOM_CUDA_CHECK(launch_conv2d_backward_input(
      code, grad_input.data_ptr(), strides_of(grad_input), grad_out.data_ptr(), strides_of(grad_out),
      w.data_ptr(), strides_of(w), conv_geometry(grad_input.sizes(), w.sizes(), grad_out.sizes(), p),
      op_stream()));
}

// With an empty grad_out or x every sum is empty, and the kernels write zeros. cuDNN's backward
// filter has no bias gradient; that one is grad_out summed over N, H, W.
void conv2d_backward_weight_kernel(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                                   const Tensor& x, const Conv2dParams& p) {
  if (grad_weight.numel() == 0 && !(grad_bias.defined() && grad_bias.numel() > 0)) return;
  if (cudnn_enabled() && grad_weight.numel() > 0 && grad_out.numel() > 0 && x.numel() > 0) {
    // grad_weight is NCHW; with channels_last activations cuDNN writes an NHWC copy of it.
    const bool cl = channels_last(x) && !channels_last(grad_weight);
    Tensor gw = cl ? empty_channels_last(grad_weight.sizes(), grad_weight.options()) : grad_weight;
    if (cudnn_convolution(CudnnConvKind::kBackwardFilter, x, gw, grad_out, p)) {
      if (cl) copy_(grad_weight, gw);
      if (grad_bias.defined()) copy_(grad_bias, grad_out.sum({0, 2, 3}));
      return;
    }
  }
  const int code = floating_code(x, "conv2d_backward_weight");
  LOOM_CUDA_CHECK(launch_conv2d_backward_weight(
      code, grad_weight.data_ptr(), strides_of(grad_weight),
      grad_bias.defined() ? grad_bias.data_ptr() : nullptr, grad_bias.defined() ? grad_bias.stride(0) : 0,
      grad_out.data_ptr(), strides_of(grad_out), x.data_ptr(), strides_of(x),
      conv_geometry(x.sizes(), grad_weight.sizes(), grad_out.sizes(), p), op_stream()));
}

// ---- pooling --------------------------------------------------------------------------------

void max_pool2d_kernel(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  if (out.numel() == 0) return;
  const int code = floating_code(x, "max_pool2d");
  LOOM_CUDA_CHECK(launch_max_pool2d(code, out.data_ptr(), strides_of(out), indices.data_ptr<int64_t>(),
                                    strides_of(indices), x.data_ptr(), strides_of(x),
                                    pool_geometry(x.sizes(), out.sizes(), &p), op_stream()));
}

// Indices are user input here: an index outside its plane is reported, as on the CPU, by a check
// kernel that records the first bad position into a device word, read at the host's next wait for
// the GPU (core/cuda/device_checks.h). The gather kernel itself only adds gradients whose index lies
// in their window, which every index max_pool2d produces does.
void max_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_out, const Tensor& indices,
                                const Pool2dParams& p) {
  if (grad_input.numel() == 0) return;
  const int code = floating_code(grad_out, "max_pool2d_backward");
  const PoolGeometry g = pool_geometry(grad_input.sizes(), grad_out.sizes(), &p);
  unsigned long long* bad_index = device_check_word(
      detail::concat("max_pool2d_backward: an index out of range for an input plane of ", g.h, "x", g.w),
      "position");
  LOOM_CUDA_CHECK(
      launch_check_pool_indices(bad_index, indices.data_ptr<int64_t>(), strides_of(indices), g, op_stream()));
  finish_device_check();
  LOOM_CUDA_CHECK(launch_max_pool2d_backward(
      code, grad_input.data_ptr(), strides_of(grad_input), grad_out.data_ptr(), strides_of(grad_out),
      indices.data_ptr<int64_t>(), strides_of(indices), g, op_stream()));
}

void avg_pool2d_kernel(const Tensor& out, const Tensor&, const Tensor& x, const Pool2dParams& p) {
  if (out.numel() == 0) return;
  const int code = floating_code(x, "avg_pool2d");
  LOOM_CUDA_CHECK(launch_avg_pool2d(code, out.data_ptr(), strides_of(out), x.data_ptr(), strides_of(x),
                                    pool_geometry(x.sizes(), out.sizes(), &p), op_stream()));
}

void avg_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_out, const Tensor&,
                                const Pool2dParams& p) {
  if (grad_input.numel() == 0) return;
  const int code = floating_code(grad_out, "avg_pool2d_backward");
  LOOM_CUDA_CHECK(launch_avg_pool2d_backward(
      code, grad_input.data_ptr(), strides_of(grad_input), grad_out.data_ptr(), strides_of(grad_out),
      pool_geometry(grad_input.sizes(), grad_out.sizes(), &p), op_stream()));
}

void adaptive_avg_pool2d_kernel(const Tensor& out, const Tensor& x) {
  if (out.numel() == 0) return;
  const int code = floating_code(x, "adaptive_avg_pool2d");
  LOOM_CUDA_CHECK(launch_adaptive_avg_pool2d(code, out.data_ptr(), strides_of(out), x.data_ptr(),
                                             strides_of(x), pool_geometry(x.sizes(), out.sizes(), nullptr),
                                             op_stream()));
}

void adaptive_avg_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_out) {
  if (grad_input.numel() == 0) return;
  const int code = floating_code(grad_out, "adaptive_avg_pool2d_backward");
  LOOM_CUDA_CHECK(launch_adaptive_avg_pool2d_backward(
      code, grad_input.data_ptr(), strides_of(grad_input), grad_out.data_ptr(), strides_of(grad_out),
      pool_geometry(grad_input.sizes(), grad_out.sizes(), nullptr), op_stream()));
}

}  // namespace

void register_conv_pool_cuda_kernels() {
  register_kernel<Op::conv2d>(DeviceType::CUDA, conv2d_kernel);
  register_kernel<Op::conv2d_backward_input>(DeviceType::CUDA, conv2d_backward_input_kernel);
  register_kernel<Op::conv2d_backward_weight>(DeviceType::CUDA, conv2d_backward_weight_kernel);
  register_kernel<Op::max_pool2d>(DeviceType::CUDA, max_pool2d_kernel);
  register_kernel<Op::max_pool2d_backward>(DeviceType::CUDA, max_pool2d_backward_kernel);
  register_kernel<Op::avg_pool2d>(DeviceType::CUDA, avg_pool2d_kernel);
  register_kernel<Op::avg_pool2d_backward>(DeviceType::CUDA, avg_pool2d_backward_kernel);
  register_kernel<Op::adaptive_avg_pool2d>(DeviceType::CUDA, adaptive_avg_pool2d_kernel);
  register_kernel<Op::adaptive_avg_pool2d_backward>(DeviceType::CUDA, adaptive_avg_pool2d_backward_kernel);
}

}  // namespace loom::cuda
