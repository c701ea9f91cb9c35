/*
 * CUDA reductions: sum, prod, amax, amin, var, and max/min along a dim with their indices.
 *
 * One engine serves them all, as on the CPU (ops/cpu/reduction_kernels.cpp). The host
 * (reduction_kernels.cpp) describes each output's reduced elements by two strided groups of
 * dims (ReduceGeometry) and picks one of two kernel shapes:
 *
 *   thread per output  many outputs and a short or strided reduced extent (summing the
 *                      columns of [64, 128], the bias gradient): each thread folds its own
 *                      output's elements in order; neighbouring threads read neighbouring
 *                      columns, so loads coalesce. No communication. Very long columns are
 *                      cut into `splits` pieces folded by separate threads into partials.
 *   block per output   long reductions: the block's threads stride over the elements, then a
 *                      warp-shuffle + shared-memory block reduction. With few outputs and very
 *                      long rows (a full sum), `splits` blocks share an output.
 *
 * Split reductions write one partial per (output, split) to a workspace, which a second,
 * thread-per-output kernel folds in split order.
 *
 * A reducer says what to do: Acc identity(); Acc load(T x, int64_t out, int64_t pos);
 * Acc combine(Acc, Acc); void write(int64_t out, Acc). combine must not depend on the order of
 * its arguments beyond rounding, because the shuffle tree pairs lanes in either order; for
 * max/min with an index that is why ties go to the smaller index explicitly.
 *
 * Numerics: 16-bit and float32 sums/products accumulate in float (double when either side is
 * float64), integers and bool in uint64 so that int64 overflow wraps as on the CPU. var is the
 * CPU's two passes in double: the mean, then the squared deviations from it. max/min propagate
 * NaN (the first NaN's index for max/min along a dim), as PyTorch.
 *
 * Identities that need std::numeric_limits are computed on the host: its members are not
 * device functions for nvcc without --expt-relaxed-constexpr.
 */
#include <limits>
#include <type_traits>

#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/reduction_launchers.h"

namespace loom::cuda {

// ---- kernels -------------------------------------------------------------------------------

namespace {

template <class T>
constexpr bool kIsFloating = std::is_floating_point<T>::value || std::is_same<T, __half>::value ||
                             std::is_same<T, __nv_bfloat16>::value;

// The type max/min compare and shuffle in: float for 16-bit floats, int for the small integers
// and bool (shuffles move 4- or 8-byte values), the type itself otherwise.
template <class T>
using extreme_t = std::conditional_t<kIsFloating<T>, opmath_t<T>,
                                     std::conditional_t<(sizeof(T) < 4), int, T>>;

// Storage type T from an accumulator (numeric_cast rules; the value fits whenever T came in).
template <class T, class A>
__device__ inline T store(A v) {
  if constexpr (std::is_integral<T>::value && !std::is_same<T, bool>::value) {
    return static_cast<T>(v);
  } else {
    return convert<T>(v);
  }
}

// Element i (row-major) of a group of dims: its offset, without divisions for 0 or 1 dims (the
// common case once the host has merged contiguous dims).
__device__ inline int64_t group_offset(int64_t i, int ndim, const int64_t* sizes, const int64_t* strides) {
  if (ndim == 0) return 0;
  if (ndim == 1) return i * strides[0];
  return strided_offset(i, ndim, sizes, strides);
}

__device__ inline int64_t kept_offset(const ReduceGeometry& g, int64_t o) {
  return group_offset(o, g.kept_ndim, g.kept_sizes, g.kept_strides);
}
__device__ inline int64_t reduced_offset(const ReduceGeometry& g, int64_t k) {
  return group_offset(k, g.red_ndim, g.red_sizes, g.red_strides);
}

// max/min with the index of the winner.
template <class V>
struct ValueIndex {
  V value;
  int64_t index;  // kNoIndex: nothing seen yet
};
constexpr int64_t kNoIndex = INT64_MAX;

// One warp shuffle of an accumulator; pairs move as two shuffles.
template <class A>
__device__ inline A shuffle_xor(A v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}
template <class V>
__device__ inline ValueIndex<V> shuffle_xor(ValueIndex<V> v, int offset) {
  return {shuffle_xor(v.value, offset), shuffle_xor(v.index, offset)};
}

// Folds v over the block with r.combine (blockDim.x a multiple of 32): device_utils'
// block_reduce, generalised to accumulators that are pairs. The result is valid in thread 0.
// `scratch` holds 32 accumulators of shared memory.
template <class R>
__device__ inline typename R::Acc block_fold(typename R::Acc v, const R& r, typename R::Acc* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) v = r.combine(v, shuffle_xor(v, offset));
  if (lane == 0) scratch[warp] = v;
  __syncthreads();  // every warp's partial is in scratch
  if (warp == 0) {
    v = lane < warps ? scratch[lane] : r.identity();
    for (int offset = 16; offset > 0; offset /= 2) v = r.combine(v, shuffle_xor(v, offset));
  }
  __syncthreads();  // warp 0 has read scratch: the next output of this block may overwrite it
  return v;
}

// ---- reducers

// Sums and products accumulate in Acc: float for 16-bit and float32 (double when in or out is
// float64), uint64 for integers and bool (int64 wrap-around without signed overflow).
template <class T, class Out>
using product_acc_t = std::conditional_t<
    kIsFloating<T>,
    std::conditional_t<std::is_same<T, double>::value || std::is_same<Out, double>::value, double, float>,
    uint64_t>;

template <class T, class Out, bool kProd>
struct SumProdReducer {
  using Acc = product_acc_t<T, Out>;
  Out* out;
  __device__ Acc identity() const { return Acc(kProd ? 1 : 0); }
  __device__ Acc load(T x, int64_t, int64_t) const { return static_cast<Acc>(to_opmath(x)); }
  __device__ Acc combine(Acc a, Acc b) const { return kProd ? a * b : a + b; }
  __device__ void write(int64_t o, Acc acc) const { out[o] = store<Out>(acc); }
};

// (A helper rather than v != v in place: compilers warn about that test on integers.)
template <class V>
__device__ inline bool is_nan(V v) {
  if constexpr (std::is_floating_point<V>::value) {
    return v != v;
  } else {
    return false;
  }
}

// max (kMax) or min, where NaN wins: x replaces a when strictly better or NaN.
template <bool kMax, class V>
__device__ inline bool wins(V x, V a) {
  return kMax ? (x > a || is_nan(x)) : (x < a || is_nan(x));
}

template <class T, bool kMax>
struct ExtremeReducer {
  using Acc = extreme_t<T>;
  T* out;
  Acc init;  // -inf / +inf, or the integer type's lowest / highest value
  __device__ Acc identity() const { return init; }
  __device__ Acc load(T x, int64_t, int64_t) const { return static_cast<Acc>(to_opmath(x)); }
  __device__ Acc combine(Acc a, Acc b) const { return is_nan(a) ? a : (wins<kMax>(b, a) ? b : a); }
  __device__ void write(int64_t o, Acc acc) const { out[o] = store<T>(acc); }
};

template <class T, bool kMax>
struct ArgReducer {
  using V = extreme_t<T>;
  using Acc = ValueIndex<V>;
  T* values;
  int64_t* indices;
  V init;
  __device__ Acc identity() const { return {init, kNoIndex}; }
  __device__ Acc load(T x, int64_t, int64_t pos) const { return {static_cast<V>(to_opmath(x)), pos}; }
  // Symmetric: the better value; on a tie (two NaNs included) the smaller index, so the result
  // is the CPU's first occurrence whatever order the shuffles combine in.
  __device__ Acc combine(Acc a, Acc b) const {
    if (a.index == kNoIndex) return b;
    if (b.index == kNoIndex) return a;
    const bool a_nan = is_nan(a.value), b_nan = is_nan(b.value);
    if (a_nan != b_nan) return a_nan ? a : b;
    if (!a_nan) {
      if (wins<kMax>(b.value, a.value)) return b;
      if (wins<kMax>(a.value, b.value)) return a;
    }
    return b.index < a.index ? b : a;
  }
  __device__ void write(int64_t o, Acc acc) const {
    values[o] = store<T>(acc.value);
    indices[o] = acc.index == kNoIndex ? 0 : acc.index;
  }
};

// var, first pass: mean[o] (0 / 0 = NaN for an empty reduction, as the CPU).
template <class T>
struct MeanReducer {
  using Acc = double;
  double* mean;
  double count;
  __device__ Acc identity() const { return 0.0; }
  __device__ Acc load(T x, int64_t, int64_t) const { return static_cast<double>(to_opmath(x)); }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
  __device__ void write(int64_t o, Acc acc) const { mean[o] = acc / count; }
};

// var, second pass: the squared deviations from mean[o], divided by max(0, n - correction).
template <class T>
struct SquaredDeviationReducer {
  using Acc = double;
  T* out;
  const double* mean;
  double divisor;
  __device__ Acc identity() const { return 0.0; }
  __device__ Acc load(T x, int64_t o, int64_t) const {
    const double d = static_cast<double>(to_opmath(x)) - mean[o];
    return d * d;
  }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
  __device__ void write(int64_t o, Acc acc) const { out[o] = store<T>(acc / divisor); }
};

// ---- kernel shapes

// One thread per (output, split) item, folding its elements in order (kIndependent).
// Consecutive threads take consecutive outputs, so a column layout reads coalesced rows. With
// one split the thread writes the output; with more (few, very long columns), split c of output
// o leaves its partial in partial[o * splits + c] for reduce_partials_kernel.
template <class T, class R>
__global__ void reduce_thread_kernel(const T* in, ReduceGeometry g, R r, typename R::Acc* partial) {
  using Acc = typename R::Acc;
  const int64_t chunk = (g.n_red + g.splits - 1) / g.splits;
  const int64_t items = g.n_out * g.splits;
  for (int64_t item = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; item < items;
       item += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = item % g.n_out, c = item / g.n_out;
    const int64_t begin = c * chunk;
    const int64_t end = begin + chunk < g.n_red ? begin + chunk : g.n_red;
    const T* base = in + kept_offset(g, o);
    Acc acc = r.identity();
    for (int64_t k = begin; k < end; ++k) acc = r.combine(acc, r.load(base[reduced_offset(g, k)], o, k));
    if (g.splits == 1) {
      r.write(o, acc);
    } else {
      partial[o * g.splits + c] = acc;
    }
  }
}

// One block per (output, split) item, grid-stride over items (kCooperative; dynamic shared
// memory: 32 accumulators). With one split the block writes the output; with more, split c
// of output o leaves its partial in partial[o * splits + c] for reduce_partials_kernel.
template <class T, class R>
__global__ void reduce_block_kernel(const T* in, ReduceGeometry g, R r, typename R::Acc* partial) {
  using Acc = typename R::Acc;
  Acc* scratch = dynamic_shared<Acc>();
  const int64_t chunk = (g.n_red + g.splits - 1) / g.splits;
  const int64_t items = g.n_out * g.splits;
  // Every thread of a block runs the same number of iterations (the bound depends on the
  // block only), so all of them reach the barriers in block_fold.
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t o = item / g.splits;
    const int64_t begin = (item % g.splits) * chunk;
    const int64_t end = begin + chunk < g.n_red ? begin + chunk : g.n_red;
    const T* base = in + kept_offset(g, o);
    Acc acc = r.identity();
    for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x)
      acc = r.combine(acc, r.load(base[reduced_offset(g, k)], o, k));
    acc = block_fold(acc, r, scratch);
    if (threadIdx.x == 0) {
      if (g.splits == 1) {
        r.write(o, acc);
      } else {
        partial[item] = acc;
      }
    }
  }
}

// Second pass of a split reduction: each thread folds its output's partials, in split order
// (kIndependent).
template <class R>
__global__ void reduce_partials_kernel(const typename R::Acc* partial, int64_t n_out, int64_t splits, R r) {
  using Acc = typename R::Acc;
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < n_out; o += int64_t{gridDim.x} * blockDim.x) {
    Acc acc = r.identity();
    for (int64_t c = 0; c < splits; ++c) acc = r.combine(acc, partial[o * splits + c]);
    r.write(o, acc);
  }
}

}  // namespace

// ---- launchers -----------------------------------------------------------------------------

namespace {

// Runs reducer r over in with the strategy the host chose for g.
template <class T, class R>
cudaError_t run_reduction(const T* in, const ReduceGeometry& g, const R& r, void* workspace, cudaStream_t stream) {
  using Acc = typename R::Acc;
  static_assert(sizeof(Acc) <= kReducePartialBytes, "a partial must fit its workspace slot");
  if (g.splits < 1 || (g.splits > 1 && workspace == nullptr)) return cudaErrorInvalidValue;
  Acc* partial = g.splits > 1 ? static_cast<Acc*>(workspace) : nullptr;
  const int64_t items = g.n_out * g.splits;
  cudaError_t err;
  if (g.strategy == ReduceStrategy::kThreadPerOutput) {
    err = launch<reduce_thread_kernel<T, R>>(grid_stride(items, stream), in, g, r,
                                             partial);
  } else {
    if (g.block % 32 != 0 || g.block < 32 || g.block > 1024) return cudaErrorInvalidValue;
    const unsigned blocks = static_cast<unsigned>(items < 1024 ? (items < 1 ? 1 : items) : 1024);
    err = launch<reduce_block_kernel<T, R>>(
        {blocks, static_cast<unsigned>(g.block), 32 * sizeof(Acc), stream, BlockThreads::kCooperative}, in, g, r,
        partial);
  }
  if (err != cudaSuccess || g.splits == 1) return err;
  // The stream orders this pass after the partials are written.
  return launch<reduce_partials_kernel<R>>(grid_stride(g.n_out, stream),
                                           static_cast<const Acc*>(partial), g.n_out, g.splits, r);
}

template <class V, bool kMax>
V extreme_identity() {
  if constexpr (std::numeric_limits<V>::has_infinity) {
    return kMax ? -std::numeric_limits<V>::infinity() : std::numeric_limits<V>::infinity();
  } else {
    return kMax ? std::numeric_limits<V>::lowest() : std::numeric_limits<V>::max();
  }
}

// The identity of max/min for storage type T, in its comparison type (bool: false / true).
template <class T, bool kMax>
extreme_t<T> extreme_init() {
  if constexpr (kIsFloating<T>) {
    return extreme_identity<extreme_t<T>, kMax>();
  } else {
    return static_cast<extreme_t<T>>(extreme_identity<T, kMax>());
  }
}

template <bool kProd>
cudaError_t launch_sum_prod(void* out, int out_dtype, const void* in, int in_dtype, const ReduceGeometry& g,
                            void* workspace, cudaStream_t stream) {
  return visit_code(in_dtype, [&](auto t) {
    using T = decltype(t);
    auto run = [&](auto o) {
      using Out = decltype(o);
      return run_reduction(static_cast<const T*>(in), g, SumProdReducer<T, Out, kProd>{static_cast<Out*>(out)},
                           workspace, stream);
    };
    if constexpr (kIsFloating<T>) {
      if (out_dtype == in_dtype) return run(T{});
      if (out_dtype == kCodeFloat32) return run(float{});
      if (out_dtype == kCodeFloat64) return run(double{});
      return cudaErrorInvalidValue;
    } else {
      if (out_dtype != kCodeInt64) return cudaErrorInvalidValue;
      return run(int64_t{});
    }
  });
}

}  // namespace

cudaError_t launch_sum(void* out, int out_dtype, const void* in, int in_dtype, const ReduceGeometry& g,
                       void* workspace, cudaStream_t stream) {
  return launch_sum_prod<false>(out, out_dtype, in, in_dtype, g, workspace, stream);
}

cudaError_t launch_prod(void* out, int out_dtype, const void* in, int in_dtype, const ReduceGeometry& g,
                        void* workspace, cudaStream_t stream) {
  return launch_sum_prod<true>(out, out_dtype, in, in_dtype, g, workspace, stream);
}

cudaError_t launch_extreme(void* out, const void* in, int dtype, bool is_max, const ReduceGeometry& g,
                           void* workspace, cudaStream_t stream) {
  return visit_code(dtype, [&](auto t) {
    using T = decltype(t);
    const T* src = static_cast<const T*>(in);
    T* dst = static_cast<T*>(out);
    if (is_max) return run_reduction(src, g, ExtremeReducer<T, true>{dst, extreme_init<T, true>()}, workspace, stream);
    return run_reduction(src, g, ExtremeReducer<T, false>{dst, extreme_init<T, false>()}, workspace, stream);
  });
}

cudaError_t launch_var(void* out, const void* in, int dtype, int64_t correction, const ReduceGeometry& g,
                       double* mean, void* workspace, cudaStream_t stream) {
  return visit_floating_code(dtype, [&](auto t) {
    using T = decltype(t);
    const T* src = static_cast<const T*>(in);
    const double n = static_cast<double>(g.n_red);
    cudaError_t err = run_reduction(src, g, MeanReducer<T>{mean, n}, workspace, stream);
    if (err != cudaSuccess) return err;
    const double divisor = n - static_cast<double>(correction) > 0.0 ? n - static_cast<double>(correction) : 0.0;
    // The stream orders this pass after the means are written.
    return run_reduction(src, g, SquaredDeviationReducer<T>{static_cast<T*>(out), mean, divisor}, workspace, stream);
  });
}

cudaError_t launch_arg_extreme(void* values, int64_t* indices, const void* in, int dtype, bool is_max,
                               const ReduceGeometry& g, void* workspace, cudaStream_t stream) {
  return visit_code(dtype, [&](auto t) {
    using T = decltype(t);
    const T* src = static_cast<const T*>(in);
    T* dst = static_cast<T*>(values);
    if (is_max) return run_reduction(src, g, ArgReducer<T, true>{dst, indices, extreme_init<T, true>()}, workspace, stream);
    return run_reduction(src, g, ArgReducer<T, false>{dst, indices, extreme_init<T, false>()}, workspace, stream);
  });
}

}  // namespace loom::cuda
