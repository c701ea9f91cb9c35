/*
 * CUDA matmul (cuBLAS, or the emulated cuBLAS of core/cuda/emulated) against the CPU: matmul,
 * mm, bmm and linear for f32, f64, f16 and bf16, on square and non-square shapes, broadcast
 * batches, transposed, sliced and expanded operands, 1-D operands, bias, forward and backward.
 * Also TF32 (opt-in: observably less precise than f32), a negative control showing that these
 * comparisons catch a swapped transpose in the wrapper call, cuBLAS's own argument check
 * surfacing as a loom::Error, and the ops layer's shape check on CUDA.
 */
#include <cstring>
#include <vector>

#include "ops/cuda/blas.h"
#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::check_cuda_matches_cpu;
using test::CudaCase;
using test::pat;

LOOM_CUDA_COVERS(Op::matmul);

Tensor values(IntArrayRef shape, DType dt, double seed) {
  return pat(shape, seed, 1.0).to(dt);
}

TEST_CASE("linalg: matmul, mm and bmm match the CPU") {
  LOOM_REQUIRE_GPU();
  for (DType dt : test::cuda_float_dtypes()) {
    INFO(dt);
    // Square and non-square 2-D.
    check_cuda_matches_cpu([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); },
                           {values({4, 4}, dt, 0.1), values({4, 4}, dt, 0.2)});
    check_cuda_matches_cpu([](const std::vector<Tensor>& x) { return x[0].mm(x[1]); },
                           {values({3, 5}, dt, 0.3), values({5, 7}, dt, 0.4)});
    // Transposed operands: a.t(), b.t(), both (op T with ld = the other stride).
    check_cuda_matches_cpu([](const std::vector<Tensor>& x) { return matmul(x[0].t(), x[1]); },
                           {values({5, 3}, dt, 0.5), values({5, 7}, dt, 0.6)});
    check_cuda_matches_cpu([](const std::vector<Tensor>& x) { return matmul(x[0], x[1].t()); },
                           {values({3, 5}, dt, 0.7), values({7, 5}, dt, 0.8)});
    check_cuda_matches_cpu([](const std::vector<Tensor>& x) { return matmul(x[0].t(), x[1].t()); },
                           {values({5, 3}, dt, 0.9), values({7, 5}, dt, 1.0)});
    // Sliced: a column slice (unit column stride, ld larger than the width: in place) and a
    // step slice (no unit stride: copied).
    check_cuda_matches_cpu([](const std::vector<Tensor>& x) { return matmul(x[0].slice(1, 1, 6), x[1]); },
                           {values({3, 8}, dt, 1.1), values({5, 4}, dt, 1.2)});
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& x) { return matmul(x[0], x[1].slice(0, 0, 10, 2).slice(1, 0, 8, 2)); },
        {values({3, 5}, dt, 1.3), values({10, 8}, dt, 1.4)});
    // Batched, and a broadcast batch (stride 0) on either side.
    check_cuda_matches_cpu([](const std::vector<Tensor>& x) { return x[0].bmm(x[1]); },
                           {values({2, 3, 5}, dt, 1.5), values({2, 5, 4}, dt, 1.6)});
    check_cuda_matches_cpu([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); },
                           {values({2, 1, 3, 5}, dt, 1.7), values({3, 5, 4}, dt, 1.8)});
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& x) {
          return matmul(x[0].expand({3, 3, 5}), x[1]);
        },
        {values({1, 3, 5}, dt, 1.9), values({3, 5, 2}, dt, 2.0)});
    check_cuda_matches_cpu([](const std::vector<Tensor>& x) { return bmm(x[0], x[1].transpose(1, 2)); },
                           {values({2, 3, 5}, dt, 2.1), values({2, 4, 5}, dt, 2.2)});
    // 1-D operands (torch.matmul semantics): dot, vector-matrix, matrix-vector, batched-vector.
    check_cuda_matches_cpu([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); },
                           {values({5}, dt, 2.3), values({5}, dt, 2.4)});
    check_cuda_matches_cpu([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); },
                           {values({5}, dt, 2.5), values({5, 3}, dt, 2.6)});
    check_cuda_matches_cpu([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); },
                           {values({4, 5}, dt, 2.7), values({5}, dt, 2.8)});
    check_cuda_matches_cpu([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); },
                           {values({2, 3, 5}, dt, 2.9), values({5}, dt, 3.0)});
  }
}

TEST_CASE("linalg: linear with and without bias matches the CPU") {
  LOOM_REQUIRE_GPU();
  for (DType dt : test::cuda_float_dtypes()) {
    INFO(dt);
    check_cuda_matches_cpu([](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2]); },
                           {values({2, 3, 5}, dt, 0.1), values({4, 5}, dt, 0.2), values({4}, dt, 0.3)});
    check_cuda_matches_cpu([](const std::vector<Tensor>& x) { return linear(x[0], x[1], Tensor()); },
                           {values({3, 5}, dt, 0.4), values({7, 5}, dt, 0.5)});
    // A transposed input (rows do not merge: copied by the ops layer) and a 1-D input.
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& x) { return linear(x[0].transpose(0, 1), x[1], x[2]); },
        {values({3, 2, 5}, dt, 0.6), values({4, 5}, dt, 0.7), values({4}, dt, 0.8)});
    check_cuda_matches_cpu([](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2]); },
                           {values({5}, dt, 0.9), values({4, 5}, dt, 1.0), values({4}, dt, 1.1)});
  }
}

TEST_CASE("linalg: matmul with an empty inner dimension gives zeros (or the bias)") {
  LOOM_REQUIRE_GPU();
  CudaCase forward_only;
  forward_only.backward = false;
  check_cuda_matches_cpu([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); },
                         {values({3, 0}, kFloat32, 0.1), values({0, 4}, kFloat32, 0.2)}, forward_only);
  check_cuda_matches_cpu(
      [](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2]); },
      {values({3, 0}, kFloat32, 0.1), values({4, 0}, kFloat32, 0.2), values({4}, kFloat32, 0.3)},
      forward_only);
}

// Rounds float32 values to TF32 (10-bit mantissa, nearest, ties away from zero) on the host.
// Only the emulated build compares with it (a GPU's TF32 rounding is the hardware's own).
[[maybe_unused]] Tensor round_tf32(const Tensor& x) {
  std::vector<double> v = x.to_vector<double>();
  for (double& d : v) {
    float f = static_cast<float>(d);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bits = (bits + 0x1000u) & ~0x1FFFu;
    std::memcpy(&f, &bits, 4);
    d = f;
  }
  return test::make(v, x.sizes(), kFloat32);
}

struct AllowTf32 {
  AllowTf32() { cuda::set_allow_tf32(true); }
  ~AllowTf32() { cuda::set_allow_tf32(false); }
};

// max |x - y| / max |y|
double relative_error(const Tensor& x, const Tensor& y) {
  std::vector<double> a = x.to(kCPU).to_vector<double>(), b = y.to(kCPU).to_vector<double>();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

TEST_CASE("linalg: TF32 is off by default and observable when allowed") {
  LOOM_REQUIRE_GPU();
  CHECK_FALSE(cuda::allow_tf32());
  Tensor a = pat({6, 16}, 0.37, 1.0), b = pat({16, 5}, 1.91, 1.0);
  Tensor cpu = matmul(a, b);
  Tensor ga = a.to(Device::cuda()), gb = b.to(Device::cuda());
  CHECK(relative_error(matmul(ga, gb), cpu) < 1e-6);
  Tensor tf32;
  {
    AllowTf32 allow;
    CHECK(cuda::allow_tf32());
    tf32 = matmul(ga, gb);
  }
  CHECK_FALSE(cuda::allow_tf32());
  const double err = relative_error(tf32, cpu);
  CHECK(err > 1e-6);
  CHECK(err < 1e-3);
#if defined(LOOM_CUDA_EMULATED)
  // Products of TF32 values are exact in float: only the summation order may differ.
  CHECK(relative_error(tf32, matmul(round_tf32(a), round_tf32(b))) < 1e-6);
#endif
}

// out = a b for a [3, 5], b [5, 7] through the wrapper, with out^T = b^T a^T in column-major
// terms; `swap` passes op T for both operands (their leading dimensions stay valid).
Tensor wrapper_matmul(const Tensor& a, const Tensor& b, bool swap, int64_t lda) {
  Tensor out = empty({3, 7}, a.options());
  const cuda::BlasOp op = swap ? cuda::BlasOp::kT : cuda::BlasOp::kN;
  cuda::gemm_strided_batched(op, op, 7, 3, 5, 1.0, b.data_ptr(), lda, 0, a.data_ptr(), 5, 0, 0.0,
                             out.data_ptr(), 7, 0, 1, a.dtype());
  return out;
}

TEST_CASE("linalg: negative control: a swapped transpose in the cuBLAS call is caught") {
  LOOM_REQUIRE_GPU();
  Tensor a = pat({3, 5}, 0.4, 1.0), b = pat({5, 7}, 0.9, 1.0);
  Tensor expected = matmul(a, b);
  // a and b live in the first rows of square buffers: the swapped call reads each operand as the
  // other orientation with the same leading dimension, which runs past a tight allocation (the
  // ASan build of emulated CUDA reports that overread).
  Tensor ga_storage = zeros({5, 5}, Device::cuda()), gb_storage = zeros({7, 7}, Device::cuda());
  Tensor ga = ga_storage.slice(0, 0, 3), gb = gb_storage.slice(0, 0, 5);
  ga.copy_(a);
  gb.copy_(b);
  const test::Tol tol = test::cuda_tol_for(kFloat32);
  // The correct call matches the CPU...
  CHECK(test::mismatch(wrapper_matmul(ga, gb, false, 7).to(kCPU).to_vector<double>(),
                       expected.to_vector<double>(), tol)
            .empty());
  // ...and the comparison the tests use fails for the same call with both transposes swapped.
  CHECK_FALSE(test::mismatch(wrapper_matmul(ga, gb, true, 7).to(kCPU).to_vector<double>(),
                             expected.to_vector<double>(), tol)
                  .empty());
}

TEST_CASE("linalg: errors") {
  LOOM_REQUIRE_GPU();
  Tensor ga = pat({3, 5}, 0.4).to(Device::cuda()), gb = pat({5, 7}, 0.9).to(Device::cuda());
  // lda = 6 < 7 rows of cuBLAS's A (b^T stored 7 x 5, op N): cuBLAS refuses, the wrapper throws.
  CHECK_THROWS_WITH_AS(wrapper_matmul(ga, gb, false, 6), doctest::Contains("CUBLAS_STATUS_INVALID_VALUE"),
                       Error);
  // The ops layer checks shapes before any kernel runs.
  Tensor x = pat({2, 3}, 0.1).to(Device::cuda()), y = pat({4, 5}, 0.2).to(Device::cuda());
  CHECK_THROWS_WITH_AS(matmul(x, y), doctest::Contains("matmul: inner dimensions differ"), Error);
  CHECK_THROWS_WITH_AS(x.mm(y), doctest::Contains("mm: inner dimensions differ"), Error);
  // Integer matmul has no cuBLAS GEMM.
  Tensor xi = x.to(kInt32), yi = pat({3, 2}, 0.3).to(kInt32).to(Device::cuda());
  CHECK_THROWS_WITH_AS(matmul(xi, yi), doctest::Contains("matmul: CUDA supports float32"), Error);
}

}  // namespace
}  // namespace loom
