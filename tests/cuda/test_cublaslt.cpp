/*
 * The emulated cuBLASLt (core/cuda/emulated/cublasLt.h): the epilogues Loom uses against a host
 * reference (BIAS, RELU_BIAS, GELU_AUX_BIAS with its aux matrix, BGRADB, DGELU and DGELU_BGRAD
 * reading that aux matrix, a batch), and each
 * rejection the cuBLASLt documentation lists for what Loom could get wrong, with cuBLASLt's
 * status; the INT8 GEMM (s8 x s8 -> s32, and -> s8 with a float scale) against integer sums, with
 * the layout rules cuBLASLt imposes on it. Emulated build only: these pin the emulation's contract
 * (a GPU runs the op tests).
 */
#include <doctest/doctest.h>

#if __has_include(<cublasLt.h>)
#include <cublasLt.h>  // the emulated one defines LOOM_CUDA_EMULATED (through cuda_runtime_api.h)
#endif
#if defined(LOOM_CUDA_EMULATED)
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cuda/blas_lt.h"
#include "ops/ops.h"
#include "tests/gpu_test.h"

using namespace loom;

namespace {

// A float device buffer holding `values`, freed with the fixture.
struct DeviceFloats {
  Tensor t;
  explicit DeviceFloats(const std::vector<float>& values)
      : t(tensor(values, {static_cast<int64_t>(values.size())}).to(Device::cuda())) {}
  DeviceFloats(int64_t n) : t(zeros({n}, Device::cuda())) {}  // NOLINT: a size
  float* ptr() const { return t.data_ptr<float>(); }
  std::vector<float> host() const { return t.to(kCPU).to_vector<float>(); }
};

// D (m x n) = op(A) op(B) with A m x k and B k x n column-major (op N), float, one batch.
struct Gemm {
  int64_t m, n, k;
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  DeviceFloats A, B, D;
  std::vector<float> ha, hb;

  Gemm(int64_t m_, int64_t n_, int64_t k_) : m(m_), n(n_), k(k_), A(values(m_ * k_, 0.3)), B(values(k_ * n_, 0.7)), D(m_ * n_) {
    ha = values(m * k, 0.3);
    hb = values(k * n, 0.7);
    REQUIRE(cublasLtCreate(&handle) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&a, CUDA_R_32F, m, k, m) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&b, CUDA_R_32F, k, n, k) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, m, n, m) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
  }
  ~Gemm() {
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(d);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(handle);
  }
  static std::vector<float> values(int64_t n, double seed) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(std::sin(seed + 1.3 * i));
    return v;
  }
  template <class T>
  cublasStatus_t set(cublasLtMatmulDescAttributes_t attr, const T& v) {
    return cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof(v));
  }
  cublasStatus_t heuristic(int& found) {
    cublasLtMatmulHeuristicResult_t r{};
    return cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, d, d, pref, 1, &r, &found);
  }
  cublasStatus_t run() {
    const float one = 1.0f, zero = 0.0f;
    return cublasLtMatmul(handle, desc, &one, A.ptr(), a, B.ptr(), b, &zero, D.ptr(), d, D.ptr(), d, nullptr,
                          nullptr, 0, nullptr);
  }
  double product(int64_t i, int64_t j) const {
    double s = 0;
    for (int64_t p = 0; p < k; ++p) s += static_cast<double>(ha[i + p * m]) * hb[p + j * k];
    return s;
  }
};

double gelu_tanh(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

// Its derivative by a central difference, independent of the emulator's closed form.
double gelu_tanh_slope(double x) {
  return (gelu_tanh(x + 1e-6) - gelu_tanh(x - 1e-6)) / 2e-6;
}

}  // namespace

TEST_CASE("emulated cuBLASLt: BIAS, RELU_BIAS and GELU_AUX_BIAS apply the bias, then the activation") {
  LOOM_REQUIRE_GPU();
  for (cublasLtEpilogue_t e : {CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_RELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS}) {
    CAPTURE(static_cast<int>(e));
    Gemm g(8, 3, 5);
    DeviceFloats bias(Gemm::values(8, 1.9)), aux(8 * 3);
    std::vector<float> hbias = Gemm::values(8, 1.9);
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(e)) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(bias.ptr())) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(aux.ptr())) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{8}) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(g.run() == CUBLAS_STATUS_SUCCESS);
    std::vector<float> out = g.D.host(), pre = aux.host();
    for (int64_t j = 0; j < 3; ++j) {
      for (int64_t i = 0; i < 8; ++i) {
        const double h = g.product(i, j) + hbias[static_cast<size_t>(i)];  // the bias follows D's rows
        const double want = e == CUBLASLT_EPILOGUE_BIAS ? h : e == CUBLASLT_EPILOGUE_RELU_BIAS ? std::max(h, 0.0) : gelu_tanh(h);
        CHECK(out[static_cast<size_t>(i + j * 8)] == doctest::Approx(want).epsilon(1e-5));
        if (e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) CHECK(pre[static_cast<size_t>(i + j * 8)] == doctest::Approx(h).epsilon(1e-5));
      }
    }
  }
}

// The RELU epilogue is max(x, 0) with a NaN going to 0, as cuBLASLt's users report it on GPUs;
// Loom's linear_activation keeps relu out of the epilogue for that reason (ops/cuda/linalg_kernels.cpp).
// The tanh GELU of a NaN is NaN, as its formula gives.
TEST_CASE("emulated cuBLASLt: RELU_BIAS turns a NaN into 0, GELU_BIAS keeps it") {
  LOOM_REQUIRE_GPU();
  for (cublasLtEpilogue_t e : {CUBLASLT_EPILOGUE_RELU_BIAS, CUBLASLT_EPILOGUE_GELU_BIAS}) {
    CAPTURE(static_cast<int>(e));
    Gemm g(4, 2, 3);
    std::vector<float> hbias = Gemm::values(4, 0.4);
    hbias[1] = std::nanf("");
    DeviceFloats bias(hbias);
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(e)) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(bias.ptr())) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(g.run() == CUBLAS_STATUS_SUCCESS);
    const std::vector<float> out = g.D.host();
    for (int64_t j = 0; j < 2; ++j) {
      const float v = out[static_cast<size_t>(1 + j * 4)];  // row 1 of D: its bias is NaN
      if (e == CUBLASLT_EPILOGUE_RELU_BIAS) CHECK(v == 0.0f);
      else CHECK(std::isnan(v));
      CHECK(std::isfinite(out[static_cast<size_t>(0 + j * 4)]));
    }
  }
}

TEST_CASE("emulated cuBLASLt: BGRADB sums op(B) over k, one value per column of D") {
  LOOM_REQUIRE_GPU();
  Gemm g(4, 6, 5);
  DeviceFloats grad(6);
  REQUIRE(g.set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(CUBLASLT_EPILOGUE_BGRADB)) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(g.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(grad.ptr())) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(g.run() == CUBLAS_STATUS_SUCCESS);
  std::vector<float> sums = grad.host(), out = g.D.host();
  for (int64_t j = 0; j < 6; ++j) {
    double s = 0;
    for (int64_t p = 0; p < 5; ++p) s += g.hb[static_cast<size_t>(p + j * 5)];
    CHECK(sums[static_cast<size_t>(j)] == doctest::Approx(s).epsilon(1e-5));
    CHECK(out[static_cast<size_t>(j * 4)] == doctest::Approx(g.product(0, j)).epsilon(1e-5));
  }
}

TEST_CASE("emulated cuBLASLt: DGELU multiplies by the GELU's slope at aux; DGELU_BGRAD also sums D's rows") {
  LOOM_REQUIRE_GPU();
  for (cublasLtEpilogue_t e : {CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_DGELU_BGRAD}) {
    CAPTURE(static_cast<int>(e));
    Gemm g(8, 3, 5);
    std::vector<float> hpre = Gemm::values(16 * 3, 2.3);  // aux ld 16: a column's padding is skipped
    for (float& v : hpre) v *= 3.0f;                      // across the GELU's curved part
    DeviceFloats pre(hpre), grad_bias(8);
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(e)) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(pre.ptr())) ==
            CUBLAS_STATUS_SUCCESS);
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{16}) == CUBLAS_STATUS_SUCCESS);
    if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
      CHECK(g.run() == CUBLAS_STATUS_INVALID_VALUE);  // the bias gradient needs its pointer
      REQUIRE(g.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(grad_bias.ptr())) ==
              CUBLAS_STATUS_SUCCESS);
    }
    REQUIRE(g.run() == CUBLAS_STATUS_SUCCESS);
    std::vector<float> out = g.D.host(), sums = grad_bias.host();
    CHECK(pre.host() == hpre);  // read, not written
    for (int64_t i = 0; i < 8; ++i) {
      double row = 0;
      for (int64_t j = 0; j < 3; ++j) {
        const double want = g.product(i, j) * gelu_tanh_slope(hpre[static_cast<size_t>(i + j * 16)]);
        CHECK(out[static_cast<size_t>(i + j * 8)] == doctest::Approx(want).epsilon(1e-5));
        row += want;
      }
      if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD)
        CHECK(sums[static_cast<size_t>(i)] == doctest::Approx(row).epsilon(1e-5));
      else
        CHECK(sums[static_cast<size_t>(i)] == 0.0f);
    }
  }
}

TEST_CASE("emulated cuBLASLt: the ReLU bit-mask epilogues are refused, as an emulator limit") {
  LOOM_REQUIRE_GPU();
  for (cublasLtEpilogue_t e : {CUBLASLT_EPILOGUE_RELU_AUX_BIAS, CUBLASLT_EPILOGUE_DRELU_BGRAD}) {
    CAPTURE(static_cast<int>(e));
    Gemm g(8, 3, 5);
    int found = -1;
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(e)) == CUBLAS_STATUS_SUCCESS);
    CHECK(g.heuristic(found) == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(found == 0);
  }
}

TEST_CASE("emulated cuBLASLt: what cuBLASLt rejects, with its status") {
  LOOM_REQUIRE_GPU();
  int found = -1;
  SUBCASE("a null handle") {
    Gemm g(4, 4, 4);
    cublasLtMatmulHeuristicResult_t r{};
    CHECK(cublasLtMatmulAlgoGetHeuristic(nullptr, g.desc, g.a, g.b, g.d, g.d, g.pref, 1, &r, &found) ==
          CUBLAS_STATUS_NOT_INITIALIZED);
  }
  SUBCASE("a leading dimension below the rows") {
    Gemm g(4, 4, 4);
    const int64_t ld = 3;
    REQUIRE(cublasLtMatrixLayoutSetAttribute(g.a, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof(ld)) == CUBLAS_STATUS_SUCCESS);
    CHECK(g.heuristic(found) == CUBLAS_STATUS_INVALID_VALUE);
    CHECK(g.run() == CUBLAS_STATUS_INVALID_VALUE);
  }
  SUBCASE("layouts whose sizes do not chain (op(A) 4 x 4, op(B) 5 x 4)") {
    Gemm g(4, 4, 4);
    const uint64_t rows = 5;
    REQUIRE(cublasLtMatrixLayoutSetAttribute(g.b, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof(rows)) == CUBLAS_STATUS_SUCCESS);
    CHECK(g.heuristic(found) == CUBLAS_STATUS_INVALID_VALUE);
  }
  SUBCASE("an attribute of the wrong size") {
    Gemm g(4, 4, 4);
    const int64_t wide = CUBLASLT_EPILOGUE_BIAS;  // EPILOGUE is a uint32_t
    CHECK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &wide, sizeof(wide)) ==
          CUBLAS_STATUS_INVALID_VALUE);
  }
  SUBCASE("a bias epilogue without a bias pointer") {
    Gemm g(4, 4, 4);
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(CUBLASLT_EPILOGUE_RELU_BIAS)) == CUBLAS_STATUS_SUCCESS);
    CHECK(g.run() == CUBLAS_STATUS_INVALID_VALUE);
  }
  SUBCASE("GELU_AUX without the aux pointer, or with an aux ld that is not a multiple of 8") {
    Gemm g(4, 4, 4);
    DeviceFloats aux(64);
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(CUBLASLT_EPILOGUE_GELU_AUX)) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{8}) == CUBLAS_STATUS_SUCCESS);
    CHECK(g.run() == CUBLAS_STATUS_INVALID_VALUE);
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(aux.ptr())) == CUBLAS_STATUS_SUCCESS);
    CHECK(g.run() == CUBLAS_STATUS_SUCCESS);
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{12}) == CUBLAS_STATUS_SUCCESS);
    CHECK(g.run() == CUBLAS_STATUS_INVALID_VALUE);
  }
  SUBCASE("a bias type the epilogue does not take: no algorithm") {
    Gemm g(4, 4, 4);
    DeviceFloats bias(4);
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(CUBLASLT_EPILOGUE_BIAS)) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(bias.ptr())) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(CUDA_R_64F)) == CUBLAS_STATUS_SUCCESS);
    CHECK(g.heuristic(found) == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(found == 0);
  }
  SUBCASE("16-bit inputs with TF32 compute") {
    Gemm g(4, 4, 4);
    for (auto* l : {g.a, g.b}) {
      const auto t = static_cast<uint32_t>(CUDA_R_16F);
      REQUIRE(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_TYPE, &t, sizeof(t)) == CUBLAS_STATUS_SUCCESS);
    }
    REQUIRE(g.set(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, static_cast<int32_t>(CUBLAS_COMPUTE_32F_FAST_TF32)) ==
            CUBLAS_STATUS_SUCCESS);
    CHECK(g.heuristic(found) == CUBLAS_STATUS_NOT_SUPPORTED);
  }
  SUBCASE("a workspace smaller than the algorithm's") {
    Gemm g(4, 4, 4);
    const uint64_t max_ws = 1 << 20;
    REQUIRE(cublasLtMatmulPreferenceSetAttribute(g.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws,
                                                 sizeof(max_ws)) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t r{};
    REQUIRE(cublasLtMatmulAlgoGetHeuristic(g.handle, g.desc, g.a, g.b, g.d, g.d, g.pref, 1, &r, &found) ==
            CUBLAS_STATUS_SUCCESS);
    REQUIRE(found == 1);
    REQUIRE(r.workspaceSize > 0);
    const float one = 1.0f, zero = 0.0f;
    CHECK(cublasLtMatmul(g.handle, g.desc, &one, g.A.ptr(), g.a, g.B.ptr(), g.b, &zero, g.D.ptr(), g.d, g.D.ptr(),
                         g.d, &r.algo, nullptr, 0, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
    DeviceFloats ws(static_cast<int64_t>(r.workspaceSize / 4));
    CHECK(cublasLtMatmul(g.handle, g.desc, &one, g.A.ptr(), g.a, g.B.ptr(), g.b, &zero, g.D.ptr(), g.d, g.D.ptr(),
                         g.d, &r.algo, ws.ptr(), r.workspaceSize, nullptr) == CUBLAS_STATUS_SUCCESS);
  }
}

namespace {

// D (m x n, column-major) = A^T B for int8 A (k x m, ld lda) and B (k x n, ld ldb): cuBLASLt's
// INT8 "TN" form. Host copies of A and B for the reference sums.
struct Int8Gemm {
  int64_t m, n, k, lda, ldb;
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  std::vector<int8_t> ha, hb;
  Tensor A, B, D;

  Int8Gemm(int64_t m_, int64_t n_, int64_t k_, int64_t lda_, int64_t ldb_, cudaDataType d_type = CUDA_R_32I,
           cudaDataType scale_type = CUDA_R_32I)
      : m(m_), n(n_), k(k_), lda(lda_), ldb(ldb_) {
    for (int64_t i = 0; i < lda * m; ++i) ha.push_back(static_cast<int8_t>(i == 0 ? -128 : (i * 37) % 256 - 128));
    for (int64_t i = 0; i < ldb * n; ++i) hb.push_back(static_cast<int8_t>(i == 0 ? -128 : (i * 91) % 256 - 128));
    A = tensor(ha, {lda * m}).to(Device::cuda());
    B = tensor(hb, {ldb * n}).to(Device::cuda());
    D = zeros({m * n}, TensorOptions(d_type == CUDA_R_32I ? kInt32 : kInt8).device(Device::cuda()));
    REQUIRE(cublasLtCreate(&handle) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32I, scale_type) == CUBLAS_STATUS_SUCCESS);
    set(CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(CUBLAS_OP_T));
    REQUIRE(cublasLtMatrixLayoutCreate(&a, CUDA_R_8I, k, m, lda) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&b, CUDA_R_8I, k, n, ldb) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&d, d_type, m, n, m) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
  }
  ~Int8Gemm() {
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(d);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(handle);
  }
  template <class T>
  void set(cublasLtMatmulDescAttributes_t attr, const T& v) {
    REQUIRE(cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof(v)) == CUBLAS_STATUS_SUCCESS);
  }
  cublasStatus_t heuristic() {
    cublasLtMatmulHeuristicResult_t r{};
    int found = 0;
    return cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, d, d, pref, 1, &r, &found);
  }
  template <class Scale>
  cublasStatus_t run(Scale alpha, const void* a_ptr = nullptr) {
    const Scale beta = 0;
    return cublasLtMatmul(handle, desc, &alpha, a_ptr ? a_ptr : A.data_ptr(), a, B.data_ptr(), b, &beta, D.data_ptr(),
                          d, D.data_ptr(), d, nullptr, nullptr, 0, nullptr);
  }
  int64_t sum(int64_t i, int64_t j) const {
    int64_t s = 0;
    for (int64_t q = 0; q < k; ++q) s += int64_t{ha[static_cast<size_t>(q + i * lda)]} * hb[static_cast<size_t>(q + j * ldb)];
    return s;
  }
};

}  // namespace

TEST_CASE("emulated cuBLASLt INT8: s8 x s8 -> s32 (TN) is the exact integer sum, padded leading dimensions too") {
  LOOM_REQUIRE_GPU();
  for (int64_t ld : {12, 16}) {
    CAPTURE(ld);
    Int8Gemm g(8, 3, 12, ld, ld);
    REQUIRE(g.heuristic() == CUBLAS_STATUS_SUCCESS);
    REQUIRE(g.run(int32_t{1}) == CUBLAS_STATUS_SUCCESS);
    std::vector<int32_t> out = g.D.to(kCPU).to_vector<int32_t>();
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t i = 0; i < 8; ++i) CHECK(out[static_cast<size_t>(i + j * 8)] == g.sum(i, j));
  }
}

TEST_CASE("emulated cuBLASLt INT8: s8 x s8 -> s8 with a float scale rounds half to even and saturates") {
  LOOM_REQUIRE_GPU();
  Int8Gemm g(4, 5, 8, 8, 8, CUDA_R_8I, CUDA_R_32F);
  REQUIRE(g.heuristic() == CUBLAS_STATUS_SUCCESS);
  const float alpha = 1.0f / 256.0f;  // exact: the products of k / 256 end in .5 often enough
  REQUIRE(g.run(alpha) == CUBLAS_STATUS_SUCCESS);
  std::vector<int8_t> out = g.D.to(kCPU).to_vector<int8_t>();
  for (int64_t j = 0; j < 5; ++j)
    for (int64_t i = 0; i < 4; ++i) {
      const double want = std::nearbyint(std::clamp(static_cast<double>(g.sum(i, j)) / 256.0, -128.0, 127.0));
      CHECK(out[static_cast<size_t>(i + j * 4)] == static_cast<int8_t>(want));
    }
}

TEST_CASE("emulated cuBLASLt INT8: what cuBLASLt's IMMA path rejects, with its status") {
  LOOM_REQUIRE_GPU();
  SUBCASE("not TN (A not transposed)") {
    Int8Gemm g(8, 3, 12, 12, 12);
    g.set(CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(CUBLAS_OP_N));
    cublasLtMatrixLayoutDestroy(g.a);
    REQUIRE(cublasLtMatrixLayoutCreate(&g.a, CUDA_R_8I, 8, 12, 8) == CUBLAS_STATUS_SUCCESS);
    CHECK(g.heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(g.run(int32_t{1}) == CUBLAS_STATUS_NOT_SUPPORTED);
  }
  SUBCASE("B transposed") {
    Int8Gemm g(8, 4, 12, 12, 12);
    g.set(CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(CUBLAS_OP_T));
    cublasLtMatrixLayoutDestroy(g.b);
    REQUIRE(cublasLtMatrixLayoutCreate(&g.b, CUDA_R_8I, 4, 12, 4) == CUBLAS_STATUS_SUCCESS);
    CHECK(g.heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);
  }
  SUBCASE("m or k not a multiple of 4") {
    Int8Gemm rows(6, 3, 12, 12, 12), depth(8, 3, 10, 12, 12);
    CHECK(rows.heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(depth.heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);
  }
  SUBCASE("a leading dimension not a multiple of 4") {
    Int8Gemm g(8, 3, 12, 14, 12);
    CHECK(g.heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(g.run(int32_t{1}) == CUBLAS_STATUS_NOT_SUPPORTED);
  }
  SUBCASE("a pointer that is not 4-byte aligned") {
    Int8Gemm g(8, 3, 12, 12, 12);
    REQUIRE(g.heuristic() == CUBLAS_STATUS_SUCCESS);
    CHECK(g.run(int32_t{1}, static_cast<const int8_t*>(g.A.data_ptr()) + 1) == CUBLAS_STATUS_NOT_SUPPORTED);
  }
  SUBCASE("types outside the table: int32 D with a float scale, int8 D with an int scale, float A") {
    Int8Gemm f32_scale(8, 3, 12, 12, 12, CUDA_R_32I, CUDA_R_32F), i32_scale(8, 3, 12, 12, 12, CUDA_R_8I, CUDA_R_32I);
    CHECK(f32_scale.heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);
    CHECK(i32_scale.heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);
    Int8Gemm g(8, 3, 12, 12, 12);
    const auto t = static_cast<uint32_t>(CUDA_R_32F);
    for (auto* l : {g.a, g.b})
      REQUIRE(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_TYPE, &t, sizeof(t)) == CUBLAS_STATUS_SUCCESS);
    CHECK(g.heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);
  }
  SUBCASE("an epilogue (none is offered here for INT8)") {
    Int8Gemm g(8, 3, 12, 12, 12);
    g.set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(CUBLASLT_EPILOGUE_RELU));
    CHECK(g.heuristic() == CUBLAS_STATUS_NOT_SUPPORTED);
  }
}

TEST_CASE("cuBLASLt INT8 wrapper: sizes that break cuBLASLt's multiple-of-4 rule are an error, not a wrong result") {
  LOOM_REQUIRE_GPU();
  Tensor a = zeros({64}, TensorOptions(kInt8).device(Device::cuda()));
  Tensor d = zeros({64}, TensorOptions(kInt32).device(Device::cuda()));
  cuda::LtInt8Gemm g{.m = 6, .n = 2, .k = 4, .a = a.data_ptr<int8_t>(), .lda = 4, .b = a.data_ptr<int8_t>(),
                     .ldb = 4, .d = d.data_ptr<int32_t>(), .ldd = 6};
  CHECK_THROWS_WITH(cuda::lt_matmul_int8(g), doctest::Contains("multiples of 4"));
  g.m = 8;
  g.ldd = 8;
  cuda::lt_matmul_int8(g);
  CHECK(d.to(kCPU).to_vector<int32_t>() == std::vector<int32_t>(64, 0));
}

#endif  // LOOM_CUDA_EMULATED
