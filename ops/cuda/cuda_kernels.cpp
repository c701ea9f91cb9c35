/*
 * The C++ side of the CUDA copy and fill kernels, and the registration of every family: turns tensors into
 * the plain layouts of ops/cuda/launchers.h and moves bytes between host and device.
 *
 * Synchronisation: everything runs on the current stream (op_stream.h), which orders these
 * kernels and copies after all earlier work on the device. cudaMemcpy from or to pageable
 * host memory returns only when the transfer is complete, so the host buffer may be reused
 * (H2D) or read (D2H) right after it.
 */
#include "ops/cuda/cuda_kernels.h"

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_checks.h"
#include "ops/copy_ops.h"
#include "ops/cuda/launchers.h"
#include "ops/cuda/op_stream.h"
#include "ops/dispatch.h"

namespace loom::cuda {

void host_transfer(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, const char* op) {
  LOOM_CHECK(
      !current_stream_capturing(), op,
      ": a copy between host and CUDA memory during a CUDA graph capture; a graph "
      "cannot wait for the host. Copy new inputs into the graph's static tensors before replay(), and read "
      "results after it");
  LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, op_stream()));
  // Waits for the copy, and so for the work queued before it on this stream (what wrote a source).
  LOOM_CUDA_CHECK(cudaStreamSynchronize(op_stream()));
  report_failed_device_checks(op_stream());  // what the checks among that work found
}

namespace {

#define LOOM_CHECK_CODE(type, name, short_name) \
  static_assert(static_cast<int>(DType::name) == kCode##name, "DType and CUDA dtype codes disagree");
LOOM_FORALL_DTYPES(LOOM_CHECK_CODE)
#undef LOOM_CHECK_CODE

StridedLayout layout_of(const Tensor& dst, const Tensor* src) {
  LOOM_CHECK(dst.dim() <= kMaxDims, "CUDA copy: tensors with more than ", kMaxDims, " dims are not supported, got ",
             dst.dim());
  StridedLayout l;
  l.ndim = static_cast<int>(dst.dim());
  for (int d = 0; d < l.ndim; ++d) {
    l.sizes[d] = dst.sizes()[d];
    l.dst_strides[d] = dst.strides()[d];
    l.src_strides[d] = src ? src->strides()[d] : 0;
  }
  return l;
}

void device_copy(const Tensor& dst, const Tensor& src) {
  LOOM_CUDA_CHECK(launch_copy(dst.data_ptr(), static_cast<int>(dst.dtype()), src.data_ptr(),
                              static_cast<int>(src.dtype()), layout_of(dst, &src), dst.numel(), op_stream()));
}

void copy_kernel(const Tensor& dst, const Tensor& src) {
  if (dst.is_cuda() && src.is_cuda()) {
    device_copy(dst, src);
  } else if (dst.is_cuda()) {
    // Host to device: convert and pack on the host, one transfer, then scatter on the device
    // if dst is strided.
    Tensor packed = contiguous(to(src, dst.dtype()));
    Tensor staging = dst.is_contiguous() ? dst : empty(dst.sizes(), dst.options());
    host_transfer(staging.data_ptr(), packed.data_ptr(), packed.nbytes(), cudaMemcpyHostToDevice,
                  "copy to CUDA");
    if (!staging.is_same(dst)) device_copy(dst, staging);
  } else {
    // Device to host: pack on the device, one transfer, then convert/scatter on the host.
    Tensor packed = src;
    if (!src.is_contiguous()) {
      packed = empty(src.sizes(), src.options());
      device_copy(packed, src);
    }
    Tensor host = empty(src.sizes(), src.options().device(kCPU));
    host_transfer(host.data_ptr(), packed.data_ptr(), packed.nbytes(), cudaMemcpyDeviceToHost,
                  "copy from CUDA");
    copy_(dst, host);
  }
}

void fill_kernel(const Tensor& dst, Scalar value) {
  LOOM_CUDA_CHECK(launch_fill(dst.data_ptr(), static_cast<int>(dst.dtype()), layout_of(dst, nullptr),
                              dst.numel(), value.to_double(), value.to_int(), op_stream()));
}

}  // namespace

void register_copy_cuda_kernels() {
  register_kernel<Op::copy>(DeviceType::CUDA, copy_kernel);
  register_kernel<Op::fill>(DeviceType::CUDA, fill_kernel);
}

void register_cuda_kernels() {
  register_copy_cuda_kernels();
  register_elementwise_cuda_kernels();
  register_reduction_cuda_kernels();
  register_nn_cuda_kernels();
  register_linalg_cuda_kernels();
  register_conv_pool_cuda_kernels();
  register_shape_cuda_kernels();
  register_amp_cuda_kernels();
  register_optim_cuda_kernels();
  register_attention_cuda_kernels();
  register_sort_cuda_kernels();
  register_int8_cuda_kernels();
}

}  // namespace loom::cuda
