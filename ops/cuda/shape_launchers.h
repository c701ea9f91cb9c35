/*
 * The interface between ops/cuda/shape_kernels.cpp (C++20) and ops/cuda/shape.cu (C++17):
 * one launcher per shape kernel, taking plain device pointers, dtype codes and layouts.
 *
 * The indexing kernels take their operands restrided to one common shape, as the CPU kernels
 * do (ops/cpu/shape_kernels.cpp): the indexed dim gets stride 0 in the data operand and the
 * index value times `step` supplies the offset along it. So one strided walk covers any rank
 * and any strides, and the kernels never see which op they serve.
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/launchers.h"

namespace loom::cuda {

// Sizes (innermost last) and element strides of three operands of one shape; an unused
// operand's strides stay 0.
struct Layout3 {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[3][kMaxDims] = {};
};

// dst[i] = src[i] for every index of the layout, for elements of `element_size` bytes (1, 2,
// 4 or 8): cat's slices and flip (src at the flipped corner, negative strides).
cudaError_t launch_strided_move(void* dst, const void* src, int element_size, const StridedLayout& layout,
                                int64_t numel, cudaStream_t stream);

// index_select, gather: out[i] = src[i + index[i] * step] over l (operands out, src, index);
// 0 where index[i] lies outside [0, bound) (launch_index_range_check reports it).
cudaError_t launch_indexed_copy(void* out, const void* src, const int64_t* index, int element_size,
                                const Layout3& l, int64_t step, int64_t bound, cudaStream_t stream);

// *bad = the smallest i < n with index[i] outside [0, size), if that is smaller than *bad (a
// contiguous index; `bad` a check word, core/cuda/device_checks.h).
cudaError_t launch_index_range_check(const int64_t* index, int64_t n, int64_t size, unsigned long long* bad,
                                     cudaStream_t stream);

// scatter_add, index_add: out[i + index[i] * step] += src[i] over l (operands out, src, index).
// Elements that differ only along `dim` may write the same place; elements that differ
// elsewhere never do. Each thread owns one line along `dim` and adds it in order, so the result
// is deterministic and equal to the CPU's (same order, same rounding after each addition).
// An index outside [0, bound) adds nothing.
cudaError_t launch_indexed_add(void* out, const void* src, const int64_t* index, int dtype, const Layout3& l,
                               int dim, int64_t step, int64_t bound, cudaStream_t stream);

// tril (lower) / triu of the last two dims of l (operands out, in); diagonal as in
// ops/kernel_types.h, already clamped to [-rows, cols].
cudaError_t launch_triangle(void* out, const void* in, int element_size, const Layout3& l, bool lower,
                            int64_t diagonal, cudaStream_t stream);

// pad: l has out's sizes and the strides of (out, in); in_sizes is in's shape; left[d] the
// padding before dim d (0 for unpadded dims, negative crops); mode one of ops/pad_source.h's
// kPad* codes. Constant fills with value (value_int for integer dtypes, so int64 is exact).
cudaError_t launch_pad(void* out, const void* in, int dtype, const Layout3& l, const int64_t* in_sizes,
                       const int64_t* left, int mode, double value_float, int64_t value_int,
                       cudaStream_t stream);

// Gradient of reflect padding along one dim: l has dst's sizes (the input's size along dim)
// and the strides of (dst, src); src has `padded` elements along dim, `left`/`right` the pads.
cudaError_t launch_reflect_backward_dim(void* dst, const void* src, int dtype, const Layout3& l, int dim,
                                        int64_t left, int64_t right, int64_t padded, cudaStream_t stream);

}  // namespace loom::cuda
