/*
 * The interface between ops/cuda/reduction_kernels.cpp (C++20) and ops/cuda/reduction.cu
 * (C++17): the geometry of a reduction as plain arrays, the strategy the host chose for it,
 * and one launcher per kernel of ops/kernel_types.h.
 *
 * Geometry: the input's dims split into kept dims (one output per index; their row-major
 * index is the index of the contiguous output) and reduced dims (row-major over them is the
 * order of the reduced elements; for max/min along a dim, the position along that dim).
 * Each group has its own sizes and element strides, so any input strides work.
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/launchers.h"

namespace loom::cuda {

// How the reduced elements of each output are folded.
enum class ReduceStrategy : int {
  kThreadPerOutput,  // many outputs, short or strided (column) reductions: a thread loops over them
  kBlockPerOutput,   // long reductions: a block's threads stride over them, then a block reduction
};

struct ReduceGeometry {
  int kept_ndim = 0;
  int64_t kept_sizes[kMaxDims] = {};
  int64_t kept_strides[kMaxDims] = {};
  int red_ndim = 0;
  int64_t red_sizes[kMaxDims] = {};
  int64_t red_strides[kMaxDims] = {};
  int64_t n_out = 0;  // product of kept_sizes
  int64_t n_red = 0;  // product of red_sizes (0: an empty reduction, every output the identity)

  ReduceStrategy strategy = ReduceStrategy::kThreadPerOutput;
  int block = 256;     // kBlockPerOutput: threads per block (a multiple of 32, at most 1024)
  int64_t splits = 1;  // pieces of each output's reduced range, folded apart; > 1 needs a workspace
};

// Bytes of workspace per (output, split) partial when splits > 1: enough for every
// accumulator type (a double, or a value with its int64 index).
inline constexpr int64_t kReducePartialBytes = 16;

// sum/prod: out (dtype out_dtype: int64 for integer and bool inputs; in's dtype, float32 or
// float64 for floating ones) from in (in_dtype). `workspace`: n_out * splits *
// kReducePartialBytes bytes of device memory when splits > 1, else unused (may be null).
cudaError_t launch_sum(void* out, int out_dtype, const void* in, int in_dtype, const ReduceGeometry& g,
                       void* workspace, cudaStream_t stream);
cudaError_t launch_prod(void* out, int out_dtype, const void* in, int in_dtype, const ReduceGeometry& g,
                        void* workspace, cudaStream_t stream);

// amax (is_max) / amin; out has in's dtype. NaN wins.
cudaError_t launch_extreme(void* out, const void* in, int dtype, bool is_max, const ReduceGeometry& g,
                           void* workspace, cudaStream_t stream);

// var with `correction`, floating dtypes only; out has in's dtype. `mean`: n_out doubles of
// device memory for the first pass.
cudaError_t launch_var(void* out, const void* in, int dtype, int64_t correction, const ReduceGeometry& g,
                       double* mean, void* workspace, cudaStream_t stream);

// max/min along one dim (the reduced group, red_ndim <= 1) with the int64 index of the first
// extreme (the first NaN, when there is one).
cudaError_t launch_arg_extreme(void* values, int64_t* indices, const void* in, int dtype, bool is_max,
                               const ReduceGeometry& g, void* workspace, cudaStream_t stream);

}  // namespace loom::cuda
