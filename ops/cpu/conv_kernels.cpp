/*
 * The CPU kernels of 2-D convolution (forward, input gradient, weight gradient): the path for
 * each dtype (conv_paths.h). f32 and bf16 run on oneDNN, with the input gradient of few input
 * channels as a GEMM + col2im instead (oneDNN pads the channels to 16); f16 (no oneDNN f16
 * convolution on CPUs in 2.6), and bf16 on CPUs without AVX-512 (no oneDNN bf16 kernels there),
 * compute in f32; f64 uses the im2col + Eigen reference.
 */
#include "ops/copy_ops.h"
#include "ops/cpu/conv_paths.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/onednn_utils.h"
#include "ops/dispatch.h"
#include "ops/factories.h"
#include "ops/view_ops.h"

namespace loom::cpu {

namespace {

namespace dn = onednn;

// The 16-bit types oneDNN cannot compute in here (computes_in_f32) are widened to f32 (keeping
// the layout of channels_last tensors) and the result rounded once.
Tensor widen(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor out =
      conv::is_channels_last(t) && !t.is_contiguous()
          ? permute(empty({t.size(0), t.size(2), t.size(3), t.size(1)}, t.options().dtype(DType::Float32)),
                    {0, 3, 1, 2})
          : empty(t.sizes(), t.options().dtype(DType::Float32));
  copy_(out, t);
  return out;
}

void conv2d_kernel(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                   const Conv2dParams& p) {
  if (out.numel() == 0) return;
  if (dn::computes_in_f32(x.dtype())) {
    Tensor out32 = widen(out);
    dn::guarded("conv2d", [&] { conv::onednn_forward(out32, widen(x), widen(w), widen(bias), p); });
    copy_(out, out32);
    return;
  }
  switch (x.dtype()) {
    case DType::Float32:
    case DType::BFloat16:
      dn::guarded("conv2d", [&] { conv::onednn_forward(out, x, w, bias, p); });
      return;
    case DType::Float64:
      conv::reference_forward(out, x, w, bias, p);
      return;
    default:
      LOOM_FAIL("conv2d: expected a floating-point tensor, got ", x.dtype());
  }
}

void conv2d_backward_input_kernel(const Tensor& grad_input, const Tensor& grad_out, const Tensor& w,
                                  const Conv2dParams& p) {
  if (grad_input.numel() == 0) return;
  if (dn::computes_in_f32(grad_out.dtype())) {
    Tensor gx32 = widen(grad_input);
    dn::guarded("conv2d_backward_input",
                [&] { conv::onednn_backward_data(gx32, widen(grad_out), widen(w), p); });
    copy_(grad_input, gx32);
    return;
  }
  switch (grad_out.dtype()) {
    case DType::Float32:
    case DType::BFloat16:
      if (conv::use_small_cin(grad_input, grad_out, p)) {
        conv::small_cin_backward_data(grad_input, grad_out, w, p);
        return;
      }
      dn::guarded("conv2d_backward_input", [&] { conv::onednn_backward_data(grad_input, grad_out, w, p); });
      return;
    case DType::Float64:
      conv::reference_backward_data(grad_input, grad_out, w, p);
      return;
    default:
      LOOM_FAIL("conv2d_backward_input: expected a floating-point tensor, got ", grad_out.dtype());
  }
}

void conv2d_backward_weight_kernel(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_out,
                                   const Tensor& x, const Conv2dParams& p) {
  if (grad_out.numel() == 0 || x.numel() == 0) {  // nothing reaches the weights
    fill_(grad_weight, 0);
    if (grad_bias.defined()) fill_(grad_bias, 0);
    return;
  }
  if (dn::computes_in_f32(x.dtype())) {
    Tensor gw32 = widen(grad_weight), gb32 = widen(grad_bias);
    dn::guarded("conv2d_backward_weight",
                [&] { conv::onednn_backward_weights(gw32, gb32, widen(grad_out), widen(x), p); });
    copy_(grad_weight, gw32);
    if (grad_bias.defined()) copy_(grad_bias, gb32);
    return;
  }
  switch (x.dtype()) {
    case DType::Float32:
    case DType::BFloat16:
      dn::guarded("conv2d_backward_weight",
                  [&] { conv::onednn_backward_weights(grad_weight, grad_bias, grad_out, x, p); });
      return;
    case DType::Float64:
      conv::reference_backward_weights(grad_weight, grad_bias, grad_out, x, p);
      return;
    default:
      LOOM_FAIL("conv2d_backward_weight: expected a floating-point tensor, got ", x.dtype());
  }
}

}  // namespace

void register_conv_kernels() {
  register_kernel<Op::conv2d>(DeviceType::CPU, conv2d_kernel);
  register_kernel<Op::conv2d_backward_input>(DeviceType::CPU, conv2d_backward_input_kernel);
  register_kernel<Op::conv2d_backward_weight>(DeviceType::CPU, conv2d_backward_weight_kernel);
}

}  // namespace loom::cpu
