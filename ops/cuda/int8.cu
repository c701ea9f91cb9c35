/*
 * CUDA kernels around the INT8 GEMM of int8_linear (the GEMM itself is cuBLASLt's IMMA path,
 * called from int8_kernels.cpp), and the other INT8 inference ops: im2col of uint8 images, max
 * pooling of integers, per-tensor quantize and dequantize. All are elementwise grid-stride
 * loops (independent threads). Their arithmetic is ops/int8_math.h's, shared with the CPU
 * kernels (ops/cpu/int8_kernels.cpp), so both backends round alike. (ops/int8_math.h is plain
 * C++17 over core/host_device.h, which this file may include.)
 */
#include <cstdint>

#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/int8_launchers.h"
#include "ops/cuda/launch.cuh"
#include "ops/int8_math.h"

namespace loom::cuda {

// ---- kernels -------------------------------------------------------------------------------

namespace {

#define LOOM_GRID_STRIDE_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{gridDim.x} * blockDim.x)

template <class Src>
__global__ void shift_pad_kernel(int8_t* dst, int64_t rows, int64_t dst_cols, const Src* src, int64_t src_cols,
                                 int shift) {
  LOOM_GRID_STRIDE_LOOP(i, rows * dst_cols) {
    const int64_t r = i / dst_cols, c = i % dst_cols;
    // uint8 v - 128 and int8 v + 0 both fit int8: the shift never wraps for the codes used.
    dst[i] = c < src_cols ? static_cast<int8_t>(static_cast<int>(src[r * src_cols + c]) + shift) : int8_t{0};
  }
}

__global__ void row_sums_kernel(int32_t* row_sums, const int8_t* w, int64_t rows, int64_t cols) {
  LOOM_GRID_STRIDE_LOOP(r, rows) {
    int32_t sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += w[r * cols + c];
    row_sums[r] = sum;
  }
}

template <class Out>
__device__ inline Out requantized(float f, int32_t zero_point);
template <>
__device__ inline float requantized<float>(float f, int32_t) {
  return f;
}
template <>
__device__ inline uint8_t requantized<uint8_t>(float f, int32_t zero_point) {
  return static_cast<uint8_t>(int8_round_clamp(f, zero_point, 0, 255));
}
template <>
__device__ inline int8_t requantized<int8_t>(float f, int32_t zero_point) {
  return static_cast<int8_t>(int8_round_clamp(f, zero_point, -128, 127));
}

template <class Out>
__global__ void requantize_kernel(Int8RequantArgs a) {
  Out* out = static_cast<Out*>(a.out);
  LOOM_GRID_STRIDE_LOOP(i, a.rows * a.cols) {
    const int64_t r = i / a.cols, c = i % a.cols;
    const int32_t acc = a.acc[r * a.acc_ld + c] + a.correction_factor * a.row_sums[c];
    const float f = int8_dequantized_sum(acc, a.bias ? a.bias[c] : 0.0f, a.scales[a.per_channel_scales ? c : 0], a.relu);
    out[i] = requantized<Out>(f, a.output_zero_point);
  }
}

__global__ void im2col_kernel(uint8_t* out, int64_t out_h, int64_t out_w, const uint8_t* x, Int8Image im,
                              Int8Window win, uint8_t pad_value) {
  const int64_t window = win.kernel[0] * win.kernel[1];
  const int64_t cols = im.sizes[1] * window, rows = im.sizes[0] * out_h * out_w;
  LOOM_GRID_STRIDE_LOOP(i, rows * cols) {
    const int64_t row = i / cols, col = i % cols;
    const int64_t b = row / (out_h * out_w), oy = row / out_w % out_h, ox = row % out_w;
    const int64_t c = col / window, ky = col / win.kernel[1] % win.kernel[0], kx = col % win.kernel[1];
    const int64_t iy = oy * win.stride[0] - win.padding[0] + ky * win.dilation[0];
    const int64_t ix = ox * win.stride[1] - win.padding[1] + kx * win.dilation[1];
    const bool inside = iy >= 0 && iy < im.sizes[2] && ix >= 0 && ix < im.sizes[3];
    out[i] = inside ? x[b * im.strides[0] + c * im.strides[1] + iy * im.strides[2] + ix * im.strides[3]] : pad_value;
  }
}

template <class Q>
__global__ void max_pool_kernel(Q* out, Int8Image o, const Q* x, Int8Image im, Int8Window win) {
  const int64_t n = o.sizes[0] * o.sizes[1] * o.sizes[2] * o.sizes[3];
  LOOM_GRID_STRIDE_LOOP(i, n) {
    const int64_t ox = i % o.sizes[3], oy = i / o.sizes[3] % o.sizes[2], c = i / (o.sizes[2] * o.sizes[3]) % o.sizes[1];
    const int64_t b = i / (o.sizes[1] * o.sizes[2] * o.sizes[3]);
    const Q* plane = x + b * im.strides[0] + c * im.strides[1];
    Q best = static_cast<Q>(static_cast<Q>(-1) < 0 ? -128 : 0);  // the dtype's minimum
    for (int64_t ky = 0; ky < win.kernel[0]; ++ky)
      for (int64_t kx = 0; kx < win.kernel[1]; ++kx) {
        const int64_t iy = oy * win.stride[0] - win.padding[0] + ky, ix = ox * win.stride[1] - win.padding[1] + kx;
        if (iy < 0 || iy >= im.sizes[2] || ix < 0 || ix >= im.sizes[3]) continue;
        const Q v = plane[iy * im.strides[2] + ix * im.strides[3]];
        best = v > best ? v : best;
      }
    out[b * o.strides[0] + c * o.strides[1] + oy * o.strides[2] + ox * o.strides[3]] = best;
  }
}

template <class Q>
__global__ void quantize_kernel(Q* dst, const float* src, StridedLayout l, int64_t numel, float inv_scale,
                                int32_t zero_point, int32_t lo, int32_t hi) {
  LOOM_GRID_STRIDE_LOOP(i, numel) {
    const float v = src[strided_offset(i, l.ndim, l.sizes, l.src_strides)];
    dst[strided_offset(i, l.ndim, l.sizes, l.dst_strides)] = static_cast<Q>(int8_quantize(v, inv_scale, zero_point, lo, hi));
  }
}

template <class Q>
__global__ void dequantize_kernel(float* dst, const Q* src, StridedLayout l, int64_t numel, float scale,
                                  int32_t zero_point) {
  LOOM_GRID_STRIDE_LOOP(i, numel) {
    const int32_t q = src[strided_offset(i, l.ndim, l.sizes, l.src_strides)];
    dst[strided_offset(i, l.ndim, l.sizes, l.dst_strides)] = int8_fmul(static_cast<float>(q - zero_point), scale);
  }
}

#undef LOOM_GRID_STRIDE_LOOP

}  // namespace

// ---- launchers -----------------------------------------------------------------------------

cudaError_t launch_int8_shift_pad(int8_t* dst, int64_t rows, int64_t dst_cols, const void* src, int src_dtype,
                                  int64_t src_cols, int shift, cudaStream_t stream) {
  if (rows * dst_cols == 0) return cudaSuccess;
  const LaunchConfig config = grid_stride(rows * dst_cols, stream);
  if (src_dtype == kCodeUInt8)
    return launch<shift_pad_kernel<uint8_t>>(config, dst, rows, dst_cols, static_cast<const uint8_t*>(src), src_cols,
                                             shift);
  if (src_dtype == kCodeInt8)
    return launch<shift_pad_kernel<int8_t>>(config, dst, rows, dst_cols, static_cast<const int8_t*>(src), src_cols,
                                            shift);
  return cudaErrorInvalidValue;
}

cudaError_t launch_int8_row_sums(int32_t* row_sums, const int8_t* w, int64_t rows, int64_t cols,
                                 cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  return launch<row_sums_kernel>(grid_stride(rows, stream), row_sums, w, rows, cols);
}

cudaError_t launch_int8_requantize(const Int8RequantArgs& args, cudaStream_t stream) {
  if (args.rows * args.cols == 0) return cudaSuccess;
  const LaunchConfig config = grid_stride(args.rows * args.cols, stream);
  switch (args.out_dtype) {
    case kCodeFloat32:
      return launch<requantize_kernel<float>>(config, args);
    case kCodeUInt8:
      return launch<requantize_kernel<uint8_t>>(config, args);
    case kCodeInt8:
      return launch<requantize_kernel<int8_t>>(config, args);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t launch_int8_im2col(uint8_t* out, int64_t out_h, int64_t out_w, const uint8_t* x, const Int8Image& image,
                               const Int8Window& window, uint8_t pad_value, cudaStream_t stream) {
  const int64_t n = image.sizes[0] * out_h * out_w * image.sizes[1] * window.kernel[0] * window.kernel[1];
  if (n == 0) return cudaSuccess;
  return launch<im2col_kernel>(grid_stride(n, stream), out, out_h, out_w, x, image, window, pad_value);
}

cudaError_t launch_int8_max_pool2d(void* out, const Int8Image& out_image, const void* x, const Int8Image& image,
                                   int dtype, const Int8Window& window, cudaStream_t stream) {
  const int64_t n = out_image.sizes[0] * out_image.sizes[1] * out_image.sizes[2] * out_image.sizes[3];
  if (n == 0) return cudaSuccess;
  const LaunchConfig config = grid_stride(n, stream);
  if (dtype == kCodeUInt8)
    return launch<max_pool_kernel<uint8_t>>(config, static_cast<uint8_t*>(out), out_image,
                                            static_cast<const uint8_t*>(x), image, window);
  if (dtype == kCodeInt8)
    return launch<max_pool_kernel<int8_t>>(config, static_cast<int8_t*>(out), out_image,
                                           static_cast<const int8_t*>(x), image, window);
  return cudaErrorInvalidValue;
}

cudaError_t launch_quantize_per_tensor(void* dst, int dst_dtype, const float* src, const StridedLayout& layout,
                                       int64_t numel, float scale, int32_t zero_point, cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  const LaunchConfig config = grid_stride(numel, stream);
  const float inv = 1.0f / scale;  // on the host, as the CPU kernel: one rounding, the same bits
  if (dst_dtype == kCodeUInt8)
    return launch<quantize_kernel<uint8_t>>(config, static_cast<uint8_t*>(dst), src, layout, numel, inv, zero_point,
                                            0, 255);
  if (dst_dtype == kCodeInt8)
    return launch<quantize_kernel<int8_t>>(config, static_cast<int8_t*>(dst), src, layout, numel, inv, zero_point,
                                           -128, 127);
  return cudaErrorInvalidValue;
}

cudaError_t launch_dequantize_per_tensor(float* dst, const void* src, int src_dtype, const StridedLayout& layout,
                                         int64_t numel, float scale, int32_t zero_point, cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  const LaunchConfig config = grid_stride(numel, stream);
  if (src_dtype == kCodeUInt8)
    return launch<dequantize_kernel<uint8_t>>(config, dst, static_cast<const uint8_t*>(src), layout, numel, scale,
                                              zero_point);
  if (src_dtype == kCodeInt8)
    return launch<dequantize_kernel<int8_t>>(config, dst, static_cast<const int8_t*>(src), layout, numel, scale,
                                             zero_point);
  return cudaErrorInvalidValue;
}

}  // namespace loom::cuda
