/*
 * CUDA kernels for joining, indexing and rearranging: cat, index_select, gather, scatter_add,
 * index_add, tril/triu, flip, pad and pad's gradient (ops/cuda/shape_launchers.h).
 *
 * Every kernel is a grid-stride loop of independent threads that find their operands' elements
 * by strided offsets, so any strides (0 and negative included) work. Kernels that only move
 * elements are written per element size (1, 2, 4 or 8 bytes), like the CPU's, so every dtype
 * shares them; the accumulating ones (scatter_add, index_add, reflect pad gradient) and pad's
 * fill value need the dtype.
 *
 * Accumulation is deterministic and uses no atomics: a thread owns every element that can
 * collide (a line along the indexed dim for scatter_add/index_add, one input element for the
 * pad gradient) and adds in the CPU's order, rounding to the storage type after each addition
 * as the CPU does, so CUDA and CPU results are bitwise equal. Index values are checked by the
 * ops layer (ops/shape_ops.cpp) before any kernel runs.
 */
#include <type_traits>

#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/shape_launchers.h"
#include "ops/pad_source.h"

namespace loom::cuda {

// ---- kernels -------------------------------------------------------------------------------

namespace {

// Offsets of row-major position i in the three operands of l, with dim `skip` (if >= 0)
// treated as size 1: i then numbers the lines along `skip`.
__device__ inline void offsets_of(int64_t i, const Layout3& l, int skip, int64_t* o) {
  o[0] = o[1] = o[2] = 0;
  for (int d = l.ndim - 1; d >= 0; --d) {
    if (d == skip) continue;
    const int64_t idx = i % l.sizes[d];
    i /= l.sizes[d];
    o[0] += idx * l.strides[0][d];
    o[1] += idx * l.strides[1][d];
    o[2] += idx * l.strides[2][d];
  }
}

// a + b in the CPU's arithmetic: 16-bit floats in float, then rounded back; integers promoted
// and wrapped back; bool as a logical or.
template <class T>
__device__ inline T add_values(T a, T b) {
  if constexpr (std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value) {
    return convert<T>(to_opmath(a) + to_opmath(b));
  } else {
    return static_cast<T>(a + b);
  }
}

template <class U>
__global__ void strided_move_kernel(U* dst, const U* src, StridedLayout l, int64_t numel) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < numel;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = i, o_dst = 0, o_src = 0;
    for (int d = l.ndim - 1; d >= 0; --d) {
      const int64_t idx = rest % l.sizes[d];
      rest /= l.sizes[d];
      o_dst += idx * l.dst_strides[d];
      o_src += idx * l.src_strides[d];
    }
    dst[o_dst] = src[o_src];
  }
}

// The smallest position i with index[i] outside [0, size) goes into *bad (a CUDA graph's check
// word): the device side of check_index_range during a capture.
__global__ void index_range_check_kernel(const int64_t* index, int64_t n, int64_t size, unsigned long long* bad) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t v = index[i];
    if (v < 0 || v >= size) record_bad_index(bad, static_cast<unsigned long long>(i));
  }
}

// The indexing kernels follow only indices in [0, bound). Eagerly the host has checked them all
// before the launch; in a CUDA graph's replay the device check reports a bad one at the host's
// next wait, so the kernel must not follow it meanwhile: a copy reads zero there, an add skips it.
template <class U>
__global__ void indexed_copy_kernel(U* out, const U* src, const int64_t* index, Layout3 l, int64_t step,
                                    int64_t bound, int64_t numel) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < numel;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t o[3];
    offsets_of(i, l, -1, o);
    const int64_t j = index[o[2]];
    out[o[0]] = (j >= 0 && j < bound) ? src[o[1] + j * step] : U{};
  }
}

// One thread per line along `dim`: the line's elements are the only ones that may write the
// same output element, so adding them in order of k needs no atomics and fixes the order.
template <class T>
__global__ void indexed_add_kernel(T* out, const T* src, const int64_t* index, Layout3 l, int dim,
                                   int64_t step, int64_t bound, int64_t lines) {
  const int64_t len = l.sizes[dim], s_out = l.strides[0][dim], s_src = l.strides[1][dim],
                s_index = l.strides[2][dim];
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < lines;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t o[3];
    offsets_of(i, l, dim, o);
    for (int64_t k = 0; k < len; ++k) {
      const int64_t j = index[o[2] + k * s_index];
      if (j < 0 || j >= bound) continue;
      T& to = out[o[0] + k * s_out + j * step];
      to = add_values(to, src[o[1] + k * s_src]);
    }
  }
}

template <class U>
__global__ void triangle_kernel(U* out, const U* in, Layout3 l, bool lower, int64_t diagonal, int64_t numel) {
  const int64_t cols = l.sizes[l.ndim - 1], rows = l.sizes[l.ndim - 2];
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < numel;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t o[3];
    offsets_of(i, l, -1, o);
    const int64_t c = i % cols, r = (i / cols) % rows;
    const bool keep = lower ? c - r <= diagonal : c - r >= diagonal;
    out[o[0]] = keep ? in[o[1]] : U{0};
  }
}

struct PadGeometry {
  int64_t in_sizes[kMaxDims];
  int64_t left[kMaxDims];
};

template <class T>
__global__ void pad_kernel(T* out, const T* in, Layout3 l, PadGeometry g, int mode, T fill,
                           int64_t numel) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < numel;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = i, o_out = 0, o_in = 0;
    bool is_fill = false;
    for (int d = l.ndim - 1; d >= 0; --d) {
      const int64_t j = rest % l.sizes[d];
      rest /= l.sizes[d];
      o_out += j * l.strides[0][d];
      const int64_t s = pad_source(j, g.left[d], g.in_sizes[d], mode);
      if (s < 0)
        is_fill = true;
      else
        o_in += s * l.strides[1][d];
    }
    out[o_out] = is_fill ? fill : in[o_in];
  }
}

// Input position i along `dim` collects the padded positions that read it: itself (i + left),
// the left mirror left - i (for 1 <= i <= left) and the right mirror left + 2 (size - 1) - i
// (for size - 1 - right <= i <= size - 2); added in that order, as on the CPU.
template <class T>
__global__ void reflect_backward_dim_kernel(T* dst, const T* src, Layout3 l, int dim, int64_t left,
                                            int64_t right, int64_t padded, int64_t numel) {
  const int64_t size = l.sizes[dim], s_src = l.strides[1][dim];
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < numel;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = i, o_dst = 0, o_src = 0, pos = 0;
    for (int d = l.ndim - 1; d >= 0; --d) {
      const int64_t idx = rest % l.sizes[d];
      rest /= l.sizes[d];
      o_dst += idx * l.strides[0][d];
      if (d == dim)
        pos = idx;
      else
        o_src += idx * l.strides[1][d];
    }
    T v = convert<T>(0);
    if (pos + left >= 0 && pos + left < padded) v = src[o_src + (pos + left) * s_src];
    if (pos >= 1 && pos <= left) v = add_values(v, src[o_src + (left - pos) * s_src]);
    if (pos >= size - 1 - right && pos <= size - 2)
      v = add_values(v, src[o_src + (left + 2 * (size - 1) - pos) * s_src]);
    dst[o_dst] = v;
  }
}

// Calls f(U{}) with an unsigned integer type as wide as one element.
template <class F>
cudaError_t visit_element_size(int size, F&& f) {
  switch (size) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
    default:
      return cudaErrorInvalidValue;
  }
}

int64_t numel_of(const Layout3& l) {
  int64_t n = 1;
  for (int d = 0; d < l.ndim; ++d) n *= l.sizes[d];
  return n;
}

}  // namespace

// ---- launchers -----------------------------------------------------------------------------

cudaError_t launch_strided_move(void* dst, const void* src, int element_size, const StridedLayout& layout,
                                int64_t numel, cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  return visit_element_size(element_size, [&](auto u) {
    using U = decltype(u);
    return launch<strided_move_kernel<U>>(grid_stride(numel, stream), static_cast<U*>(dst),
                                          static_cast<const U*>(src), layout, numel);
  });
}

cudaError_t launch_indexed_copy(void* out, const void* src, const int64_t* index, int element_size,
                                const Layout3& l, int64_t step, int64_t bound, cudaStream_t stream) {
  const int64_t numel = numel_of(l);
  if (numel == 0) return cudaSuccess;
  return visit_element_size(element_size, [&](auto u) {
    using U = decltype(u);
    return launch<indexed_copy_kernel<U>>(grid_stride(numel, stream), static_cast<U*>(out),
                                          static_cast<const U*>(src), index, l, step, bound, numel);
  });
}

cudaError_t launch_index_range_check(const int64_t* index, int64_t n, int64_t size, unsigned long long* bad,
                                     cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return launch<index_range_check_kernel>(grid_stride(n, stream), index, n, size, bad);
}

cudaError_t launch_indexed_add(void* out, const void* src, const int64_t* index, int dtype, const Layout3& l,
                               int dim, int64_t step, int64_t bound, cudaStream_t stream) {
  const int64_t numel = numel_of(l);
  if (numel == 0) return cudaSuccess;
  const int64_t lines = numel / l.sizes[dim];
  return visit_code(dtype, [&](auto t) {
    using T = decltype(t);
    return launch<indexed_add_kernel<T>>(grid_stride(lines, stream), static_cast<T*>(out),
                                         static_cast<const T*>(src), index, l, dim, step, bound, lines);
  });
}

cudaError_t launch_triangle(void* out, const void* in, int element_size, const Layout3& l, bool lower,
                            int64_t diagonal, cudaStream_t stream) {
  const int64_t numel = numel_of(l);
  if (numel == 0) return cudaSuccess;
  return visit_element_size(element_size, [&](auto u) {
    using U = decltype(u);
    return launch<triangle_kernel<U>>(grid_stride(numel, stream), static_cast<U*>(out),
                                      static_cast<const U*>(in), l, lower, diagonal, numel);
  });
}

cudaError_t launch_pad(void* out, const void* in, int dtype, const Layout3& l, const int64_t* in_sizes,
                       const int64_t* left, int mode, double value_float, int64_t value_int,
                       cudaStream_t stream) {
  const int64_t numel = numel_of(l);
  if (numel == 0) return cudaSuccess;
  PadGeometry g{};
  for (int d = 0; d < l.ndim; ++d) {
    g.in_sizes[d] = in_sizes[d];
    g.left[d] = left[d];
  }
  return visit_code(dtype, [&](auto t) {
    using T = decltype(t);
    T fill;
    if constexpr (std::is_same<T, bool>::value) {
      fill = value_float != 0.0;
    } else if constexpr (std::is_integral<T>::value) {
      fill = static_cast<T>(value_int);
    } else {
      fill = convert<T>(value_float);
    }
    return launch<pad_kernel<T>>(grid_stride(numel, stream), static_cast<T*>(out), static_cast<const T*>(in),
                                 l, g, mode, fill, numel);
  });
}

cudaError_t launch_reflect_backward_dim(void* dst, const void* src, int dtype, const Layout3& l, int dim,
                                        int64_t left, int64_t right, int64_t padded, cudaStream_t stream) {
  const int64_t numel = numel_of(l);
  if (numel == 0) return cudaSuccess;
  return visit_code(dtype, [&](auto t) {
    using T = decltype(t);
    return launch<reflect_backward_dim_kernel<T>>(grid_stride(numel, stream), static_cast<T*>(dst),
                                                  static_cast<const T*>(src), l, dim, left, right, padded,
                                                  numel);
  });
}

}  // namespace loom::cuda
