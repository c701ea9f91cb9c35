/*
 * Emulated cuDNN: the handle, the status strings, the reference engine and cudnnBackendExecute
 * (see cudnn_graph.h; the descriptors are in cudnn_descriptors.cpp).
 *
 * The engine is a direct convolution written from the definitions, for 2-D convolutions in any
 * layout: every operand is read and written through its descriptor's strides, so NCHW, NHWC and
 * any other strides give the same numbers. With groups G = C / (the filter's C), output channel
 * k sees input channels [g * C/G, (g + 1) * C/G) for g = k / (K/G). Input pixel (oh * stride -
 * pre_padding + r * dilation) meets filter tap r (R - 1 - r for CUDNN_CONVOLUTION, which flips the
 * filter; Loom asks for CUDNN_CROSS_CORRELATION, as PyTorch does). Every output element is summed
 * in the compute type (float, or double for DOUBLE), in a fixed order, into the workspace; then
 * out = alpha * sum + beta * out (the prior output, read only when beta is not 0) is rounded once
 * to the output's type. Backward data and backward filter are the same sums taken over the other
 * indices.
 *
 * cudnnBackendExecute rejects, with cuDNN's status: a null handle, plan or variant pack
 * (CUDNN_STATUS_BAD_PARAM_NULL_POINTER), a plan or pack not finalized
 * (CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED), a tensor of the plan without a pointer in the pack
 * (CUDNN_STATUS_BAD_PARAM) or with a null one, a missing workspace the plan needs
 * (CUDNN_STATUS_BAD_PARAM_NULL_POINTER), a pointer below its tensor's byte alignment
 * (CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER), and a workspace smaller than the plan's
 * (CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT; a GPU would read past it). A tensor pointer that is
 * not device memory is a loom::Error naming cudaErrorIllegalAddress, as a GPU would fault.
 */
#include <cudnn_graph.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

#include "core/cuda/emulated/cudnn_descriptors.h"
#include "core/cuda/emulated/device_memory.h"
#include "core/cuda/emulated/device_work.h"
#include "core/cuda/emulated/element_io.h"
#include "core/error.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;
};

namespace loom_emu::cudnn {

namespace {

thread_local std::string last_error;

const TensorDesc& output_of(const ConvOp& op) {
  return op.kind == ConvKind::kForward ? op.y : op.kind == ConvKind::kBackwardData ? op.x : op.w;
}

// A 4-D operand: base pointer, element type and strides, read or written by (n, c, h, w).
struct Operand {
  void* p;
  cudaDataType type;
  int64_t s[4];
  Operand(void* ptr, const TensorDesc& t) : p(ptr), type(element_type(t.data_type)) {
    for (int i = 0; i < 4; ++i) s[i] = t.strides[static_cast<size_t>(i)];
  }
  int64_t at(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return a * s[0] + b * s[1] + c * s[2] + d * s[3];
  }
  double load(int64_t i) const { return loom_emu::load(type, p, i); }
};

// The sums of the three convolutions into acc (one value per output element, in the output's
// [n, c, h, w] row-major order), in the accumulator type Acc.
template <class Acc>
void convolve(const ConvOp& op, const Operand& x, const Operand& w, const Operand& y, Acc* acc) {
  const int64_t N = op.x.dims[0], C = op.x.dims[1], H = op.x.dims[2], W = op.x.dims[3];
  const int64_t K = op.w.dims[0], Cg = op.w.dims[1], R = op.w.dims[2], S = op.w.dims[3];
  const int64_t P = op.y.dims[2], Q = op.y.dims[3], Kg = K / op.groups;
  const int64_t sh = op.conv.strides[0], sw = op.conv.strides[1], ph = op.conv.pre_paddings[0],
                pw = op.conv.pre_paddings[1], dh = op.conv.dilations[0], dw = op.conv.dilations[1];
  const bool flip = op.conv.mode == CUDNN_CONVOLUTION;
  auto tap_r = [&](int64_t r) { return flip ? R - 1 - r : r; };
  auto tap_s = [&](int64_t s) { return flip ? S - 1 - s : s; };
  auto product = [](double a, double b) { return static_cast<Acc>(a) * static_cast<Acc>(b); };
  int64_t i = 0;
  switch (op.kind) {
    case ConvKind::kForward:
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k)
          for (int64_t oh = 0; oh < P; ++oh)
            for (int64_t ow = 0; ow < Q; ++ow, ++i) {
              Acc sum = 0;
              const int64_t c0 = k / Kg * Cg;
              for (int64_t c = 0; c < Cg; ++c)
                for (int64_t r = 0; r < R; ++r) {
                  const int64_t ih = oh * sh - ph + r * dh;
                  if (ih < 0 || ih >= H) continue;
                  for (int64_t s = 0; s < S; ++s) {
                    const int64_t iw = ow * sw - pw + s * dw;
                    if (iw < 0 || iw >= W) continue;
                    sum += product(x.load(x.at(n, c0 + c, ih, iw)), w.load(w.at(k, c, tap_r(r), tap_s(s))));
                  }
                }
              acc[i] = sum;
            }
      break;
    case ConvKind::kBackwardData:
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t ih = 0; ih < H; ++ih)
            for (int64_t iw = 0; iw < W; ++iw, ++i) {
              Acc sum = 0;
              const int64_t k0 = c / Cg * Kg;
              for (int64_t k = k0; k < k0 + Kg; ++k)
                for (int64_t r = 0; r < R; ++r) {
                  const int64_t th = ih + ph - r * dh;
                  if (th < 0 || th % sh != 0 || th / sh >= P) continue;
                  for (int64_t s = 0; s < S; ++s) {
                    const int64_t tw = iw + pw - s * dw;
                    if (tw < 0 || tw % sw != 0 || tw / sw >= Q) continue;
                    sum += product(y.load(y.at(n, k, th / sh, tw / sw)),
                                   w.load(w.at(k, c % Cg, tap_r(r), tap_s(s))));
                  }
                }
              acc[i] = sum;
            }
      break;
    case ConvKind::kBackwardFilter:
      for (int64_t k = 0; k < K; ++k)
        for (int64_t c = 0; c < Cg; ++c)
          for (int64_t rr = 0; rr < R; ++rr)
            for (int64_t ss = 0; ss < S; ++ss, ++i) {
              Acc sum = 0;
              const int64_t r = tap_r(rr), s = tap_s(ss), cx = k / Kg * Cg + c;
              for (int64_t n = 0; n < N; ++n)
                for (int64_t oh = 0; oh < P; ++oh) {
                  const int64_t ih = oh * sh - ph + r * dh;
                  if (ih < 0 || ih >= H) continue;
                  for (int64_t ow = 0; ow < Q; ++ow) {
                    const int64_t iw = ow * sw - pw + s * dw;
                    if (iw < 0 || iw >= W) continue;
                    sum += product(y.load(y.at(n, k, oh, ow)), x.load(x.at(n, cx, ih, iw)));
                  }
                }
              acc[i] = sum;
            }
      break;
  }
}

// out = alpha * acc + beta * out, rounded once to out's type; acc is in out's [n, c, h, w] order.
template <class Acc>
void blend(const ConvOp& op, const Operand& out, const TensorDesc& t, const Acc* acc) {
  const auto alpha = static_cast<Acc>(op.alpha), beta = static_cast<Acc>(op.beta);
  int64_t i = 0;
  for (int64_t a = 0; a < t.dims[0]; ++a)
    for (int64_t b = 0; b < t.dims[1]; ++b)
      for (int64_t c = 0; c < t.dims[2]; ++c)
        for (int64_t d = 0; d < t.dims[3]; ++d, ++i) {
          const int64_t at = out.at(a, b, c, d);
          Acc v = alpha * acc[i];
          if (op.beta != 0) v += beta * static_cast<Acc>(out.load(at));
          loom_emu::store(out.type, out.p, at, static_cast<double>(v));
        }
}

bool double_compute(const ConvOp& op) {
  return op.conv.comp_type == CUDNN_DATA_DOUBLE;
}

void check_device(const char* what, const void* p, int64_t bytes) {
  if (bytes > 0 && !loom_emu::is_device_range(p, static_cast<size_t>(bytes)))
    LOOM_FAIL("cudaErrorIllegalAddress: cudnnBackendExecute: ", what, " (", p, ", ", bytes,
              " bytes) is not in one device allocation; cuDNN reads only memory from cudaMalloc");
}

}  // namespace

cudnnStatus_t fail(cudnnStatus_t status, const char* message) {
  last_error = std::string(cudnnGetErrorString(status)) + ": " + message;
  return status;
}

cudaDataType element_type(int32_t cudnn_type) {
  switch (cudnn_type) {
    case CUDNN_DATA_DOUBLE:
      return CUDA_R_64F;
    case CUDNN_DATA_HALF:
      return CUDA_R_16F;
    case CUDNN_DATA_BFLOAT16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

int64_t numel(const TensorDesc& t) {
  int64_t n = 1;
  for (int64_t d : t.dims) n *= d;
  return n;
}

int64_t extent(const TensorDesc& t) {
  int64_t last = 0;
  for (size_t i = 0; i < t.dims.size(); ++i) last += (t.dims[i] - 1) * t.strides[i];
  return last + 1;
}

cudnnStatus_t engine_supports(const Graph& g) {
  if (g.ops.size() + g.norms.size() != 1)
    return fail(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN, "emulated cuDNN: one operation per graph");
  if (!g.norms.empty()) return norm_engine_supports(g.norms[0]);
  const ConvOp& op = g.ops[0];
  if (op.conv.spatial_dims != 2)
    return fail(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "emulated cuDNN: 2-D convolutions only");
  const int32_t t = op.x.data_type;
  if (op.w.data_type != t || op.y.data_type != t)
    return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "tensors of one convolution differ in data type");
  const bool io_ok =
      t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_HALF || t == CUDNN_DATA_BFLOAT16 || t == CUDNN_DATA_DOUBLE;
  const int32_t compute = t == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  if (!io_ok || op.conv.comp_type != compute)
    return fail(
        CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE,
        "no engine for these data and compute types (FLOAT, HALF, BFLOAT16 with FLOAT; DOUBLE with DOUBLE)");
  return CUDNN_STATUS_SUCCESS;
}

int64_t engine_workspace_bytes(const Graph& g) {
  if (!g.norms.empty()) return 2 * g.norms[0].tensors[kNormX].dims[1] * 8;  // per channel, two doubles
  const ConvOp& op = g.ops[0];
  return numel(output_of(op)) * (double_compute(op) ? 8 : 4);
}

cudnnStatus_t run_convolution(const ConvOp& op, void* x, void* w, void* y, void* workspace) {
  const Operand xo(x, op.x), wo(w, op.w), yo(y, op.y);
  const Operand& out = op.kind == ConvKind::kForward ? yo : op.kind == ConvKind::kBackwardData ? xo : wo;
  loom_emu::DeviceAccess access;  // device memory is readable only while device work runs
  if (double_compute(op)) {
    auto* acc = static_cast<double*>(workspace);
    convolve(op, xo, wo, yo, acc);
    blend(op, out, output_of(op), acc);
  } else {
    auto* acc = static_cast<float*>(workspace);
    convolve(op, xo, wo, yo, acc);
    blend(op, out, output_of(op), acc);
  }
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace loom_emu::cudnn

using loom_emu::cudnn::fail;

size_t cudnnGetVersion(void) {
  return CUDNN_VERSION;
}

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS:
      return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED:
      return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM:
      return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER:
      return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER:
      return "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER";
    case CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED:
      return "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED";
    case CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND:
      return "CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND";
    case CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT:
      return "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT";
    case CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH:
      return "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH";
    case CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES:
      return "CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES";
    case CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE:
      return "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE";
    case CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE:
      return "CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE";
    case CUDNN_STATUS_NOT_SUPPORTED:
      return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN:
      return "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN";
    case CUDNN_STATUS_NOT_SUPPORTED_SHAPE:
      return "CUDNN_STATUS_NOT_SUPPORTED_SHAPE";
    case CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE:
      return "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE";
    case CUDNN_STATUS_NOT_SUPPORTED_LAYOUT:
      return "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT";
    case CUDNN_STATUS_INTERNAL_ERROR:
      return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED:
      return "CUDNN_STATUS_EXECUTION_FAILED";
  }
  return "CUDNN_STATUS_UNKNOWN";
}

void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (message == nullptr || max_size == 0) return;
  const std::string& m = loom_emu::cudnn::last_error;
  const size_t n = std::min(m.size(), max_size - 1);
  std::memcpy(message, m.data(), n);
  message[n] = '\0';
  loom_emu::cudnn::last_error.clear();
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "null handle pointer");
  *handle = new cudnnContext();
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return fail(CUDNN_STATUS_NOT_INITIALIZED, "null handle");
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  if (handle == nullptr || stream == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "null handle or stream");
  *stream = handle->stream;
  return CUDNN_STATUS_SUCCESS;
}

namespace {

using loom_emu::cudnn::Descriptor;
using loom_emu::cudnn::TensorDesc;

// The variant pack's pointer for tensor t, checked as cuDNN checks it: SUCCESS or why not.
cudnnStatus_t pointer_for(const Descriptor& pack, const TensorDesc& t, void*& out) {
  const auto it = std::find(pack.uids.begin(), pack.uids.end(), t.uid);
  if (it == pack.uids.end())
    return fail(CUDNN_STATUS_BAD_PARAM, "variant pack: a tensor's unique id is missing");
  out = pack.pointers[static_cast<size_t>(it - pack.uids.begin())];
  if (out == nullptr) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "variant pack: null data pointer");
  if (!t.by_value && reinterpret_cast<uintptr_t>(out) % static_cast<uintptr_t>(t.alignment) != 0)
    return fail(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER,
                "variant pack: pointer below the tensor's byte alignment");
  return CUDNN_STATUS_SUCCESS;
}

// A device tensor's pointer must cover every element its strides reach (a by-value tensor is a
// host scalar).
void check_reach(const char* what, const TensorDesc& t, const void* p) {
  if (t.by_value) return;
  loom_emu::cudnn::check_device(
      what, p,
      loom_emu::cudnn::extent(t) *
          static_cast<int64_t>(loom_emu::type_size(loom_emu::cudnn::element_type(t.data_type))));
}

// The engine's work on the handle's stream (device_work.h): at once, or at each replay of the
// graph that stream is capturing.
cudnnStatus_t submit_engine_work(cudnnHandle_t handle, std::function<cudnnStatus_t()> run) {
  const cudaError_t e = loom_emu::submit(handle->stream, [run = std::move(run)] {
    if (cudnnStatus_t s = run(); s != CUDNN_STATUS_SUCCESS)
      LOOM_FAIL("cudnnBackendExecute failed while running: ", cudnnGetErrorString(s));
  });
  return e == cudaSuccess ? CUDNN_STATUS_SUCCESS : fail(CUDNN_STATUS_EXECUTION_FAILED, cudaGetErrorName(e));
}

cudnnStatus_t execute_norm(cudnnHandle_t handle, const loom_emu::cudnn::NormOp& op, const Descriptor& pack,
                           void* workspace) {
  std::array<void*, loom_emu::cudnn::kNormRoles> pointers{};
  for (size_t r = 0; r < pointers.size(); ++r) {
    if (!op.has[r]) continue;
    if (cudnnStatus_t s = pointer_for(pack, op.tensors[r], pointers[r]); s != CUDNN_STATUS_SUCCESS) return s;
  }
  for (size_t r = 0; r < pointers.size(); ++r)
    if (op.has[r]) check_reach("a batch norm tensor", op.tensors[r], pointers[r]);
  // By-value scalars are host memory that cuDNN reads at the call: the work keeps their values.
  std::array<float, loom_emu::cudnn::kNormRoles> values{};
  for (size_t r = 0; r < values.size(); ++r)
    if (op.has[r] && op.tensors[r].by_value) values[r] = *static_cast<const float*>(pointers[r]);
  return submit_engine_work(handle, [op, pointers, values, workspace]() mutable {
    for (size_t r = 0; r < values.size(); ++r)
      if (op.has[r] && op.tensors[r].by_value) pointers[r] = &values[r];
    return loom_emu::cudnn::run_batch_norm(op, pointers, workspace);
  });
}

}  // namespace

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan_desc,
                                  cudnnBackendDescriptor_t pack_desc) {
  auto* plan = static_cast<Descriptor*>(plan_desc);
  auto* pack = static_cast<Descriptor*>(pack_desc);
  if (handle == nullptr || plan == nullptr || pack == nullptr || plan->magic != loom_emu::cudnn::kLiveMagic ||
      pack->magic != loom_emu::cudnn::kLiveMagic)
    return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "null handle, plan or variant pack");
  if (plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR ||
      pack->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
    return fail(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "expected an execution plan and a variant pack");
  if (!plan->finalized || !pack->finalized)
    return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "execution plan or variant pack not finalized");
  const int64_t ws = plan->workspace_bytes;
  if (ws > 0 && pack->workspace == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "variant pack: the plan needs a workspace");
  if (ws > 0 && !loom_emu::is_device_range(pack->workspace, static_cast<size_t>(ws)))
    return fail(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT, "variant pack: workspace smaller than the plan's");
  const auto& graph = plan->engine.graph;
  if (!graph.norms.empty()) return execute_norm(handle, graph.norms[0], *pack, pack->workspace);
  const auto& op = graph.ops[0];
  void* ptrs[3] = {};
  const TensorDesc* tensors[3] = {&op.x, &op.w, &op.y};
  for (int i = 0; i < 3; ++i)
    if (cudnnStatus_t s = pointer_for(*pack, *tensors[i], ptrs[i]); s != CUDNN_STATUS_SUCCESS) return s;
  const char* names[3] = {"x", "w", "y"};
  for (int i = 0; i < 3; ++i) check_reach(names[i], *tensors[i], ptrs[i]);
  return submit_engine_work(handle, [op, x = ptrs[0], w = ptrs[1], y = ptrs[2], workspace = pack->workspace] {
    return loom_emu::cudnn::run_convolution(op, x, w, y, workspace);
  });
}
