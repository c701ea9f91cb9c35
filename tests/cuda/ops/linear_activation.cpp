/*
 * CUDA linear_activation (cuBLASLt's RELU_BIAS / GELU_AUX_BIAS epilogues, the erf GELU after the
 * GEMM) and linear_weight_grad (the BGRADB epilogue) against the CPU, forward and backward, for
 * f32, f64, f16 and bf16, with and without a bias, batched inputs, an output width that is not
 * a multiple of 8 (no aux matrix: the GEMM, then the activation kernel) and a transposed input.
 */
#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::check_cuda_matches_cpu;
using test::CudaCase;
using test::pat;

LOOM_CUDA_COVERS(Op::linear_activation, Op::linear_weight_grad);

Tensor values(IntArrayRef shape, DType dt, double seed) { return pat(shape, seed, 1.0).to(dt); }

TEST_CASE("linear_activation: relu, gelu and tanh gelu match the CPU, forward and backward") {
  LOOM_REQUIRE_GPU();
  for (DType dt : test::cuda_float_dtypes()) {
    for (Activation act : {Activation::Relu, Activation::Gelu, Activation::GeluTanh}) {
      INFO(dt, " activation ", static_cast<int>(act));
      auto f = [act](const std::vector<Tensor>& x) { return linear_activation(x[0], x[1], x[2], act); };
      // The fused epilogue rounds once (gelu of the float accumulator); linear then gelu rounds the
      // pre-activation to 16 bits first, and gelu's tail (x near -3) amplifies that rounding error
      // about x^2 times: bf16 values near 0.004 differ by ~1e-4, f16 near 0.04 by ~1e-4.
      CudaCase c;
      if ((dt == kBFloat16 || dt == kFloat16) && act != Activation::Relu)
        c.tol = test::Tol{test::cuda_tol_for(dt).rtol, 1e-3};
      // out width 8: the fused epilogue with its aux matrix; 5: the unfused fallback for the GELUs.
      check_cuda_matches_cpu(f, {values({2, 3, 6}, dt, 0.1), values({8, 6}, dt, 0.2), values({8}, dt, 0.3)}, c);
      check_cuda_matches_cpu(f, {values({4, 6}, dt, 0.4), values({5, 6}, dt, 0.5), values({5}, dt, 0.6)}, c);
      check_cuda_matches_cpu(f, {values({3, 6}, dt, 0.7), values({8, 6}, dt, 0.8), Tensor()}, c);
      check_cuda_matches_cpu(
          [act](const std::vector<Tensor>& x) { return linear_activation(x[0].transpose(0, 1), x[1], x[2], act); },
          {values({3, 2, 6}, dt, 0.9), values({8, 6}, dt, 1.0), values({8}, dt, 1.1)}, c);
    }
  }
}

TEST_CASE("linear_weight_grad: the weight gradient and the bias gradient match the CPU") {
  LOOM_REQUIRE_GPU();
  for (DType dt : test::cuda_float_dtypes()) {
    INFO(dt);
    for (bool with_bias : {true, false}) {
      check_cuda_matches_cpu(
          [with_bias](const std::vector<Tensor>& x) {
            auto [gw, gb] = linear_weight_grad(x[0], x[1], with_bias);
            return with_bias ? std::vector<Tensor>{gw, gb} : std::vector<Tensor>{gw};
          },
          {values({6, 4}, dt, 1.2), values({6, 5}, dt, 1.3)});
    }
    // A transposed grad (op N for B instead of op T).
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& x) {
          auto [gw, gb] = linear_weight_grad(x[0].t(), x[1], true);
          return std::vector<Tensor>{gw, gb};
        },
        {values({4, 6}, dt, 1.4), values({6, 5}, dt, 1.5)});
  }
}

}  // namespace
}  // namespace loom
