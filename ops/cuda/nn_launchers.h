/*
 * The interface between ops/cuda/nn_kernels.cpp (C++20) and ops/cuda/nn.cu and norm.cu (C++17): softmax,
 * log_softmax, layer and batch normalisation and nll_loss, forward and backward, as plain
 * pointers, dtype codes and sizes. `dtype` is the code of the input x (or logp); "A" below is
 * the statistics type: float, or double for float64 x. Every pointer is device memory (null
 * where a comment says "or null"); every launcher returns the first failing launch's status.
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/launchers.h"

namespace loom::cuda {

// ---- softmax family: contiguous tensors seen as [outer, size, inner] around the softmax dim.

// out = softmax(x) (log_softmax when `log`).
cudaError_t launch_softmax(void* out, const void* x, int dtype, bool log, int64_t outer, int64_t size,
                           int64_t inner, cudaStream_t stream);
// softmax:     grad_input = out * (grad_out - sum(grad_out * out))
// log_softmax: grad_input = grad_out - exp(out) * sum(grad_out)
cudaError_t launch_softmax_backward(void* grad_input, const void* grad_out, const void* out, int dtype,
                                    bool log, int64_t outer, int64_t size, int64_t inner,
                                    cudaStream_t stream);

// ---- layer_norm: x, out, grad_out, grad_input contiguous [m, d] (m, d >= 1); mean, rstd [m] and
// weight, bias, grad_weight, grad_bias [d] contiguous in A; weight/bias/grad_* may be null.
cudaError_t launch_layer_norm(void* out, void* mean, void* rstd, const void* x, const void* weight,
                              const void* bias, int dtype, int64_t m, int64_t d, double eps,
                              cudaStream_t stream);
cudaError_t launch_layer_norm_backward(void* grad_input, void* grad_weight, void* grad_bias,
                                       const void* grad_out, const void* x, const void* mean,
                                       const void* rstd, const void* weight, int dtype, int64_t m, int64_t d,
                                       cudaStream_t stream);

// ---- batch_norm: x, out, grad_out, grad_input contiguous [n, c, s]; weight, bias, save_mean,
// save_invstd, grad_weight, grad_bias [c] contiguous in A (weight/bias/grad_* may be null).

// A running statistic: [c] of any floating dtype and element stride, or data == null.
struct RunningStat {
  void* data = nullptr;
  int dtype = kCodeFloat32;
  int64_t stride = 1;
};

cudaError_t launch_batch_norm(void* out, void* save_mean, void* save_invstd, const void* x,
                              const void* weight, const void* bias, RunningStat running_mean,
                              RunningStat running_var, int dtype, int64_t n, int64_t c, int64_t s,
                              bool training, double momentum, double eps, cudaStream_t stream);
// Evaluation only: save_mean = running_mean, save_invstd = 1 / sqrt(running_var + eps), in A.
cudaError_t launch_batch_norm_eval_stats(void* save_mean, void* save_invstd, RunningStat running_mean,
                                         RunningStat running_var, int dtype, int64_t c, double eps,
                                         cudaStream_t stream);
// `workspace`: 2 * c values of A.
cudaError_t launch_batch_norm_backward(void* grad_input, void* grad_weight, void* grad_bias,
                                       const void* grad_out, const void* x, const void* weight,
                                       const void* save_mean, const void* save_invstd, void* workspace,
                                       int dtype, int64_t n, int64_t c, int64_t s, cudaStream_t stream);

// ---- nll_loss: logp [n, classes] (element strides logp_s0, logp_s1), target int64 [n] (stride
// target_stride), weight [classes] contiguous in logp's dtype or null. reduction: 0 none, 1 mean,
// 2 sum (loom::Reduction). A target that is neither ignore_index nor in [0, classes) is not
// read: the smallest batch index holding one is left in *bad_index, which the caller sets to
// UINT64_MAX ("none") before the launch.

// out: [n] with element stride out_stride (none) or one value; total_weight: one value.
cudaError_t launch_nll_loss(void* out, int64_t out_stride, void* total_weight, const void* logp,
                            int64_t logp_s0, int64_t logp_s1, const int64_t* target, int64_t target_stride,
                            const void* weight, int dtype, int64_t n, int64_t classes, int reduction,
                            int64_t ignore_index, unsigned long long* bad_index, cudaStream_t stream);
// grad_logp: contiguous [n, classes], zero-filled; grad_out: [n] contiguous (none) or one value;
// total_weight: one value (read for mean only).
cudaError_t launch_nll_loss_backward(void* grad_logp, const void* grad_out, const int64_t* target,
                                     int64_t target_stride, const void* weight, const void* total_weight,
                                     int dtype, int64_t n, int64_t classes, int reduction,
                                     int64_t ignore_index, unsigned long long* bad_index,
                                     cudaStream_t stream);

}  // namespace loom::cuda
