/*
 * CUDA glue of flash_attention and its backward (ops/attention_ops.h): tensors into
 * AttentionArgs for the kernels of ops/cuda/attention.cu. The ops layer has made q, k, v,
 * out and grad_out contiguous and the mask float32 [N, L, S] (strides 0 where broadcast).
 * Every launch is on the current stream (op_stream.h), after the kernels that wrote the inputs.
 */
#include <string_view>

#include "core/cuda/cuda_check.h"
#include "ops/cuda/attention_launchers.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/op_stream.h"
#include "ops/dispatch.h"

namespace loom::cuda {

namespace {

AttentionArgs attention_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale,
                             bool is_causal, std::string_view op) {
  LOOM_CHECK(q.dtype() == kFloat32 || q.dtype() == kFloat16 || q.dtype() == kBFloat16, op,
             ": the CUDA kernel takes float32, float16 and bfloat16, got ", q.dtype(),
             " (scaled_dot_product_attention writes the attention out for it)");
  LOOM_CHECK(q.size(2) <= kFlashMaxHeadDim && v.size(2) <= kFlashMaxHeadDim, op,
             ": the CUDA kernel takes head dims up to ", kFlashMaxHeadDim, ", got query ", q.sizes(), " and value ",
             v.sizes(), " (scaled_dot_product_attention writes the attention out for them)");
  AttentionArgs a;
  a.q = q.data_ptr();
  a.k = k.data_ptr();
  a.v = v.data_ptr();
  if (mask.defined()) {
    a.mask = mask.data_ptr<float>();
    for (int d = 0; d < 3; ++d) a.mask_stride[d] = mask.stride(d);
  }
  a.n = q.size(0);
  a.l = q.size(1);
  a.s = k.size(1);
  a.e = q.size(2);
  a.ev = v.size(2);
  a.scale = static_cast<float>(scale);
  a.is_causal = is_causal;
  a.dtype = static_cast<int>(q.dtype());
  return a;
}

void flash_attention_kernel(const Tensor& out, const Tensor& logsumexp, const Tensor& q, const Tensor& k,
                            const Tensor& v, const Tensor& mask, double scale, bool is_causal) {
  const AttentionArgs a = attention_args(q, k, v, mask, scale, is_causal, "flash_attention");
  LOOM_CUDA_CHECK(
      launch_flash_attention_forward(a, out.data_ptr(), logsumexp.data_ptr<float>(), op_stream()));
}

void flash_attention_backward_kernel(const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v,
                                     const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& logsumexp, const Tensor& mask, double scale,
                                     bool is_causal) {
  const AttentionArgs a = attention_args(q, k, v, mask, scale, is_causal, "flash_attention_backward");
  LOOM_CUDA_CHECK(launch_flash_attention_backward(a, grad_out.data_ptr(), out.data_ptr(),
                                                  logsumexp.data_ptr<float>(), grad_q.data_ptr(),
                                                  grad_k.data_ptr(), grad_v.data_ptr(), op_stream()));
}

}  // namespace

void register_attention_cuda_kernels() {
  register_kernel<Op::flash_attention>(DeviceType::CUDA, flash_attention_kernel);
  register_kernel<Op::flash_attention_backward>(DeviceType::CUDA, flash_attention_backward_kernel);
}

}  // namespace loom::cuda
