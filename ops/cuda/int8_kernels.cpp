/*
 * CUDA glue of the INT8 inference ops (ops/int8_ops.h): int8_linear's GEMM through cuBLASLt's
 * INT8 kernels (ops/cuda/blas_lt.h), the rest through ops/cuda/int8.cu.
 *
 * int8_linear. cuBLASLt multiplies int8 by int8 (IMMA); the activations are uint8 with a zero
 * point. Shifting them by -128 makes them int8 exactly (x - 128 is in [-128, 127]), and
 *   sum_k (x - zp) w = sum_k (x - 128) w + (128 - zp) sum_k w,
 * so the GEMM of the shifted input plus (128 - zp) times the weight's row sums is the exact
 * int32 sum the CPU computes; the requantize kernel adds that correction and then applies the
 * epilogue. In cuBLASLt's column-major terms the product is the "TN" GEMM D = A^T B with
 * A = W [O, K] row-major (a K x O column-major matrix), B = x [M, K] row-major (K x M) and
 * D = [M, O] row-major (O x M): m = O, n = M, k = K. cuBLASLt asks for m, k and the leading
 * dimensions to be multiples of 4, so K and O are padded to multiples of 4 with zeros (which
 * add nothing to the sums) when they are not. Every launch and the GEMM run in order on the
 * legacy default stream; the temporaries go back to the caching allocator for reuse by later
 * work on that stream.
 */
#include "core/cuda/cuda_check.h"
#include "ops/cuda/blas_lt.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/int8_launchers.h"
#include "ops/cuda/op_stream.h"
#include "ops/dispatch.h"

namespace loom::cuda {

namespace {

int64_t round_up4(int64_t v) { return (v + 3) / 4 * 4; }

Tensor device_empty(IntArrayRef sizes, DType dtype) { return empty(sizes, TensorOptions(dtype).device(Device::cuda())); }

void int8_linear_kernel(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& scales,
                        const Tensor& bias, const Int8Epilogue& e) {
  const int64_t m = x.size(0), k = x.size(1), o = w.size(0);
  const int64_t kp = round_up4(k), op = round_up4(o);
  Tensor xs = device_empty({m, kp}, kInt8);
  LOOM_CUDA_CHECK(
      launch_int8_shift_pad(xs.data_ptr<int8_t>(), m, kp, x.data_ptr(), kCodeUInt8, k, -128, op_stream()));
  Tensor wp = w;
  if (kp != k || op != o || reinterpret_cast<uintptr_t>(w.data_ptr()) % 4 != 0) {
    wp = device_empty({op, kp}, kInt8);
    LOOM_CUDA_CHECK(
        launch_int8_shift_pad(wp.data_ptr<int8_t>(), o, kp, w.data_ptr(), kCodeInt8, k, 0, op_stream()));
    // The padded rows o..op: the shift-pad above wrote only the first o rows.
    if (op != o)
      LOOM_CUDA_CHECK(cudaMemsetAsync(wp.data_ptr<int8_t>() + o * kp, 0, static_cast<size_t>((op - o) * kp),
                                      op_stream()));
  }
  Tensor row_sums = device_empty({o}, kInt32);
  LOOM_CUDA_CHECK(
      launch_int8_row_sums(row_sums.data_ptr<int32_t>(), w.data_ptr<int8_t>(), o, k, op_stream()));
  Tensor acc = device_empty({m, op}, kInt32);
  lt_matmul_int8(LtInt8Gemm{.m = op, .n = m, .k = kp, .a = wp.data_ptr<int8_t>(), .lda = kp,
                            .b = xs.data_ptr<int8_t>(), .ldb = kp, .d = acc.data_ptr<int32_t>(), .ldd = op});
  Int8RequantArgs args;
  args.out = out.data_ptr();
  args.out_dtype = static_cast<int>(out.dtype());
  args.acc = acc.data_ptr<int32_t>();
  args.acc_ld = op;
  args.row_sums = row_sums.data_ptr<int32_t>();
  args.correction_factor = 128 - e.input_zero_point;
  args.bias = bias.defined() ? bias.data_ptr<float>() : nullptr;
  args.scales = scales.data_ptr<float>();
  args.per_channel_scales = scales.numel() > 1;
  args.rows = m;
  args.cols = o;
  args.output_zero_point = e.output_zero_point;
  args.relu = e.relu;
  LOOM_CUDA_CHECK(launch_int8_requantize(args, op_stream()));
}

Int8Image image_of(const Tensor& t) {
  Int8Image im;
  for (int d = 0; d < 4; ++d) {
    im.sizes[d] = t.size(d);
    im.strides[d] = t.stride(d);
  }
  return im;
}

Int8Window window_of(std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                     std::array<int64_t, 2> dilation) {
  Int8Window win;
  for (int d = 0; d < 2; ++d) {
    win.kernel[d] = kernel[d];
    win.stride[d] = stride[d];
    win.padding[d] = padding[d];
    win.dilation[d] = dilation[d];
  }
  return win;
}

void int8_im2col_kernel(const Tensor& out, const Tensor& x, std::array<int64_t, 2> kernel, const Conv2dParams& p,
                        int32_t pad_value) {
  const int64_t out_h = (x.size(2) + 2 * p.padding[0] - p.dilation[0] * (kernel[0] - 1) - 1) / p.stride[0] + 1;
  const int64_t out_w = (x.size(3) + 2 * p.padding[1] - p.dilation[1] * (kernel[1] - 1) - 1) / p.stride[1] + 1;
  LOOM_CUDA_CHECK(launch_int8_im2col(out.data_ptr<uint8_t>(), out_h, out_w, x.data_ptr<uint8_t>(),
                                     image_of(x), window_of(kernel, p.stride, p.padding, p.dilation),
                                     static_cast<uint8_t>(pad_value), op_stream()));
}

void int8_max_pool2d_kernel(const Tensor& out, const Tensor&, const Tensor& x, const Pool2dParams& p) {
  LOOM_CUDA_CHECK(launch_int8_max_pool2d(out.data_ptr(), image_of(out), x.data_ptr(), image_of(x),
                                         static_cast<int>(x.dtype()),
                                         window_of(p.kernel, p.stride, p.padding, {1, 1}), op_stream()));
}

StridedLayout pair_layout(const Tensor& dst, const Tensor& src) {
  LOOM_CHECK(dst.dim() <= kMaxDims, "CUDA (de)quantize: tensors with more than ", kMaxDims,
             " dims are not supported, got ", dst.dim());
  StridedLayout l;
  l.ndim = static_cast<int>(dst.dim());
  for (int d = 0; d < l.ndim; ++d) {
    l.sizes[d] = dst.size(d);
    l.dst_strides[d] = dst.stride(d);
    l.src_strides[d] = src.stride(d);
  }
  return l;
}

void quantize_kernel(const Tensor& out, const Tensor& in, float scale, int32_t zero_point) {
  LOOM_CUDA_CHECK(launch_quantize_per_tensor(out.data_ptr(), static_cast<int>(out.dtype()),
                                             in.data_ptr<float>(), pair_layout(out, in), out.numel(), scale,
                                             zero_point, op_stream()));
}

void dequantize_kernel(const Tensor& out, const Tensor& in, float scale, int32_t zero_point) {
  LOOM_CUDA_CHECK(launch_dequantize_per_tensor(out.data_ptr<float>(), in.data_ptr(),
                                               static_cast<int>(in.dtype()), pair_layout(out, in),
                                               out.numel(), scale, zero_point, op_stream()));
}

}  // namespace

void register_int8_cuda_kernels() {
  register_kernel<Op::int8_linear>(DeviceType::CUDA, int8_linear_kernel);
  register_kernel<Op::int8_im2col>(DeviceType::CUDA, int8_im2col_kernel);
  register_kernel<Op::int8_max_pool2d>(DeviceType::CUDA, int8_max_pool2d_kernel);
  register_kernel<Op::quantize_per_tensor>(DeviceType::CUDA, quantize_kernel);
  register_kernel<Op::dequantize_per_tensor>(DeviceType::CUDA, dequantize_kernel);
}

}  // namespace loom::cuda
