/*
 * CUDA kernels for softmax, log_softmax and nll_loss, forward and backward (see
 * ops/cuda/nn_launchers.h; CPU twins in ops/cpu/nn_kernels.cpp, whose numerics these follow;
 * layer and batch norm are in norm.cu).
 *
 *  - Rows (softmax along the last dim): one row team per row (row_team.cuh).
 *  - Columns (softmax along another dim): one thread per column, looping over the reduced dim;
 *    neighbouring threads read neighbouring addresses, and the fixed loop order makes the sums
 *    deterministic.
 *  - nll_loss: one thread per sample; mean/sum in one block (double, fixed order: no atomics).
 *    Out-of-range targets are not read; the smallest batch index holding one goes to a device
 *    word that the host copies back to raise the CPU's error.
 * 16-bit inputs are computed in float (opmath).
 */
#include <cmath>

#include "ops/cuda/device_math.cuh"
#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/nn_launchers.h"
#include "ops/cuda/row_team.cuh"

namespace loom::cuda {

// ---- kernels -------------------------------------------------------------------------------

namespace {

// ---- softmax family

// Rows of n contiguous values (softmax along the last dim), one row per team:
// max, then sum(exp(x - max)), then the write (kCooperative).
template <class T, bool kLog, bool kWarp>
__global__ void softmax_rows_kernel(T* out, const T* x, int64_t rows, int64_t n) {
  using A = opmath_t<T>;
  const RowTeam<kWarp> team{};
  A* scratch = team_scratch<kWarp, A>();
  for (int64_t r = team.first_row(); r < rows; r += team.row_step()) {
    const T* xr = x + r * n;
    T* yr = out + r * n;
    A m = neg_infinity<A>();
    for (int64_t j = team.lane(); j < n; j += team.width()) m = MaxOp{}(m, to_opmath(xr[j]));
    m = team.reduce(m, MaxOp{}, neg_infinity<A>(), scratch);
    A s = 0;
    for (int64_t j = team.lane(); j < n; j += team.width()) s += m_exp(to_opmath(xr[j]) - m);
    s = team.reduce(s, SumOp{}, A(0), scratch);
    if constexpr (kLog) {
      const A lse = m + m_log(s);
      for (int64_t j = team.lane(); j < n; j += team.width()) yr[j] = convert<T>(to_opmath(xr[j]) - lse);
    } else {
      const A inv = A(1) / s;
      for (int64_t j = team.lane(); j < n; j += team.width())
        yr[j] = convert<T>(m_exp(to_opmath(xr[j]) - m) * inv);
    }
  }
}

// Softmax along a dim with inner > 1: one thread per (outer, inner) column walking the n
// values of its column, inner apart (kIndependent).
template <class T, bool kLog>
__global__ void softmax_columns_kernel(T* out, const T* x, int64_t outer, int64_t n, int64_t inner) {
  using A = opmath_t<T>;
  const int64_t columns = outer * inner;
  for (int64_t col = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; col < columns;
       col += int64_t{gridDim.x} * blockDim.x) {
    const int64_t base = (col / inner) * n * inner + col % inner;
    A m = neg_infinity<A>();
    for (int64_t k = 0; k < n; ++k) m = MaxOp{}(m, to_opmath(x[base + k * inner]));
    A s = 0;
    for (int64_t k = 0; k < n; ++k) s += m_exp(to_opmath(x[base + k * inner]) - m);
    if constexpr (kLog) {
      const A lse = m + m_log(s);
      for (int64_t k = 0; k < n; ++k)
        out[base + k * inner] = convert<T>(to_opmath(x[base + k * inner]) - lse);
    } else {
      const A inv = A(1) / s;
      for (int64_t k = 0; k < n; ++k)
        out[base + k * inner] = convert<T>(m_exp(to_opmath(x[base + k * inner]) - m) * inv);
    }
  }
}

// The row's sum for the backward: sum(gy) for log_softmax, sum(gy * y) for softmax.
template <bool kLog, class A>
__device__ inline A backward_term(A gy, A y) {
  return kLog ? gy : gy * y;
}
template <bool kLog, class A>
__device__ inline A backward_value(A gy, A y, A s) {
  if constexpr (kLog) {
    return gy - m_exp(y) * s;
  } else {
    return y * (gy - s);
  }
}

template <class T, bool kLog, bool kWarp>
__global__ void softmax_backward_rows_kernel(T* gx, const T* gy, const T* y, int64_t rows, int64_t n) {
  using A = opmath_t<T>;
  const RowTeam<kWarp> team{};
  A* scratch = team_scratch<kWarp, A>();
  for (int64_t r = team.first_row(); r < rows; r += team.row_step()) {
    const int64_t off = r * n;
    A s = 0;
    for (int64_t j = team.lane(); j < n; j += team.width())
      s += backward_term<kLog>(to_opmath(gy[off + j]), to_opmath(y[off + j]));
    s = team.reduce(s, SumOp{}, A(0), scratch);
    for (int64_t j = team.lane(); j < n; j += team.width())
      gx[off + j] = convert<T>(backward_value<kLog>(to_opmath(gy[off + j]), to_opmath(y[off + j]), s));
  }
}

template <class T, bool kLog>
__global__ void softmax_backward_columns_kernel(T* gx, const T* gy, const T* y, int64_t outer, int64_t n,
                                                int64_t inner) {
  using A = opmath_t<T>;
  const int64_t columns = outer * inner;
  for (int64_t col = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; col < columns;
       col += int64_t{gridDim.x} * blockDim.x) {
    const int64_t base = (col / inner) * n * inner + col % inner;
    A s = 0;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = base + k * inner;
      s += backward_term<kLog>(to_opmath(gy[i]), to_opmath(y[i]));
    }
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = base + k * inner;
      gx[i] = convert<T>(backward_value<kLog>(to_opmath(gy[i]), to_opmath(y[i]), s));
    }
  }
}
// ---- nll_loss

// The class of sample i if it is counted: -1 when ignored, -2 (recorded) when out of range.
__device__ inline int64_t counted_class(const int64_t* target, int64_t target_stride, int64_t i,
                                        int64_t classes, int64_t ignore_index, unsigned long long* bad) {
  const int64_t t = target[i * target_stride];
  if (t == ignore_index) return -1;
  if (t < 0 || t >= classes) {
    record_bad_index(bad, static_cast<unsigned long long>(i));
    return -2;
  }
  return t;
}

// Reduction none: out[i] = -weight[t_i] * logp[i, t_i], 0 for ignored samples (kIndependent).
template <class T>
__global__ void nll_loss_none_kernel(T* out, int64_t out_stride, const T* logp, int64_t s0, int64_t s1,
                                     const int64_t* target, int64_t target_stride, const T* weight, int64_t n,
                                     int64_t classes, int64_t ignore_index, unsigned long long* bad) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = counted_class(target, target_stride, i, classes, ignore_index, bad);
    double loss = 0;
    if (t >= 0) {
      const double w = weight ? static_cast<double>(to_opmath(weight[t])) : 1.0;
      loss = -w * static_cast<double>(to_opmath(logp[i * s0 + t * s1]));
    }
    out[i * out_stride] = convert<T>(loss);
  }
}

// The sums over samples, in one block, in double: total_weight always, the loss for mean/sum
// (kCooperative; dynamic shared memory: 32 doubles).
template <class T>
__global__ void nll_loss_reduce_kernel(T* out, T* total_weight, const T* logp, int64_t s0, int64_t s1,
                                       const int64_t* target, int64_t target_stride, const T* weight,
                                       int64_t n, int64_t classes, int reduction, int64_t ignore_index,
                                       unsigned long long* bad) {
  double* scratch = dynamic_shared<double>();
  double loss_sum = 0, weight_sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t t = counted_class(target, target_stride, i, classes, ignore_index, bad);
    if (t < 0) continue;
    const double w = weight ? static_cast<double>(to_opmath(weight[t])) : 1.0;
    loss_sum += -w * static_cast<double>(to_opmath(logp[i * s0 + t * s1]));
    weight_sum += w;
  }
  loss_sum = block_reduce(loss_sum, SumOp{}, 0.0, scratch);
  weight_sum = block_reduce(weight_sum, SumOp{}, 0.0, scratch);
  if (threadIdx.x == 0) {
    // The mean of no counted targets is 0/0 = NaN, as on the CPU and in PyTorch.
    if (reduction == 1) *out = convert<T>(loss_sum / weight_sum);
    if (reduction == 2) *out = convert<T>(loss_sum);
    *total_weight = convert<T>(weight_sum);
  }
}

// grad_logp[i, t_i] = -weight[t_i] * grad_out[i or 0] (/ total_weight for mean) (kIndependent).
template <class T>
__global__ void nll_loss_backward_kernel(T* grad, const T* grad_out, int64_t grad_out_stride,
                                         const int64_t* target, int64_t target_stride, const T* weight,
                                         const T* total_weight, int64_t n, int64_t classes, bool mean,
                                         int64_t ignore_index, unsigned long long* bad) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = counted_class(target, target_stride, i, classes, ignore_index, bad);
    if (t < 0) continue;
    const double scale = mean ? 1.0 / static_cast<double>(to_opmath(*total_weight)) : 1.0;
    const double w = weight ? static_cast<double>(to_opmath(weight[t])) : 1.0;
    grad[i * classes + t] =
        convert<T>(-w * static_cast<double>(to_opmath(grad_out[i * grad_out_stride])) * scale);
  }
}
}  // namespace

// ---- launchers -----------------------------------------------------------------------------

namespace {

template <bool kLog>
cudaError_t softmax_dispatch(void* out, const void* x, int dtype, int64_t outer, int64_t size, int64_t inner,
                             cudaStream_t stream) {
  return visit_floating_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out);
    const T* xp = static_cast<const T*>(x);
    if (inner > 1)
      return launch<softmax_columns_kernel<T, kLog>>(grid_stride(outer * inner, stream), o, xp, outer, size,
                                                     inner);
    const RowLaunch rl = row_launch<opmath_t<T>>(outer, size, stream);
    return rl.warp ? launch<softmax_rows_kernel<T, kLog, true>>(rl.config, o, xp, outer, size)
                   : launch<softmax_rows_kernel<T, kLog, false>>(rl.config, o, xp, outer, size);
  });
}

template <bool kLog>
cudaError_t softmax_backward_dispatch(void* grad_input, const void* grad_out, const void* out, int dtype,
                                      int64_t outer, int64_t size, int64_t inner, cudaStream_t stream) {
  return visit_floating_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* gx = static_cast<T*>(grad_input);
    const T* gy = static_cast<const T*>(grad_out);
    const T* y = static_cast<const T*>(out);
    if (inner > 1)
      return launch<softmax_backward_columns_kernel<T, kLog>>(grid_stride(outer * inner, stream), gx, gy, y,
                                                              outer, size, inner);
    const RowLaunch rl = row_launch<opmath_t<T>>(outer, size, stream);
    return rl.warp ? launch<softmax_backward_rows_kernel<T, kLog, true>>(rl.config, gx, gy, y, outer, size)
                   : launch<softmax_backward_rows_kernel<T, kLog, false>>(rl.config, gx, gy, y, outer, size);
  });
}
}  // namespace

cudaError_t launch_softmax(void* out, const void* x, int dtype, bool log, int64_t outer, int64_t size,
                           int64_t inner, cudaStream_t stream) {
  if (outer * size * inner == 0) return cudaSuccess;
  return log ? softmax_dispatch<true>(out, x, dtype, outer, size, inner, stream)
             : softmax_dispatch<false>(out, x, dtype, outer, size, inner, stream);
}

cudaError_t launch_softmax_backward(void* grad_input, const void* grad_out, const void* out, int dtype,
                                    bool log, int64_t outer, int64_t size, int64_t inner,
                                    cudaStream_t stream) {
  if (outer * size * inner == 0) return cudaSuccess;
  return log ? softmax_backward_dispatch<true>(grad_input, grad_out, out, dtype, outer, size, inner, stream)
             : softmax_backward_dispatch<false>(grad_input, grad_out, out, dtype, outer, size, inner, stream);
}
cudaError_t launch_nll_loss(void* out, int64_t out_stride, void* total_weight, const void* logp,
                            int64_t logp_s0, int64_t logp_s1, const int64_t* target, int64_t target_stride,
                            const void* weight, int dtype, int64_t n, int64_t classes, int reduction,
                            int64_t ignore_index, unsigned long long* bad_index, cudaStream_t stream) {
  return visit_floating_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out);
    const T* lp = static_cast<const T*>(logp);
    const T* w = static_cast<const T*>(weight);
    if (reduction == 0 && n > 0) {
      cudaError_t status =
          launch<nll_loss_none_kernel<T>>(grid_stride(n, stream), o, out_stride, lp, logp_s0, logp_s1, target,
                                          target_stride, w, n, classes, ignore_index, bad_index);
      if (status != cudaSuccess) return status;
    }
    return launch<nll_loss_reduce_kernel<T>>(
        {1, kBlockRowThreads, 32 * sizeof(double), stream, BlockThreads::kCooperative}, o,
        static_cast<T*>(total_weight), lp, logp_s0, logp_s1, target, target_stride, w, n, classes, reduction,
        ignore_index, bad_index);
  });
}

cudaError_t launch_nll_loss_backward(void* grad_logp, const void* grad_out, const int64_t* target,
                                     int64_t target_stride, const void* weight, const void* total_weight,
                                     int dtype, int64_t n, int64_t classes, int reduction,
                                     int64_t ignore_index, unsigned long long* bad_index,
                                     cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return visit_floating_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    return launch<nll_loss_backward_kernel<T>>(
        grid_stride(n, stream), static_cast<T*>(grad_logp), static_cast<const T*>(grad_out),
        int64_t{reduction == 0 ? 1 : 0}, target, target_stride, static_cast<const T*>(weight),
        static_cast<const T*>(total_weight), n, classes, reduction == 1, ignore_index, bad_index);
  });
}
}  // namespace loom::cuda
