/*
 * The interface of the CUDA multi-tensor optimizer kernels (ops/cuda/optim.cu) for the C++20
 * side (optim_kernels.cpp). Plain C++17, like launchers.h. Each list's pointers, sizes and
 * per-tensor factors travel by value in the kernel's parameters (4 KB at most on sm_90), so a
 * launch takes a bounded number of tensors and the glue launches once per full list.
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/launchers.h"

namespace loom::cuda {

// 6 pointers, a size and 2 factors: 72 bytes a tensor, 2.3 KB a list.
inline constexpr int kMaxAdamTensors = 32;

struct AdamList {
  void* param[kMaxAdamTensors] = {};
  const void* grad[kMaxAdamTensors] = {};
  void* exp_avg[kMaxAdamTensors] = {};
  void* exp_avg_sq[kMaxAdamTensors] = {};
  void* max_exp_avg_sq[kMaxAdamTensors] = {};  // null without amsgrad
  int64_t numel[kMaxAdamTensors] = {};
  // Host step counts: the factors. Device step counts (the capturable form): step_count, in
  // device memory, incremented by the launch and read by the kernel, which then computes the
  // factors itself; null on the host path.
  double step_size[kMaxAdamTensors] = {};            // lr / (1 - beta1^t)
  double inv_bias_corr2_sqrt[kMaxAdamTensors] = {};  // 1 / sqrt(1 - beta2^t)
  int64_t* step_count[kMaxAdamTensors] = {};
  int count = 0;
};

struct AdamArgs {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled, amsgrad, maximize;
  const double* device_lr;  // read by the kernel in place of lr when not null (the capturable form)
  const float* found_inf;   // GradScaler's flag when not null: nonzero skips the step, counts included
};

// One Adam/AdamW step over the list's tensors (all float32 or all float64: `dtype`), in place;
// the formula of nn/optim/adam.h. With device step counts, the list may hold empty tensors:
// their counts are incremented too.
cudaError_t launch_fused_adam(const AdamList& list, int dtype, const AdamArgs& args, cudaStream_t stream);

// 3 pointers and a size: 32 bytes a tensor, 2 KB a list.
inline constexpr int kMaxSgdTensors = 64;

struct SgdList {
  void* param[kMaxSgdTensors] = {};
  const void* grad[kMaxSgdTensors] = {};
  void* buffer[kMaxSgdTensors] = {};  // null without momentum
  int64_t numel[kMaxSgdTensors] = {};
  int count = 0;
};

struct SgdArgs {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize, first_step;
  const double* device_lr;  // read by the kernel in place of lr when not null (the capturable form)
  const float* found_inf;   // GradScaler's flag when not null: nonzero skips the step
};

// One SGD step over the list's tensors, in place; the formula of nn/optim/sgd.h.
cudaError_t launch_fused_sgd(const SgdList& list, int dtype, const SgdArgs& args, cudaStream_t stream);

inline constexpr int kMaxForeachTensors = 64;

struct ForeachList {
  void* data[kMaxForeachTensors] = {};
  int64_t numel[kMaxForeachTensors] = {};
  int count = 0;
};

// Blocks per tensor that launch_foreach_norm_partials uses for this list: it writes
// list.count times this many partial results.
int foreach_norm_blocks(const ForeachList& list);

// partials[tensor * blocks + block] = that block's sum of |x|^norm_type (max |x| for infinity)
// in float64, for blocks = foreach_norm_blocks(list).
cudaError_t launch_foreach_norm_partials(const ForeachList& list, int dtype, double norm_type, double* partials,
                                         cudaStream_t stream);

// *out = the sum (max, NaN winning, for norm_type = infinity) of partials[0, n), in a fixed
// order: the same inputs give the same bits on every run.
cudaError_t launch_foreach_norm_combine(const double* partials, int64_t n, double norm_type, double* out,
                                        cudaStream_t stream);

// Multiplies every tensor of the list by *scale (device memory), rounded to the dtype.
cudaError_t launch_foreach_mul(const ForeachList& list, int dtype, const double* scale, cudaStream_t stream);

}  // namespace loom::cuda
