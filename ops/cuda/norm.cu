/*
 * CUDA kernels for layer and batch normalisation, forward and backward (see
 * ops/cuda/nn_launchers.h; CPU twins in ops/cpu/norm_kernels.cpp, whose numerics these follow).
 *
 *  - layer_norm: one row team per row (row_team.cuh); grad_weight/grad_bias one thread per
 *    column, looping over the rows in a fixed order, so the sums are deterministic.
 *  - batch_norm: one block per channel reduces its N * S values (block_reduce, in double),
 *    then an elementwise kernel applies the per-channel affine map.
 * 16-bit inputs are computed in float (opmath); statistics are float, or double for float64.
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

// ---- layer_norm
// Two passes over each row (mean, then the mean of squared deviations), as the CPU: exact
// enough in float, unlike E[x^2] - E[x]^2.

template <class T, bool kWarp>
__global__ void layer_norm_kernel(T* out, opmath_t<T>* mean, opmath_t<T>* rstd, const T* x,
                                  const opmath_t<T>* w, const opmath_t<T>* b, int64_t rows, int64_t d,
                                  double eps) {
  using A = opmath_t<T>;
  const RowTeam<kWarp> team{};
  A* scratch = team_scratch<kWarp, A>();
  for (int64_t r = team.first_row(); r < rows; r += team.row_step()) {
    const T* xr = x + r * d;
    T* yr = out + r * d;
    A s = 0;
    for (int64_t j = team.lane(); j < d; j += team.width()) s += to_opmath(xr[j]);
    const A mu = team.reduce(s, SumOp{}, A(0), scratch) / static_cast<A>(d);
    A sq = 0;
    for (int64_t j = team.lane(); j < d; j += team.width()) {
      const A dv = to_opmath(xr[j]) - mu;
      sq += dv * dv;
    }
    const A var = team.reduce(sq, SumOp{}, A(0), scratch) / static_cast<A>(d);
    const A rs = A(1) / m_sqrt(var + static_cast<A>(eps));
    if (team.lane() == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    for (int64_t j = team.lane(); j < d; j += team.width()) {
      A v = (to_opmath(xr[j]) - mu) * rs;
      if (w) v *= w[j];
      if (b) v += b[j];
      yr[j] = convert<T>(v);
    }
  }
}

// Per row, with g = gy * weight and xhat = (x - mean) * rstd:
//   gx = rstd * (g - mean(g) - xhat * mean(g * xhat))
template <class T, bool kWarp>
__global__ void layer_norm_backward_rows_kernel(T* gx, const T* gy, const T* x, const opmath_t<T>* mean,
                                                const opmath_t<T>* rstd, const opmath_t<T>* w, int64_t rows,
                                                int64_t d) {
  using A = opmath_t<T>;
  const RowTeam<kWarp> team{};
  A* scratch = team_scratch<kWarp, A>();
  for (int64_t r = team.first_row(); r < rows; r += team.row_step()) {
    const int64_t off = r * d;
    const A mu = mean[r], rs = rstd[r];
    A sg = 0, sgx = 0;
    for (int64_t j = team.lane(); j < d; j += team.width()) {
      const A g = to_opmath(gy[off + j]) * (w ? w[j] : A(1));
      sg += g;
      sgx += g * ((to_opmath(x[off + j]) - mu) * rs);
    }
    const A a = team.reduce(sg, SumOp{}, A(0), scratch) / static_cast<A>(d);
    const A bb = team.reduce(sgx, SumOp{}, A(0), scratch) / static_cast<A>(d);
    for (int64_t j = team.lane(); j < d; j += team.width()) {
      const A g = to_opmath(gy[off + j]) * (w ? w[j] : A(1));
      const A xhat = (to_opmath(x[off + j]) - mu) * rs;
      gx[off + j] = convert<T>(rs * (g - a - xhat * bb));
    }
  }
}

// grad_weight = sum over rows of gy * xhat, grad_bias = sum over rows of gy: one thread per
// column, rows in order, in double (kIndependent).
template <class T>
__global__ void layer_norm_backward_params_kernel(opmath_t<T>* gw, opmath_t<T>* gb, const T* gy, const T* x,
                                                  const opmath_t<T>* mean, const opmath_t<T>* rstd,
                                                  int64_t rows, int64_t d) {
  using A = opmath_t<T>;
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < d;
       j += int64_t{gridDim.x} * blockDim.x) {
    double sw = 0, sb = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const A g = to_opmath(gy[r * d + j]);
      sw += static_cast<double>(g * ((to_opmath(x[r * d + j]) - mean[r]) * rstd[r]));
      sb += static_cast<double>(g);
    }
    if (gw) gw[j] = static_cast<A>(sw);
    if (gb) gb[j] = static_cast<A>(sb);
  }
}

// ---- batch_norm

// Element c of a running statistic of any floating dtype and stride.
__device__ inline double read_stat(const RunningStat& st, int64_t c) {
  const int64_t i = c * st.stride;
  switch (st.dtype) {
    case kCodeFloat64:
      return static_cast<const double*>(st.data)[i];
    case kCodeFloat16:
      return __half2float(static_cast<const __half*>(st.data)[i]);
    case kCodeBFloat16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(st.data)[i]);
    default:
      return static_cast<const float*>(st.data)[i];
  }
}
__device__ inline void write_stat(const RunningStat& st, int64_t c, double v) {
  const int64_t i = c * st.stride;
  switch (st.dtype) {
    case kCodeFloat64:
      static_cast<double*>(st.data)[i] = v;
      break;
    case kCodeFloat16:
      static_cast<__half*>(st.data)[i] = convert<__half>(v);
      break;
    case kCodeBFloat16:
      static_cast<__nv_bfloat16*>(st.data)[i] = convert<__nv_bfloat16>(v);
      break;
    default:
      static_cast<float*>(st.data)[i] = static_cast<float>(v);
      break;
  }
}

// Element e of channel ch in x [n, c, s] (e < n * s).
__device__ inline int64_t channel_offset(int64_t e, int64_t ch, int64_t c, int64_t s) {
  return ((e / s) * c + ch) * s + e % s;
}

// Training statistics: one block per channel (grid-stride over channels) reduces the channel's
// count = n * s values in double, two passes; thread 0 writes save_mean/save_invstd and moves
// the running stats by momentum towards the batch mean and unbiased variance (kCooperative;
// dynamic shared memory: 32 doubles).
template <class T>
__global__ void batch_norm_stats_kernel(opmath_t<T>* save_mean, opmath_t<T>* save_invstd, const T* x,
                                        RunningStat running_mean, RunningStat running_var, int64_t n,
                                        int64_t c, int64_t s, double momentum, double eps) {
  using A = opmath_t<T>;
  double* scratch = dynamic_shared<double>();
  const int64_t count = n * s;
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    double sum = 0;
    for (int64_t e = threadIdx.x; e < count; e += blockDim.x)
      sum += to_opmath(x[channel_offset(e, ch, c, s)]);
    sum = block_reduce(sum, SumOp{}, 0.0, scratch);
    const A mean = static_cast<A>(sum / static_cast<double>(count));
    double sq = 0;
    for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
      const A dv = to_opmath(x[channel_offset(e, ch, c, s)]) - mean;
      sq += static_cast<double>(dv * dv);
    }
    sq = block_reduce(sq, SumOp{}, 0.0, scratch);
    if (threadIdx.x == 0) {
      save_mean[ch] = mean;
      save_invstd[ch] = static_cast<A>(1.0 / m_sqrt(sq / static_cast<double>(count) + eps));
      if (running_mean.data)
        write_stat(running_mean, ch,
                   (1 - momentum) * read_stat(running_mean, ch) + momentum * static_cast<double>(mean));
      if (running_var.data) {
        const double unbiased = count > 1 ? sq / static_cast<double>(count - 1) : 0.0;
        write_stat(running_var, ch, (1 - momentum) * read_stat(running_var, ch) + momentum * unbiased);
      }
    }
  }
}

// Evaluation statistics from the running stats, one thread per channel (kIndependent).
template <class A>
__global__ void batch_norm_eval_stats_kernel(A* save_mean, A* save_invstd, RunningStat running_mean,
                                             RunningStat running_var, int64_t c, double eps) {
  for (int64_t ch = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; ch < c;
       ch += int64_t{gridDim.x} * blockDim.x) {
    save_mean[ch] = static_cast<A>(read_stat(running_mean, ch));
    save_invstd[ch] = static_cast<A>(1.0 / m_sqrt(read_stat(running_var, ch) + eps));
  }
}

// y = x * scale + shift, scale = invstd * weight, shift = bias - mean * scale (kIndependent).
template <class T>
__global__ void batch_norm_apply_kernel(T* out, const T* x, const opmath_t<T>* mean,
                                        const opmath_t<T>* invstd, const opmath_t<T>* w, const opmath_t<T>* b,
                                        int64_t c, int64_t s, int64_t numel) {
  using A = opmath_t<T>;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < numel;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ch = (e / s) % c;
    const A scale = invstd[ch] * (w ? w[ch] : A(1));
    const A shift = (b ? b[ch] : A(0)) - mean[ch] * scale;
    out[e] = convert<T>(to_opmath(x[e]) * scale + shift);
  }
}

// Backward statistics per channel over its count values, with xhat = (x - mean) * invstd:
//   grad_bias = sum(gy), grad_weight = sum(gy * xhat)
// and for the elementwise pass ws[ch] = grad_bias / count, ws[c + ch] = grad_weight / count *
// invstd (kCooperative, one block per channel; dynamic shared memory: 32 doubles).
template <class T>
__global__ void batch_norm_backward_stats_kernel(opmath_t<T>* gw, opmath_t<T>* gb, opmath_t<T>* ws,
                                                 const T* gy, const T* x, const opmath_t<T>* save_mean,
                                                 const opmath_t<T>* save_invstd, int64_t n, int64_t c,
                                                 int64_t s) {
  using A = opmath_t<T>;
  double* scratch = dynamic_shared<double>();
  const int64_t count = n * s;
  for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
    const A mean = save_mean[ch];
    double sum_gy = 0, sum_gy_xc = 0;
    for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
      const int64_t i = channel_offset(e, ch, c, s);
      const A g = to_opmath(gy[i]);
      sum_gy += static_cast<double>(g);
      sum_gy_xc += static_cast<double>(g * (to_opmath(x[i]) - mean));
    }
    sum_gy = block_reduce(sum_gy, SumOp{}, 0.0, scratch);
    sum_gy_xc = block_reduce(sum_gy_xc, SumOp{}, 0.0, scratch);
    if (threadIdx.x == 0) {
      const A invstd = save_invstd[ch];
      const double sum_gy_xhat = sum_gy_xc * static_cast<double>(invstd);
      if (gw) gw[ch] = static_cast<A>(sum_gy_xhat);
      if (gb) gb[ch] = static_cast<A>(sum_gy);
      ws[ch] = static_cast<A>(sum_gy / static_cast<double>(count));
      ws[c + ch] = static_cast<A>(sum_gy_xhat / static_cast<double>(count)) * invstd;
    }
  }
}

// gx = weight * invstd * (gy - mean(gy) - (x - mean) * mean(gy * xhat) * invstd) (kIndependent).
template <class T>
__global__ void batch_norm_backward_apply_kernel(T* gx, const T* gy, const T* x, const opmath_t<T>* w,
                                                 const opmath_t<T>* save_mean, const opmath_t<T>* save_invstd,
                                                 const opmath_t<T>* ws, int64_t c, int64_t s, int64_t numel) {
  using A = opmath_t<T>;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < numel;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ch = (e / s) % c;
    const A k = save_invstd[ch] * (w ? w[ch] : A(1));
    gx[e] = convert<T>(k * (to_opmath(gy[e]) - ws[ch] - (to_opmath(x[e]) - save_mean[ch]) * ws[c + ch]));
  }
}
}  // namespace

// ---- launchers -----------------------------------------------------------------------------

cudaError_t launch_layer_norm(void* out, void* mean, void* rstd, const void* x, const void* weight,
                              const void* bias, int dtype, int64_t m, int64_t d, double eps,
                              cudaStream_t stream) {
  if (m * d == 0) return cudaSuccess;
  return visit_floating_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = opmath_t<T>;
    T* o = static_cast<T*>(out);
    A* mp = static_cast<A*>(mean);
    A* rp = static_cast<A*>(rstd);
    const T* xp = static_cast<const T*>(x);
    const A* w = static_cast<const A*>(weight);
    const A* b = static_cast<const A*>(bias);
    const RowLaunch rl = row_launch<A>(m, d, stream);
    return rl.warp ? launch<layer_norm_kernel<T, true>>(rl.config, o, mp, rp, xp, w, b, m, d, eps)
                   : launch<layer_norm_kernel<T, false>>(rl.config, o, mp, rp, xp, w, b, m, d, eps);
  });
}

cudaError_t launch_layer_norm_backward(void* grad_input, void* grad_weight, void* grad_bias,
                                       const void* grad_out, const void* x, const void* mean,
                                       const void* rstd, const void* weight, int dtype, int64_t m, int64_t d,
                                       cudaStream_t stream) {
  if (m * d == 0) return cudaSuccess;
  return visit_floating_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = opmath_t<T>;
    T* gx = static_cast<T*>(grad_input);
    const T* gy = static_cast<const T*>(grad_out);
    const T* xp = static_cast<const T*>(x);
    const A* mp = static_cast<const A*>(mean);
    const A* rp = static_cast<const A*>(rstd);
    const A* w = static_cast<const A*>(weight);
    const RowLaunch rl = row_launch<A>(m, d, stream);
    cudaError_t status =
        rl.warp ? launch<layer_norm_backward_rows_kernel<T, true>>(rl.config, gx, gy, xp, mp, rp, w, m, d)
                : launch<layer_norm_backward_rows_kernel<T, false>>(rl.config, gx, gy, xp, mp, rp, w, m, d);
    if (status != cudaSuccess || (grad_weight == nullptr && grad_bias == nullptr)) return status;
    return launch<layer_norm_backward_params_kernel<T>>(grid_stride(d, stream), static_cast<A*>(grad_weight),
                                                        static_cast<A*>(grad_bias), gy, xp, mp, rp, m, d);
  });
}

cudaError_t launch_batch_norm_eval_stats(void* save_mean, void* save_invstd, RunningStat running_mean,
                                         RunningStat running_var, int dtype, int64_t c, double eps,
                                         cudaStream_t stream) {
  if (c == 0) return cudaSuccess;
  return visit_floating_code(dtype, [&](auto tag) {
    using A = opmath_t<decltype(tag)>;
    return launch<batch_norm_eval_stats_kernel<A>>(grid_stride(c, stream), static_cast<A*>(save_mean),
                                                   static_cast<A*>(save_invstd), running_mean, running_var, c, eps);
  });
}

cudaError_t launch_batch_norm(void* out, void* save_mean, void* save_invstd, const void* x,
                              const void* weight, const void* bias, RunningStat running_mean,
                              RunningStat running_var, int dtype, int64_t n, int64_t c, int64_t s,
                              bool training, double momentum, double eps, cudaStream_t stream) {
  if (c == 0) return cudaSuccess;
  return visit_floating_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = opmath_t<T>;
    A* mean = static_cast<A*>(save_mean);
    A* invstd = static_cast<A*>(save_invstd);
    const T* xp = static_cast<const T*>(x);
    cudaError_t status =
        training ? launch<batch_norm_stats_kernel<T>>(
                       {capped(c), kBlockRowThreads, 32 * sizeof(double), stream, BlockThreads::kCooperative},
                       mean, invstd, xp, running_mean, running_var, n, c, s, momentum, eps)
                 : launch_batch_norm_eval_stats(save_mean, save_invstd, running_mean, running_var, dtype, c, eps,
                                                stream);
    const int64_t numel = n * c * s;
    if (status != cudaSuccess || numel == 0) return status;
    return launch<batch_norm_apply_kernel<T>>(grid_stride(numel, stream), static_cast<T*>(out), xp,
                                              static_cast<const A*>(mean), static_cast<const A*>(invstd),
                                              static_cast<const A*>(weight), static_cast<const A*>(bias), c,
                                              s, numel);
  });
}

cudaError_t launch_batch_norm_backward(void* grad_input, void* grad_weight, void* grad_bias,
                                       const void* grad_out, const void* x, const void* weight,
                                       const void* save_mean, const void* save_invstd, void* workspace,
                                       int dtype, int64_t n, int64_t c, int64_t s, cudaStream_t stream) {
  if (c == 0) return cudaSuccess;
  return visit_floating_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = opmath_t<T>;
    const T* gy = static_cast<const T*>(grad_out);
    const T* xp = static_cast<const T*>(x);
    const A* mean = static_cast<const A*>(save_mean);
    const A* invstd = static_cast<const A*>(save_invstd);
    A* ws = static_cast<A*>(workspace);
    cudaError_t status = launch<batch_norm_backward_stats_kernel<T>>(
        {capped(c), kBlockRowThreads, 32 * sizeof(double), stream, BlockThreads::kCooperative},
        static_cast<A*>(grad_weight), static_cast<A*>(grad_bias), ws, gy, xp, mean, invstd, n, c, s);
    const int64_t numel = n * c * s;
    if (status != cudaSuccess || numel == 0) return status;
    return launch<batch_norm_backward_apply_kernel<T>>(
        grid_stride(numel, stream), static_cast<T*>(grad_input), gy, xp, static_cast<const A*>(weight), mean,
        invstd, static_cast<const A*>(ws), c, s, numel);
  });
}
}  // namespace loom::cuda
