/*
 * Emulated cuBLASLt (see cublasLt.h), written from the cuBLASLt documentation.
 *
 * cublasLtMatmul computes D = epilogue(alpha * op(A) op(B) + beta * C) for column-major layouts:
 *  - the product is cublasGemmStridedBatchedEx's reference GEMM (cublas.cpp) into an accumulator
 *    of the compute type (float, or double for 64F), so Lt and plain cuBLAS agree bit for bit;
 *  - the epilogue then runs on that accumulator, before the single rounding to D's type:
 *    BIAS adds bias[row] (the vector has D's rows, packed), RELU is max(x, 0) with a NaN going
 *    to 0 (what cuBLASLt's users report from GPUs: forums.developer.nvidia.com/t/329783), GELU is
 *    the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GELU_AUX stores the GELU
 *    input (after the bias) to the aux matrix; BGRADA / BGRADB store the sums of op(A) over k
 *    (one per row of D) / of op(B) over k (one per column of D) to the bias pointer;
 *  - DGELU multiplies the product by the tanh-GELU's derivative at the aux matrix (the GELU
 *    input GELU_AUX stored in forward); DGELU_BGRAD also stores the sums of that result over
 *    D's columns (one per row of D: the gradient of the forward's bias) to the bias pointer;
 *  - the accumulator lives in the workspace when the heuristic's algorithm asked for one (it
 *    asks when the preference's MAX_WORKSPACE_BYTES allows), else in a temporary allocation;
 *  - the arguments are checked at the call, and the product runs as work on the call's stream
 *    (device_work.h) with copies of the descriptors and of alpha and beta, so that a call
 *    captured into a CUDA graph computes at each replay what it would have computed at the call.
 * Rejected as cuBLASLt rejects them: a null handle (CUBLAS_STATUS_NOT_INITIALIZED); null
 * descriptors, pointers or scalars, a leading dimension below the rows, layouts whose sizes do
 * not make op(A) m x k, op(B) k x n and C, D m x n, differing batch counts, a missing bias or aux
 * pointer, an aux leading dimension below D's rows or not a multiple of 8, a workspace smaller
 * than the algorithm's (CUBLAS_STATUS_INVALID_VALUE); a type combination outside the table, a
 * bias or aux type the epilogue does not take (CUBLAS_STATUS_NOT_SUPPORTED, and no algorithm
 * from the heuristic). Emulator limits, also CUBLAS_STATUS_NOT_SUPPORTED: row-major order and
 * the bit-mask epilogues (RELU_AUX, DRELU), whose mask format cuBLASLt does not document.
 *
 * INT8 (IMMA): A and B CUDA_R_8I with CUBLAS_COMPUTE_32I(_PEDANTIC), and either C/D CUDA_R_32I
 * with scale type CUDA_R_32I (D = alpha * sum + beta * C, exact in int32, wrapping as the
 * hardware's adders do) or C/D CUDA_R_8I with scale type CUDA_R_32F (D = the float alpha * sum
 * + beta * C rounded half to even and saturated to [-128, 127]), the two rows of cuBLASLt's
 * table for regular (column-major) ordering. cuBLASLt's requirements for that ordering are
 * enforced with CUBLAS_STATUS_NOT_SUPPORTED: only "TN" (A transposed, B not), m and k multiples
 * of 4, leading dimensions of A, B, C and D multiples of 4, every matrix pointer 4-byte aligned.
 * No epilogue is emulated for INT8 (Loom requantizes in its own kernel).
 */
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/cuda/emulated/device_memory.h"
#include "core/cuda/emulated/device_work.h"
#include "core/cuda/emulated/element_io.h"
#include "core/error.h"

struct cublasLtContext {
  cublasHandle_t blas = nullptr;  // the reference GEMM
};

struct cublasLtMatmulDescOpaque_t {
  int32_t compute = CUBLAS_COMPUTE_32F;
  int32_t scale = CUDA_R_32F;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;
  int64_t bias_batch_stride = 0;
  void* aux = nullptr;
  int64_t aux_ld = 0, aux_batch_stride = 0;
  int32_t aux_type = -1, bias_type = -1;  // -1: D's type
};

struct cublasLtMatrixLayoutOpaque_t {
  uint32_t type = CUDA_R_32F;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t batch_stride = 0;
};

struct cublasLtMatmulPreferenceOpaque_t {
  uint32_t search_mode = 0;
  uint64_t max_workspace = 0;
};

namespace {

using loom_emu::load;
using loom_emu::store;
using loom_emu::type_size;

template <class T>
cublasStatus_t set_field(T& field, const void* buf, size_t size) {
  if (buf == nullptr || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

bool has_bias(uint32_t e) { return (e & CUBLASLT_EPILOGUE_BIAS) != 0; }
bool has_bgrad(uint32_t e) { return e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB; }
bool has_gelu(uint32_t e) { return (e & CUBLASLT_EPILOGUE_GELU) != 0; }
bool has_relu(uint32_t e) { return (e & CUBLASLT_EPILOGUE_RELU) != 0; }
bool has_aux(uint32_t e) { return (e & 128) != 0; }
bool has_dgelu(uint32_t e) { return (e & 64) != 0; }
// DRELU_BGRAD / DGELU_BGRAD: the bias gradient of the result, after the activation's derivative.
bool has_dbgrad(uint32_t e) { return (e & 16) != 0; }

bool implemented_epilogue(uint32_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_RELU:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU:
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
    case CUBLASLT_EPILOGUE_BGRADA:
    case CUBLASLT_EPILOGUE_BGRADB:
      return true;
  }
  return false;
}

bool is_16bit(int32_t t) { return t == CUDA_R_16F || t == CUDA_R_16BF; }

// The (A/B type, C/D type, compute type, scale type) table for the types Loom passes.
bool supported_types(int32_t ab, int32_t cd, int32_t compute, int32_t scale) {
  switch (compute) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
      return scale == CUDA_R_32F &&
             (ab == CUDA_R_32F ? cd == CUDA_R_32F : is_16bit(ab) && (cd == ab || cd == CUDA_R_32F));
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      return scale == CUDA_R_32F && ab == CUDA_R_32F && cd == CUDA_R_32F;
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
      return scale == CUDA_R_64F && ab == CUDA_R_64F && cd == CUDA_R_64F;
    case CUBLAS_COMPUTE_32I:
    case CUBLAS_COMPUTE_32I_PEDANTIC:
      return ab == CUDA_R_8I && ((scale == CUDA_R_32I && cd == CUDA_R_32I) || (scale == CUDA_R_32F && cd == CUDA_R_8I));
  }
  return false;
}

bool is_int8(const cublasLtMatmulDescOpaque_t* desc) {
  return desc->compute == CUBLAS_COMPUTE_32I || desc->compute == CUBLAS_COMPUTE_32I_PEDANTIC;
}

// A bias (or bias gradient) vector or GELU aux matrix takes D's type; a 16-bit D also takes float.
int32_t effective(int32_t declared, int32_t d_type) { return declared == -1 ? d_type : declared; }
bool vector_type_ok(int32_t t, int32_t d_type) { return t == d_type || (is_16bit(d_type) && t == CUDA_R_32F); }

struct Problem {
  int64_t m = 0, n = 0, k = 0;
  int batch = 1;
};

// The checks shared by the heuristic and the matmul: SUCCESS, or the status cuBLASLt returns.
cublasStatus_t check_problem(const cublasLtMatmulDescOpaque_t* desc, const cublasLtMatrixLayoutOpaque_t* a,
                             const cublasLtMatrixLayoutOpaque_t* b, const cublasLtMatrixLayoutOpaque_t* c,
                             const cublasLtMatrixLayoutOpaque_t* d, Problem& p) {
  if (desc == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  for (const auto* l : {a, b, c, d}) {
    if (l->ld < std::max<int64_t>(1, static_cast<int64_t>(l->rows)) || l->batch < 0)
      return CUBLAS_STATUS_INVALID_VALUE;
    if (l->order != CUBLASLT_ORDER_COL) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const bool ta = desc->transa != CUBLAS_OP_N, tb = desc->transb != CUBLAS_OP_N;
  p.m = static_cast<int64_t>(d->rows);
  p.n = static_cast<int64_t>(d->cols);
  p.k = static_cast<int64_t>(ta ? a->rows : a->cols);
  const uint64_t a_m = ta ? a->cols : a->rows, b_k = tb ? b->cols : b->rows, b_n = tb ? b->rows : b->cols;
  if (a_m != d->rows || b_k != static_cast<uint64_t>(p.k) || b_n != d->cols || c->rows != d->rows ||
      c->cols != d->cols)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (a->batch != d->batch || b->batch != d->batch || c->batch != d->batch) return CUBLAS_STATUS_INVALID_VALUE;
  p.batch = d->batch;
  if (a->type != b->type || c->type != d->type ||
      !supported_types(static_cast<int32_t>(a->type), static_cast<int32_t>(d->type), desc->compute,
                       desc->scale))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const uint32_t e = desc->epilogue;
  if (is_int8(desc)) {
    // IMMA with regular ordering: TN only, m, k and every leading dimension multiples of 4.
    if (desc->transa != CUBLAS_OP_T || desc->transb != CUBLAS_OP_N || p.m % 4 != 0 || p.k % 4 != 0)
      return CUBLAS_STATUS_NOT_SUPPORTED;
    for (const auto* l : {a, b, c, d})
      if (l->ld % 4 != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (e != CUBLASLT_EPILOGUE_DEFAULT) return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (!implemented_epilogue(e)) return CUBLAS_STATUS_NOT_SUPPORTED;
  const int32_t d_type = static_cast<int32_t>(d->type);
  if (has_bias(e) || has_bgrad(e) || has_dbgrad(e)) {
    if (desc->bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    if (!vector_type_ok(effective(desc->bias_type, d_type), d_type)) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (has_aux(e)) {
    if (desc->aux == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    if (desc->aux_ld < p.m || desc->aux_ld % 8 != 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (p.batch > 1 && desc->aux_batch_stride % 8 != 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (effective(desc->aux_type, d_type) != d_type) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

bool double_accumulator(const cublasLtMatmulDescOpaque_t* desc) {
  return desc->compute == CUBLAS_COMPUTE_64F || desc->compute == CUBLAS_COMPUTE_64F_PEDANTIC;
}

size_t accumulator_bytes(const cublasLtMatmulDescOpaque_t* desc, const Problem& p) {
  return static_cast<size_t>(p.m * p.n * std::max(p.batch, 1)) * (double_accumulator(desc) ? 8 : 4);
}

// Throws unless [p, p + elements of type) lies in one device allocation (a GPU would fault).
void check_device(const char* what, const void* p, int64_t elements, cudaDataType type) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(elements, 0)) * type_size(type);
  if (bytes > 0 && (p == nullptr || !loom_emu::is_device_range(p, bytes)))
    LOOM_FAIL("cudaErrorIllegalAddress: cublasLtMatmul: ", what, " (", p, ", ", bytes,
              " bytes) is not in one device allocation; cuBLASLt reads only memory from cudaMalloc");
}

int64_t matrix_extent(const cublasLtMatrixLayoutOpaque_t* l) {  // elements a strided batch can touch
  if (l->rows == 0 || l->cols == 0 || l->batch == 0) return 0;
  return (l->batch - 1) * l->batch_stride + (static_cast<int64_t>(l->cols) - 1) * l->ld +
         static_cast<int64_t>(l->rows);
}

// One cublasLtMatmul as its work holds it: copies of the descriptors and of the host scalars
// alpha and beta, which CUDA reads at the call (a captured call runs again at each replay).
struct MatmulCall {
  cublasLtMatmulDescOpaque_t desc;
  cublasLtMatrixLayoutOpaque_t a, b, c, d;
  Problem p;
  const void *A, *B, *C;
  void* D;
  unsigned char alpha[8], beta[8];  // the scale type's bytes
  cublasHandle_t blas;              // the reference GEMM
  cudaStream_t stream;
  void* workspace;  // the accumulator, when the algorithm asked for one
};

// INT8's requirements on the pointers and their reach, at the call as cuBLASLt checks them.
cublasStatus_t check_int8(const MatmulCall& m) {
  for (const void* ptr : {m.A, m.B, m.C, static_cast<const void*>(m.D)})
    if (reinterpret_cast<uintptr_t>(ptr) % 4 != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  const auto d_type = static_cast<cudaDataType>(m.d.type);
  check_device("A", m.A, matrix_extent(&m.a), CUDA_R_8I);
  check_device("B", m.B, matrix_extent(&m.b), CUDA_R_8I);
  check_device("D", m.D, matrix_extent(&m.d), d_type);
  int32_t beta_i = 0;
  float beta_f = 0;
  std::memcpy(&beta_i, m.beta, sizeof(beta_i));
  std::memcpy(&beta_f, m.beta, sizeof(beta_f));
  if (m.d.type == CUDA_R_32I ? beta_i != 0 : beta_f != 0) check_device("C", m.C, matrix_extent(&m.c), d_type);
  return CUBLAS_STATUS_SUCCESS;
}

// The INT8 product (see the file comment), after check_problem and check_int8 accepted it:
// sum_q A[q, i] B[q, j] (A transposed) in int32 per batch, then D from it, alpha, beta and C.
void run_int8(const MatmulCall& m) {
  const Problem& p = m.p;
  const auto *a = &m.a, *b = &m.b, *c = &m.c, *d = &m.d;
  const bool int_out = d->type == CUDA_R_32I;
  int32_t alpha_i = 0, beta_i = 0;
  float alpha_f = 0, beta_f = 0;
  if (int_out) {
    std::memcpy(&alpha_i, m.alpha, sizeof(alpha_i));
    std::memcpy(&beta_i, m.beta, sizeof(beta_i));
  } else {
    std::memcpy(&alpha_f, m.alpha, sizeof(alpha_f));
    std::memcpy(&beta_f, m.beta, sizeof(beta_f));
  }
  const bool reads_c = int_out ? beta_i != 0 : beta_f != 0;
  loom_emu::DeviceAccess access;
  const auto* ap = static_cast<const int8_t*>(m.A);
  const auto* bp = static_cast<const int8_t*>(m.B);
  for (int bt = 0; bt < p.batch; ++bt)
    for (int64_t j = 0; j < p.n; ++j)
      for (int64_t i = 0; i < p.m; ++i) {
        // Unsigned arithmetic: int32 wraps on overflow, as the tensor cores' adders do.
        uint32_t sum = 0;
        for (int64_t q = 0; q < p.k; ++q)
          sum += static_cast<uint32_t>(int32_t{ap[bt * a->batch_stride + q + i * a->ld]} *
                                       int32_t{bp[bt * b->batch_stride + q + j * b->ld]});
        const int64_t c_at = bt * c->batch_stride + i + j * c->ld,
                      d_at = bt * d->batch_stride + i + j * d->ld;
        if (int_out) {
          uint32_t v = static_cast<uint32_t>(alpha_i) * sum;
          if (reads_c)
            v +=
                static_cast<uint32_t>(beta_i) * static_cast<uint32_t>(static_cast<const int32_t*>(m.C)[c_at]);
          static_cast<int32_t*>(m.D)[d_at] = static_cast<int32_t>(v);
        } else {
          float v = alpha_f * static_cast<float>(static_cast<int32_t>(sum));
          if (reads_c) v += beta_f * static_cast<float>(static_cast<const int8_t*>(m.C)[c_at]);
          v = std::nearbyint(std::min(127.0f, std::max(-128.0f, v)));
          static_cast<int8_t*>(m.D)[d_at] = static_cast<int8_t>(v);
        }
      }
}

double gelu_tanh(double x, bool f64) {
  if (f64) return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  const float xf = static_cast<float>(x);
  return 0.5f * xf * (1.0f + std::tanh(0.7978845608028654f * (xf + 0.044715f * xf * xf * xf)));
}

// d/dx of gelu_tanh: with u = s (x + c x^3) and t = tanh(u), 0.5 (1 + t) + 0.5 x (1 - t^2) s (1 + 3 c x^2).
double gelu_tanh_derivative(double x, bool f64) {
  if (f64) {
    const double s = std::sqrt(2.0 / M_PI), c = 0.044715, t = std::tanh(s * (x + c * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * c * x * x);
  }
  const float xf = static_cast<float>(x), s = 0.7978845608028654f, c = 0.044715f;
  const float t = std::tanh(s * (xf + c * xf * xf * xf));
  return 0.5f * (1.0f + t) + 0.5f * xf * (1.0f - t * t) * s * (1.0f + 3.0f * c * xf * xf);
}

// A float matmul's alpha or beta from the copied bytes of its scale type (double or float).
double scale_value(const unsigned char* bytes, bool f64) {
  if (f64) {
    double v;
    std::memcpy(&v, bytes, sizeof v);
    return v;
  }
  float v;
  std::memcpy(&v, bytes, sizeof v);
  return v;
}

// The reach of every operand of a float matmul, checked at the call as a GPU would fault on it.
void check_float_operands(const MatmulCall& m) {
  const Problem& p = m.p;
  const uint32_t e = m.desc.epilogue;
  const auto d_type = static_cast<cudaDataType>(m.d.type);
  const bool f64 = double_accumulator(&m.desc);
  const double alpha_v = scale_value(m.alpha, f64), beta_v = scale_value(m.beta, f64);
  if (alpha_v != 0 && p.k > 0) {
    check_device("A", m.A, matrix_extent(&m.a), static_cast<cudaDataType>(m.a.type));
    check_device("B", m.B, matrix_extent(&m.b), static_cast<cudaDataType>(m.b.type));
  }
  const auto bias_type = static_cast<cudaDataType>(effective(m.desc.bias_type, static_cast<int32_t>(d_type)));
  const int64_t bias_len = e == CUBLASLT_EPILOGUE_BGRADB ? p.n : p.m;  // DGELU_BGRAD: D's rows
  check_device("D", m.D, matrix_extent(&m.d), d_type);
  if (beta_v != 0) check_device("C", m.C, matrix_extent(&m.c), static_cast<cudaDataType>(m.c.type));
  if (has_bias(e) || has_bgrad(e) || has_dbgrad(e))
    check_device("the bias vector", m.desc.bias, (p.batch - 1) * m.desc.bias_batch_stride + bias_len,
                 bias_type);
  if (has_aux(e))
    check_device("the aux matrix", m.desc.aux,
                 (p.batch - 1) * m.desc.aux_batch_stride + (p.n - 1) * m.desc.aux_ld + p.m, d_type);
  if (has_bgrad(e)) {
    const auto& l = e == CUBLASLT_EPILOGUE_BGRADA ? m.a : m.b;
    check_device(e == CUBLASLT_EPILOGUE_BGRADA ? "A" : "B", e == CUBLASLT_EPILOGUE_BGRADA ? m.A : m.B,
                 matrix_extent(&l), static_cast<cudaDataType>(l.type));
  }
}

// The float matmul, after check_problem and check_float_operands accepted it: the reference GEMM
// into the accumulator, then the epilogue and the one rounding to D's type.
void run_float(const MatmulCall& m) {
  const Problem& p = m.p;
  const bool f64 = double_accumulator(&m.desc);
  const double beta_v = scale_value(m.beta, f64);
  const cudaDataType acc_type = f64 ? CUDA_R_64F : CUDA_R_32F;
  const auto d_type = static_cast<cudaDataType>(m.d.type);
  const uint32_t e = m.desc.epilogue;
  const auto bias_type = static_cast<cudaDataType>(effective(m.desc.bias_type, static_cast<int32_t>(d_type)));
  const int64_t bias_len = e == CUBLASLT_EPILOGUE_BGRADB ? p.n : p.m;

  // The product alpha op(A) op(B) in the compute type, into the workspace or a temporary (this
  // runs as device work, so the allocation is the emulator's, not a call a capture would see).
  void* acc = m.workspace;
  if (acc == nullptr && cudaMalloc(&acc, accumulator_bytes(&m.desc, p)) != cudaSuccess)
    LOOM_FAIL("cublasLtMatmul: CUBLAS_STATUS_ALLOC_FAILED: no device memory for the accumulator");
  const double zero = 0.0;
  const float zero_f = 0.0f;
  cublasSetStream(m.blas, m.stream);
  const cublasStatus_t s = cublasGemmStridedBatchedEx(
      m.blas, static_cast<cublasOperation_t>(m.desc.transa), static_cast<cublasOperation_t>(m.desc.transb),
      static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), m.alpha, m.A,
      static_cast<cudaDataType>(m.a.type), static_cast<int>(m.a.ld), m.a.batch_stride, m.B,
      static_cast<cudaDataType>(m.b.type), static_cast<int>(m.b.ld), m.b.batch_stride,
      f64 ? static_cast<const void*>(&zero) : static_cast<const void*>(&zero_f), acc, acc_type,
      static_cast<int>(p.m), p.m * p.n, p.batch, static_cast<cublasComputeType_t>(m.desc.compute),
      CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) {
    if (m.workspace == nullptr) cudaFree(acc);
    LOOM_FAIL("cublasLtMatmul: the reference GEMM failed with ", cublasGetStatusName(s));
  }
  {
    loom_emu::DeviceAccess access;  // device memory is readable only while device work runs
    auto round = [&](double v) { return f64 ? v : static_cast<double>(static_cast<float>(v)); };
    std::vector<double> row_sums;  // DGELU_BGRAD's bias gradient, per row of D
    for (int b = 0; b < p.batch; ++b) {
      row_sums.assign(has_dbgrad(e) ? static_cast<size_t>(p.m) : 0, 0.0);
      const int64_t acc_off = b * p.m * p.n, d_off = b * m.d.batch_stride, c_off = b * m.c.batch_stride;
      for (int64_t j = 0; j < p.n; ++j) {
        for (int64_t i = 0; i < p.m; ++i) {
          double v = load(acc_type, acc, acc_off + i + j * p.m);
          if (beta_v != 0)
            v = round(v + beta_v * load(static_cast<cudaDataType>(m.c.type), m.C, c_off + i + j * m.c.ld));
          if (has_bias(e)) v = round(v + load(bias_type, m.desc.bias, b * m.desc.bias_batch_stride + i));
          const int64_t aux_at = b * m.desc.aux_batch_stride + i + j * m.desc.aux_ld;
          if (has_dgelu(e)) {  // aux is the forward's GELU input, read
            v = round(v * gelu_tanh_derivative(load(d_type, m.desc.aux, aux_at), f64));
            if (has_dbgrad(e)) row_sums[static_cast<size_t>(i)] = round(row_sums[static_cast<size_t>(i)] + v);
          } else if (has_aux(e)) {  // GELU_AUX: aux gets the GELU input, written
            store(d_type, m.desc.aux, aux_at, v);
          }
          if (has_relu(e)) v = v > 0 ? v : 0.0;
          if (has_gelu(e)) v = gelu_tanh(v, f64);
          store(d_type, m.D, d_off + i + j * m.d.ld, v);
        }
      }
      if (has_dbgrad(e))
        for (int64_t i = 0; i < p.m; ++i)
          store(bias_type, m.desc.bias, b * m.desc.bias_batch_stride + i, row_sums[static_cast<size_t>(i)]);
      if (has_bgrad(e)) {
        // The sums over k of op(A)'s rows (BGRADA) or op(B)'s columns (BGRADB).
        const bool from_a = e == CUBLASLT_EPILOGUE_BGRADA;
        const auto* l = from_a ? &m.a : &m.b;
        const void* src = from_a ? m.A : m.B;
        const bool transposed = (from_a ? m.desc.transa : m.desc.transb) != CUBLAS_OP_N;
        for (int64_t v_i = 0; v_i < bias_len; ++v_i) {
          double sum = 0;
          for (int64_t q = 0; q < p.k; ++q) {
            // op(A)[v_i, q] or op(B)[q, v_i], as stored.
            const int64_t r = from_a != transposed ? v_i : q, c = from_a != transposed ? q : v_i;
            sum = round(sum +
                        load(static_cast<cudaDataType>(l->type), src, b * l->batch_stride + r + c * l->ld));
          }
          store(bias_type, m.desc.bias, b * m.desc.bias_batch_stride + v_i, sum);
        }
      }
    }
  }
  if (m.workspace == nullptr) cudaFree(acc);
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* ctx = new cublasLtContext();
  if (cublasStatus_t s = cublasCreate(&ctx->blas); s != CUBLAS_STATUS_SUCCESS) {
    delete ctx;
    return s;
  }
  *lightHandle = ctx;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  cublasDestroy(lightHandle->blas);
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t status) { return cublasGetStatusName(status); }
const char* cublasLtGetStatusString(cublasStatus_t status) { return cublasGetStatusString(status); }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  if (matmulDesc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* d = new cublasLtMatmulDescOpaque_t();
  d->compute = computeType;
  d->scale = scaleType;
  *matmulDesc = d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  delete matmulDesc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return set_field(d->compute, buf, size);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return set_field(d->scale, buf, size);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: {
      int32_t mode = 0;
      if (cublasStatus_t s = set_field(mode, buf, size); s != CUBLAS_STATUS_SUCCESS) return s;
      if (mode != CUBLASLT_POINTER_MODE_HOST) return CUBLAS_STATUS_NOT_SUPPORTED;  // emulator limit
      d->pointer_mode = mode;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
      int32_t op = 0;
      if (cublasStatus_t s = set_field(op, buf, size); s != CUBLAS_STATUS_SUCCESS) return s;
      if (op != CUBLAS_OP_N && op != CUBLAS_OP_T && op != CUBLAS_OP_C) return CUBLAS_STATUS_INVALID_VALUE;
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->transa : d->transb) = op;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return set_field(d->epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return set_field(d->bias, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      return set_field(d->bias_batch_stride, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return set_field(d->aux, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return set_field(d->aux_ld, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
      return set_field(d->aux_batch_stride, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
      return set_field(d->aux_type, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return set_field(d->bias_type, buf, size);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (matLayout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* l = new cublasLtMatrixLayoutOpaque_t();
  l->type = static_cast<uint32_t>(type);
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  *matLayout = l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  delete matLayout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  if (l == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
      return set_field(l->type, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      return set_field(l->order, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return set_field(l->rows, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return set_field(l->cols, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return set_field(l->ld, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return set_field(l->batch, buf, size);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return set_field(l->batch_stride, buf, size);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = new cublasLtMatmulPreferenceOpaque_t();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
      return set_field(pref->search_mode, buf, size);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return set_field(pref->max_workspace, buf, size);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

// algo.data[0]: the workspace bytes the algorithm uses (0: it allocates its accumulator itself).
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (preference == nullptr || requestedAlgoCount < 1 || heuristicResultsArray == nullptr ||
      returnAlgoCount == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  *returnAlgoCount = 0;
  Problem p;
  if (cublasStatus_t s = check_problem(operationDesc, Adesc, Bdesc, Cdesc, Ddesc, p); s != CUBLAS_STATUS_SUCCESS)
    return s;
  cublasLtMatmulHeuristicResult_t r{};
  const size_t want = accumulator_bytes(operationDesc, p);
  r.workspaceSize = want <= preference->max_workspace ? want : 0;
  r.algo.data[0] = r.workspaceSize;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  heuristicResultsArray[0] = r;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                              cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                              cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSizeInBytes,
                              cudaStream_t stream) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  Problem p;
  if (cublasStatus_t s = check_problem(desc, Adesc, Bdesc, Cdesc, Ddesc, p); s != CUBLAS_STATUS_SUCCESS) return s;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const size_t algo_workspace = algo != nullptr ? static_cast<size_t>(algo->data[0]) : 0;
  if (workspaceSizeInBytes < algo_workspace || (algo_workspace > 0 && workspace == nullptr))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CUBLAS_STATUS_SUCCESS;
  MatmulCall call{*desc,
                  *Adesc,
                  *Bdesc,
                  *Cdesc,
                  *Ddesc,
                  p,
                  A,
                  B,
                  C,
                  D,
                  {},
                  {},
                  lightHandle->blas,
                  stream,
                  algo_workspace > 0 ? workspace : nullptr};
  const size_t scale_bytes = double_accumulator(desc) ? 8 : 4;  // double, or float / int32
  std::memcpy(call.alpha, alpha, scale_bytes);
  std::memcpy(call.beta, beta, scale_bytes);
  if (is_int8(desc)) {
    if (cublasStatus_t s = check_int8(call); s != CUBLAS_STATUS_SUCCESS) return s;
  } else {
    check_float_operands(call);
  }
  const cudaError_t e = loom_emu::submit(stream, [call] {
    if (is_int8(&call.desc)) {
      run_int8(call);
    } else {
      run_float(call);
    }
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
