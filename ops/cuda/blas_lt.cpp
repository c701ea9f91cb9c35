/*
 * The cuBLASLt wrapper of blas_lt.h.
 *
 * One cuBLASLt handle for the process, like blas.cpp's cuBLAS handle, and one mutex: the cached
 * descriptors carry the bias and aux pointers as attributes, set just before each call. The
 * cache holds, per problem, the matmul descriptor, the four layouts and the heuristic's first
 * algorithm (or the fact that there is none), so steady-state training calls the heuristic once
 * per distinct shape. Descriptors are never destroyed, for the reason blas.cpp gives.
 */
#include "ops/cuda/blas_lt.h"

#include <cublasLt.h>

#include <climits>
#include <map>
#include <mutex>
#include <tuple>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/cuda/blas_types.h"
#include "ops/factories.h"
#include "ops/linalg.h"

#define LOOM_CUBLASLT_CHECK(call)                                                    \
  do {                                                                               \
    cublasStatus_t loom_cublaslt_status_ = (call);                                   \
    if (loom_cublaslt_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                 \
      LOOM_FAIL("cuBLASLt error ", cublasLtGetStatusName(loom_cublaslt_status_), ": ", \
                cublasLtGetStatusString(loom_cublaslt_status_), " in ", #call);      \
  } while (0)

namespace loom::cuda {

namespace {

// Workspace cuBLASLt may use, as PyTorch's default for Hopper (CUBLASLT_WORKSPACE_SIZE, 32 MiB).
constexpr uint64_t kMaxWorkspaceBytes = uint64_t{32} << 20;

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  bool found = false;
  cublasLtMatmulHeuristicResult_t heuristic{};
};

using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int, int, bool, int64_t, int64_t>;

cublasLtEpilogue_t lt_epilogue(const LtGemm& g) {
  switch (g.epilogue) {
    case LtEpilogue::kNone:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case LtEpilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case LtEpilogue::kGeluTanhBias:
      if (g.aux) return g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      return g.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    case LtEpilogue::kBiasGradB:
      return CUBLASLT_EPILOGUE_BGRADB;
    case LtEpilogue::kDGeluTanh:
      return g.bias ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                   int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  LOOM_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows),
                                                 static_cast<uint64_t>(cols), ld));
  const auto order = static_cast<int32_t>(CUBLASLT_ORDER_COL);
  const auto count = static_cast<int32_t>(batch);
  LOOM_CUBLASLT_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof(order)));
  LOOM_CUBLASLT_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  LOOM_CUBLASLT_CHECK(
      cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  return l;
}

template <class T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  LOOM_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

// The heuristic's algorithm for a plan's descriptors (found = false when there is none).
void find_algorithm(cublasLtHandle_t handle, Plan& p) {
  cublasLtMatmulPreference_t pref = nullptr;
  LOOM_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  LOOM_CUBLASLT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &kMaxWorkspaceBytes, sizeof(kMaxWorkspaceBytes)));
  int found = 0;
  const cublasStatus_t s =
      cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.c, p.c, pref, 1, &p.heuristic, &found);
  LOOM_CUBLASLT_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  // No algorithm is an answer (the caller falls back), not an error; anything else is.
  if (s != CUBLAS_STATUS_NOT_SUPPORTED) LOOM_CUBLASLT_CHECK(s);
  p.found = s == CUBLAS_STATUS_SUCCESS && found > 0;
}

Plan make_plan(cublasLtHandle_t handle, const LtGemm& g, cublasComputeType_t compute) {
  const cudaDataType_t type = gemm_data_type(g.dtype, "cuBLASLt GEMM");
  const bool f64 = compute == CUBLAS_COMPUTE_64F;
  Plan p;
  LOOM_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&p.desc, compute, f64 ? CUDA_R_64F : CUDA_R_32F));
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(g.transa == BlasOp::kN ? CUBLAS_OP_N : CUBLAS_OP_T));
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(g.transb == BlasOp::kN ? CUBLAS_OP_N : CUBLAS_OP_T));
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(lt_epilogue(g)));
  if (g.bias) set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(type));
  // The heuristic looks at the pointers' alignment only; the real ones are set per call.
  if (g.bias) set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  if (g.aux) {
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.aux_ld);
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, g.aux_stride);
  }
  const bool ta = g.transa != BlasOp::kN, tb = g.transb != BlasOp::kN;
  p.a = make_layout(type, ta ? g.k : g.m, ta ? g.m : g.k, g.lda, g.batch, g.stride_a);
  p.b = make_layout(type, tb ? g.n : g.k, tb ? g.k : g.n, g.ldb, g.batch, g.stride_b);
  p.c = make_layout(type, g.m, g.n, g.ldd, g.batch, g.stride_d);

  find_algorithm(handle, p);
  return p;
}

// The process's handle and the lock every use of it and of the plan caches takes.
std::mutex& lt_mutex() {
  static std::mutex mutex;
  return mutex;
}

cublasLtHandle_t lt_handle() {  // call with lt_mutex() held
  static cublasLtHandle_t handle = nullptr;
  if (handle == nullptr) LOOM_CUBLASLT_CHECK(cublasLtCreate(&handle));
  return handle;
}

// Runs a found plan with alpha = 1 and beta = 0 of the plan's scale type, with the workspace
// its algorithm asked for.
void run_plan(const Plan& p, const void* one, const void* zero, const void* a, const void* b, void* d,
              cudaStream_t stream) {
  const size_t ws_bytes = p.heuristic.workspaceSize;
  Tensor workspace;  // from the caching allocator; freed for reuse once the stream is past this GEMM
  if (ws_bytes > 0)
    workspace = empty({static_cast<int64_t>(ws_bytes)}, TensorOptions(DType::UInt8).device(Device::cuda()));
  LOOM_CUBLASLT_CHECK(cublasLtMatmul(lt_handle(), p.desc, one, a, p.a, b, p.b, zero, d, p.c, d, p.c,
                                     &p.heuristic.algo, ws_bytes > 0 ? workspace.data_ptr() : nullptr, ws_bytes,
                                     stream));
}

}  // namespace

void lt_matmul_int8(const LtInt8Gemm& g, cudaStream_t stream) {
  for (int64_t v : {g.m, g.n, g.k, g.lda, g.ldb, g.ldd})
    LOOM_CHECK(v >= 0 && v <= INT_MAX, "cuBLASLt INT8 GEMM: size ", v, " does not fit cuBLASLt's 32-bit limits");
  LOOM_CHECK(g.m % 4 == 0 && g.k % 4 == 0 && g.lda % 4 == 0 && g.ldb % 4 == 0 && g.ldd % 4 == 0,
             "cuBLASLt INT8 GEMM: m, k and the leading dimensions must be multiples of 4, got m ", g.m, ", k ",
             g.k, ", lda ", g.lda, ", ldb ", g.ldb, ", ldd ", g.ldd);
  // Never destroyed, as lt_matmul's cache.
  static auto& cache = *new std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>, Plan>();
  std::lock_guard<std::mutex> lock(lt_mutex());
  const auto key = std::make_tuple(g.m, g.n, g.k, g.lda, g.ldb, g.ldd);
  auto it = cache.find(key);
  if (it == cache.end()) {
    Plan p;
    LOOM_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32I, CUDA_R_32I));
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(CUBLAS_OP_T));
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(CUBLAS_OP_N));
    p.a = make_layout(CUDA_R_8I, g.k, g.m, g.lda, 1, 0);
    p.b = make_layout(CUDA_R_8I, g.k, g.n, g.ldb, 1, 0);
    p.c = make_layout(CUDA_R_32I, g.m, g.n, g.ldd, 1, 0);
    find_algorithm(lt_handle(), p);
    it = cache.emplace(key, p).first;
  }
  const Plan& p = it->second;
  LOOM_CHECK(p.found, "cuBLASLt INT8 GEMM: no algorithm for m ", g.m, ", n ", g.n, ", k ", g.k);
  const int32_t one = 1, zero = 0;
  run_plan(p, &one, &zero, g.a, g.b, g.d, stream);
}

bool lt_matmul(const LtGemm& g, cudaStream_t stream) {
  for (int64_t v : {g.m, g.n, g.k, g.lda, g.ldb, g.ldd, g.batch})
    LOOM_CHECK(v >= 0 && v <= INT_MAX, "cuBLASLt GEMM: size ", v, " does not fit cuBLASLt's 32-bit limits");
  const cublasComputeType_t compute = g.dtype == DType::Float64                   ? CUBLAS_COMPUTE_64F
                                      : g.dtype == DType::Float32 && allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                  : CUBLAS_COMPUTE_32F;
  // Never destroyed, like the handle: at exit the runtime may be gone before the descriptors
  // could be freed, and a map destroyed without freeing them would leak them (LeakSanitizer).
  static auto& cache = *new std::map<Key, Plan>();
  std::lock_guard<std::mutex> lock(lt_mutex());
  const Key key{static_cast<int>(g.transa), static_cast<int>(g.transb), g.m, g.n, g.k, g.lda, g.stride_a, g.ldb,
                g.stride_b, g.ldd, g.stride_d, g.batch, static_cast<int>(g.dtype), static_cast<int>(lt_epilogue(g)),
                compute == CUBLAS_COMPUTE_32F_FAST_TF32, g.aux_ld, g.aux_stride};
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make_plan(lt_handle(), g, compute)).first;
  const Plan& p = it->second;
  if (!p.found) return false;

  if (g.bias) set_desc(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  if (g.aux) set_desc(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
  const double one_d = 1.0, zero_d = 0.0;
  const float one_f = 1.0f, zero_f = 0.0f;
  const bool f64 = compute == CUBLAS_COMPUTE_64F;
  run_plan(p, f64 ? static_cast<const void*>(&one_d) : static_cast<const void*>(&one_f),
           f64 ? static_cast<const void*>(&zero_d) : static_cast<const void*>(&zero_f), g.a, g.b, g.d, stream);
  return true;
}

}  // namespace loom::cuda
