/*
 * CUDA kernels for softmax, log_softmax, layer and batch normalisation and nll_loss, forward
 * and backward (see ops/cuda/nn_launchers.h; CPU twins in ops/cpu/nn_kernels.cpp and
 * ops/cpu/norm_kernels.cpp, whose numerics these follow).
 *
 *  - Rows (softmax along the last dim, layer_norm): a "row team" owns one row at a time: a
 *    warp for rows of up to 1024 values (4 rows per 128-thread block, warp shuffles only), a
 *    whole block for longer rows (block_reduce through 32 values of shared memory). Each pass
 *    over a row is a strided loop of the team's lanes followed by one team reduction.
 *  - Columns (softmax along another dim, layer_norm's grad_weight/grad_bias): one thread per
 *    column, looping over the reduced dim; neighbouring threads read neighbouring addresses,
 *    and the fixed loop order makes the sums deterministic.
 *  - Channels (batch_norm): one block per channel reduces its N * S values (block_reduce, in
 *    double), then an elementwise kernel applies the per-channel affine map.
 *  - nll_loss: one thread per sample; mean/sum in one block (double, fixed order: no atomics).
 *    Out-of-range targets are not read; the smallest batch index holding one goes to a device
 *    word that the host copies back to raise the CPU's error.
 * 16-bit inputs are computed in float (opmath); statistics are float, or double for float64.
 */
#include <cmath>

#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/nn_launchers.h"

namespace loom::cuda {

// ---- kernels -------------------------------------------------------------------------------

namespace {

constexpr int kWarpRowThreads = 128;   // warp-per-row kernels: 4 rows per block
constexpr int kBlockRowThreads = 256;  // block-per-row and block-per-channel kernels
constexpr int64_t kMaxWarpRowLength = 1024;
constexpr unsigned kMaxCooperativeBlocks = 1024;
constexpr unsigned long long kNoBadIndex = ~0ull;

// Qualified: an unqualified exp inside namespace loom could find the tensor op instead.
__device__ inline float dev_exp(float v) {
  return ::expf(v);
}
__device__ inline double dev_exp(double v) {
  return ::exp(v);
}
__device__ inline float dev_log(float v) {
  return ::logf(v);
}
__device__ inline double dev_log(double v) {
  return ::log(v);
}
__device__ inline float dev_sqrt(float v) {
  return ::sqrtf(v);
}
__device__ inline double dev_sqrt(double v) {
  return ::sqrt(v);
}

template <class A>
__device__ inline A neg_infinity() {
  return -static_cast<A>(INFINITY);
}

// The threads that own one row: a warp (kWarp) or the whole block. Every thread of a team sees
// the same rows in the same order, so all of them reach the team's shuffles and barriers.
template <bool kWarp>
struct RowTeam {
  __device__ int lane() const {
    return kWarp ? static_cast<int>(threadIdx.x % 32) : static_cast<int>(threadIdx.x);
  }
  __device__ int width() const { return kWarp ? 32 : static_cast<int>(blockDim.x); }
  __device__ int64_t first_row() const {
    return kWarp ? int64_t{blockIdx.x} * (blockDim.x / 32) + threadIdx.x / 32 : int64_t{blockIdx.x};
  }
  __device__ int64_t row_step() const {
    return kWarp ? int64_t{gridDim.x} * (blockDim.x / 32) : int64_t{gridDim.x};
  }
  // v folded over the team; every thread gets the result. `scratch`: 32 values of shared
  // memory (block teams only).
  template <class A, class Op>
  __device__ A reduce(A v, Op op, A identity, A* scratch) const {
    if constexpr (kWarp) {
      (void)identity;
      (void)scratch;
      return warp_reduce(v, op);
    } else {
      return block_reduce(v, op, identity, scratch);
    }
  }
};

template <bool kWarp, class A>
__device__ inline A* team_scratch() {
  if constexpr (kWarp) {
    return nullptr;
  } else {
    return dynamic_shared<A>();
  }
}

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
    for (int64_t j = team.lane(); j < n; j += team.width()) s += dev_exp(to_opmath(xr[j]) - m);
    s = team.reduce(s, SumOp{}, A(0), scratch);
    if constexpr (kLog) {
      const A lse = m + dev_log(s);
      for (int64_t j = team.lane(); j < n; j += team.width()) yr[j] = convert<T>(to_opmath(xr[j]) - lse);
    } else {
      const A inv = A(1) / s;
      for (int64_t j = team.lane(); j < n; j += team.width())
        yr[j] = convert<T>(dev_exp(to_opmath(xr[j]) - m) * inv);
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
    for (int64_t k = 0; k < n; ++k) s += dev_exp(to_opmath(x[base + k * inner]) - m);
    if constexpr (kLog) {
      const A lse = m + dev_log(s);
      for (int64_t k = 0; k < n; ++k)
        out[base + k * inner] = convert<T>(to_opmath(x[base + k * inner]) - lse);
    } else {
      const A inv = A(1) / s;
      for (int64_t k = 0; k < n; ++k)
        out[base + k * inner] = convert<T>(dev_exp(to_opmath(x[base + k * inner]) - m) * inv);
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
    return gy - dev_exp(y) * s;
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
    const A rs = A(1) / dev_sqrt(var + static_cast<A>(eps));
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
      save_invstd[ch] = static_cast<A>(1.0 / dev_sqrt(sq / static_cast<double>(count) + eps));
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
    save_invstd[ch] = static_cast<A>(1.0 / dev_sqrt(read_stat(running_var, ch) + eps));
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

// ---- nll_loss

// *bad = min(*bad, i), with compare-and-swap only (no plain read races the other writers).
__device__ inline void record_bad_index(unsigned long long* bad, unsigned long long i) {
  unsigned long long expected = kNoBadIndex;
  while (i < expected) {
    const unsigned long long old = atomicCAS(bad, expected, i);
    if (old == expected) break;
    expected = old;
  }
}

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

unsigned capped(int64_t blocks) {
  return static_cast<unsigned>(
      blocks < 1 ? 1 : (blocks > kMaxCooperativeBlocks ? kMaxCooperativeBlocks : blocks));
}

// Launch shape of a row-team kernel over `rows` rows of `n` values.
struct RowLaunch {
  bool warp;
  LaunchConfig config;
};
template <class A>
RowLaunch row_launch(int64_t rows, int64_t n, cudaStream_t stream) {
  if (n <= kMaxWarpRowLength) {
    const int64_t rows_per_block = kWarpRowThreads / 32;
    return {true, LaunchConfig{capped((rows + rows_per_block - 1) / rows_per_block), kWarpRowThreads, 0,
                               stream, BlockThreads::kCooperative}};
  }
  return {false,
          LaunchConfig{capped(rows), kBlockRowThreads, 32 * sizeof(A), stream, BlockThreads::kCooperative}};
}

LaunchConfig independent(int64_t n, cudaStream_t stream) {
  return LaunchConfig{grid_for(n), 256, 0, stream, BlockThreads::kIndependent};
}

template <bool kLog>
cudaError_t softmax_dispatch(void* out, const void* x, int dtype, int64_t outer, int64_t size, int64_t inner,
                             cudaStream_t stream) {
  return visit_floating_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out);
    const T* xp = static_cast<const T*>(x);
    if (inner > 1)
      return launch<softmax_columns_kernel<T, kLog>>(independent(outer * inner, stream), o, xp, outer, size,
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
      return launch<softmax_backward_columns_kernel<T, kLog>>(independent(outer * inner, stream), gx, gy, y,
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
    return launch<layer_norm_backward_params_kernel<T>>(independent(d, stream), static_cast<A*>(grad_weight),
                                                        static_cast<A*>(grad_bias), gy, xp, mp, rp, m, d);
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
                 : launch<batch_norm_eval_stats_kernel<A>>(independent(c, stream), mean, invstd, running_mean,
                                                           running_var, c, eps);
    const int64_t numel = n * c * s;
    if (status != cudaSuccess || numel == 0) return status;
    return launch<batch_norm_apply_kernel<T>>(independent(numel, stream), static_cast<T*>(out), xp,
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
        independent(numel, stream), static_cast<T*>(grad_input), gy, xp, static_cast<const A*>(weight), mean,
        invstd, static_cast<const A*>(ws), c, s, numel);
  });
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
          launch<nll_loss_none_kernel<T>>(independent(n, stream), o, out_stride, lp, logp_s0, logp_s1, target,
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
        independent(n, stream), static_cast<T*>(grad_logp), static_cast<const T*>(grad_out),
        int64_t{reduction == 0 ? 1 : 0}, target, target_stride, static_cast<const T*>(weight),
        static_cast<const T*>(total_weight), n, classes, reduction == 1, ignore_index, bad_index);
  });
}

}  // namespace loom::cuda
