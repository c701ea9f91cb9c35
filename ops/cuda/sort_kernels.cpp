/*
 * The C++ side of the CUDA cumsum and sort (ops/cuda/sort.cu): splits the contiguous operands
 * into [outer, size, inner] around the dim, allocates sort's scratch for long lines, and
 * registers the kernels.
 *
 * Synchronisation: every launch is on the current stream (op_stream.h), so the scratch buffer
 * (freed to the caching allocator when the function returns) is not reused before the kernels
 * that sort in it have run.
 */
#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/op_stream.h"
#include "ops/cuda/sort_launchers.h"
#include "ops/dim_geometry.h"
#include "ops/dispatch.h"

namespace loom::cuda {

namespace {

// Scratch for at most this many bytes of lines per launch of a global-memory sort.
constexpr int64_t kSortScratchBytes = int64_t{256} << 20;
constexpr int64_t kMaxSortBlocks = 65535;

void cumsum_kernel(const Tensor& out, const Tensor& in, int64_t dim) {
  LOOM_CHECK(in.dtype() != kBool, "cumsum: no bool kernel (the ops layer sums bool as int64)");
  const DimGeometry g = geometry_around(in, dim);
  LOOM_CUDA_CHECK(launch_cumsum(out.data_ptr(), in.data_ptr(), static_cast<int>(in.dtype()), g.outer, g.size,
                                g.inner, op_stream()));
}

void sort_kernel(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim,
                 bool descending) {
  const DimGeometry g = geometry_around(in, dim);
  const int element_size = static_cast<int>(in.element_size());
  const int64_t lines = g.outer * g.inner;
  const bool shared = sort_fits_shared(g.size, element_size);
  const int64_t per_line = sort_scratch_bytes(g.size, element_size);
  const int64_t batch = shared ? lines : std::clamp<int64_t>(kSortScratchBytes / per_line, 1, kMaxSortBlocks);
  Tensor scratch;
  if (!shared) scratch = empty({std::min(batch, lines) * per_line}, in.options().dtype(kUInt8));
  for (int64_t begin = 0; begin < lines; begin += batch) {
    const int64_t end = std::min(lines, begin + batch);
    LOOM_CUDA_CHECK(launch_sort(values.data_ptr(), indices.data_ptr<int64_t>(), in.data_ptr(),
                                static_cast<int>(in.dtype()), g.size, g.inner, begin, end, descending,
                                shared ? nullptr : scratch.data_ptr(), op_stream()));
  }
}

}  // namespace

void register_sort_cuda_kernels() {
  register_kernel<Op::cumsum>(DeviceType::CUDA, cumsum_kernel);
  register_kernel<Op::sort>(DeviceType::CUDA, sort_kernel);
}

}  // namespace loom::cuda
