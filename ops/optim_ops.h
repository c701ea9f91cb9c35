/*
 * Multi-tensor optimizer ops: the fused Adam/AdamW and SGD steps (torch's _fused_adamw_ /
 * _fused_sgd_) and the two passes of gradient-norm clipping (torch's _foreach_norm and
 * _foreach_mul_), each over a whole list of tensors in one call. They exist so that a step on
 * CUDA parameters is a handful of kernel launches instead of a dozen per parameter, and so
 * that clipping reads no value back to the host per tensor. On the CPU they are the fused
 * loops nn::Adam, nn::SGD and nn::clip_grad_norm_ have always used. None is recorded by
 * autograd; the optimizers call them under NoGradGuard.
 */
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/kernel_types.h"

namespace loom {

// A tensor's bias corrections at its own step count (>= 1), as fused_adam_ computes them; for
// an update of the same formula by other means.
AdamStepFactors adam_step_factors(const AdamStepOptions& options, int64_t step);

// One Adam (options.decoupled = false) or AdamW step, in place, for every i (torch.optim.Adam /
// AdamW; nn/optim/adam.h has the formula), with t = steps[i], the tensor's own step count
// after incrementing it (>= 1):
//   params[i] [any shape], grads[i], exp_avgs[i], exp_avg_sqs[i] and, with options.amsgrad,
//   max_exp_avg_sqs[i]: all of params[i]'s shape, dtype (float32 or float64) and device, and
//   contiguous. max_exp_avg_sqs is empty without amsgrad.
// Throws loom::Error naming fused_adam_ and the tensor's list and position for lists of other
// lengths, an undefined, non-contiguous or mismatched tensor, a dtype other than float32 or
// float64, a step < 1, or lr, eps or weight_decay < 0 or a beta outside [0, 1).
void fused_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                 const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<int64_t>& steps,
                 const AdamStepOptions& options);

// The capturable form (torch's fused Adam with capturable=True and a tensor lr): the same step,
// with each tensor's step count and the learning rate read from tensors on the parameters'
// device when the step runs rather than from host numbers, so that a step captured into a CUDA
// graph (core/cuda_graph.h) uses the counts and lr of each replay. step_counts[i]: a 0-dim int64
// on params[i]'s device, incremented by the call before use (so >= 0 before it); lr: a 0-dim
// float64 on the parameters' device, read in place of options.lr (so its value is not checked).
// found_inf, when defined (GradScaler's flag: float32 [1] on the parameters' device), is read
// when the step runs: nonzero skips the whole step, step counts included (torch's fused Adam
// with found_inf). Nothing is read back to the host. Throws as above, and for a step count, lr
// or found_inf of another dtype, shape or device.
void fused_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                 const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<Tensor>& step_counts,
                 const Tensor& lr, const AdamStepOptions& options, const Tensor& found_inf = Tensor());

// One SGD step, in place (torch.optim.SGD; nn/optim/sgd.h has the formula). momentum_buffers
// is empty when options.momentum == 0; with options.first_step, each buffer is set to the
// first direction (its old values are not read, so it may be uninitialised). Same tensor rules
// as fused_adam_. Throws loom::Error naming fused_sgd_ for the same mistakes, a negative
// hyper-parameter, or nesterov without momentum > 0 and dampening = 0.
void fused_sgd_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_buffers, const SgdStepOptions& options);
// The same with the learning rate read from lr (a 0-dim float64 on the parameters' device) when
// the step runs, in place of options.lr: the capturable form. found_inf as for fused_adam_.
void fused_sgd_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_buffers, const Tensor& lr, const SgdStepOptions& options,
                const Tensor& found_inf = Tensor());

// The sum over every element x of every tensor of |x|^norm_type (x * x for 2, |x| for 1), or
// max |x| for norm_type = infinity (NaN when any x is NaN), accumulated in float64: a float64
// 0-dim tensor on the tensors' device (device), which stays there until read. With no tensors,
// 0. On the CPU the sum runs per fixed block and then over blocks in order, so it does not
// depend on the thread count. tensors: contiguous float32/float64, all on `device`. Throws
// loom::Error naming foreach_norm_reduce for norm_type not > 0 or a bad tensor.
Tensor foreach_norm_reduce(const std::vector<Tensor>& tensors, double norm_type, Device device);

// tensors[i] *= scale in place, scale being a float64 0-dim tensor on the tensors' device
// (so that a factor computed there is never read back), rounded to each tensor's dtype.
// tensors: contiguous float32/float64. Throws loom::Error naming foreach_mul_ for a bad tensor
// or a scale that is not one float64 on their device.
void foreach_mul_(const std::vector<Tensor>& tensors, const Tensor& scale);

}  // namespace loom
