/*
 * The cuBLAS wrapper of blas.h.
 *
 * One handle for the process, created on first use and guarded by a mutex: a cuBLAS handle is
 * not safe to use from two threads at once, and Loom issues its GEMMs on one stream, so a pool
 * of per-thread handles would buy nothing. The handle is deliberately never destroyed: at
 * static destruction the CUDA runtime may already be shut down, and the driver frees it at exit.
 * Math mode stays CUBLAS_DEFAULT_MATH; precision is chosen per call by the compute type, which
 * (unlike the math mode) also governs cublasGemmStridedBatchedEx.
 */
#include "ops/cuda/blas.h"

#include <cublas_v2.h>

#include <atomic>
#include <climits>
#include <mutex>

#include "core/error.h"
#include "ops/cuda/blas_types.h"
#include "ops/linalg.h"

// LOOM_CUBLAS_CHECK(call): throws loom::Error with file:line, the call and cuBLAS's status name
// and description when a cuBLAS call does not return CUBLAS_STATUS_SUCCESS.
#define LOOM_CUBLAS_CHECK(call)                                                  \
  do {                                                                           \
    cublasStatus_t loom_cublas_status_ = (call);                                 \
    if (loom_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]               \
      LOOM_FAIL("cuBLAS error ", cublasGetStatusName(loom_cublas_status_), ": ", \
                cublasGetStatusString(loom_cublas_status_), " in ", #call);      \
  } while (0)

namespace loom::cuda {

namespace {

std::mutex& handle_mutex() {
  static std::mutex m;
  return m;
}

// Call with handle_mutex() held.
cublasHandle_t handle() {
  static cublasHandle_t h = nullptr;
  if (h == nullptr) {
    cublasHandle_t created = nullptr;
    LOOM_CUBLAS_CHECK(cublasCreate(&created));
    LOOM_CUBLAS_CHECK(cublasSetMathMode(created, CUBLAS_DEFAULT_MATH));
    h = created;
  }
  return h;
}

int to_int(int64_t v, const char* what) {
  LOOM_CHECK(v >= INT_MIN && v <= INT_MAX, "cuBLAS GEMM: ", what, " = ", v,
             " does not fit cuBLAS's 32-bit int argument");
  return static_cast<int>(v);
}

cublasOperation_t op_of(BlasOp op) {
  return op == BlasOp::kN ? CUBLAS_OP_N : CUBLAS_OP_T;
}

}  // namespace

void gemm_strided_batched(BlasOp transa, BlasOp transb, int64_t m, int64_t n, int64_t k, double alpha,
                          const void* a, int64_t lda, int64_t stride_a, const void* b, int64_t ldb,
                          int64_t stride_b, double beta, void* c, int64_t ldc, int64_t stride_c,
                          int64_t batch, DType dtype, cudaStream_t stream) {
  const cudaDataType_t type = gemm_data_type(dtype, "cuBLAS GEMM");
  // 16-bit inputs accumulate in float (CUBLAS_COMPUTE_32F); float stays float unless TF32 is allowed.
  const cublasComputeType_t compute = dtype == DType::Float64                   ? CUBLAS_COMPUTE_64F
                                      : dtype == DType::Float32 && allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                : CUBLAS_COMPUTE_32F;
  // alpha and beta are host scalars of the compute type's scale type.
  const double alpha_d = alpha, beta_d = beta;
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  const bool f64 = compute == CUBLAS_COMPUTE_64F;
  const void* alpha_p = f64 ? static_cast<const void*>(&alpha_d) : static_cast<const void*>(&alpha_f);
  const void* beta_p = f64 ? static_cast<const void*>(&beta_d) : static_cast<const void*>(&beta_f);

  const int im = to_int(m, "m"), in = to_int(n, "n"), ik = to_int(k, "k"), ilda = to_int(lda, "lda"),
            ildb = to_int(ldb, "ldb"), ildc = to_int(ldc, "ldc"), ibatch = to_int(batch, "batch count");
  std::lock_guard<std::mutex> lock(handle_mutex());
  cublasHandle_t h = handle();
  LOOM_CUBLAS_CHECK(cublasSetStream(h, stream));
  LOOM_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, op_of(transa), op_of(transb), im, in, ik, alpha_p, a, type,
                                               ilda, stride_a, b, type, ildb, stride_b, beta_p, c, type, ildc,
                                               stride_c, ibatch, compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace loom::cuda
