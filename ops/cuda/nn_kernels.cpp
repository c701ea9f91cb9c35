/*
 * The C++ side of the CUDA nn kernels (ops/cuda/nn.cu, norm.cu): softmax, log_softmax, layer_norm,
 * batch_norm, nll_loss and their backward functions. Turns tensors into the plain arguments of
 * ops/cuda/nn_launchers.h, allocates the small device buffers the kernels need and registers
 * the kernels. Batch norm of channels_last activations goes to cuDNN first (cudnn_batch_norm.h),
 * whose handle is bound to the same current stream.
 *
 * Target values of nll_loss are checked on the device: a kernel that meets a target outside
 * [0, C) (and not ignore_index) leaves it out and records the smallest such batch index in a
 * device word, which the host reads at its next wait for the GPU (core/cuda/device_checks.h).
 * The op itself does not wait.
 *
 * Synchronisation: every launch is on the current stream (op_stream.h), so the buffers allocated here
 * (freed to the caching allocator on return) are not reused before the kernels that use them
 * have run.
 */
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_checks.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cudnn_batch_norm.h"
#include "ops/cuda/cudnn_conv.h"  // cudnn_enabled
#include "ops/cuda/nn_launchers.h"
#include "ops/cuda/op_stream.h"
#include "ops/dim_geometry.h"
#include "ops/dispatch.h"
#include "ops/factories.h"
#include "ops/memory_format.h"

namespace loom::cuda {

namespace {

int code(const Tensor& t) {
  return static_cast<int>(t.dtype());
}

const void* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}
void* mutable_ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}

// ---- softmax family: [outer, size, inner] around dim of a contiguous tensor


template <bool kLog>
void softmax_kernel(const Tensor& out, const Tensor& x, int64_t dim) {
  const DimGeometry g = geometry_around(x, dim);
  LOOM_CUDA_CHECK(
      launch_softmax(out.data_ptr(), x.data_ptr(), code(x), kLog, g.outer, g.size, g.inner, op_stream()));
}

template <bool kLog>
void softmax_backward_kernel(const Tensor& grad_input, const Tensor& grad_out, const Tensor& out,
                             int64_t dim) {
  const DimGeometry g = geometry_around(out, dim);
  LOOM_CUDA_CHECK(launch_softmax_backward(grad_input.data_ptr(), grad_out.data_ptr(), out.data_ptr(),
                                          code(out), kLog, g.outer, g.size, g.inner, op_stream()));
}

// ---- layer_norm: x [M, D]

void layer_norm_kernel(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& weight, const Tensor& bias, double eps) {
  const int64_t m = mean.numel(), d = m == 0 ? 0 : x.numel() / m;
  LOOM_CUDA_CHECK(launch_layer_norm(out.data_ptr(), mean.data_ptr(), rstd.data_ptr(), x.data_ptr(),
                                    ptr_or_null(weight), ptr_or_null(bias), code(x), m, d, eps, op_stream()));
}

void layer_norm_backward_kernel(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                                const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                                const Tensor& rstd, const Tensor& weight) {
  const int64_t m = mean.numel(), d = m == 0 ? 0 : x.numel() / m;
  LOOM_CUDA_CHECK(launch_layer_norm_backward(grad_input.data_ptr(), mutable_ptr_or_null(grad_weight),
                                             mutable_ptr_or_null(grad_bias), grad_out.data_ptr(),
                                             x.data_ptr(), mean.data_ptr(), rstd.data_ptr(),
                                             ptr_or_null(weight), code(x), m, d, op_stream()));
}

// ---- batch_norm: x [N, C, S]

struct ChannelGeometry {
  int64_t n, c, s;
};

ChannelGeometry channel_geometry(const Tensor& x) {
  int64_t s = 1;
  for (int64_t d = 2; d < x.dim(); ++d) s *= x.sizes()[d];
  return {x.sizes()[0], x.sizes()[1], s};
}

RunningStat running_stat(const Tensor& t) {
  RunningStat r;
  if (!t.defined()) return r;
  r.data = t.data_ptr();
  r.dtype = code(t);
  r.stride = t.strides()[0];
  return r;
}

// Channels_last activations (ops/memory_format.h) go to cuDNN's batch norm first; what it does
// not run, and NCHW activations, go to Loom's kernels, which take [N, C, S] in NCHW order.
void batch_norm_kernel(const Tensor& out, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& x,
                       const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, bool training, double momentum, double eps) {
  if (!out.is_contiguous() && cudnn_enabled()) {
    // Inference reads save_mean and save_invstd, which Loom computes from the running statistics.
    if (!training)
      LOOM_CUDA_CHECK(launch_batch_norm_eval_stats(save_mean.data_ptr(), save_invstd.data_ptr(),
                                                   running_stat(running_mean), running_stat(running_var),
                                                   code(x), x.size(1), eps, op_stream()));
    if (cudnn_batch_norm(out, save_mean, save_invstd, x, weight, bias, running_mean, running_var, training,
                         momentum, eps))
      return;
  }
  in_nchw_order(out, {x}, [&](const Tensor& o, const std::vector<Tensor>& in) {
    const ChannelGeometry g = channel_geometry(in[0]);
    LOOM_CUDA_CHECK(launch_batch_norm(o.data_ptr(), save_mean.data_ptr(), save_invstd.data_ptr(),
                                      in[0].data_ptr(), ptr_or_null(weight), ptr_or_null(bias),
                                      running_stat(running_mean), running_stat(running_var), code(x), g.n,
                                      g.c, g.s, training, momentum, eps, op_stream()));
  });
}

void batch_norm_backward_kernel(const Tensor& grad_input, const Tensor& grad_weight, const Tensor& grad_bias,
                                const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                const Tensor& save_mean, const Tensor& save_invstd) {
  if (!grad_input.is_contiguous() && cudnn_enabled() &&
      cudnn_batch_norm_backward(grad_input, grad_weight, grad_bias, grad_out, x, weight, save_mean,
                                save_invstd))
    return;
  in_nchw_order(grad_input, {grad_out, x}, [&](const Tensor& gi, const std::vector<Tensor>& in) {
    const ChannelGeometry g = channel_geometry(in[1]);
    // Per channel: mean(gy) and mean(gy * xhat) * invstd, in the stats dtype.
    Tensor workspace = empty({2 * g.c}, save_mean.options());
    LOOM_CUDA_CHECK(launch_batch_norm_backward(
        gi.data_ptr(), mutable_ptr_or_null(grad_weight), mutable_ptr_or_null(grad_bias), in[0].data_ptr(),
        in[1].data_ptr(), ptr_or_null(weight), save_mean.data_ptr(), save_invstd.data_ptr(),
        workspace.data_ptr(), code(x), g.n, g.c, g.s, op_stream()));
  });
}

// ---- nll_loss: logp [N, C], target [N]

// The device word that the kernels record a bad target's batch index into.
unsigned long long* bad_target_word(int64_t classes, std::string_view op) {
  return device_check_word(detail::concat(op, ": a target out of bounds for ", classes, " classes"));
}

void nll_loss_kernel(const Tensor& out, const Tensor& total_weight, const Tensor& logp, const Tensor& target,
                     const Tensor& weight, Reduction reduction, int64_t ignore_index) {
  const int64_t n = logp.sizes()[0], classes = logp.sizes()[1];
  unsigned long long* bad_target = bad_target_word(classes, "nll_loss");
  LOOM_CUDA_CHECK(launch_nll_loss(out.data_ptr(), reduction == Reduction::None ? out.strides()[0] : 0,
                                  total_weight.data_ptr(), logp.data_ptr(), logp.strides()[0],
                                  logp.strides()[1], static_cast<const int64_t*>(target.data_ptr()),
                                  target.strides()[0], ptr_or_null(weight), code(logp), n, classes,
                                  static_cast<int>(reduction), ignore_index, bad_target, op_stream()));
  finish_device_check();
}

void nll_loss_backward_kernel(const Tensor& grad_logp, const Tensor& grad_out, const Tensor& target,
                              const Tensor& weight, const Tensor& total_weight, Reduction reduction,
                              int64_t ignore_index) {
  const int64_t n = grad_logp.sizes()[0], classes = grad_logp.sizes()[1];
  unsigned long long* bad_target = bad_target_word(classes, "nll_loss_backward");
  LOOM_CUDA_CHECK(launch_nll_loss_backward(
      grad_logp.data_ptr(), grad_out.data_ptr(), static_cast<const int64_t*>(target.data_ptr()),
      target.strides()[0], ptr_or_null(weight), ptr_or_null(total_weight), code(grad_logp), n, classes,
      static_cast<int>(reduction), ignore_index, bad_target, op_stream()));
  finish_device_check();
}

}  // namespace

void register_nn_cuda_kernels() {
  register_kernel<Op::softmax>(DeviceType::CUDA, softmax_kernel<false>);
  register_kernel<Op::log_softmax>(DeviceType::CUDA, softmax_kernel<true>);
  register_kernel<Op::softmax_backward>(DeviceType::CUDA, softmax_backward_kernel<false>);
  register_kernel<Op::log_softmax_backward>(DeviceType::CUDA, softmax_backward_kernel<true>);
  register_kernel<Op::layer_norm>(DeviceType::CUDA, layer_norm_kernel);
  register_kernel<Op::layer_norm_backward>(DeviceType::CUDA, layer_norm_backward_kernel);
  register_kernel<Op::batch_norm>(DeviceType::CUDA, batch_norm_kernel);
  register_kernel<Op::batch_norm_backward>(DeviceType::CUDA, batch_norm_backward_kernel);
  register_kernel<Op::nll_loss>(DeviceType::CUDA, nll_loss_kernel);
  register_kernel<Op::nll_loss_backward>(DeviceType::CUDA, nll_loss_backward_kernel);
}

}  // namespace loom::cuda
