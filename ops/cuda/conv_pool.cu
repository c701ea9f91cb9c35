/*
 * CUDA 2-D convolution and pooling on [N, C, H, W] tensors of any strides (NCHW, channels_last,
 * views): direct kernels, correct and deterministic, until cuDNN takes the convolutions over.
 *
 * Every result element is computed by one thread, or one block, that reads everything it needs
 * in a fixed order: no result is summed with atomics, so each is the same on every run. Backward
 * passes are gathers (each input element visits the outputs whose windows read it) rather than
 * scatters. Sums run in opmath (float for the 16-bit types, double for f64) and round once, as the
 * CPU kernels do; the one exception is the max-pool gradient, which rounds after every addition
 * because the CPU kernel accumulates in the output tensor, and it is matched bit for bit.
 *
 * Pooling follows PyTorch's rules exactly, as ops/cpu/pool_kernels.cpp does: windows scanned
 * row-major with the first maximum winning ties and a NaN winning, -inf as the padding value of
 * max pooling, the average divisor with and without padding (ceil_mode's overhang never counts),
 * and adaptive bins [floor(i * H / Ho), ceil((i + 1) * H / Ho)).
 */
#include <cmath>

#include "ops/cuda/conv_pool_launchers.h"
#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/launchers.h"

namespace loom::cuda {

// ---- kernels -------------------------------------------------------------------------------

namespace {

// Threads per block of the cooperative weight-gradient kernel, and the reduction length from
// which it is used: below one term per thread most of a block would idle.
constexpr int kReduceBlock = 128;
constexpr int64_t kMaxReduceBlocks = 1024;

// (n, c, h, w) of row-major position i in a [*, C, H, W] tensor.
struct Pos {
  int64_t n, c, h, w;
};

__device__ inline Pos unravel(int64_t i, int64_t C, int64_t H, int64_t W) {
  Pos p;
  p.w = i % W;
  i /= W;
  p.h = i % H;
  i /= H;
  p.c = i % C;
  p.n = i / C;
  return p;
}

__device__ inline int64_t offset_of(const Strides4& s, int64_t n, int64_t c, int64_t h, int64_t w) {
  return n * s.v[0] + c * s.v[1] + h * s.v[2] + w * s.v[3];
}

__device__ inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

__device__ inline int64_t max64(int64_t a, int64_t b) {
  return a > b ? a : b;
}

// ---- convolution --------------------------------------------------------------------------

// One thread per output element: the dot product of its window with its filter over the
// cin / groups input channels of its group.
template <class T>
__global__ void conv2d_kernel(T* out, Strides4 out_s, const T* x, Strides4 x_s, const T* w, Strides4 w_s,
                              const T* bias, int64_t bias_stride, ConvGeometry g) {
  using M = opmath_t<T>;
  const int64_t total = g.n * g.cout * g.ho * g.wo;
  const int64_t cg = g.cin / g.groups, og = g.cout / g.groups;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const Pos o = unravel(i, g.cout, g.ho, g.wo);
    const int64_t c0 = (o.c / og) * cg;
    M acc = M(0);
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t a = 0; a < g.kh; ++a) {
        const int64_t ih = o.h * g.stride[0] - g.padding[0] + a * g.dilation[0];
        if (ih < 0 || ih >= g.h) continue;
        for (int64_t b = 0; b < g.kw; ++b) {
          const int64_t iw = o.w * g.stride[1] - g.padding[1] + b * g.dilation[1];
          if (iw < 0 || iw >= g.w) continue;
          acc +=
              to_opmath(x[offset_of(x_s, o.n, c0 + c, ih, iw)]) * to_opmath(w[offset_of(w_s, o.c, c, a, b)]);
        }
      }
    if (bias != nullptr) acc += to_opmath(bias[o.c * bias_stride]);
    out[offset_of(out_s, o.n, o.c, o.h, o.w)] = convert<T>(acc);
  }
}

// One thread per input element, gathering grad_out * w over the output positions and output
// channels that read it: tap a of output row oh reads ih = oh * stride - padding + a * dilation.
template <class T>
__global__ void conv2d_backward_input_kernel(T* gx, Strides4 gx_s, const T* gy, Strides4 gy_s, const T* w,
                                             Strides4 w_s, ConvGeometry g) {
  using M = opmath_t<T>;
  const int64_t total = g.n * g.cin * g.h * g.w;
  const int64_t cg = g.cin / g.groups, og = g.cout / g.groups;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const Pos p = unravel(i, g.cin, g.h, g.w);
    const int64_t group = p.c / cg, c = p.c - group * cg;
    M acc = M(0);
    for (int64_t a = 0; a < g.kh; ++a) {
      const int64_t th = p.h + g.padding[0] - a * g.dilation[0];  // = oh * stride
      if (th < 0 || th % g.stride[0] != 0 || th / g.stride[0] >= g.ho) continue;
      const int64_t oh = th / g.stride[0];
      for (int64_t b = 0; b < g.kw; ++b) {
        const int64_t tw = p.w + g.padding[1] - b * g.dilation[1];
        if (tw < 0 || tw % g.stride[1] != 0 || tw / g.stride[1] >= g.wo) continue;
        const int64_t ow = tw / g.stride[1];
        for (int64_t oc = group * og; oc < (group + 1) * og; ++oc)
          acc += to_opmath(gy[offset_of(gy_s, p.n, oc, oh, ow)]) * to_opmath(w[offset_of(w_s, oc, c, a, b)]);
      }
    }
    gx[offset_of(gx_s, p.n, p.c, p.h, p.w)] = convert<T>(acc);
  }
}

// The weight and bias gradients as one list of items: items [0, weights) are the elements of
// grad_weight (row-major), items [weights, weights + cout) those of grad_bias. Each is a sum over
// the n * ho * wo output positions r; this adds the terms r = first, first + step, ...
template <class T>
__device__ opmath_t<T> weight_grad_terms(int64_t item, int64_t first, int64_t step, const T* gy,
                                         const Strides4& gy_s, const T* x, const Strides4& x_s,
                                         const ConvGeometry& g) {
  using M = opmath_t<T>;
  const int64_t cg = g.cin / g.groups, og = g.cout / g.groups;
  const int64_t weights = g.cout * cg * g.kh * g.kw, positions = g.n * g.ho * g.wo;
  M acc = M(0);
  if (item >= weights) {
    const int64_t oc = item - weights;
    for (int64_t r = first; r < positions; r += step) {
      const Pos o = unravel(r, 1, g.ho, g.wo);
      acc += to_opmath(gy[offset_of(gy_s, o.n, oc, o.h, o.w)]);
    }
    return acc;
  }
  const Pos k = unravel(item, cg, g.kh, g.kw);  // k.n: output channel, k.c: channel in the group
  const int64_t c = (k.n / og) * cg + k.c;
  for (int64_t r = first; r < positions; r += step) {
    const Pos o = unravel(r, 1, g.ho, g.wo);
    const int64_t ih = o.h * g.stride[0] - g.padding[0] + k.h * g.dilation[0];
    const int64_t iw = o.w * g.stride[1] - g.padding[1] + k.w * g.dilation[1];
    if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
    acc += to_opmath(gy[offset_of(gy_s, o.n, k.n, o.h, o.w)]) * to_opmath(x[offset_of(x_s, o.n, c, ih, iw)]);
  }
  return acc;
}

template <class T>
__device__ inline void store_weight_grad(int64_t item, opmath_t<T> v, T* gw, const Strides4& gw_s, T* gb,
                                         int64_t gb_stride, const ConvGeometry& g) {
  const int64_t cg = g.cin / g.groups, weights = g.cout * cg * g.kh * g.kw;
  if (item >= weights) {
    gb[(item - weights) * gb_stride] = convert<T>(v);
  } else {
    const Pos k = unravel(item, cg, g.kh, g.kw);
    gw[offset_of(gw_s, k.n, k.c, k.h, k.w)] = convert<T>(v);
  }
}

// Short reductions: one thread per item.
template <class T>
__global__ void conv2d_backward_weight_kernel(T* gw, Strides4 gw_s, T* gb, int64_t gb_stride, const T* gy,
                                              Strides4 gy_s, const T* x, Strides4 x_s, ConvGeometry g,
                                              int64_t items) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < items;
       i += int64_t{gridDim.x} * blockDim.x)
    store_weight_grad(i, weight_grad_terms(i, 0, 1, gy, gy_s, x, x_s, g), gw, gw_s, gb, gb_stride, g);
}

// Long reductions: one block per item (grid-stride over items), each thread summing every
// blockDim.x-th term, then a fixed-order block_reduce. Dynamic shared memory: 32 opmath values.
template <class T>
__global__ void conv2d_backward_weight_block_kernel(T* gw, Strides4 gw_s, T* gb, int64_t gb_stride,
                                                    const T* gy, Strides4 gy_s, const T* x, Strides4 x_s,
                                                    ConvGeometry g, int64_t items) {
  using M = opmath_t<T>;
  M* scratch = dynamic_shared<M>();
  // The loop bound depends on the block only, so every thread reaches the barriers of block_reduce.
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    M v = weight_grad_terms(item, threadIdx.x, blockDim.x, gy, gy_s, x, x_s, g);
    v = block_reduce(v, SumOp{}, M(0), scratch);
    if (threadIdx.x == 0) store_weight_grad(item, v, gw, gw_s, gb, gb_stride, g);
  }
}

// ---- max pooling --------------------------------------------------------------------------

// One thread per output: the window scanned row-major, positions outside the input skipped (they
// count as -inf). The index starts at the first tap inside the input, as on the CPU, so a window
// of -inf values still points into the input.
template <class T>
__global__ void max_pool2d_kernel(T* out, Strides4 out_s, int64_t* indices, Strides4 idx_s, const T* x,
                                  Strides4 x_s, PoolGeometry g) {
  using M = opmath_t<T>;
  const int64_t total = g.n * g.c * g.ho * g.wo;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const Pos o = unravel(i, g.c, g.ho, g.wo);
    const int64_t h0 = o.h * g.stride[0] - g.padding[0], w0 = o.w * g.stride[1] - g.padding[1];
    int64_t h_first = h0, w_first = w0;
    while (h_first < 0) h_first += g.dilation[0];
    while (w_first < 0) w_first += g.dilation[1];
    M best = -static_cast<M>(INFINITY);
    int64_t best_index = h_first * g.w + w_first;
    for (int64_t a = 0; a < g.kernel[0]; ++a) {
      const int64_t h = h0 + a * g.dilation[0];
      if (h < 0 || h >= g.h) continue;
      for (int64_t b = 0; b < g.kernel[1]; ++b) {
        const int64_t w = w0 + b * g.dilation[1];
        if (w < 0 || w >= g.w) continue;
        const M v = to_opmath(x[offset_of(x_s, o.n, o.c, h, w)]);
        if (v > best || v != v) {  // v != v: NaN wins
          best = v;
          best_index = h * g.w + w;
        }
      }
    }
    out[offset_of(out_s, o.n, o.c, o.h, o.w)] = convert<T>(best);
    indices[offset_of(idx_s, o.n, o.c, o.h, o.w)] = best_index;
  }
}

// Records the first position (in [n, c, ho, wo] order) whose index lies outside the plane;
// indices are user input to max_pool2d_backward.
__global__ void check_pool_indices_kernel(unsigned long long* bad, const int64_t* indices, Strides4 idx_s,
                                          PoolGeometry g) {
  const int64_t total = g.n * g.c * g.ho * g.wo, plane = g.h * g.w;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const Pos o = unravel(i, g.c, g.ho, g.wo);
    const int64_t index = indices[offset_of(idx_s, o.n, o.c, o.h, o.w)];
    if (index < 0 || index >= plane) record_bad_index(bad, static_cast<unsigned long long>(i));
  }
}

// Output rows [lo, hi) whose window span [o * stride - padding, ... + extent) holds input row h.
struct Range {
  int64_t lo, hi;
};

__device__ inline Range windows_holding(int64_t h, int64_t extent, int64_t stride, int64_t padding,
                                        int64_t outs) {
  const int64_t last_start = h + padding - extent;  // windows starting at or before it end before h
  Range r;
  r.lo = last_start < 0 ? 0 : last_start / stride + 1;
  r.hi = min64((h + padding) / stride + 1, outs);
  return r;
}

// One thread per input element, adding the gradients of the windows whose index points at it.
// Windows are visited in the CPU's order (row-major over outputs) and the sum rounds to T after
// each addition, as the CPU kernel's accumulation in the gradient tensor does.
template <class T>
__global__ void max_pool2d_backward_kernel(T* gx, Strides4 gx_s, const T* gy, Strides4 gy_s,
                                           const int64_t* indices, Strides4 idx_s, PoolGeometry g) {
  const int64_t total = g.n * g.c * g.h * g.w;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const Pos p = unravel(i, g.c, g.h, g.w);
    const int64_t self = p.h * g.w + p.w;
    const Range rh =
        windows_holding(p.h, (g.kernel[0] - 1) * g.dilation[0] + 1, g.stride[0], g.padding[0], g.ho);
    const Range rw =
        windows_holding(p.w, (g.kernel[1] - 1) * g.dilation[1] + 1, g.stride[1], g.padding[1], g.wo);
    T acc = convert<T>(0.0f);
    for (int64_t oh = rh.lo; oh < rh.hi; ++oh)
      for (int64_t ow = rw.lo; ow < rw.hi; ++ow)
        if (indices[offset_of(idx_s, p.n, p.c, oh, ow)] == self)
          acc = convert<T>(to_opmath(acc) + to_opmath(gy[offset_of(gy_s, p.n, p.c, oh, ow)]));
    gx[offset_of(gx_s, p.n, p.c, p.h, p.w)] = acc;
  }
}

// ---- average pooling ----------------------------------------------------------------------

// PyTorch's average-pool window for output (oh, ow): the input range clipped to the input, and
// the divisor (padding counts when count_include_pad, ceil_mode's overhang past it never does).
struct AvgWindow {
  int64_t h0, h1, w0, w1, divisor;
};

__device__ inline AvgWindow avg_window(int64_t oh, int64_t ow, const PoolGeometry& g) {
  AvgWindow win;
  win.h0 = oh * g.stride[0] - g.padding[0];
  win.w0 = ow * g.stride[1] - g.padding[1];
  win.h1 = min64(win.h0 + g.kernel[0], g.h + g.padding[0]);
  win.w1 = min64(win.w0 + g.kernel[1], g.w + g.padding[1]);
  const int64_t padded_size = (win.h1 - win.h0) * (win.w1 - win.w0);
  win.h0 = max64(win.h0, 0);
  win.w0 = max64(win.w0, 0);
  win.h1 = min64(win.h1, g.h);
  win.w1 = min64(win.w1, g.w);
  win.divisor = g.count_include_pad ? padded_size : (win.h1 - win.h0) * (win.w1 - win.w0);
  return win;
}

template <class T>
__global__ void avg_pool2d_kernel(T* out, Strides4 out_s, const T* x, Strides4 x_s, PoolGeometry g) {
  using M = opmath_t<T>;
  const int64_t total = g.n * g.c * g.ho * g.wo;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const Pos o = unravel(i, g.c, g.ho, g.wo);
    const AvgWindow win = avg_window(o.h, o.w, g);
    M sum = M(0);
    for (int64_t h = win.h0; h < win.h1; ++h)
      for (int64_t w = win.w0; w < win.w1; ++w) sum += to_opmath(x[offset_of(x_s, o.n, o.c, h, w)]);
    const bool empty = win.h0 >= win.h1 || win.w0 >= win.w1;
    out[offset_of(out_s, o.n, o.c, o.h, o.w)] = convert<T>(empty ? M(0) : sum / static_cast<M>(win.divisor));
  }
}

// One thread per input element, summing grad_out / divisor over the windows that hold it, in the
// CPU's order.
template <class T>
__global__ void avg_pool2d_backward_kernel(T* gx, Strides4 gx_s, const T* gy, Strides4 gy_s, PoolGeometry g) {
  using M = opmath_t<T>;
  const int64_t total = g.n * g.c * g.h * g.w;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const Pos p = unravel(i, g.c, g.h, g.w);
    const Range rh = windows_holding(p.h, g.kernel[0], g.stride[0], g.padding[0], g.ho);
    const Range rw = windows_holding(p.w, g.kernel[1], g.stride[1], g.padding[1], g.wo);
    M acc = M(0);
    for (int64_t oh = rh.lo; oh < rh.hi; ++oh)
      for (int64_t ow = rw.lo; ow < rw.hi; ++ow) {
        const AvgWindow win = avg_window(oh, ow, g);
        if (p.h < win.h0 || p.h >= win.h1 || p.w < win.w0 || p.w >= win.w1) continue;
        acc += to_opmath(gy[offset_of(gy_s, p.n, p.c, oh, ow)]) / static_cast<M>(win.divisor);
      }
    gx[offset_of(gx_s, p.n, p.c, p.h, p.w)] = convert<T>(acc);
  }
}

// ---- adaptive average pooling -------------------------------------------------------------

// PyTorch's adaptive bins: [floor(i * in / out), ceil((i + 1) * in / out)).
__device__ inline int64_t bin_start(int64_t i, int64_t in, int64_t out) {
  return (i * in) / out;
}

__device__ inline int64_t bin_end(int64_t i, int64_t in, int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

template <class T>
__global__ void adaptive_avg_pool2d_kernel(T* out, Strides4 out_s, const T* x, Strides4 x_s, PoolGeometry g) {
  using M = opmath_t<T>;
  const int64_t total = g.n * g.c * g.ho * g.wo;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const Pos o = unravel(i, g.c, g.ho, g.wo);
    const int64_t h0 = bin_start(o.h, g.h, g.ho), h1 = bin_end(o.h, g.h, g.ho);
    const int64_t w0 = bin_start(o.w, g.w, g.wo), w1 = bin_end(o.w, g.w, g.wo);
    M sum = M(0);
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) sum += to_opmath(x[offset_of(x_s, o.n, o.c, h, w)]);
    out[offset_of(out_s, o.n, o.c, o.h, o.w)] = convert<T>(sum / static_cast<M>((h1 - h0) * (w1 - w0)));
  }
}

// One thread per input element. The bins holding row h are oh in [floor(h * Ho / H),
// floor(((h + 1) * Ho - 1) / H)]; each is checked against its bounds anyway.
template <class T>
__global__ void adaptive_avg_pool2d_backward_kernel(T* gx, Strides4 gx_s, const T* gy, Strides4 gy_s,
                                                    PoolGeometry g) {
  using M = opmath_t<T>;
  const int64_t total = g.n * g.c * g.h * g.w;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const Pos p = unravel(i, g.c, g.h, g.w);
    const int64_t oh_lo = p.h * g.ho / g.h, oh_hi = min64(((p.h + 1) * g.ho - 1) / g.h + 1, g.ho);
    const int64_t ow_lo = p.w * g.wo / g.w, ow_hi = min64(((p.w + 1) * g.wo - 1) / g.w + 1, g.wo);
    M acc = M(0);
    for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
      const int64_t h0 = bin_start(oh, g.h, g.ho), h1 = bin_end(oh, g.h, g.ho);
      if (p.h < h0 || p.h >= h1) continue;
      for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
        const int64_t w0 = bin_start(ow, g.w, g.wo), w1 = bin_end(ow, g.w, g.wo);
        if (p.w < w0 || p.w >= w1) continue;
        acc += to_opmath(gy[offset_of(gy_s, p.n, p.c, oh, ow)]) / static_cast<M>((h1 - h0) * (w1 - w0));
      }
    }
    gx[offset_of(gx_s, p.n, p.c, p.h, p.w)] = convert<T>(acc);
  }
}

}  // namespace

// ---- launchers -----------------------------------------------------------------------------

cudaError_t launch_conv2d(int dtype, void* out, Strides4 out_s, const void* x, Strides4 x_s, const void* w,
                          Strides4 w_s, const void* bias, int64_t bias_stride, const ConvGeometry& g,
                          cudaStream_t stream) {
  return visit_floating_code(dtype, [&](auto t) {
    using T = decltype(t);
    return launch<conv2d_kernel<T>>(grid_stride(g.n * g.cout * g.ho * g.wo, stream), static_cast<T*>(out),
                                    out_s, static_cast<const T*>(x), x_s, static_cast<const T*>(w), w_s,
                                    static_cast<const T*>(bias), bias_stride, g);
  });
}

cudaError_t launch_conv2d_backward_input(int dtype, void* grad_input, Strides4 gi_s, const void* grad_out,
                                         Strides4 go_s, const void* w, Strides4 w_s, const ConvGeometry& g,
                                         cudaStream_t stream) {
  return visit_floating_code(dtype, [&](auto t) {
    using T = decltype(t);
    return launch<conv2d_backward_input_kernel<T>>(
        grid_stride(g.n * g.cin * g.h * g.w, stream), static_cast<T*>(grad_input), gi_s,
        static_cast<const T*>(grad_out), go_s, static_cast<const T*>(w), w_s, g);
  });
}

cudaError_t launch_conv2d_backward_weight(int dtype, void* grad_weight, Strides4 gw_s, void* grad_bias,
                                          int64_t gb_stride, const void* grad_out, Strides4 go_s,
                                          const void* x, Strides4 x_s, const ConvGeometry& g,
                                          cudaStream_t stream) {
  const int64_t items = g.cout * (g.cin / g.groups) * g.kh * g.kw + (grad_bias != nullptr ? g.cout : 0);
  const int64_t positions = g.n * g.ho * g.wo;
  return visit_floating_code(dtype, [&](auto t) {
    using T = decltype(t);
    using M = opmath_t<T>;
    T* gw = static_cast<T*>(grad_weight);
    T* gb = static_cast<T*>(grad_bias);
    const T* gy = static_cast<const T*>(grad_out);
    const T* xp = static_cast<const T*>(x);
    // A block per weight pays off only for few weights over a long reduction; with thousands of
    // weights a thread each already fills the GPU (and the emulator runs it far faster).
    if (positions < kReduceBlock || items >= 2048)
      return launch<conv2d_backward_weight_kernel<T>>(grid_stride(items, stream), gw, gw_s, gb, gb_stride, gy,
                                                      go_s, xp, x_s, g, items);
    const unsigned blocks =
        static_cast<unsigned>(items < kMaxReduceBlocks ? (items < 1 ? 1 : items) : kMaxReduceBlocks);
    return launch<conv2d_backward_weight_block_kernel<T>>(
        {blocks, kReduceBlock, 32 * sizeof(M), stream, BlockThreads::kCooperative}, gw, gw_s, gb, gb_stride,
        gy, go_s, xp, x_s, g, items);
  });
}

cudaError_t launch_max_pool2d(int dtype, void* out, Strides4 out_s, int64_t* indices, Strides4 idx_s,
                              const void* x, Strides4 x_s, const PoolGeometry& g, cudaStream_t stream) {
  return visit_floating_code(dtype, [&](auto t) {
    using T = decltype(t);
    return launch<max_pool2d_kernel<T>>(grid_stride(g.n * g.c * g.ho * g.wo, stream), static_cast<T*>(out),
                                        out_s, indices, idx_s, static_cast<const T*>(x), x_s, g);
  });
}

cudaError_t launch_check_pool_indices(unsigned long long* bad, const int64_t* indices, Strides4 idx_s,
                                      const PoolGeometry& g, cudaStream_t stream) {
  return launch<check_pool_indices_kernel>(grid_stride(g.n * g.c * g.ho * g.wo, stream), bad, indices, idx_s,
                                           g);
}

cudaError_t launch_max_pool2d_backward(int dtype, void* grad_input, Strides4 gi_s, const void* grad_out,
                                       Strides4 go_s, const int64_t* indices, Strides4 idx_s,
                                       const PoolGeometry& g, cudaStream_t stream) {
  return visit_floating_code(dtype, [&](auto t) {
    using T = decltype(t);
    return launch<max_pool2d_backward_kernel<T>>(grid_stride(g.n * g.c * g.h * g.w, stream),
                                                 static_cast<T*>(grad_input), gi_s,
                                                 static_cast<const T*>(grad_out), go_s, indices, idx_s, g);
  });
}

cudaError_t launch_avg_pool2d(int dtype, void* out, Strides4 out_s, const void* x, Strides4 x_s,
                              const PoolGeometry& g, cudaStream_t stream) {
  return visit_floating_code(dtype, [&](auto t) {
    using T = decltype(t);
    return launch<avg_pool2d_kernel<T>>(grid_stride(g.n * g.c * g.ho * g.wo, stream), static_cast<T*>(out),
                                        out_s, static_cast<const T*>(x), x_s, g);
  });
}

cudaError_t launch_avg_pool2d_backward(int dtype, void* grad_input, Strides4 gi_s, const void* grad_out,
                                       Strides4 go_s, const PoolGeometry& g, cudaStream_t stream) {
  return visit_floating_code(dtype, [&](auto t) {
    using T = decltype(t);
    return launch<avg_pool2d_backward_kernel<T>>(grid_stride(g.n * g.c * g.h * g.w, stream),
                                                 static_cast<T*>(grad_input), gi_s,
                                                 static_cast<const T*>(grad_out), go_s, g);
  });
}

cudaError_t launch_adaptive_avg_pool2d(int dtype, void* out, Strides4 out_s, const void* x, Strides4 x_s,
                                       const PoolGeometry& g, cudaStream_t stream) {
  return visit_floating_code(dtype, [&](auto t) {
    using T = decltype(t);
    return launch<adaptive_avg_pool2d_kernel<T>>(grid_stride(g.n * g.c * g.ho * g.wo, stream),
                                                 static_cast<T*>(out), out_s, static_cast<const T*>(x), x_s,
                                                 g);
  });
}

cudaError_t launch_adaptive_avg_pool2d_backward(int dtype, void* grad_input, Strides4 gi_s,
                                                const void* grad_out, Strides4 go_s, const PoolGeometry& g,
                                                cudaStream_t stream) {
  return visit_floating_code(dtype, [&](auto t) {
    using T = decltype(t);
    return launch<adaptive_avg_pool2d_backward_kernel<T>>(grid_stride(g.n * g.c * g.h * g.w, stream),
                                                          static_cast<T*>(grad_input), gi_s,
                                                          static_cast<const T*>(grad_out), go_s, g);
  });
}

}  // namespace loom::cuda
