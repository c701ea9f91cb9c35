/*
 * CUDA kernels of flash_attention and its backward (see ops/cuda/attention_launchers.h; CPU twin
 * in ops/cpu/attention_kernels.cpp), after FlashAttention-2 (Dao, 2023) in plain CUDA cores:
 * the [L, S] scores never reach global memory.
 *
 * Layout shared by the three kernels: a block of 128 threads owns 16 rows (query rows in the
 * forward and dq kernels, key rows in the dk/dv kernel), 8 lanes a row; lane `l` of a row keeps
 * dims l, l + 8, ... of that row's accumulator in registers (16 at most: E, Ev <= 128). The other
 * side streams through shared memory in tiles, converted to float once. Scores are split among
 * a row's lanes by key (or query), each lane taking whole dot products; the row's max and sums
 * are then combined with shuffles inside its group of 8 lanes (xor 4, 2, 1 stays in the group).
 *
 *   forward (block per (batch, 16 query rows)): online softmax over key tiles of 32,
 *     m' = max(m, max_j s_j), acc = acc e^(m - m') + sum_j e^(s_j - m') v_j, l likewise;
 *     out = acc / l, logsumexp = m + log l.
 *   dq (block per (batch, 16 query rows)): P = exp(s - logsumexp), D = rowsum(dO * O),
 *     dS = P (dO v^T - D), dq = scale dS k, over key tiles of 16.
 *   dk, dv (block per (batch, 16 keys)): the same P and dS over query tiles of 16,
 *     dv = P^T dO, dk = scale dS^T q.
 * dq and dk/dv are separate kernels so that each output has one writer (no atomics: the
 * result is deterministic), at the price of computing the scores twice.
 * Rows past L or S take part in every barrier and shuffle but load zeros and store nothing.
 */
#include <cstdint>

#include "ops/cuda/attention_launchers.h"
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/launch.cuh"

namespace loom::cuda {

// ---- kernels -------------------------------------------------------------------------------

namespace {

constexpr int kThreads = 128;
constexpr int kLanes = 8;                     // lanes per row
constexpr int kRows = kThreads / kLanes;      // rows a block owns
constexpr int kMaxDim = static_cast<int>(kFlashMaxHeadDim);
constexpr int kDimsPerLane = kMaxDim / kLanes;
constexpr int kPad = kMaxDim + 1;             // rows of a tile one float apart: lanes reading
                                              // the same dim of different rows hit different banks
constexpr int kForwardKeyTile = 32;
constexpr int kBackwardTile = 16;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ inline float group_max(float v) {
  for (int offset = kLanes / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}
__device__ inline float group_sum(float v) {
  for (int offset = kLanes / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// rows [first, first + count) of a [total, width] matrix into tile (zeros past `total`), by all
// threads of the block.
template <class T, int kTileRows, int kStride>
__device__ void load_tile(float (*tile)[kStride], const T* src, int64_t first, int64_t total, int64_t width) {
  for (int x = static_cast<int>(threadIdx.x); x < kTileRows * width; x += kThreads) {
    const int r = x / static_cast<int>(width), c = x % static_cast<int>(width);
    tile[r][c] = first + r < total ? to_opmath(src[(first + r) * width + c]) : 0.0f;
  }
}

__device__ inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

// The scaled, masked score of query i and key j of batch b; -inf where it takes no part.
__device__ inline float score(const AttentionArgs& a, const float* q_row, const float* k_row, int64_t b, int64_t i,
                              int64_t j) {
  if (i >= a.l || j >= a.s || (a.is_causal && j > i)) return -INFINITY;
  float s = dot(q_row, k_row, a.e) * a.scale;
  if (a.mask) s += a.mask[b * a.mask_stride[0] + i * a.mask_stride[1] + j * a.mask_stride[2]];
  return s;
}

// exp(s - logsumexp); 0 for a masked key, even in a row whose logsumexp is NaN (a NaN score), so
// that which keys get NaN gradients does not depend on the tiles; 0 for a row whose keys are all
// masked.
__device__ inline float probability(float s, float logsumexp) {
  return s == -INFINITY || logsumexp == -INFINITY ? 0.0f : expf(s - logsumexp);
}

// D_i = grad_out_i . out_i for the row `row` of batch b, summed over the row's lanes.
template <class T>
__device__ float row_delta(const AttentionArgs& a, const T* grad_out, const T* out, int64_t row, int lane) {
  float part = 0.0f;
  if (row < a.l)
    for (int64_t d = lane; d < a.ev; d += kLanes) part += to_opmath(grad_out[row * a.ev + d]) * to_opmath(out[row * a.ev + d]);
  return group_sum(part);
}

template <class T>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(AttentionArgs a, T* out, float* logsumexp) {
  __shared__ float q_s[kRows][kPad];
  __shared__ float k_s[kForwardKeyTile][kPad];
  __shared__ float v_s[kForwardKeyTile][kPad];
  __shared__ float p_s[kRows][kForwardKeyTile];
  const int r = static_cast<int>(threadIdx.x) / kLanes, lane = static_cast<int>(threadIdx.x) % kLanes;
  const int64_t b = blockIdx.x, row0 = int64_t{blockIdx.y} * kRows, i = row0 + r;
  const T* q = static_cast<const T*>(a.q) + b * a.l * a.e;
  const T* k = static_cast<const T*>(a.k) + b * a.s * a.e;
  const T* v = static_cast<const T*>(a.v) + b * a.s * a.ev;
  load_tile<T, kRows>(q_s, q, row0, a.l, a.e);

  float acc[kDimsPerLane];
#pragma unroll
  for (int x = 0; x < kDimsPerLane; ++x) acc[x] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  // Causal: no row of this block sees a key past its last row.
  const int64_t key_end = a.is_causal ? (a.s < row0 + kRows ? a.s : row0 + kRows) : a.s;
  for (int64_t k0 = 0; k0 < key_end; k0 += kForwardKeyTile) {
    __syncthreads();  // the previous tile's k_s/v_s reads are done (and q_s is loaded)
    load_tile<T, kForwardKeyTile>(k_s, k, k0, a.s, a.e);
    load_tile<T, kForwardKeyTile>(v_s, v, k0, a.s, a.ev);
    __syncthreads();  // the tile is in shared memory

    constexpr int kKeysPerLane = kForwardKeyTile / kLanes;
    float s[kKeysPerLane];
    float tile_max = -INFINITY;
#pragma unroll
    for (int t = 0; t < kKeysPerLane; ++t) {
      const int j = lane + kLanes * t;
      s[t] = score(a, q_s[r], k_s[j], b, i, k0 + j);
      tile_max = fmaxf(tile_max, s[t]);
    }
    const float m_new = fmaxf(m, group_max(tile_max));
    const float base = m_new == -INFINITY ? 0.0f : m_new;  // all masked so far: e^(-inf - 0) = 0
    const float alpha = expf(m - base);
    float p_sum = 0.0f;
#pragma unroll
    for (int t = 0; t < kKeysPerLane; ++t) {
      const float p = expf(s[t] - base);
      p_s[r][lane + kLanes * t] = p;
      p_sum += p;
    }
    l = l * alpha + group_sum(p_sum);
    m = m_new;
    __syncwarp();  // the row's probabilities (written by its 8 lanes, one warp) are visible
#pragma unroll
    for (int x = 0; x < kDimsPerLane; ++x) {
      const int d = lane + kLanes * x;
      if (d >= a.ev) break;
      float sum = acc[x] * alpha;
      for (int j = 0; j < kForwardKeyTile; ++j) sum += p_s[r][j] * v_s[j][d];
      acc[x] = sum;
    }
  }
  if (i >= a.l) return;
  // l is 0 only when every key is masked (l >= 1 otherwise: the maximum's term is 1), and NaN
  // when a score is (fmaxf left it out of m, but its e^(s - m) is NaN), which out and logsumexp keep.
  const float inv = l == 0.0f ? 0.0f : 1.0f / l;
#pragma unroll
  for (int x = 0; x < kDimsPerLane; ++x) {
    const int d = lane + kLanes * x;
    if (d < a.ev) out[(b * a.l + i) * a.ev + d] = convert<T>(acc[x] * inv);
  }
  if (lane == 0) logsumexp[b * a.l + i] = l == 0.0f ? -INFINITY : m + logf(l);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    flash_backward_dq_kernel(AttentionArgs a, const T* grad_out, const T* out, const float* logsumexp, T* grad_q) {
  __shared__ float q_s[kRows][kPad];
  __shared__ float do_s[kRows][kPad];
  __shared__ float k_s[kBackwardTile][kPad];
  __shared__ float v_s[kBackwardTile][kPad];
  __shared__ float ds_s[kRows][kBackwardTile];
  const int r = static_cast<int>(threadIdx.x) / kLanes, lane = static_cast<int>(threadIdx.x) % kLanes;
  const int64_t b = blockIdx.x, row0 = int64_t{blockIdx.y} * kRows, i = row0 + r;
  const T* k = static_cast<const T*>(a.k) + b * a.s * a.e;
  const T* v = static_cast<const T*>(a.v) + b * a.s * a.ev;
  grad_out += b * a.l * a.ev;
  out += b * a.l * a.ev;
  load_tile<T, kRows>(q_s, static_cast<const T*>(a.q) + b * a.l * a.e, row0, a.l, a.e);
  load_tile<T, kRows>(do_s, grad_out, row0, a.l, a.ev);
  const float delta = row_delta(a, grad_out, out, i, lane);
  const float lse = i < a.l ? logsumexp[b * a.l + i] : -INFINITY;

  float dq[kDimsPerLane];
#pragma unroll
  for (int x = 0; x < kDimsPerLane; ++x) dq[x] = 0.0f;
  const int64_t key_end = a.is_causal ? (a.s < row0 + kRows ? a.s : row0 + kRows) : a.s;
  for (int64_t k0 = 0; k0 < key_end; k0 += kBackwardTile) {
    __syncthreads();  // the previous tile's reads are done (and q_s/do_s are loaded)
    load_tile<T, kBackwardTile>(k_s, k, k0, a.s, a.e);
    load_tile<T, kBackwardTile>(v_s, v, k0, a.s, a.ev);
    __syncthreads();  // the tile is in shared memory
#pragma unroll
    for (int t = 0; t < kBackwardTile / kLanes; ++t) {
      const int j = lane + kLanes * t;
      const float p = probability(score(a, q_s[r], k_s[j], b, i, k0 + j), lse);
      ds_s[r][j] = p == 0.0f ? 0.0f : p * (dot(do_s[r], v_s[j], a.ev) - delta);
    }
    __syncwarp();  // the row's dS (written by its 8 lanes, one warp) is visible
#pragma unroll
    for (int x = 0; x < kDimsPerLane; ++x) {
      const int d = lane + kLanes * x;
      if (d >= a.e) break;
      float sum = dq[x];
      for (int j = 0; j < kBackwardTile; ++j) sum += ds_s[r][j] * k_s[j][d];
      dq[x] = sum;
    }
  }
  if (i >= a.l) return;
#pragma unroll
  for (int x = 0; x < kDimsPerLane; ++x) {
    const int d = lane + kLanes * x;
    if (d < a.e) grad_q[(b * a.l + i) * a.e + d] = convert<T>(dq[x] * a.scale);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    flash_backward_dkdv_kernel(AttentionArgs a, const T* grad_out, const T* out, const float* logsumexp, T* grad_k,
                               T* grad_v) {
  __shared__ float k_s[kRows][kPad];
  __shared__ float v_s[kRows][kPad];
  __shared__ float q_s[kBackwardTile][kPad];
  __shared__ float do_s[kBackwardTile][kPad];
  __shared__ float p_s[kRows][kBackwardTile];
  __shared__ float ds_s[kRows][kBackwardTile];
  __shared__ float lse_s[kBackwardTile];
  __shared__ float delta_s[kBackwardTile];
  const int r = static_cast<int>(threadIdx.x) / kLanes, lane = static_cast<int>(threadIdx.x) % kLanes;
  const int64_t b = blockIdx.x, key0 = int64_t{blockIdx.y} * kRows, j = key0 + r;
  const T* q = static_cast<const T*>(a.q) + b * a.l * a.e;
  grad_out += b * a.l * a.ev;
  out += b * a.l * a.ev;
  logsumexp += b * a.l;
  load_tile<T, kRows>(k_s, static_cast<const T*>(a.k) + b * a.s * a.e, key0, a.s, a.e);
  load_tile<T, kRows>(v_s, static_cast<const T*>(a.v) + b * a.s * a.ev, key0, a.s, a.ev);

  float dk[kDimsPerLane], dv[kDimsPerLane];
#pragma unroll
  for (int x = 0; x < kDimsPerLane; ++x) dk[x] = dv[x] = 0.0f;
  // Causal: query rows before the block's first key see none of its keys.
  for (int64_t i0 = a.is_causal ? key0 : 0; i0 < a.l; i0 += kBackwardTile) {
    __syncthreads();  // the previous tile's reads are done (and k_s/v_s are loaded)
    load_tile<T, kBackwardTile>(q_s, q, i0, a.l, a.e);
    load_tile<T, kBackwardTile>(do_s, grad_out, i0, a.l, a.ev);
    // kRows == kBackwardTile: group r computes the statistics of the tile's query row r.
    const float delta = row_delta(a, grad_out, out, i0 + r, lane);
    if (lane == 0) {
      delta_s[r] = delta;
      lse_s[r] = i0 + r < a.l ? logsumexp[i0 + r] : -INFINITY;
    }
    __syncthreads();  // the query tile and its statistics are in shared memory
#pragma unroll
    for (int t = 0; t < kBackwardTile / kLanes; ++t) {
      const int ii = lane + kLanes * t;
      const float p = probability(score(a, q_s[ii], k_s[r], b, i0 + ii, j), lse_s[ii]);
      p_s[r][ii] = p;
      ds_s[r][ii] = p == 0.0f ? 0.0f : p * (dot(do_s[ii], v_s[r], a.ev) - delta_s[ii]);
    }
    __syncwarp();  // the key's P and dS (written by its 8 lanes, one warp) are visible
#pragma unroll
    for (int x = 0; x < kDimsPerLane; ++x) {
      const int d = lane + kLanes * x;
      float sum_v = dv[x], sum_k = dk[x];
      for (int ii = 0; ii < kBackwardTile; ++ii) {
        if (d < a.ev) sum_v += p_s[r][ii] * do_s[ii][d];
        if (d < a.e) sum_k += ds_s[r][ii] * q_s[ii][d];
      }
      dv[x] = sum_v;
      dk[x] = sum_k;
    }
  }
  if (j >= a.s) return;
#pragma unroll
  for (int x = 0; x < kDimsPerLane; ++x) {
    const int d = lane + kLanes * x;
    if (d < a.e) grad_k[(b * a.s + j) * a.e + d] = convert<T>(dk[x] * a.scale);
    if (d < a.ev) grad_v[(b * a.s + j) * a.ev + d] = convert<T>(dv[x]);
  }
}

static_assert(kRows == kBackwardTile, "the dk/dv kernel computes one query row's statistics per row group");
static_assert(kForwardKeyTile % kLanes == 0 && kBackwardTile % kLanes == 0, "keys split evenly among a row's lanes");

// One block per (batch, 16 rows): batches along x (up to 2^31 - 1), row tiles along y.
LaunchConfig tiles_config(int64_t batches, int64_t rows, cudaStream_t stream) {
  LaunchConfig config;
  config.grid = dim3(static_cast<unsigned>(batches), static_cast<unsigned>((rows + kRows - 1) / kRows));
  config.block = dim3(kThreads);
  config.stream = stream;
  return config;
}

template <class F>
cudaError_t visit_attention_dtype(int code, F&& f) {
  switch (code) {
    case kCodeFloat32: return f(float{});
    case kCodeFloat16: return f(__half{});
    case kCodeBFloat16: return f(__nv_bfloat16{});
    default: return cudaErrorInvalidValue;
  }
}

bool valid(const AttentionArgs& a) {
  return a.e <= kFlashMaxHeadDim && a.ev <= kFlashMaxHeadDim && a.n > 0 && a.l > 0 && a.s > 0 &&
         (a.l + kRows - 1) / kRows <= 65535 && (a.s + kRows - 1) / kRows <= 65535 && a.n <= 0x7fffffff;
}

}  // namespace

// ---- launchers -----------------------------------------------------------------------------

cudaError_t launch_flash_attention_forward(const AttentionArgs& args, void* out, float* logsumexp,
                                           cudaStream_t stream) {
  if (!valid(args)) return cudaErrorInvalidValue;
  return visit_attention_dtype(args.dtype, [&](auto tag) {
    using T = decltype(tag);
    return launch<flash_forward_kernel<T>>(tiles_config(args.n, args.l, stream), args, static_cast<T*>(out),
                                           logsumexp);
  });
}

cudaError_t launch_flash_attention_backward(const AttentionArgs& args, const void* grad_out, const void* out,
                                            const float* logsumexp, void* grad_q, void* grad_k, void* grad_v,
                                            cudaStream_t stream) {
  if (!valid(args)) return cudaErrorInvalidValue;
  return visit_attention_dtype(args.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* go = static_cast<const T*>(grad_out);
    const T* o = static_cast<const T*>(out);
    // The two kernels read the same inputs and write different outputs: no order between them.
    cudaError_t status = launch<flash_backward_dq_kernel<T>>(tiles_config(args.n, args.l, stream), args, go, o,
                                                             logsumexp, static_cast<T*>(grad_q));
    if (status != cudaSuccess) return status;
    return launch<flash_backward_dkdv_kernel<T>>(tiles_config(args.n, args.s, stream), args, go, o, logsumexp,
                                                 static_cast<T*>(grad_k), static_cast<T*>(grad_v));
  });
}

}  // namespace loom::cuda
