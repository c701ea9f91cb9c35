/*
 * CUDA kernels of the multi-tensor optimizer ops (ops/optim_ops.h; launchers declared in
 * ops/cuda/optim_launchers.h, CPU twins in ops/cpu/optim_kernels.cpp). Many tensors per launch,
 * as amp.cu: blockIdx.y picks the tensor and the blocks along x walk it in a grid-stride loop,
 * so an optimizer step over a model is one launch per 32 (Adam) or 64 (SGD) parameters rather
 * than a dozen launches and temporaries per parameter.
 *
 * The per-element arithmetic is the CPU loop's, in the parameter's dtype; nvcc contracts
 * a * b + c into one FMA where the CPU build may round twice, so results agree to a few ulps,
 * not bit for bit. The norm is reduced in a fixed order (per block, then one block over the
 * partials), so it is deterministic run to run, but its summation order differs from the CPU's.
 */
#include <cmath>
#include <cstdint>

#include "ops/cuda/device_math.cuh"
#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/optim_launchers.h"

namespace loom::cuda {

// ---- kernels -------------------------------------------------------------------------------

namespace {

// GradScaler's skipped step: every thread of every launch of the step reads the same flag, which
// nothing in the step writes.
__device__ inline bool step_skipped(const float* found_inf) {
  return found_inf != nullptr && *found_inf != 0.0f;
}

template <class T>
__global__ void fused_adam_kernel(AdamList list, AdamArgs h) {
  if (step_skipped(h.found_inf)) return;
  const int k = blockIdx.y;
  T* p = static_cast<T*>(list.param[k]);
  const T* g = static_cast<const T*>(list.grad[k]);
  T* m = static_cast<T*>(list.exp_avg[k]);
  T* v = static_cast<T*>(list.exp_avg_sq[k]);
  T* v_max = static_cast<T*>(list.max_exp_avg_sq[k]);
  const int64_t numel = list.numel[k];
  const double lr = h.device_lr != nullptr ? *h.device_lr : h.lr;
  double step_size = list.step_size[k], inv_bias_corr2_sqrt = list.inv_bias_corr2_sqrt[k];
  if (list.step_count[k] != nullptr) {
    // adam_step_factors (ops/optim_ops.cpp) at the count the increment kernel left.
    const double t = static_cast<double>(*list.step_count[k]);
    step_size = lr / (1.0 - m_pow(h.beta1, t));
    inv_bias_corr2_sqrt = 1.0 / m_sqrt(1.0 - m_pow(h.beta2, t));
  }
  const T sign = h.maximize ? T(-1) : T(1);
  const T decay = static_cast<T>(1.0 - lr * h.weight_decay), wd = static_cast<T>(h.weight_decay);
  const bool l2 = !h.decoupled && h.weight_decay != 0;
  const T b1 = static_cast<T>(h.beta1), one_minus_b1 = static_cast<T>(1.0 - h.beta1);
  const T b2 = static_cast<T>(h.beta2), one_minus_b2 = static_cast<T>(1.0 - h.beta2);
  const T eps = static_cast<T>(h.eps), inv_bc2_sqrt = static_cast<T>(inv_bias_corr2_sqrt);
  const T neg_step_size = static_cast<T>(-step_size);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < numel;
       i += int64_t{gridDim.x} * blockDim.x) {
    T pi = p[i];
    T gi = sign * g[i];
    if (h.decoupled) pi = pi * decay;
    if (l2) gi = gi + wd * pi;
    const T mi = m[i] * b1 + one_minus_b1 * gi;
    const T vi = v[i] * b2 + one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    T second = vi;
    if (h.amsgrad) {
      const T old = v_max[i];
      second = (vi > old || vi != vi) ? vi : old;  // torch.maximum: NaN wins
      v_max[i] = second;
    }
    p[i] = pi + neg_step_size * mi / (m_sqrt(second) * inv_bc2_sqrt + eps);
  }
}

// The capturable form's step counts, one thread each, in a launch of their own: every block of
// the update that follows reads its tensor's count, so none may change it there.
__global__ void increment_step_counts_kernel(AdamList list, const float* found_inf) {
  if (step_skipped(found_inf)) return;
  if (static_cast<int>(threadIdx.x) < list.count) ++*list.step_count[threadIdx.x];
}

template <class T>
__global__ void fused_sgd_kernel(SgdList list, SgdArgs h) {
  if (step_skipped(h.found_inf)) return;
  const int k = blockIdx.y;
  T* p = static_cast<T*>(list.param[k]);
  const T* g = static_cast<const T*>(list.grad[k]);
  T* buf = static_cast<T*>(list.buffer[k]);
  const int64_t numel = list.numel[k];
  const T sign = h.maximize ? T(-1) : T(1);
  const T wd = static_cast<T>(h.weight_decay), mom = static_cast<T>(h.momentum);
  const T keep = static_cast<T>(1.0 - h.dampening);
  const T neg_lr = static_cast<T>(-(h.device_lr != nullptr ? *h.device_lr : h.lr));
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < numel;
       i += int64_t{gridDim.x} * blockDim.x) {
    const T pi = p[i];
    T d = sign * g[i];
    if (h.weight_decay != 0) d = d + wd * pi;
    if (h.momentum != 0) {
      const T b = h.first_step ? d : buf[i] * mom + keep * d;
      buf[i] = b;
      d = h.nesterov ? d + mom * b : b;
    }
    p[i] = pi + neg_lr * d;
  }
}

enum NormKind { kNormTwo, kNormOne, kNormInf, kNormPow };

template <class T, int kKind>
__global__ void foreach_norm_partials_kernel(ForeachList list, double norm_type, double* partials) {
  __shared__ double scratch[32];
  const T* x = static_cast<const T*>(list.data[blockIdx.y]);
  const int64_t numel = list.numel[blockIdx.y];
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < numel;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double a = m_fabs(static_cast<double>(x[i]));
    if (kKind == kNormTwo)
      acc += a * a;
    else if (kKind == kNormOne)
      acc += a;
    else if (kKind == kNormInf)
      acc = MaxOp{}(acc, a);
    else
      acc += m_pow(a, norm_type);
  }
  const double total = kKind == kNormInf ? block_reduce(acc, MaxOp{}, 0.0, scratch)
                                         : block_reduce(acc, SumOp{}, 0.0, scratch);
  if (threadIdx.x == 0) partials[int64_t{blockIdx.y} * gridDim.x + blockIdx.x] = total;
}

// One block: each thread folds a fixed stride of the partials, then the block reduces.
template <bool kMax>
__global__ void foreach_norm_combine_kernel(const double* partials, int64_t n, double* out) {
  __shared__ double scratch[32];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc = kMax ? MaxOp{}(acc, partials[i]) : acc + partials[i];
  const double total = kMax ? block_reduce(acc, MaxOp{}, 0.0, scratch) : block_reduce(acc, SumOp{}, 0.0, scratch);
  if (threadIdx.x == 0) *out = total;
}

template <class T>
__global__ void foreach_mul_kernel(ForeachList list, const double* scale) {
  T* x = static_cast<T*>(list.data[blockIdx.y]);
  const int64_t numel = list.numel[blockIdx.y];
  const T c = static_cast<T>(*scale);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < numel;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] = x[i] * c;
}

template <int kMax>
int64_t longest_of(const int64_t (&numel)[kMax], int count) {
  int64_t longest = 0;
  for (int i = 0; i < count; ++i) longest = numel[i] > longest ? numel[i] : longest;
  return longest;
}

// A grid-stride launch over the list's tensors: grid.y = one per tensor.
template <int kMax>
LaunchConfig per_tensor_config(const int64_t (&numel)[kMax], int count, cudaStream_t stream) {
  LaunchConfig config = grid_stride(longest_of(numel, count), stream);
  config.grid.y = static_cast<unsigned>(count);
  return config;
}

// Threads of a norm block: enough to hide memory latency, few enough that the emulated
// cooperative launch (an OS thread per CUDA thread) stays quick.
constexpr int kNormThreads = 128;
// At most this many blocks per tensor: with up to 64 tensors a launch, up to 2048 blocks.
constexpr int64_t kMaxNormBlocks = 32;

}  // namespace

// ---- launchers -----------------------------------------------------------------------------

cudaError_t launch_fused_adam(const AdamList& list, int dtype, const AdamArgs& args, cudaStream_t stream) {
  if (list.count == 0) return cudaSuccess;
  if (list.step_count[0] != nullptr) {
    const LaunchConfig counts{dim3(1), dim3(kMaxAdamTensors), 0, stream, BlockThreads::kIndependent};
    const cudaError_t e = launch<increment_step_counts_kernel>(counts, list, args.found_inf);
    if (e != cudaSuccess) return e;
  }
  if (longest_of(list.numel, list.count) == 0) return cudaSuccess;
  const LaunchConfig config = per_tensor_config(list.numel, list.count, stream);
  if (dtype == kCodeFloat32) return launch<fused_adam_kernel<float>>(config, list, args);
  if (dtype == kCodeFloat64) return launch<fused_adam_kernel<double>>(config, list, args);
  return cudaErrorInvalidValue;
}

cudaError_t launch_fused_sgd(const SgdList& list, int dtype, const SgdArgs& args, cudaStream_t stream) {
  if (list.count == 0 || longest_of(list.numel, list.count) == 0) return cudaSuccess;
  const LaunchConfig config = per_tensor_config(list.numel, list.count, stream);
  if (dtype == kCodeFloat32) return launch<fused_sgd_kernel<float>>(config, list, args);
  if (dtype == kCodeFloat64) return launch<fused_sgd_kernel<double>>(config, list, args);
  return cudaErrorInvalidValue;
}

int foreach_norm_blocks(const ForeachList& list) {
  const int64_t per_block = int64_t{kNormThreads} * 8;  // several elements a thread
  const int64_t blocks = (longest_of(list.numel, list.count) + per_block - 1) / per_block;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kMaxNormBlocks ? kMaxNormBlocks : blocks));
}

cudaError_t launch_foreach_norm_partials(const ForeachList& list, int dtype, double norm_type, double* partials,
                                         cudaStream_t stream) {
  if (list.count == 0) return cudaSuccess;
  const LaunchConfig config{dim3(static_cast<unsigned>(foreach_norm_blocks(list)), static_cast<unsigned>(list.count)),
                            dim3(kNormThreads), 0, stream, BlockThreads::kCooperative};
  auto go = [&](auto tag) {
    using T = decltype(tag);
    if (norm_type == 2.0) return launch<foreach_norm_partials_kernel<T, kNormTwo>>(config, list, norm_type, partials);
    if (norm_type == 1.0) return launch<foreach_norm_partials_kernel<T, kNormOne>>(config, list, norm_type, partials);
    if (std::isinf(norm_type)) return launch<foreach_norm_partials_kernel<T, kNormInf>>(config, list, norm_type, partials);
    return launch<foreach_norm_partials_kernel<T, kNormPow>>(config, list, norm_type, partials);
  };
  if (dtype == kCodeFloat32) return go(float{});
  if (dtype == kCodeFloat64) return go(double{});
  return cudaErrorInvalidValue;
}

cudaError_t launch_foreach_norm_combine(const double* partials, int64_t n, double norm_type, double* out,
                                        cudaStream_t stream) {
  const LaunchConfig config{dim3(1), dim3(256), 0, stream, BlockThreads::kCooperative};
  if (std::isinf(norm_type)) return launch<foreach_norm_combine_kernel<true>>(config, partials, n, out);
  return launch<foreach_norm_combine_kernel<false>>(config, partials, n, out);
}

cudaError_t launch_foreach_mul(const ForeachList& list, int dtype, const double* scale, cudaStream_t stream) {
  if (list.count == 0 || longest_of(list.numel, list.count) == 0) return cudaSuccess;
  const LaunchConfig config = per_tensor_config(list.numel, list.count, stream);
  if (dtype == kCodeFloat32) return launch<foreach_mul_kernel<float>>(config, list, scale);
  if (dtype == kCodeFloat64) return launch<foreach_mul_kernel<double>>(config, list, scale);
  return cudaErrorInvalidValue;
}

}  // namespace loom::cuda
