/*
 * CUDA linear_activation (cuBLASLt's GELU_AUX_BIAS epilogue; relu and the erf GELU after the GEMM,
 * in place) and linear_weight_grad (the BGRADB epilogue) against the CPU, forward and backward, for
 * f32, f64, f16 and bf16, with and without a bias, batched inputs, an output width that is not
 * a multiple of 8 (no aux matrix: the GEMM, then the activation kernel) and a transposed input.
 * linear_activation_linear, forward and backward, and linear_input_grad_activation (the DGELU /
 * DGELU_BGRAD epilogue for the tanh GELU with a hidden width that is a multiple of 8; the GEMM,
 * then the activation's backward and the sums, otherwise) against the CPU.
 */
#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::check_cuda_matches_cpu;
using test::CudaCase;
using test::pat;

LOOM_CUDA_COVERS(Op::linear_activation, Op::linear_weight_grad, Op::linear_input_grad_activation);

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

// The epilogue multiplies the float accumulator by the GELU's derivative and rounds once; the CPU
// rounds grad @ W2 to 16 bits first, and sums the bias gradient from the rounded products.
CudaCase hidden_grad_case(DType dt, Activation act) {
  CudaCase c;
  if ((dt == kBFloat16 || dt == kFloat16) && act != Activation::Relu)
    c.tol = test::Tol{test::cuda_tol_for(dt).rtol, dt == kBFloat16 ? 2e-2 : 2e-3};
  return c;
}

TEST_CASE(
    "linear_activation_linear: forward and backward match the CPU, the tanh GELU's through DGELU_BGRAD") {
  LOOM_REQUIRE_GPU();
  for (DType dt : test::cuda_float_dtypes()) {
    for (Activation act : {Activation::Relu, Activation::Gelu, Activation::GeluTanh}) {
      INFO(dt, " activation ", static_cast<int>(act));
      auto f = [act](const std::vector<Tensor>& x) {
        return linear_activation_linear(x[0], x[1], x[2], x[3], x[4], act);
      };
      CudaCase c = hidden_grad_case(dt, act);
      // hidden width 8: the fused epilogues forward (GELU_AUX_BIAS) and backward (DGELU_BGRAD);
      // 5: the unfused fallbacks for the GELUs; no biases: DGELU without BGRAD.
      check_cuda_matches_cpu(f,
                             {values({2, 3, 6}, dt, 2.1), values({8, 6}, dt, 2.2), values({8}, dt, 2.3),
                              values({4, 8}, dt, 2.4), values({4}, dt, 2.5)},
                             c);
      check_cuda_matches_cpu(f,
                             {values({4, 6}, dt, 2.6), values({5, 6}, dt, 2.7), values({5}, dt, 2.8),
                              values({3, 5}, dt, 2.9), values({3}, dt, 3.0)},
                             c);
      check_cuda_matches_cpu(
          f,
          {values({3, 6}, dt, 3.1), values({16, 6}, dt, 3.2), Tensor(), values({4, 16}, dt, 3.3), Tensor()},
          c);
    }
  }
}

TEST_CASE("linear_input_grad_activation: the hidden layer's gradient and its bias gradient match the CPU") {
  LOOM_REQUIRE_GPU();
  for (DType dt : test::cuda_float_dtypes()) {
    for (Activation act : {Activation::Relu, Activation::Gelu, Activation::GeluTanh}) {
      for (bool with_bias : {true, false}) {
        INFO(dt, " activation ", static_cast<int>(act), " bias gradient ", with_bias);
        CudaCase c = hidden_grad_case(dt, act);
        c.backward = false;
        auto f = [act, with_bias](const std::vector<Tensor>& x) {
          Tensor hidden = x[2].relu(), pre = act == Activation::Relu ? Tensor() : x[2];
          auto [grad_pre, grad_bias] = linear_input_grad_activation(x[0], x[1], pre, hidden, act, with_bias);
          return with_bias ? std::vector<Tensor>{grad_pre, grad_bias} : std::vector<Tensor>{grad_pre};
        };
        check_cuda_matches_cpu(f, {values({6, 4}, dt, 3.4), values({4, 8}, dt, 3.5), values({6, 8}, dt, 3.6)},
                               c);
        check_cuda_matches_cpu(f, {values({6, 4}, dt, 3.7), values({4, 5}, dt, 3.8), values({6, 5}, dt, 3.9)},
                               c);
        // A transposed grad: cuBLAS's B read with op T.
        check_cuda_matches_cpu(
            [&f](const std::vector<Tensor>& x) {
              return f({x[0].t(), x[1], x[2]});
            },
            {values({4, 6}, dt, 4.0), values({4, 8}, dt, 4.1), values({6, 8}, dt, 4.2)}, c);
      }
    }
  }
}

}  // namespace
}  // namespace loom
