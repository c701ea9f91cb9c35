/*
 * The interface between ops/cuda/sort_kernels.cpp (C++20) and ops/cuda/sort.cu (C++17): the
 * cumsum and sort launchers, on contiguous tensors seen as [outer, size, inner] around the dim.
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/cuda/launchers.h"

namespace loom::cuda {

// out = running sums of in along the middle dim of [outer, size, inner]; dtype any code but bool.
cudaError_t launch_cumsum(void* out, const void* in, int dtype, int64_t outer, int64_t size, int64_t inner,
                          cudaStream_t stream);

// The padded line length that sort's network works on (size rounded up to a power of two), and
// whether a line of `size` elements of `element_size` bytes sorts in shared memory. Lines that
// do not sort in global memory and need sort_scratch_bytes(...) of scratch per line.
int64_t sort_padded_size(int64_t size);
bool sort_fits_shared(int64_t size, int element_size);
int64_t sort_scratch_bytes(int64_t size, int element_size);

// values, indices = lines [line_begin, line_end) of in ([outer, size, inner], lines numbered
// outer-major) sorted along the middle dim by the order of ops/sort_order.h. `scratch` is
// nullptr when sort_fits_shared, else (line_end - line_begin) * sort_scratch_bytes device bytes.
cudaError_t launch_sort(void* values, int64_t* indices, const void* in, int dtype, int64_t size,
                        int64_t inner, int64_t line_begin, int64_t line_end, bool descending, void* scratch,
                        cudaStream_t stream);

}  // namespace loom::cuda
