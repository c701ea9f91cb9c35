/*
 * The C++ side of the CUDA reductions (ops/cuda/reduction.cu): turns (out, in, dims) into a
 * ReduceGeometry, picks the kernel shape, allocates the workspaces and registers the kernels.
 *
 * Geometry, as on the CPU (ops/cpu/reduction_kernels.cpp): size-1 dims are dropped, the reduced
 * dims are ordered stride-0 first, then by decreasing stride (stable, so max/min keep the
 * input's order), and neighbouring dims that are contiguous with each other are merged. Rows
 * of a matrix, columns of a matrix and "everything" then each become one or two dims whatever
 * the rank, and the kernels rarely divide to find an element.
 *
 * Synchronisation: every launch is on the current stream (op_stream.h), so the workspaces (freed to
 * the caching allocator when this function returns) are not reused before the kernels that
 * read them have run.
 */
#include <algorithm>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/op_stream.h"
#include "ops/cuda/reduction_launchers.h"
#include "ops/dispatch.h"
#include "ops/reduction_plan.h"

namespace loom::cuda {

namespace {

// Outputs below which one long reduction is split over several blocks, and the elements per
// block that make splitting worth a second kernel.
constexpr int64_t kFewOutputs = 64;
constexpr int64_t kElementsPerSplit = 4096;
constexpr int64_t kMaxItems = 1024;  // (output, split) items of a split block reduction
// The same for a thread per output: elements per thread worth a split, and the most threads.
constexpr int64_t kRowsPerThreadSplit = 256;
constexpr int64_t kMaxThreadItems = 65536;

ReduceGeometry make_geometry(const Tensor& in, IntArrayRef dims, std::string_view op) {
  LOOM_CHECK(in.dim() <= kMaxDims, op, " on CUDA: tensors with more than ", kMaxDims,
             " dims are not supported, got ", in.dim());
  const auto [kept, reduced] = plan_reduction(in, dims);
  int64_t n_red = 1;
  for (int64_t d : dims) n_red *= in.sizes()[d];

  ReduceGeometry g;
  g.kept_ndim = static_cast<int>(kept.sizes.size());
  g.red_ndim = static_cast<int>(reduced.sizes.size());
  g.n_out = 1;
  for (int i = 0; i < g.kept_ndim; ++i) {
    g.kept_sizes[i] = kept.sizes[i];
    g.kept_strides[i] = kept.strides[i];
    g.n_out *= kept.sizes[i];
  }
  for (int i = 0; i < g.red_ndim; ++i) {
    g.red_sizes[i] = reduced.sizes[i];
    g.red_strides[i] = reduced.strides[i];
  }
  g.n_red = n_red;

  // Columns: the unit-stride dim is a kept one, so threads of consecutive outputs read
  // consecutive addresses; a thread per output is then coalesced and needs no communication.
  const bool columns = g.kept_ndim > 0 && g.kept_strides[g.kept_ndim - 1] == 1 &&
                       (g.red_ndim == 0 || g.red_strides[g.red_ndim - 1] != 1);
  if (g.n_red <= 32 || (columns && g.n_out >= 128)) {
    g.strategy = ReduceStrategy::kThreadPerOutput;
    // Long columns ([10^6, 128] over dim 0) would leave most of the GPU idle: cut them.
    if (g.n_red >= 2 * kRowsPerThreadSplit) {
      const int64_t wanted = (g.n_red + kRowsPerThreadSplit - 1) / kRowsPerThreadSplit;
      g.splits = std::max<int64_t>(1, std::min(wanted, kMaxThreadItems / g.n_out));
    }
    return g;
  }
  g.strategy = ReduceStrategy::kBlockPerOutput;
  g.block = g.n_red >= 4096 ? 256 : g.n_red >= 1024 ? 128 : g.n_red >= 256 ? 64 : 32;
  if (g.n_out < kFewOutputs && g.n_red >= 2 * kElementsPerSplit) {
    const int64_t wanted = (g.n_red + kElementsPerSplit - 1) / kElementsPerSplit;
    g.splits = std::max<int64_t>(1, std::min(wanted, kMaxItems / g.n_out));
  }
  return g;
}

// Device memory for the partials of a split reduction (an undefined tensor when unsplit).
Tensor workspace_for(const ReduceGeometry& g, const Tensor& in) {
  if (g.splits <= 1) return Tensor();
  return empty({g.n_out * g.splits * kReducePartialBytes}, in.options().dtype(kUInt8));
}

void* data_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}

// sum/prod: the CPU's output dtypes (in's, float32 or float64 for floating in; int64 otherwise).
template <bool kProd>
void sum_like_kernel(const Tensor& out, const Tensor& in, IntArrayRef dims) {
  const char* op = kProd ? "prod" : "sum";
  if (is_floating(in.dtype())) {
    LOOM_CHECK(out.dtype() == in.dtype() || out.dtype() == kFloat32 || out.dtype() == kFloat64, op,
               " kernel: cannot write ", in.dtype(), " into ", out.dtype());
  } else {
    LOOM_CHECK(out.dtype() == kInt64, op, " kernel: expected an int64 output for ", in.dtype(), ", got ",
               out.dtype());
  }
  const ReduceGeometry g = make_geometry(in, dims, op);
  Tensor workspace = workspace_for(g, in);
  const auto launcher = kProd ? launch_prod : launch_sum;
  LOOM_CUDA_CHECK(launcher(out.data_ptr(), static_cast<int>(out.dtype()), in.data_ptr(),
                           static_cast<int>(in.dtype()), g, data_or_null(workspace), op_stream()));
}

template <bool kMax>
void extreme_kernel(const Tensor& out, const Tensor& in, IntArrayRef dims) {
  const ReduceGeometry g = make_geometry(in, dims, kMax ? "amax" : "amin");
  Tensor workspace = workspace_for(g, in);
  LOOM_CUDA_CHECK(launch_extreme(out.data_ptr(), in.data_ptr(), static_cast<int>(in.dtype()), kMax, g,
                                 data_or_null(workspace), op_stream()));
}

void var_kernel(const Tensor& out, const Tensor& in, IntArrayRef dims, int64_t correction) {
  LOOM_CHECK(is_floating(in.dtype()), "var: expected a floating input, got ", in.dtype());
  const ReduceGeometry g = make_geometry(in, dims, "var");
  Tensor workspace = workspace_for(g, in);
  Tensor mean = empty({g.n_out}, in.options().dtype(kFloat64));
  LOOM_CUDA_CHECK(launch_var(out.data_ptr(), in.data_ptr(), static_cast<int>(in.dtype()), correction, g,
                             mean.data_ptr<double>(), data_or_null(workspace), op_stream()));
}

template <bool kMax>
void arg_kernel(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim) {
  std::vector<int64_t> dims;
  if (in.dim() > 0) dims.push_back(dim);
  const ReduceGeometry g = make_geometry(in, dims, kMax ? "max" : "min");
  Tensor workspace = workspace_for(g, in);
  LOOM_CUDA_CHECK(launch_arg_extreme(values.data_ptr(), indices.data_ptr<int64_t>(), in.data_ptr(),
                                     static_cast<int>(in.dtype()), kMax, g, data_or_null(workspace),
                                     op_stream()));
}

}  // namespace

void register_reduction_cuda_kernels() {
  register_kernel<Op::sum>(DeviceType::CUDA, sum_like_kernel<false>);
  register_kernel<Op::prod>(DeviceType::CUDA, sum_like_kernel<true>);
  register_kernel<Op::amax>(DeviceType::CUDA, extreme_kernel<true>);
  register_kernel<Op::amin>(DeviceType::CUDA, extreme_kernel<false>);
  register_kernel<Op::var>(DeviceType::CUDA, var_kernel);
  register_kernel<Op::max_dim>(DeviceType::CUDA, arg_kernel<true>);
  register_kernel<Op::min_dim>(DeviceType::CUDA, arg_kernel<false>);
}

}  // namespace loom::cuda
