/*
 * Tensors with no elements through every CUDA kernel, against the CPU, forward and backward.
 *
 * A batch of zero rows is ordinary input: the last batch of a filtered dataset, a detection
 * model's empty set of boxes, a sequence of no tokens. PyTorch gives every op a defined result
 * there: an empty output of the right shape, sums of nothing 0, products 1, means and variances
 * NaN, and zero gradients for the parameters. On a GPU such a case is where a kernel is launched
 * with a grid of zero blocks, which CUDA rejects (cudaErrorInvalidConfiguration), and where a
 * row kernel over rows of length zero divides by zero. The emulator rejects a zero grid as CUDA
 * does, so every such launch shows here without a GPU.
 */
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ops/attention_ops.h"
#include "ops/int8_ops.h"
#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::check_cuda_matches_cpu;
using test::CudaCase;
using test::label;
using test::one;
using test::pat;

const Device kGpu = Device::cuda();

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct EmptyCase {
  std::string name;
  Fn f;
  std::vector<Tensor> inputs;
  CudaCase c{};
  // Whether every output is reached only through the empty inputs, so that the non-empty ones
  // (weights, biases, tables) must get gradients of exact zeros. Comparing with the CPU alone
  // cannot show this: a NaN gradient on both devices compares equal.
  bool zero_gradients = true;
};

Tensor f32(IntArrayRef shape, double seed = 0.3) { return pat(shape, seed, 2.0); }

// The gradients of the non-empty floating inputs for loss = the sum of every floating output,
// on `device`, are all exactly 0.
void check_zero_gradients(const Fn& f, const std::vector<Tensor>& inputs, Device device) {
  std::vector<Tensor> in;
  for (const Tensor& t : inputs) {
    in.push_back(t.detach().to(device));
    if (is_floating(t.dtype())) in.back().requires_grad_();
  }
  Tensor loss = zeros({}, TensorOptions(kFloat64).device(device));
  for (const Tensor& out : f(in))
    if (is_floating(out.dtype()) && out.requires_grad()) loss = loss + out.sum().to(kFloat64);
  if (!loss.requires_grad()) return;
  loss.backward();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].numel() == 0 || !in[i].grad().defined()) continue;
    const std::vector<double> g = in[i].grad().to(kCPU).to_vector<double>();
    size_t nonzero = 0;
    for (double v : g) nonzero += v != 0.0;  // a NaN counts
    CHECK_MESSAGE(nonzero == 0, device.str(), ": the gradient of input ", i, " has ", nonzero, " of ", g.size(),
                  " entries that are not 0");
  }
}

void run_cases(const std::vector<EmptyCase>& cases) {
  for (const EmptyCase& e : cases) {
    INFO(e.name);
    try {
      check_cuda_matches_cpu(e.f, e.inputs, e.c);
      if (e.c.backward && e.zero_gradients)
        for (Device d : {Device::cpu(), kGpu}) check_zero_gradients(e.f, e.inputs, d);
    } catch (const std::exception& ex) {
      FAIL_CHECK(e.name, ": ", std::string(ex.what()));
    }
  }
}


TEST_CASE("empty tensors: elementwise ops, casts and random fills") {
  LOOM_REQUIRE_GPU();
  run_cases({
      {"add with broadcast", [](const auto& in) { return one(in[0] + in[1]); }, {f32({0, 5}), f32({5})}},
      {"exp, relu, gelu, sigmoid",
       [](const auto& in) { return std::vector<Tensor>{exp(in[0]), relu(in[0]), gelu(in[0]), sigmoid(in[0])}; },
       {f32({3, 0, 4})}},
      {"where and clamp of a transposed empty tensor",
       [](const auto& in) {
         Tensor x = in[0].t();
         return std::vector<Tensor>{where(gt(x, 0), x, in[1]), clamp(x, -1, 1)};
       },
       {f32({4, 0}), f32({1})}},
      {"casts to f16, bf16, int32 and bool",
       [](const auto& in) {
         return std::vector<Tensor>{in[0].to(kFloat16), in[0].to(kBFloat16), in[0].to(kInt32), in[0].to(kBool)};
       },
       {f32({0, 3})}},
      {"pow and maximum", [](const auto& in) { return std::vector<Tensor>{pow(in[0], 2), maximum(in[0], in[1])}; },
       {f32({2, 0}), f32({2, 1})}},
      {"in-place add_", [](const auto& in) { return one(in[0].detach().clone().add_(1)); }, {f32({0})}},
  });
  // Random fills of nothing are no-ops, and an empty arange is empty.
  for (Device d : {Device::cpu(), kGpu}) {
    INFO(d.str());
    CHECK(uniform_(empty({0, 3}, TensorOptions(kFloat32).device(d))).numel() == 0);
    CHECK(normal_(empty({0}, TensorOptions(kFloat16).device(d))).numel() == 0);
    CHECK(bernoulli_(empty({2, 0}, TensorOptions(kFloat32).device(d)), 0.5).numel() == 0);
    CHECK(randint(0, 4, {0}, TensorOptions(kInt64).device(d)).numel() == 0);
    CHECK(arange(0, TensorOptions(kFloat32).device(d)).numel() == 0);
    CHECK(dropout(empty({0, 4}, TensorOptions(kFloat32).device(d)), 0.5).sizes() == IntArrayRef{0, 4});
  }
}

TEST_CASE("empty tensors: reductions give PyTorch's identities (0, 1, NaN) and empty shapes") {
  LOOM_REQUIRE_GPU();
  run_cases({
      {"sum, prod, mean over an empty dim",
       [](const auto& in) {
         return std::vector<Tensor>{sum(in[0], {0}), prod(in[0], {0}), mean(in[0], {0}), var(in[0], {0}),
                                    sum(in[0]), mean(in[0])};
       },
       {f32({0, 5})}},
      {"reductions over a non-empty dim of an empty tensor",
       [](const auto& in) {
         return std::vector<Tensor>{sum(in[0], {1}), amax(in[0], {1}), amin(in[0], {1}, true), var(in[0], {1}),
                                    std::get<0>(max(in[0], 1)), std::get<1>(min(in[0], 1))};
       },
       {f32({0, 5})}},
      {"sum of f16 and int64 over an empty dim",
       [](const auto& in) { return std::vector<Tensor>{sum(in[0].to(kFloat16), {1}), sum(in[1], {0})}; },
       {f32({3, 0}), test::index_values({0, 2}, 3)}},
  });
  // amax of nothing has no value: the same error on both devices. The identities by hand.
  for (Device d : {Device::cpu(), kGpu}) {
    INFO(d.str());
    Tensor e = zeros({0, 3}, TensorOptions(kFloat32).device(d));
    CHECK(sum(e, {0}).to(kCPU).to_vector<double>() == std::vector<double>{0, 0, 0});
    CHECK(prod(e, {0}).to(kCPU).to_vector<double>() == std::vector<double>{1, 1, 1});
    CHECK(std::isnan(mean(e).to(kCPU).item<double>()));
    CHECK(std::isnan(var(e, {0}).to(kCPU).to_vector<double>()[2]));
    CHECK_THROWS_WITH_AS(amax(e, {0}), doctest::Contains("amax: expected a non-empty reduction"), Error);
    CHECK_THROWS_WITH_AS(max(e), doctest::Contains("max: expected a non-empty tensor"), Error);
  }
}

TEST_CASE("empty tensors: matmul, linear and the fused linear blocks") {
  LOOM_REQUIRE_GPU();
  run_cases({
      {"matmul with no rows", [](const auto& in) { return one(matmul(in[0], in[1])); }, {f32({0, 4}), f32({4, 3})}},
      {"matmul with no columns", [](const auto& in) { return one(matmul(in[0], in[1])); },
       {f32({3, 4}), f32({4, 0})}},
      {"bmm of no batches", [](const auto& in) { return one(bmm(in[0], in[1])); },
       {f32({0, 2, 3}), f32({0, 3, 4})}},
      {"linear of a batch of 0", [](const auto& in) { return one(linear(in[0], in[1], in[2])); },
       {f32({0, 4}), f32({3, 4}), f32({3})}},
      {"linear_activation relu and gelu of a batch of 0",
       [](const auto& in) {
         return std::vector<Tensor>{linear_activation(in[0], in[1], in[2], Activation::Relu),
                                    linear_activation(in[0], in[1], in[2], Activation::Gelu)};
       },
       {f32({0, 4}), f32({8, 4}), f32({8})}},
      {"linear_activation_linear of a batch of 0",
       [](const auto& in) {
         return one(linear_activation_linear(in[0], in[1], in[2], in[3], in[4], Activation::Relu));
       },
       {f32({0, 4}), f32({8, 4}), f32({8}), f32({2, 8}), f32({2})}},
  });
}

TEST_CASE("empty tensors: softmax, norms and losses") {
  LOOM_REQUIRE_GPU();
  run_cases({
      {"softmax and log_softmax of no rows",
       [](const auto& in) { return std::vector<Tensor>{softmax(in[0], 1), log_softmax(in[0], -1)}; },
       {f32({0, 7})}},
      {"softmax of rows of length 0", [](const auto& in) { return one(softmax(in[0], 1)); }, {f32({5, 0})}},
      {"softmax over a non-last dim of an empty tensor",
       [](const auto& in) { return std::vector<Tensor>{softmax(in[0], 0), log_softmax(in[0], 1)}; },
       {f32({3, 4, 0})}},
      {"layer_norm of no rows (weight and bias get zero gradients)",
       [](const auto& in) { return one(layer_norm(in[0], {6}, in[1], in[2])); }, {f32({0, 6}), f32({6}), f32({6})}},
      {"batch_norm eval of a batch of 0",
       [](const auto& in) { return one(batch_norm(in[0], in[1], in[2], in[3], in[4], false)); },
       {f32({0, 3, 2, 2}), f32({3}), f32({3}), f32({3}, 0.1), f32({3}, 0.7).abs() + 0.5}},
      {"batch_norm training on a batch of 0 (running statistics untouched)",
       [](const auto& in) {
         Tensor rm = in[3].detach().clone(), rv = in[4].detach().clone();
         Tensor out = batch_norm(in[0], in[1], in[2], rm, rv, true);
         return std::vector<Tensor>{out, rm, rv};
       },
       {f32({0, 3, 2, 2}), f32({3}), f32({3}), f32({3}, 0.1), f32({3}, 0.7).abs() + 0.5}},
      {"cross_entropy of a batch of 0 (mean NaN, sum 0, none empty)",
       [](const auto& in) {
         return std::vector<Tensor>{cross_entropy(in[0], in[1]),
                                    cross_entropy(in[0], in[1], {}, -100, 0.0, Reduction::Sum),
                                    cross_entropy(in[0], in[1], {}, -100, 0.1, Reduction::None)};
       },
       {f32({0, 5}), test::index_values({0}, 5)}},
      {"nll_loss of a batch of 0 with class weights",
       [](const auto& in) { return one(nll_loss(log_softmax(in[0], 1), in[1], in[2], -100, Reduction::Sum)); },
       {f32({0, 4}), test::index_values({0}, 4), f32({4}, 0.2).abs()}},
      {"mse_loss of nothing", [](const auto& in) { return one(mse_loss(in[0], in[1], Reduction::Sum)); },
       {f32({0, 2}), f32({0, 2})}},
  });
}

TEST_CASE("empty tensors: convolution and pooling of a batch of 0") {
  LOOM_REQUIRE_GPU();
  for (bool cudnn : {true, false}) {
    test::CudnnEnabledGuard guard(cudnn);
    INFO(label("cudnn", cudnn));
    run_cases({
        {"conv2d (the weight and bias get zero gradients)",
         [](const auto& in) { return one(conv2d(in[0], in[1], in[2], {1, 1}, {1, 1})); },
         {f32({0, 3, 5, 5}), f32({4, 3, 3, 3}), f32({4})}},
        {"grouped conv2d with stride", [](const auto& in) { return one(conv2d(in[0], in[1], {}, {2, 2}, {0, 0}, {1, 1}, 2)); },
         {f32({0, 4, 6, 6}), f32({2, 2, 3, 3})}},
        {"max_pool2d, avg_pool2d and adaptive_avg_pool2d",
         [](const auto& in) {
           return std::vector<Tensor>{max_pool2d(in[0], {2, 2}), avg_pool2d(in[0], {2, 2}, {1, 1}, {1, 1}),
                                      adaptive_avg_pool2d(in[0], {3, 2})};
         },
         {f32({0, 2, 4, 4})}},
    });
  }
}

TEST_CASE("empty tensors: shape and indexing ops") {
  LOOM_REQUIRE_GPU();
  run_cases({
      {"cat of an empty and a full tensor, and of two empty ones",
       [](const auto& in) { return std::vector<Tensor>{cat({in[0], in[1]}, 0), cat({in[0], in[0]}, 1)}; },
       {f32({0, 3}), f32({2, 3})},
       {},
       false},
      {"stack of empty tensors", [](const auto& in) { return one(stack({in[0], in[0]}, 1)); }, {f32({0, 2})}},
      {"index_select with an empty index", [](const auto& in) { return one(index_select(in[0], 0, in[1])); },
       {f32({4, 3}), test::index_values({0}, 4)}},
      {"index_select from an empty source", [](const auto& in) { return one(index_select(in[0], 1, in[1])); },
       {f32({0, 3}), test::index_values({2}, 3)}},
      {"gather with an empty index", [](const auto& in) { return one(gather(in[0], 1, in[1])); },
       {f32({3, 4}), test::index_values({3, 0}, 4)}},
      {"scatter_add and index_add of nothing",
       [](const auto& in) {
         return std::vector<Tensor>{scatter_add(in[0], 1, in[1], in[2]), index_add(in[0], 0, in[3], in[4])};
       },
       {f32({3, 4}), test::index_values({3, 0}, 4), f32({3, 0}), test::index_values({0}, 3), f32({0, 4})},
       {},
       false},
      {"embedding of no indices (the table gets a zero gradient)",
       [](const auto& in) { return one(embedding(in[0], in[1])); }, {f32({5, 3}), test::index_values({2, 0}, 5)}},
      {"tril, triu and flip", [](const auto& in) {
         return std::vector<Tensor>{tril(in[0]), triu(in[0], 1), flip(in[0], {0, 1}), tril(in[1])};
       },
       {f32({3, 0}), f32({0, 0})}},
      {"pad of an empty batch", [](const auto& in) { return one(pad(in[0], {1, 2})); }, {f32({0, 3})}},
      {"pad makes an empty dim non-empty", [](const auto& in) { return one(pad(in[0], {1, 1}, "constant", 2.5)); },
       {f32({3, 0})}},
      {"repeat, expand and contiguous of empty views",
       [](const auto& in) {
         return std::vector<Tensor>{repeat(in[0], {2, 1}), in[0].expand({4, 0, 3}).contiguous(),
                                    in[0].permute({1, 0}).contiguous()};
       },
       {f32({0, 3})}},
  });
}

TEST_CASE("empty tensors: attention of a batch of 0 and of no queries") {
  LOOM_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat16}) {
    INFO(label(dt));
    for (bool causal : {false, true}) {
      INFO(label("causal", causal));
      run_cases({
          {"batch of 0",
           [causal](const auto& in) {
             return one(scaled_dot_product_attention(in[0], in[1], in[2], {}, 0.0, causal));
           },
           {f32({0, 2, 4, 8}).to(dt), f32({0, 2, 4, 8}, 0.4).to(dt), f32({0, 2, 4, 8}, 0.5).to(dt)}},
          {"no queries and no keys",
           [causal](const auto& in) {
             return one(scaled_dot_product_attention(in[0], in[1], in[2], {}, 0.0, causal));
           },
           {f32({1, 2, 0, 8}).to(dt), f32({1, 2, 0, 8}, 0.4).to(dt), f32({1, 2, 0, 8}, 0.5).to(dt)}},
      });
    }
  }
}

TEST_CASE("empty tensors: INT8 linear, quantize and dequantize of a batch of 0") {
  LOOM_REQUIRE_GPU();
  CudaCase no_grad;
  no_grad.backward = false;
  run_cases({
      {"quantize and dequantize",
       [](const auto& in) {
         Tensor q = quantize_per_tensor(in[0], 0.1f, 3, kUInt8);
         return std::vector<Tensor>{q, dequantize_per_tensor(q, 0.1f, 3)};
       },
       {f32({0, 4})},
       no_grad},
      {"int8_linear of no rows, to float32 and to uint8",
       [](const auto& in) {
         Tensor x = in[0].to(kUInt8), w = (in[1] - 3).to(kInt8), scales = in[2].abs() + 0.01;
         return std::vector<Tensor>{int8_linear(x, w, scales, in[3], kFloat32, Int8Epilogue{2, 0, false}),
                                    int8_linear(x, w, scales, {}, kUInt8, Int8Epilogue{2, 5, true})};
       },
       {test::index_values({0, 8}, 255).to(kFloat32), test::index_values({3, 8}, 7).to(kFloat32), f32({3}), f32({3})},
       no_grad},
      {"int8_max_pool2d of a batch of 0",
       [](const auto& in) { return one(int8_max_pool2d(in[0].to(kUInt8), {2, 2}, {2, 2}, {0, 0})); },
       {test::index_values({0, 2, 4, 4}, 255).to(kFloat32)},
       no_grad},
  });
}

}  // namespace
}  // namespace loom
