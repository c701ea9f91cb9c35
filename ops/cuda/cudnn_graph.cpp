/*
 * The shared cuDNN graph steps of cudnn_graph.h:
 *
 *   operation (built by the wrapper) --> OPERATIONGRAPH --> ENGINEHEUR (mode A) -->
 *   ENGINECFG... --> EXECUTION_PLAN (the first acceptable one that finalizes);
 *   per call: VARIANT_PACK (pointers, workspace) --> cudnnBackendExecute.
 */
#include "ops/cuda/cudnn_graph.h"

#include <algorithm>
#include <array>
#include <map>

#include "core/cuda/cuda_check.h"
#include "core/error.h"
#include "ops/factories.h"

namespace loom::cuda {

namespace {

// Workspace beyond this is not worth it: the heuristic's next configuration is tried instead.
constexpr int64_t kMaxWorkspaceBytes = int64_t{1} << 30;
// How many of the heuristic's configurations are looked at.
constexpr int64_t kMaxConfigs = 16;

// Whether Loom takes the engine of `config` (see the header).
bool acceptable_numerics(cudnnBackendDescriptor_t config, bool float32_exact) {
  CudnnDescriptors owner;
  cudnnBackendDescriptor_t engine = owner.create(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
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

// Finalizes d; false when cuDNN does not run it, throws on any other failure.
bool finalize_or_unsupported(cudnnBackendDescriptor_t d, const char* what) {
  const cudnnStatus_t s = cudnnBackendFinalize(d);
  if (s == CUDNN_STATUS_SUCCESS) return true;
  if (cudnn_unsupported(s)) return false;
  cudnn_fail(s, what, __FILE__, __LINE__);
}

}  // namespace

bool cudnn_unsupported(cudnnStatus_t s) {
  return CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED;
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

int64_t cudnn_alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  int64_t alignment = 16;
  while (alignment > 1 && address % static_cast<uintptr_t>(alignment) != 0) alignment /= 2;
  return alignment;
}

bool cudnn_packed_as(const Tensor& t, CudnnOrder order, std::array<int64_t, 4>& strides) {
  const int64_t c = t.size(1), h = t.size(2), w = t.size(3);
  strides = order == CudnnOrder::kNCHW ? std::array<int64_t, 4>{c * h * w, h * w, w, 1}
                                       : std::array<int64_t, 4>{h * w * c, 1, w * c, c};
  for (int d = 0; d < 4; ++d)
    if (t.size(d) > 1 && t.stride(d) != strides[static_cast<size_t>(d)]) return false;
  return true;
}

CudnnDescriptors::~CudnnDescriptors() {
  for (cudnnBackendDescriptor_t d : owned_) cudnnBackendDestroyDescriptor(d);  // best effort in unwinding
}

cudnnBackendDescriptor_t CudnnDescriptors::create(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t d = nullptr;
  LOOM_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d));
  owned_.push_back(d);
  return d;
}

void cudnn_set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
               int64_t count, const void* values) {
  LOOM_CUDNN_CHECK(cudnnBackendSetAttribute(d, name, type, count, values));
}

cudnnBackendDescriptor_t cudnn_tensor(CudnnDescriptors& owner, const CudnnTensorSpec& spec, int64_t uid) {
  cudnnBackendDescriptor_t t = owner.create(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const auto rank = static_cast<int64_t>(spec.sizes.size());
  cudnn_set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &spec.type);
  cudnn_set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, spec.sizes.data());
  cudnn_set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, spec.strides.data());
  cudnn_set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  cudnn_set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &spec.alignment);
  if (spec.by_value) {
    const bool yes = true;
    cudnn_set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
  }
  LOOM_CUDNN_CHECK(cudnnBackendFinalize(t));
  return t;
}

bool cudnn_finalize_op(cudnnBackendDescriptor_t op, const char* what) {
  return finalize_or_unsupported(op, what);
}

CudnnPlan cudnn_plan_for(cudnnHandle_t handle, CudnnDescriptors& owner, cudnnBackendDescriptor_t op,
                         bool float32_exact) {
  CudnnPlan result;
  cudnnBackendDescriptor_t graph = owner.create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  cudnn_set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op);
  cudnn_set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  if (!finalize_or_unsupported(graph, "cudnnBackendFinalize(operation graph)")) return result;

  cudnnBackendDescriptor_t heur = owner.create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  cudnn_set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  cudnn_set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (!finalize_or_unsupported(heur, "cudnnBackendFinalize(engine heuristic)")) return result;
  std::vector<cudnnBackendDescriptor_t> configs(kMaxConfigs);
  for (auto& c : configs) c = owner.create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t found = 0;
  if (cudnnStatus_t s =
          cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                   kMaxConfigs, &found, configs.data());
      s != CUDNN_STATUS_SUCCESS && !cudnn_unsupported(s))
    cudnn_fail(s, "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS)", __FILE__, __LINE__);
  for (int64_t i = 0; i < std::min(found, kMaxConfigs) && !result.found; ++i) {
    cudnnBackendDescriptor_t config = configs[static_cast<size_t>(i)];
    if (!acceptable_numerics(config, float32_exact)) continue;
    cudnnBackendDescriptor_t plan = owner.create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    cudnn_set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    cudnn_set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config);
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
  // few descriptors per distinct problem).
  if (result.found) result.built_from = owner.release();
  return result;
}

void cudnn_execute(cudnnHandle_t handle, const CudnnPlan& plan, const std::vector<int64_t>& uids,
                   const std::vector<void*>& pointers) {
  LOOM_CHECK(uids.size() == pointers.size(), "cudnn_execute: ", uids.size(), " unique ids for ",
             pointers.size(), " pointers");
  Tensor workspace;  // from the caching allocator; reused once the stream is past this operation
  if (plan.workspace_bytes > 0)
    workspace = empty({plan.workspace_bytes}, TensorOptions(DType::UInt8).device(Device::cuda()));
  CudnnDescriptors owner;
  cudnnBackendDescriptor_t pack = owner.create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  void* ws = plan.workspace_bytes > 0 ? workspace.data_ptr() : nullptr;
  const auto count = static_cast<int64_t>(uids.size());
  cudnn_set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, count, uids.data());
  cudnn_set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, count, pointers.data());
  cudnn_set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  LOOM_CUDNN_CHECK(cudnnBackendFinalize(pack));
  LOOM_CUDNN_CHECK(cudnnBackendExecute(handle, plan.plan, pack));
}

bool cudnn_run_cached(const std::vector<int64_t>& problem,
                      const std::function<CudnnPlan(cudnnHandle_t)>& build, const std::vector<int64_t>& uids,
                      const std::vector<void*>& pointers, cudaStream_t stream) {
  int device = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&device));
  std::vector<int64_t> key{device};
  key.insert(key.end(), problem.begin(), problem.end());
  static auto& cache = *new std::map<std::vector<int64_t>, CudnnPlan>();  // never destroyed: see the header
  std::lock_guard<std::mutex> lock(cudnn_mutex());
  cudnnHandle_t handle = cudnn_handle(stream);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(std::move(key), build(handle)).first;
  if (!it->second.found) return false;
  cudnn_execute(handle, it->second, uids, pointers);
  return true;
}

}  // namespace loom::cuda
