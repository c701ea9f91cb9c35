/*
 * The interface of the CUDA flash-attention kernels (ops/cuda/attention.cu) for the C++20 side
 * (attention_kernels.cpp). Plain C++17, like launchers.h.
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/launchers.h"

namespace loom::cuda {

// The widest E and Ev the kernels take: each thread keeps its share of a row in registers.
inline constexpr int64_t kFlashMaxHeadDim = 128;

// q [n, l, e], k [n, s, e], v [n, s, ev]: contiguous device tensors of dtype `dtype` (float32,
// float16 or bfloat16 code). mask: null, or float32 added to the scaled scores, element (b, i,
// j) at mask[b * mask_stride[0] + i * mask_stride[1] + j * mask_stride[2]]. is_causal hides
// keys j > i. e, ev <= kFlashMaxHeadDim.
struct AttentionArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const float* mask = nullptr;
  int64_t mask_stride[3] = {0, 0, 0};
  int64_t n = 0, l = 0, s = 0, e = 0, ev = 0;
  float scale = 1.0f;
  bool is_causal = false;
  int dtype = kCodeFloat32;
};

// out [n, l, ev] (dtype) and logsumexp [n, l] (float32); an all-masked row gives 0 and -inf.
cudaError_t launch_flash_attention_forward(const AttentionArgs& args, void* out, float* logsumexp,
                                           cudaStream_t stream);

// grad_q [n, l, e], grad_k [n, s, e], grad_v [n, s, ev] (dtype, contiguous) from grad_out and the
// forward's out [n, l, ev] and logsumexp [n, l].
cudaError_t launch_flash_attention_backward(const AttentionArgs& args, const void* grad_out, const void* out,
                                            const float* logsumexp, void* grad_q, void* grad_k, void* grad_v,
                                            cudaStream_t stream);

}  // namespace loom::cuda
