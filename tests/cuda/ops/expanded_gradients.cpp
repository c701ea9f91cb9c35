/*
 * Backward kernels fed the gradient that `loss = out.sum()` or `out.mean()` sends them: one
 * value broadcast over the output's shape, every stride 0. That is the gradient most training
 * code produces, and the op table (cuda_test_util.h) never sends it: its loss weights each output
 * by a dense random tensor. A kernel that reads grad_out's data pointer as if it were dense, or
 * hands its strides to cuBLAS or cuDNN, goes wrong only here.
 *
 * Each case is checked twice, on the CPU and on CUDA: the gradients from out.sum() (and out.mean())
 * must equal those from the same loss written with a dense tensor of ones (or of 1/n), which
 * reaches the kernels as an ordinary contiguous gradient; and CUDA's must equal the CPU's.
 */
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ops/attention_ops.h"
#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::check_same;
using test::cuda_tol_for;
using test::label;
using test::one;
using test::pat;

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct GradCase {
  std::string name;
  Fn f;
  std::vector<Tensor> inputs;
  std::optional<test::Tol> tol{};  // default: cuda_tol_for(the gradient's dtype)
};

enum class Loss { kSum, kMean, kDenseSum, kDenseMean };

// The gradients of the floating inputs of f on `device` for one of the losses. kDense* weight each
// output by a materialised tensor of ones (or of 1/n) instead.
std::vector<Tensor> gradients(const GradCase& c, Device device, Loss loss_kind) {
  std::vector<Tensor> in;
  for (const Tensor& t : c.inputs) {
    in.push_back(t.detach().to(device));
    if (is_floating(t.dtype())) in.back().requires_grad_();
  }
  Tensor loss;
  for (const Tensor& out : c.f(in)) {
    if (!is_floating(out.dtype()) || !out.requires_grad()) continue;
    Tensor term;
    const double n = static_cast<double>(out.numel());
    switch (loss_kind) {
      case Loss::kSum:
        term = out.sum();
        break;
      case Loss::kMean:
        term = out.mean();
        break;
      case Loss::kDenseSum:
        term = (out * ones(out.sizes(), out.options())).sum();
        break;
      case Loss::kDenseMean:
        term = (out * full(out.sizes(), 1.0 / n, out.options())).sum();
        break;
    }
    term = term.to(kFloat64);
    loss = loss.defined() ? loss + term : term;
  }
  REQUIRE(loss.defined());
  loss.backward();
  std::vector<Tensor> grads;
  for (const Tensor& t : in)
    if (t.requires_grad()) grads.push_back(t.grad());
  return grads;
}

void check_case(const GradCase& c) {
  INFO(c.name);
  for (auto [broadcast, dense, what] : {std::tuple{Loss::kSum, Loss::kDenseSum, "sum"},
                                        std::tuple{Loss::kMean, Loss::kDenseMean, "mean"}}) {
    std::vector<Tensor> cpu_dense = gradients(c, kCPU, dense);
    for (Device d : {Device::cpu(), Device::cuda()}) {
      std::vector<Tensor> got = gradients(c, d, broadcast);
      REQUIRE(got.size() == cpu_dense.size());
      for (size_t i = 0; i < got.size(); ++i) {
        REQUIRE(got[i].defined() == cpu_dense[i].defined());
        if (!got[i].defined()) continue;
        const std::vector<double> g = got[i].to(kCPU).to_vector<double>(), r = cpu_dense[i].to_vector<double>();
        REQUIRE(g.size() == r.size());
        const std::string bad = test::mismatch(g, r, c.tol.value_or(cuda_tol_for(cpu_dense[i].dtype())));
        CHECK_MESSAGE(bad.empty(), d.str(), ", loss out.", std::string(what), "(): gradient of input ", i, ": ", bad);
      }
    }
  }
}

Tensor f32(IntArrayRef shape, double seed) { return pat(shape, seed, 2.0); }

TEST_CASE("expanded gradients: elementwise ops and reductions") {
  LOOM_REQUIRE_GPU();
  const std::vector<GradCase> cases = {
      {"add and mul with broadcast", [](const auto& in) { return one(in[0] * in[1] + in[1]); },
       {f32({3, 4}, 0.1), f32({4}, 0.2)}},
      {"exp, sigmoid, tanh, gelu, relu, pow, clamp",
       [](const auto& in) {
         const Tensor& x = in[0];
         return std::vector<Tensor>{exp(x), sigmoid(x), tanh(x), gelu(x), relu(x), pow(x, 3), clamp(x, -0.5, 0.5)};
       },
       {f32({5, 3}, 0.3)}},
      {"where and maximum", [](const auto& in) {
         return std::vector<Tensor>{where(gt(in[0], 0), in[0], in[1]), maximum(in[0], in[1])};
       },
       {f32({4, 3}, 0.4), f32({3}, 0.5)}},
      {"sum, mean, prod, amax, var and max over a dim",
       [](const auto& in) {
         const Tensor& x = in[0];
         return std::vector<Tensor>{sum(x, {1}), mean(x, {0}), prod(x, {1}), amax(x, {0}), var(x, {1}),
                                    std::get<0>(max(x, 1))};
       },
       {f32({4, 5}, 0.6)}},
  };
  for (const GradCase& c : cases) check_case(c);
}

TEST_CASE("expanded gradients: matmul, linear and the fused linear blocks") {
  LOOM_REQUIRE_GPU();
  const std::vector<GradCase> cases = {
      {"matmul", [](const auto& in) { return one(matmul(in[0], in[1])); }, {f32({5, 4}, 0.1), f32({4, 3}, 0.2)}},
      {"bmm", [](const auto& in) { return one(bmm(in[0], in[1])); }, {f32({2, 5, 4}, 0.3), f32({2, 4, 3}, 0.4)}},
      {"matmul of a 3-D by a 2-D operand", [](const auto& in) { return one(matmul(in[0], in[1])); },
       {f32({2, 5, 4}, 0.5), f32({4, 3}, 0.6)}},
      {"linear with bias", [](const auto& in) { return one(linear(in[0], in[1], in[2])); },
       {f32({6, 4}, 0.7), f32({3, 4}, 0.8), f32({3}, 0.9)}},
      {"linear_activation relu, gelu and tanh gelu",
       [](const auto& in) {
         return std::vector<Tensor>{linear_activation(in[0], in[1], in[2], Activation::Relu),
                                    linear_activation(in[0], in[1], in[2], Activation::Gelu),
                                    linear_activation(in[0], in[1], in[2], Activation::GeluTanh)};
       },
       {f32({6, 4}, 1.0), f32({8, 4}, 1.1), f32({8}, 1.2)}},
      {"linear_activation_linear",
       [](const auto& in) {
         return one(linear_activation_linear(in[0], in[1], in[2], in[3], in[4], Activation::Gelu));
       },
       {f32({6, 4}, 1.3), f32({8, 4}, 1.4), f32({8}, 1.5), f32({2, 8}, 1.6), f32({2}, 1.7)}},
  };
  for (const GradCase& c : cases) check_case(c);
}

TEST_CASE("expanded gradients: convolution and pooling, through cuDNN and Loom's kernels") {
  LOOM_REQUIRE_GPU();
  const std::vector<GradCase> cases = {
      {"conv2d with bias, padding 1", [](const auto& in) { return one(conv2d(in[0], in[1], in[2], {1, 1}, {1, 1})); },
       {f32({2, 3, 5, 5}, 0.1), f32({4, 3, 3, 3}, 0.2), f32({4}, 0.3)}},
      {"grouped conv2d with stride 2",
       [](const auto& in) { return one(conv2d(in[0], in[1], {}, {2, 2}, {0, 0}, {1, 1}, 2)); },
       {f32({2, 4, 6, 6}, 0.4), f32({2, 2, 3, 3}, 0.5)}},
      {"max_pool2d, avg_pool2d and adaptive_avg_pool2d",
       [](const auto& in) {
         return std::vector<Tensor>{max_pool2d(in[0], {2, 2}), avg_pool2d(in[0], {2, 2}, {1, 1}, {1, 1}),
                                    adaptive_avg_pool2d(in[0], {3, 2})};
       },
       {f32({2, 2, 4, 4}, 0.6)}},
  };
  for (bool cudnn : {true, false}) {
    test::CudnnEnabledGuard guard(cudnn);
    INFO(label("cudnn", cudnn));
    for (const GradCase& c : cases) check_case(c);
  }
}

TEST_CASE("expanded gradients: softmax, norms and losses") {
  LOOM_REQUIRE_GPU();
  const std::vector<GradCase> cases = {
      {"softmax and log_softmax along the last and a middle dim",
       [](const auto& in) {
         return std::vector<Tensor>{softmax(in[0], -1), log_softmax(in[0], -1), softmax(in[0], 1),
                                    log_softmax(in[0], 0)};
       },
       {f32({3, 4, 5}, 0.1)}},
      {"softmax of long rows (a block a row)", [](const auto& in) { return one(softmax(in[0], 1)); },
       {f32({2, 2000}, 0.2)}},
      {"layer_norm with weight and bias", [](const auto& in) { return one(layer_norm(in[0], {6}, in[1], in[2])); },
       {f32({4, 6}, 0.3), f32({6}, 0.4), f32({6}, 0.5)}},
      {"batch_norm in training",
       [](const auto& in) { return one(batch_norm(in[0], in[1], in[2], Tensor(), Tensor(), true)); },
       {f32({3, 2, 2, 2}, 0.6), f32({2}, 0.7), f32({2}, 0.8)}},
      {"cross_entropy without reduction, with label smoothing",
       [](const auto& in) { return one(cross_entropy(in[0], in[1], {}, -100, 0.1, Reduction::None)); },
       {f32({6, 5}, 0.9), test::index_values({6}, 5)}},
      {"nll_loss without reduction, with an ignored class",
       [](const auto& in) { return one(nll_loss(log_softmax(in[0], 1), in[1], {}, 2, Reduction::None)); },
       {f32({6, 4}, 1.0), test::index_values({6}, 4)}},
      {"mse_loss without reduction", [](const auto& in) { return one(mse_loss(in[0], in[1], Reduction::None)); },
       {f32({3, 4}, 1.1), f32({3, 4}, 1.2)}},
  };
  for (const GradCase& c : cases) check_case(c);
}

TEST_CASE("expanded gradients: shape and indexing ops") {
  LOOM_REQUIRE_GPU();
  const std::vector<GradCase> cases = {
      {"cat, stack and flip",
       [](const auto& in) {
         return std::vector<Tensor>{cat({in[0], in[1]}, 1), stack({in[0], in[0]}, 0), flip(in[0], {0, 1})};
       },
       {f32({3, 4}, 0.1), f32({3, 2}, 0.2)}},
      {"index_select, gather and embedding",
       [](const auto& in) {
         return std::vector<Tensor>{index_select(in[0], 0, in[1]), gather(in[0], 1, in[2]), embedding(in[0], in[1])};
       },
       {f32({5, 3}, 0.3), test::index_values({7}, 5), test::index_values({5, 4}, 3)}},
      {"scatter_add and index_add",
       [](const auto& in) {
         return std::vector<Tensor>{scatter_add(in[0], 1, in[1], in[2]), index_add(in[0], 0, in[3], in[4])};
       },
       {f32({3, 4}, 0.4), test::index_values({3, 2}, 4), f32({3, 2}, 0.5), test::index_values({5}, 3), f32({5, 4}, 0.6)}},
      {"tril, triu and pad",
       [](const auto& in) {
         return std::vector<Tensor>{tril(in[0], -1), triu(in[0], 1), pad(in[0], {1, 2, 0, 1}, "constant", 0.5)};
       },
       {f32({4, 5}, 0.7)}},
      {"permute, expand and repeat",
       [](const auto& in) {
         return std::vector<Tensor>{in[0].permute({1, 0}).contiguous(), in[1].expand({3, 4}) * in[0],
                                    repeat(in[1], {2, 2})};
       },
       {f32({3, 4}, 0.8), f32({4}, 0.9)}},
  };
  for (const GradCase& c : cases) check_case(c);
}

TEST_CASE("expanded gradients: the fused attention, causal and not, float32 and float16") {
  LOOM_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat16}) {
    for (bool causal : {false, true}) {
      INFO(label(dt, "causal", causal));
      check_case({"scaled_dot_product_attention",
                  [causal](const auto& in) {
                    return one(scaled_dot_product_attention(in[0], in[1], in[2], {}, 0.0, causal));
                  },
                  {f32({1, 2, 5, 8}, 0.1).to(dt), f32({1, 2, 5, 8}, 0.2).to(dt), f32({1, 2, 5, 8}, 0.3).to(dt)},
                  // float16: the CUDA kernel's summation order and rounding, as in attention.cpp
                  dt == kFloat16 ? std::optional<test::Tol>(test::Tol{2e-3, 1e-3}) : std::nullopt});
    }
  }
}

}  // namespace
}  // namespace loom
