/*
 * Row teams: the threads that own one row of a row-wise kernel (softmax along the last dim,
 * layer_norm; ops/cuda/nn.cu and norm.cu). A warp owns rows of up to 1024 values (4 rows per
 * 128-thread block, warp shuffles only); a whole block owns longer rows (block_reduce through
 * 32 values of shared memory). Each pass over a row is a strided loop of the team's lanes
 * followed by one team reduction. row_launch picks the team and its launch shape.
 */
#pragma once

#include <cstdint>

#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/launch.cuh"

namespace loom::cuda {

constexpr int kWarpRowThreads = 128;   // warp-per-row kernels: 4 rows per block
constexpr int kBlockRowThreads = 256;  // block-per-row and block-per-channel kernels
constexpr int64_t kMaxWarpRowLength = 1024;
constexpr unsigned kMaxCooperativeBlocks = 1024;

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

// Blocks for a kernel with one team per block-sized unit of work: at least 1, at most
// kMaxCooperativeBlocks (the kernels loop over the rest).
inline unsigned capped(int64_t blocks) {
  return static_cast<unsigned>(
      blocks < 1 ? 1 : (blocks > kMaxCooperativeBlocks ? kMaxCooperativeBlocks : blocks));
}

// Launch shape of a row-team kernel over `rows` rows of `n` values; A is the statistics type
// (the block team's shared scratch holds 32 of them).
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

}  // namespace loom::cuda
