/*
 * The C++ side of the CUDA convolution and pooling kernels (ops/cuda/conv_pool.cu): turns tensors
 * into a ConvGeometry or PoolGeometry and per-operand strides, and registers the kernels. The ops
 * layer (ops/conv_pool.cpp) has validated shapes and parameters and allocated the outputs; tensors
 * arrive NCHW-contiguous or channels_last, and pooling inputs as any view, all of which the
 * kernels read through their strides.
 *
 * Synchronisation: every launch is on the legacy default stream. The index check of
 * max_pool2d_backward copies its flag back with cudaMemcpy, which waits for the check kernel.
 */
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "ops/copy_ops.h"
#include "ops/cuda/conv_pool_launchers.h"
#include "ops/cuda/cuda_kernels.h"
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

void conv2d_kernel(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                   const Conv2dParams& p) {
  if (out.numel() == 0) return;
  const int code = floating_code(x, "conv2d");
  LOOM_CUDA_CHECK(launch_conv2d(code, out.data_ptr(), strides_of(out), x.data_ptr(), strides_of(x),
                                w.data_ptr(), strides_of(w), bias.defined() ? bias.data_ptr() : nullptr,
                                bias.defined() ? bias.stride(0) : 0,
                                conv_geometry(x.sizes(), w.sizes(), out.sizes(), p), nullptr));
}

void conv2d_backward_input_kernel(const Tensor& grad_input, const Tensor& grad_out, const Tensor& w,
                                  const Conv2dParams& p) {
  if (grad_input.numel() == 0) return;
  const int code = floating_code(grad_out, "conv2d_backward_input");
  LOOM_CUDA_CHECK(launch_conv2d_backward_input(
      code, grad_input.data_ptr(), strides_of(grad_input), grad_out.data_ptr(), strides_of(grad_out),
      w.data_ptr(), strides_of(w), conv_geometry(grad_input.sizes(), w.sizes(), grad_out.sizes(), p),
      nullptr));
}

// With an empty grad_out or x every sum is empty, and the kernels write zeros.
void conv2d_backward_weight_kernel(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                                   const Tensor& x, const Conv2dParams& p) {
  if (grad_weight.numel() == 0 && !(grad_bias.defined() && grad_bias.numel() > 0)) return;
  const int code = floating_code(x, "conv2d_backward_weight");
  LOOM_CUDA_CHECK(launch_conv2d_backward_weight(
      code, grad_weight.data_ptr(), strides_of(grad_weight),
      grad_bias.defined() ? grad_bias.data_ptr() : nullptr, grad_bias.defined() ? grad_bias.stride(0) : 0,
      grad_out.data_ptr(), strides_of(grad_out), x.data_ptr(), strides_of(x),
      conv_geometry(x.sizes(), grad_weight.sizes(), grad_out.sizes(), p), nullptr));
}

// ---- pooling --------------------------------------------------------------------------------

void max_pool2d_kernel(const Tensor& out, const Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  if (out.numel() == 0) return;
  const int code = floating_code(x, "max_pool2d");
  LOOM_CUDA_CHECK(launch_max_pool2d(code, out.data_ptr(), strides_of(out), indices.data_ptr<int64_t>(),
                                    strides_of(indices), x.data_ptr(), strides_of(x),
                                    pool_geometry(x.sizes(), out.sizes(), &p), nullptr));
}

// Indices are user input here: an index outside its plane is reported, as on the CPU, by a check
// kernel's flag. The gather kernel itself only adds gradients whose index lies in their window,
// which every index max_pool2d produces does.
void max_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_out, const Tensor& indices,
                                const Pool2dParams& p) {
  if (grad_input.numel() == 0) return;
  const int code = floating_code(grad_out, "max_pool2d_backward");
  const PoolGeometry g = pool_geometry(grad_input.sizes(), grad_out.sizes(), &p);
  Tensor flag = zeros({1}, indices.options().dtype(DType::Int32));
  LOOM_CUDA_CHECK(launch_check_pool_indices(flag.data_ptr<int32_t>(), indices.data_ptr<int64_t>(),
                                            strides_of(indices), g, nullptr));
  int bad = 0;
  LOOM_CUDA_CHECK(cudaMemcpy(&bad, flag.data_ptr(), sizeof(int), cudaMemcpyDeviceToHost));
  if (bad != 0) {
    // Name the first bad index in (n, c, oh, ow) order.
    Tensor host = contiguous(indices.to(kCPU));
    const int64_t* idx = host.data_ptr<int64_t>();
    int64_t value = -1;
    for (int64_t i = 0; i < host.numel(); ++i)
      if (idx[i] < 0 || idx[i] >= g.h * g.w) {
        value = idx[i];
        break;
      }
    LOOM_FAIL("max_pool2d_backward: index ", value, " out of range for an input plane of ", g.h, "x", g.w);
  }
  LOOM_CUDA_CHECK(launch_max_pool2d_backward(code, grad_input.data_ptr(), strides_of(grad_input),
                                             grad_out.data_ptr(), strides_of(grad_out),
                                             indices.data_ptr<int64_t>(), strides_of(indices), g, nullptr));
}

void avg_pool2d_kernel(const Tensor& out, const Tensor&, const Tensor& x, const Pool2dParams& p) {
  if (out.numel() == 0) return;
  const int code = floating_code(x, "avg_pool2d");
  LOOM_CUDA_CHECK(launch_avg_pool2d(code, out.data_ptr(), strides_of(out), x.data_ptr(), strides_of(x),
                                    pool_geometry(x.sizes(), out.sizes(), &p), nullptr));
}

void avg_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_out, const Tensor&,
                                const Pool2dParams& p) {
  if (grad_input.numel() == 0) return;
  const int code = floating_code(grad_out, "avg_pool2d_backward");
  LOOM_CUDA_CHECK(launch_avg_pool2d_backward(
      code, grad_input.data_ptr(), strides_of(grad_input), grad_out.data_ptr(), strides_of(grad_out),
      pool_geometry(grad_input.sizes(), grad_out.sizes(), &p), nullptr));
}

void adaptive_avg_pool2d_kernel(const Tensor& out, const Tensor& x) {
  if (out.numel() == 0) return;
  const int code = floating_code(x, "adaptive_avg_pool2d");
  LOOM_CUDA_CHECK(launch_adaptive_avg_pool2d(code, out.data_ptr(), strides_of(out), x.data_ptr(),
                                             strides_of(x), pool_geometry(x.sizes(), out.sizes(), nullptr),
                                             nullptr));
}

void adaptive_avg_pool2d_backward_kernel(const Tensor& grad_input, const Tensor& grad_out) {
  if (grad_input.numel() == 0) return;
  const int code = floating_code(grad_out, "adaptive_avg_pool2d_backward");
  LOOM_CUDA_CHECK(launch_adaptive_avg_pool2d_backward(
      code, grad_input.data_ptr(), strides_of(grad_input), grad_out.data_ptr(), strides_of(grad_out),
      pool_geometry(grad_input.sizes(), grad_out.sizes(), nullptr), nullptr));
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
