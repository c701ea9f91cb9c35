/*
 * The cuDNN convolution of cudnn_conv.h, through the graph (backend) API:
 *
 *   tensors x (uid 1), w (uid 2), y (uid 3) --> CONVOLUTION (cross-correlation, float compute) -->
 *   OPERATION_CONVOLUTION_{FORWARD, BACKWARD_DATA, BACKWARD_FILTER} --> the plan of
 *   cudnn_graph.h, cached per problem; per call: cudnn_execute.
 *
 * One mutex (cudnn_handle.h) guards the handles, the plan cache and each execution
 * (cudnn_run_cached).
 */
#include "ops/cuda/cudnn_conv.h"

#include <array>
#include <atomic>
#include <vector>

#include "ops/cuda/cudnn_graph.h"
#include "ops/linalg.h"

namespace loom::cuda {

namespace {

std::atomic<bool> enabled{true};

constexpr int64_t kUidX = 1, kUidW = 2, kUidY = 3;

// An operand as cuDNN sees it: NCHW sizes, element strides with size-1 dims given the stride of
// the packed layout (cuDNN's engines match layouts by strides), and the pointer's alignment.
struct Operand {
  std::array<int64_t, 4> sizes{}, strides{};
  int64_t alignment = 0;
};

using Order = CudnnOrder;

// t as cuDNN sees it when t is dense in NCHW or NHWC order, preferring `preferred` where both
// fit (a tensor with one channel, or one pixel, is both), so that all operands of a convolution
// show cuDNN one layout; false when t is dense in neither.
bool packed_operand(const Tensor& t, Order preferred, Operand& o) {
  if (t.dim() != 4 || t.numel() == 0) return false;
  for (int d = 0; d < 4; ++d) o.sizes[static_cast<size_t>(d)] = t.size(d);
  const Order other = preferred == Order::kNCHW ? Order::kNHWC : Order::kNCHW;
  if (!cudnn_packed_as(t, preferred, o.strides) && !cudnn_packed_as(t, other, o.strides)) return false;
  o.alignment = cudnn_alignment(t.data_ptr());
  return true;
}

cudnnBackendDescriptor_t make_tensor(CudnnDescriptors& owner, const Operand& o, int64_t uid,
                                     cudnnDataType_t type) {
  CudnnTensorSpec spec;
  spec.sizes.assign(o.sizes.begin(), o.sizes.end());
  spec.strides.assign(o.strides.begin(), o.strides.end());
  spec.alignment = o.alignment;
  spec.type = type;
  return cudnn_tensor(owner, spec, uid);
}

cudnnBackendDescriptor_t make_convolution(CudnnDescriptors& owner, const Conv2dParams& p,
                                          cudnnDataType_t compute) {
  cudnnBackendDescriptor_t c = owner.create(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const int64_t spatial = 2;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;  // what deep learning calls convolution
  cudnn_set(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  cudnn_set(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  cudnn_set(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial);
  cudnn_set(c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, p.dilation.data());
  cudnn_set(c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, p.stride.data());
  cudnn_set(c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, p.padding.data());
  cudnn_set(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, p.padding.data());
  LOOM_CUDNN_CHECK(cudnnBackendFinalize(c));
  return c;
}

struct OpNames {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t alpha, beta, conv, x, w, y;
};

OpNames op_names(CudnnConvKind kind) {
  switch (kind) {
    case CudnnConvKind::kForward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y};
    case CudnnConvKind::kBackwardData:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY};
    case CudnnConvKind::kBackwardFilter:
      break;
  }
  return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY};
}

// Builds the graph of one convolution and finalizes the first acceptable plan.
CudnnPlan make_plan(cudnnHandle_t handle, CudnnConvKind kind, const Operand& x, const Operand& w,
                    const Operand& y, const Conv2dParams& p, DType dtype, bool accumulate) {
  CudnnDescriptors owner;
  cudnnDataType_t type{};
  cudnn_type(dtype, type);
  const bool f64 = dtype == DType::Float64;
  const cudnnDataType_t compute = f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const OpNames names = op_names(kind);

  cudnnBackendDescriptor_t tx = make_tensor(owner, x, kUidX, type), tw = make_tensor(owner, w, kUidW, type),
                           ty = make_tensor(owner, y, kUidY, type);
  cudnnBackendDescriptor_t conv = make_convolution(owner, p, compute);
  cudnnBackendDescriptor_t op = owner.create(names.type);
  const double alpha_d = 1.0, beta_d = accumulate ? 1.0 : 0.0;
  const float alpha_f = 1.0f, beta_f = accumulate ? 1.0f : 0.0f;
  const cudnnBackendAttributeType_t scale_type = f64 ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT;
  cudnn_set(op, names.alpha, scale_type, 1, f64 ? static_cast<const void*>(&alpha_d) : &alpha_f);
  cudnn_set(op, names.beta, scale_type, 1, f64 ? static_cast<const void*>(&beta_d) : &beta_f);
  cudnn_set(op, names.conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
  cudnn_set(op, names.x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx);
  cudnn_set(op, names.w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw);
  cudnn_set(op, names.y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty);
  if (!cudnn_finalize_op(op, "cudnnBackendFinalize(convolution operation)")) return {};
  return cudnn_plan_for(handle, owner, op, dtype == DType::Float32 && !allow_tf32());
}

}  // namespace

void set_cudnn_enabled(bool on) {
  enabled.store(on);
}
bool cudnn_enabled() {
  return enabled.load();
}

bool cudnn_convolution(CudnnConvKind kind, const Tensor& x, const Tensor& w, const Tensor& y,
                       const Conv2dParams& p, bool accumulate, cudaStream_t stream) {
  cudnnDataType_t type{};
  if (!cudnn_type(x.dtype(), type) || w.dtype() != x.dtype() || y.dtype() != x.dtype()) return false;
  Operand ox, ow, oy;
  // The activations' layout decides: NHWC when x is NHWC and not also NCHW.
  if (x.dim() != 4) return false;
  std::array<int64_t, 4> unused{};
  const Order order = cudnn_packed_as(x, Order::kNCHW, unused) ? Order::kNCHW : Order::kNHWC;
  if (!packed_operand(x, order, ox) || !packed_operand(w, order, ow) || !packed_operand(y, order, oy))
    return false;
  // Which wrapper (0: convolution), then everything the plan depends on.
  std::vector<int64_t> problem{0,
                               static_cast<int>(kind),
                               static_cast<int>(x.dtype()),
                               accumulate,
                               x.dtype() == DType::Float32 && allow_tf32(),
                               p.groups};
  for (const Operand* o : {&ox, &ow, &oy}) {
    problem.insert(problem.end(), o->sizes.begin(), o->sizes.end());
    problem.insert(problem.end(), o->strides.begin(), o->strides.end());
    problem.push_back(o->alignment);
  }
  for (const auto* a : {&p.stride, &p.padding, &p.dilation})
    problem.insert(problem.end(), a->begin(), a->end());
  return cudnn_run_cached(
      problem,
      [&](cudnnHandle_t handle) { return make_plan(handle, kind, ox, ow, oy, p, x.dtype(), accumulate); },
      {kUidX, kUidW, kUidY}, {x.data_ptr(), w.data_ptr(), y.data_ptr()}, stream);
}

}  // namespace loom::cuda
