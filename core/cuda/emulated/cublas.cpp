/*
 * Emulated cuBLAS (see cublas_v2.h): a reference implementation of the calls Loom makes,
 * written from the cuBLAS documentation, not from Loom's use of it.
 *
 * cublasGemmStridedBatchedEx follows the documented contract:
 *  - column-major storage; op(A) is m x k, op(B) k x n, C m x n; A_i = A + i * strideA (a stride
 *    of 0 reuses one matrix for every batch);
 *  - CUBLAS_STATUS_NOT_INITIALIZED for a null handle; CUBLAS_STATUS_INVALID_VALUE for negative
 *    m, n, k or batchCount, an unknown transpose, data type or compute type, null alpha/beta, and
 *    leading dimensions below the minimum: lda >= max(1, transa == N ? m : k),
 *    ldb >= max(1, transb == N ? k : n), ldc >= max(1, m);
 *  - CUBLAS_STATUS_NOT_SUPPORTED for a type combination outside the table of cublasGemmEx
 *    (e.g. CUBLAS_COMPUTE_32F_FAST_TF32 with 16-bit inputs) or an unknown algorithm, which is
 *    what cuBLAS returns for those;
 *  - alpha and beta are host scalars of the compute type's scale type: __half for
 *    CUBLAS_COMPUTE_16F, double for CUBLAS_COMPUTE_64F, float otherwise;
 *  - products accumulate in the compute type: float for the 32F types (16-bit inputs are widened
 *    exactly), double for 64F, binary16 for 16F (rounded after every step); the FAST types first
 *    round the float inputs to TF32 (10-bit mantissa, round to nearest, ties away from zero as
 *    cvt.rna.tf32.f32), binary16 or bfloat16, so that reduced precision is observable; so does
 *    CUBLAS_COMPUTE_32F with float inputs on a handle in CUBLAS_TF32_TENSOR_OP_MATH mode;
 *  - C_i = alpha * op(A_i) op(B_i) + beta * C_i, rounded once to Ctype; with beta == 0, C is not
 *    read (NaN in C does not propagate), with alpha == 0 or k == 0, A and B are not read.
 * The matrices are read inside a loom_emu::DeviceAccess, as a kernel would read them, after
 * checking that every byte the call can touch lies in one live device allocation (a host
 * pointer is the illegal address a GPU would fault on, reported here as a loom::Error).
 * The product is work on the handle's stream (device_work.h): it runs at the call, or, while the
 * stream is captured into a CUDA graph, at each launch of that graph.
 */
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/cuda/emulated/device_memory.h"
#include "core/cuda/emulated/device_work.h"
#include "core/cuda/emulated/element_io.h"
#include "core/error.h"
#include "core/half_bits.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace {

using loom::detail::bf16_bits_to_float;
using loom::detail::float_to_bf16_bits;
using loom::detail::float_to_half_bits;
using loom::detail::half_bits_to_float;
using loom_emu::known_type;
using loom_emu::load;
using loom_emu::store;
using loom_emu::type_size;

float round_tf32(float f) {
  if (!std::isfinite(f)) return f;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits =
      (bits + 0x1000u) & ~0x1FFFu;  // keep 10 of 23 mantissa bits; +half an ulp on the magnitude: ties away
  std::memcpy(&f, &bits, 4);
  return f;
}
float round_half(float f) {
  return half_bits_to_float(float_to_half_bits(f));
}
float round_bf16(float f) {
  return bf16_bits_to_float(float_to_bf16_bits(f));
}

// How one supported (types, compute type) combination computes.
enum class Accumulate { kHalf, kFloat, kDouble };
enum class InputRounding { kNone, kTf32, kHalf, kBf16 };
struct Plan {
  Accumulate acc;
  InputRounding rounding;
};

// The cublasGemmEx type table (real types only). False: not a supported combination.
bool plan_for(cudaDataType at, cudaDataType bt, cudaDataType ct, cublasComputeType_t compute,
              cublasMath_t math, Plan& plan) {
  if (at != bt) return false;
  switch (compute) {
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC:
      plan = {Accumulate::kHalf, InputRounding::kNone};
      return at == CUDA_R_16F && ct == CUDA_R_16F;
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC: {
      const bool tf32 =
          compute == CUBLAS_COMPUTE_32F && at == CUDA_R_32F && (math & 0xF) == CUBLAS_TF32_TENSOR_OP_MATH;
      plan = {Accumulate::kFloat, tf32 ? InputRounding::kTf32 : InputRounding::kNone};
      if (at == CUDA_R_32F) return ct == CUDA_R_32F;
      if (at == CUDA_R_16F || at == CUDA_R_16BF) return ct == at || ct == CUDA_R_32F;
      return false;
    }
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      plan = {Accumulate::kFloat, compute == CUBLAS_COMPUTE_32F_FAST_16F    ? InputRounding::kHalf
                                  : compute == CUBLAS_COMPUTE_32F_FAST_16BF ? InputRounding::kBf16
                                                                            : InputRounding::kTf32};
      return at == CUDA_R_32F && ct == CUDA_R_32F;
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
      plan = {Accumulate::kDouble, InputRounding::kNone};
      return at == CUDA_R_64F && ct == CUDA_R_64F;
    case CUBLAS_COMPUTE_32I:
    case CUBLAS_COMPUTE_32I_PEDANTIC:
      return false;  // known_compute() keeps them out (below)
  }
  return false;
}

bool known_compute(cublasComputeType_t c) {
  switch (c) {
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC:
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      return true;
    case CUBLAS_COMPUTE_32I:
    case CUBLAS_COMPUTE_32I_PEDANTIC:
      // cublasGemmEx has an INT8 form that this emulator leaves out: Loom's INT8 products go
      // through cuBLASLt (cublasLt.cpp), so a GemmEx call with these is a Loom bug.
      return false;
  }
  return false;
}

// CUBLAS_GEMM_DEFAULT, CUBLAS_GEMM_ALGO0..23, CUBLAS_GEMM_DEFAULT_TENSOR_OP, ALGO0..15_TENSOR_OP.
bool known_algo(int algo) {
  return (algo >= -1 && algo <= 23) || (algo >= 99 && algo <= 115);
}

double load_scalar(cublasComputeType_t compute, const void* p) {
  if (compute == CUBLAS_COMPUTE_64F || compute == CUBLAS_COMPUTE_64F_PEDANTIC)
    return *static_cast<const double*>(p);
  if (compute == CUBLAS_COMPUTE_16F || compute == CUBLAS_COMPUTE_16F_PEDANTIC)
    return half_bits_to_float(*static_cast<const uint16_t*>(p));
  return *static_cast<const float*>(p);
}

// Throws unless every element a strided batch of rows x cols column-major matrices can touch is device
// memory.
void check_device_operand(const char* name, const void* p, cudaDataType t, int64_t rows, int64_t cols,
                          int64_t ld, long long stride, int batch) {
  const int64_t last_batch = static_cast<int64_t>(batch - 1) * stride;
  const int64_t lo = std::min<int64_t>(0, last_batch);
  const int64_t hi = std::max<int64_t>(0, last_batch) + (cols - 1) * ld + rows;  // one past the last element
  const size_t elem = type_size(t);
  const char* begin = static_cast<const char*>(p) + lo * static_cast<int64_t>(elem);
  const size_t bytes = static_cast<size_t>(hi - lo) * elem;
  if (p == nullptr || !loom_emu::is_device_range(begin, bytes))
    LOOM_FAIL("cudaErrorIllegalAddress: cublasGemmStridedBatchedEx: matrix ", name, " (", p, ", ", bytes,
              " bytes) is not in one device allocation; cuBLAS reads only memory from cudaMalloc");
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const int base = mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  if (base < CUBLAS_DEFAULT_MATH || base > CUBLAS_TF32_TENSOR_OP_MATH) return CUBLAS_STATUS_INVALID_VALUE;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "an error was detected when checking the current licensing";
  }
  return "unknown error";
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k, const void* alpha,
                                          const void* A, cudaDataType Atype, int lda, long long int strideA,
                                          const void* B, cudaDataType Btype, int ldb, long long int strideB,
                                          const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto known_op = [](cublasOperation_t op) {
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
  };
  if (!known_op(transa) || !known_op(transb)) return CUBLAS_STATUS_INVALID_VALUE;
  if (m < 0 || n < 0 || k < 0 || batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
  // op(A) is m x k: A is stored m x k (N) or k x m (T, C); likewise B k x n or n x k.
  const int a_rows = transa == CUBLAS_OP_N ? m : k, a_cols = transa == CUBLAS_OP_N ? k : m;
  const int b_rows = transb == CUBLAS_OP_N ? k : n, b_cols = transb == CUBLAS_OP_N ? n : k;
  if (lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!known_type(Atype) || !known_type(Btype) || !known_type(Ctype) || !known_compute(computeType))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Plan plan{};
  if (!plan_for(Atype, Btype, Ctype, computeType, handle->math, plan) || !known_algo(algo))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m == 0 || n == 0 || batchCount == 0) return CUBLAS_STATUS_SUCCESS;

  const double alpha_v = load_scalar(computeType, alpha), beta_v = load_scalar(computeType, beta);
  const bool read_ab = alpha_v != 0 && k > 0;
  check_device_operand("C", C, Ctype, m, n, ldc, strideC, batchCount);
  if (read_ab) {
    check_device_operand("A", A, Atype, a_rows, a_cols, lda, strideA, batchCount);
    check_device_operand("B", B, Btype, b_rows, b_cols, ldb, strideB, batchCount);
  }

  // The product runs as work on the handle's stream: at once, or at each replay of the graph
  // that stream is capturing. alpha and beta were read at the call, as cuBLAS reads host scalars.
  auto compute = [=] {
    auto round_input = [&](double v) -> double {
      switch (plan.rounding) {
        case InputRounding::kTf32:
          return round_tf32(static_cast<float>(v));
        case InputRounding::kHalf:
          return round_half(static_cast<float>(v));
        case InputRounding::kBf16:
          return round_bf16(static_cast<float>(v));
        case InputRounding::kNone:
          break;
      }
      return v;
    };
    // The sum of op(A)[i, :] * op(B)[:, j] in the compute type, in order of p.
    auto dot = [&](const void* a, const void* b, int i, int j) -> double {
      const int64_t a_step = transa == CUBLAS_OP_N ? lda : 1, b_step = transb == CUBLAS_OP_N ? 1 : ldb;
      int64_t ai = transa == CUBLAS_OP_N ? i : static_cast<int64_t>(i) * lda;
      int64_t bi = transb == CUBLAS_OP_N ? static_cast<int64_t>(j) * ldb : j;
      if (plan.acc == Accumulate::kDouble) {
        double acc = 0;
        for (int p = 0; p < k; ++p, ai += a_step, bi += b_step)
          acc += load(Atype, a, ai) * load(Btype, b, bi);
        return acc;
      }
      float acc = 0;
      for (int p = 0; p < k; ++p, ai += a_step, bi += b_step) {
        const float x = static_cast<float>(round_input(load(Atype, a, ai)));
        const float y = static_cast<float>(round_input(load(Btype, b, bi)));
        acc = plan.acc == Accumulate::kHalf ? round_half(std::fma(x, y, acc)) : acc + x * y;
      }
      return acc;
    };

    loom_emu::DeviceAccess access;  // device memory is readable only while device work runs
    const size_t a_elem = type_size(Atype), b_elem = type_size(Btype), c_elem = type_size(Ctype);
    for (int batch = 0; batch < batchCount; ++batch) {
      const char* a = static_cast<const char*>(A) + batch * strideA * static_cast<long long>(a_elem);
      const char* b = static_cast<const char*>(B) + batch * strideB * static_cast<long long>(b_elem);
      char* c = static_cast<char*>(C) + batch * strideC * static_cast<long long>(c_elem);
      for (int j = 0; j < n; ++j) {
        for (int i = 0; i < m; ++i) {
          const int64_t ci = i + static_cast<int64_t>(j) * ldc;
          double v = read_ab ? alpha_v * dot(a, b, i, j) : 0.0;
          if (beta_v != 0) v += beta_v * load(Ctype, c, ci);
          if (plan.acc == Accumulate::kFloat) v = static_cast<float>(v);
          if (plan.acc == Accumulate::kHalf) v = round_half(static_cast<float>(v));
          store(Ctype, c, ci, v);
        }
      }
    }
  };
  return loom_emu::submit(handle->stream, compute) == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                                                                  : CUBLAS_STATUS_EXECUTION_FAILED;
}
