/*
 * The cuDNN convolution of cudnn_conv.h, through the graph (backend) API:
 *
 *   tensors x (uid 1), w (uid 2), y (uid 3) --> CONVOLUTION (cross-correlation, float compute) -->
 *   OPERATION_CONVOLUTION_{FORWARD, BACKWARD_DATA, BACKWARD_FILTER} --> OPERATIONGRAPH -->
 *   ENGINEHEUR (mode A) --> ENGINECFG... --> EXECUTION_PLAN (the first that finalizes) --> cached;
 *   per call: VARIANT_PACK (pointers, workspace) --> cudnnBackendExecute.
 *
 * The plan cache, like blas_lt.cpp's, is never destroyed: at exit the runtime may be gone before
 * the descriptors could be freed, and a map destroyed without freeing them would leak them. One
 * mutex (cudnn_handle.h) guards the handles, the cache and each execution.
 *
 * Which engine configurations are taken: cuDNN lists, per engine, numerical notes. Float32 stays
 * float32 unless TF32 is allowed (set_allow_tf32, as for matmuls), so engines that down-convert
 * the inputs or use tensor cores on float32 are skipped then; engines that reduce in reduced
 * precision, or are not deterministic, are always skipped, because Loom's CUDA kernels give the
 * same bits on every run and sum in float.
 */
#include "ops/cuda/cudnn_conv.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/error.h"
#include "ops/cuda/cudnn_handle.h"
#include "ops/factories.h"
#include "ops/linalg.h"

namespace loom::cuda {

namespace {

std::atomic<bool> enabled{true};

// Workspace beyond this is not worth it: the heuristic's next configuration is tried instead.
constexpr int64_t kMaxWorkspaceBytes = int64_t{1} << 30;
// How many of the heuristic's configurations are looked at.
constexpr int64_t kMaxConfigs = 16;
constexpr int64_t kUidX = 1, kUidW = 2, kUidY = 3;

// An operand as cuDNN sees it: NCHW sizes, element strides with size-1 dims given the stride of
// the packed layout (cuDNN's engines match layouts by strides), and the pointer's alignment.
struct Operand {
  std::array<int64_t, 4> sizes{}, strides{};
  int64_t alignment = 0;
};

enum class Order { kNCHW, kNHWC };

// Whether t's strides are the packed ones of `order` (size-1 dims, whose stride is never used,
// ignored), and those packed strides.
bool packed_as(const Tensor& t, Order order, std::array<int64_t, 4>& strides) {
  const int64_t c = t.size(1), h = t.size(2), w = t.size(3);
  strides = order == Order::kNCHW ? std::array<int64_t, 4>{c * h * w, h * w, w, 1}
                                  : std::array<int64_t, 4>{h * w * c, 1, w * c, c};
  for (int d = 0; d < 4; ++d)
    if (t.size(d) > 1 && t.stride(d) != strides[static_cast<size_t>(d)]) return false;
  return true;
}

// t as cuDNN sees it when t is dense in NCHW or NHWC order, preferring `preferred` where both
// fit (a tensor with one channel, or one pixel, is both), so that all operands of a convolution
// show cuDNN one layout; false when t is dense in neither.
bool packed_operand(const Tensor& t, Order preferred, Operand& o) {
  if (t.dim() != 4 || t.numel() == 0) return false;
  for (int d = 0; d < 4; ++d) o.sizes[static_cast<size_t>(d)] = t.size(d);
  const Order other = preferred == Order::kNCHW ? Order::kNHWC : Order::kNCHW;
  if (!packed_as(t, preferred, o.strides) && !packed_as(t, other, o.strides)) return false;
  const auto address = reinterpret_cast<uintptr_t>(t.data_ptr());
  o.alignment = 16;
  while (o.alignment > 1 && address % static_cast<uintptr_t>(o.alignment) != 0) o.alignment /= 2;
  return true;
}

bool cudnn_type(DType t, cudnnDataType_t& out) {
  switch (t) {
    case DType::Float32:
      out = CUDNN_DATA_FLOAT;
      return true;
    case DType::Float64:
      out = CUDNN_DATA_DOUBLE;
      return true;
    case DType::Float16:
      out = CUDNN_DATA_HALF;
      return true;
    case DType::BFloat16:
      out = CUDNN_DATA_BFLOAT16;
      return true;
    default:
      return false;
  }
}

struct Plan {
  bool found = false;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace_bytes = 0;
  // Every descriptor the plan was built from. cudnn-frontend keeps this chain alive as long as
  // the plan (plan -> engine config -> engine -> graph -> operation -> tensors), so Loom does too.
  std::vector<cudnnBackendDescriptor_t> built_from;
};

using Key = std::vector<int64_t>;

// Whether a status means "cuDNN does not run this" (the caller falls back) rather than a failure.
bool unsupported(cudnnStatus_t s) {
  return CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED;
}

cudnnBackendDescriptor_t create(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t d = nullptr;
  LOOM_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d));
  return d;
}

// The descriptors of a plan being built: destroyed unless released to a found plan (also when a
// cuDNN call throws half way).
class Descriptors {
 public:
  Descriptors() = default;
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    for (cudnnBackendDescriptor_t d : owned_) cudnnBackendDestroyDescriptor(d);  // best effort in unwinding
  }
  cudnnBackendDescriptor_t add(cudnnBackendDescriptor_t d) {
    owned_.push_back(d);
    return d;
  }
  std::vector<cudnnBackendDescriptor_t> release() { return std::exchange(owned_, {}); }

 private:
  std::vector<cudnnBackendDescriptor_t> owned_;
};

void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
         int64_t count, const void* values) {
  LOOM_CUDNN_CHECK(cudnnBackendSetAttribute(d, name, type, count, values));
}

cudnnBackendDescriptor_t make_tensor(Descriptors& owner, const Operand& o, int64_t uid,
                                     cudnnDataType_t type) {
  cudnnBackendDescriptor_t t = owner.add(create(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
  set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, o.sizes.data());
  set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, o.strides.data());
  set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &o.alignment);
  LOOM_CUDNN_CHECK(cudnnBackendFinalize(t));
  return t;
}

cudnnBackendDescriptor_t make_convolution(Descriptors& owner, const Conv2dParams& p,
                                          cudnnDataType_t compute) {
  cudnnBackendDescriptor_t c = owner.add(create(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR));
  const int64_t spatial = 2;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;  // what deep learning calls convolution
  set(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  set(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  set(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial);
  set(c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, p.dilation.data());
  set(c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, p.stride.data());
  set(c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, p.padding.data());
  set(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, p.padding.data());
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

// Whether Loom takes the engine of `config` (see the file comment).
bool acceptable_numerics(cudnnBackendDescriptor_t config, bool float32_exact) {
  Descriptors owner;
  cudnnBackendDescriptor_t engine = owner.add(create(CUDNN_BACKEND_ENGINE_DESCRIPTOR));
  int64_t count = 0;
  LOOM_CUDNN_CHECK(cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count, &engine));
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  int64_t n = 0;
  LOOM_CUDNN_CHECK(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                            CUDNN_TYPE_NUMERICAL_NOTE, static_cast<int64_t>(notes.size()), &n,
                                            notes.data()));
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(notes.size()); ++i) {
    const cudnnBackendNumericalNote_t note = notes[static_cast<size_t>(i)];
    if (note == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION ||
        note == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)
      return false;
    if (float32_exact &&
        (note == CUDNN_NUMERICAL_NOTE_TENSOR_CORE || note == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
      return false;
  }
  return true;
}

// Builds the graph of one convolution and finalizes the first acceptable plan.
Plan make_plan(cudnnHandle_t handle, CudnnConvKind kind, const Operand& x, const Operand& w, const Operand& y,
               const Conv2dParams& p, DType dtype, bool accumulate) {
  Plan result;
  Descriptors owner;
  cudnnDataType_t type{};
  cudnn_type(dtype, type);
  const bool f64 = dtype == DType::Float64;
  const cudnnDataType_t compute = f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const OpNames names = op_names(kind);

  cudnnBackendDescriptor_t tx = make_tensor(owner, x, kUidX, type), tw = make_tensor(owner, w, kUidW, type),
                           ty = make_tensor(owner, y, kUidY, type);
  cudnnBackendDescriptor_t conv = make_convolution(owner, p, compute);
  cudnnBackendDescriptor_t op = owner.add(create(names.type));
  const double alpha_d = 1.0, beta_d = accumulate ? 1.0 : 0.0;
  const float alpha_f = 1.0f, beta_f = accumulate ? 1.0f : 0.0f;
  const cudnnBackendAttributeType_t scale_type = f64 ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT;
  set(op, names.alpha, scale_type, 1, f64 ? static_cast<const void*>(&alpha_d) : &alpha_f);
  set(op, names.beta, scale_type, 1, f64 ? static_cast<const void*>(&beta_d) : &beta_f);
  set(op, names.conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv);
  set(op, names.x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx);
  set(op, names.w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw);
  set(op, names.y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty);
  if (cudnnStatus_t s = cudnnBackendFinalize(op); s != CUDNN_STATUS_SUCCESS) {
    if (unsupported(s)) return result;
    cudnn_fail(s, "cudnnBackendFinalize(convolution operation)", __FILE__, __LINE__);
  }

  cudnnBackendDescriptor_t graph = owner.add(create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op);
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  if (cudnnStatus_t s = cudnnBackendFinalize(graph); s != CUDNN_STATUS_SUCCESS) {
    if (unsupported(s)) return result;
    cudnn_fail(s, "cudnnBackendFinalize(operation graph)", __FILE__, __LINE__);
  }

  cudnnBackendDescriptor_t heur = owner.add(create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR));
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (cudnnStatus_t s = cudnnBackendFinalize(heur); s != CUDNN_STATUS_SUCCESS) {
    if (unsupported(s)) return result;
    cudnn_fail(s, "cudnnBackendFinalize(engine heuristic)", __FILE__, __LINE__);
  }
  std::vector<cudnnBackendDescriptor_t> configs(kMaxConfigs);
  for (auto& c : configs) c = owner.add(create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
  int64_t found = 0;
  if (cudnnStatus_t s =
          cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                   kMaxConfigs, &found, configs.data());
      s != CUDNN_STATUS_SUCCESS && !unsupported(s))
    cudnn_fail(s, "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS)", __FILE__, __LINE__);
  const bool float32_exact = dtype == DType::Float32 && !allow_tf32();
  for (int64_t i = 0; i < std::min(found, kMaxConfigs) && !result.found; ++i) {
    cudnnBackendDescriptor_t config = configs[static_cast<size_t>(i)];
    if (!acceptable_numerics(config, float32_exact)) continue;
    cudnnBackendDescriptor_t plan = owner.add(create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR));
    set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config);
    int64_t workspace = 0, n = 0;
    // An engine config that does not finalize here (cuDNN's heuristic lists some that turn out not
    // to run the problem) is skipped, as cudnn-frontend does; the next one is tried.
    if (cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                 &workspace) == CUDNN_STATUS_SUCCESS &&
        workspace <= kMaxWorkspaceBytes) {
      result.found = true;
      result.plan = plan;
      result.workspace_bytes = workspace;
    }
  }
  // The configurations and plans not taken go with the rest; a found plan keeps them all (a
  // few descriptors per distinct convolution).
  if (result.found) result.built_from = owner.release();
  return result;
}

void execute(cudnnHandle_t handle, const Plan& plan, void* x, void* w, void* y) {
  Tensor workspace;  // from the caching allocator; reused once the stream is past this convolution
  if (plan.workspace_bytes > 0)
    workspace = empty({plan.workspace_bytes}, TensorOptions(DType::UInt8).device(Device::cuda()));
  Descriptors owner;
  cudnnBackendDescriptor_t pack = owner.add(create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR));
  const std::array<int64_t, 3> uids{kUidX, kUidW, kUidY};
  const std::array<void*, 3> pointers{x, w, y};
  void* ws = plan.workspace_bytes > 0 ? workspace.data_ptr() : nullptr;
  set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids.data());
  set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers.data());
  set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  LOOM_CUDNN_CHECK(cudnnBackendFinalize(pack));
  LOOM_CUDNN_CHECK(cudnnBackendExecute(handle, plan.plan, pack));
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
  const Order order = packed_as(x, Order::kNCHW, unused) ? Order::kNCHW : Order::kNHWC;
  if (!packed_operand(x, order, ox) || !packed_operand(w, order, ow) || !packed_operand(y, order, oy))
    return false;
  int device = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&device));

  Key key{device,
          static_cast<int>(kind),
          static_cast<int>(x.dtype()),
          accumulate,
          x.dtype() == DType::Float32 && allow_tf32(),
          p.groups};
  for (const Operand* o : {&ox, &ow, &oy}) {
    key.insert(key.end(), o->sizes.begin(), o->sizes.end());
    key.insert(key.end(), o->strides.begin(), o->strides.end());
    key.push_back(o->alignment);
  }
  for (const auto* a : {&p.stride, &p.padding, &p.dilation}) key.insert(key.end(), a->begin(), a->end());

  static auto& cache = *new std::map<Key, Plan>();  // never destroyed: see the file comment
  std::lock_guard<std::mutex> lock(cudnn_mutex());
  cudnnHandle_t handle = cudnn_handle(stream);
  auto it = cache.find(key);
  if (it == cache.end())
    it = cache.emplace(key, make_plan(handle, kind, ox, ow, oy, p, x.dtype(), accumulate)).first;
  if (!it->second.found) return false;
  execute(handle, it->second, x.data_ptr(), w.data_ptr(), y.data_ptr());
  return true;
}

}  // namespace loom::cuda
