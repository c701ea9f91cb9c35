/*
 * Second derivatives on CUDA against the CPU: the backward of the backward kernels.
 *
 * A gradient penalty (WGAN-GP, R1), MAML and Hessian-vector products differentiate a gradient
 * again. Loom records the backward ops like forward ops (softmax_backward, layer_norm_backward,
 * conv2d_backward_input, gelu_backward, ...) and their formulas run more ops on the device. The op
 * table checks first derivatives only; the gradcheck table checks second derivatives on the CPU
 * only. Here the Hessian-vector product
 *     hvp = d/dx [ sum_i (d loss / d x_i) u_i ],   loss = sum_k out_k * r_k,
 * of each case is computed on CUDA and on the CPU, in float64, for fixed random r and u.
 */
#include <functional>
#include <string>
#include <vector>

#include "ops/attention_ops.h"
#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::make;
using test::one;
using test::pat;

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct SecondOrderCase {
  std::string name;
  Fn f;
  std::vector<Tensor> inputs;  // float64 CPU tensors; the floating ones are differentiated
};

// The Hessian-vector product of each floating input (zeros where the first gradient does not
// depend on that input) on `device`.
std::vector<Tensor> hessian_vector_products(const SecondOrderCase& c, Device device) {
  std::vector<Tensor> in, wrt;
  for (const Tensor& t : c.inputs) {
    in.push_back(t.detach().to(device));
    if (is_floating(t.dtype())) {
      in.back().requires_grad_();
      wrt.push_back(in.back());
    }
  }
  std::vector<Tensor> out = c.f(in);
  Tensor loss = zeros({}, TensorOptions(kFloat64).device(device));
  for (size_t k = 0; k < out.size(); ++k)
    if (is_floating(out[k].dtype()) && out[k].requires_grad())
      loss = loss + (out[k] * pat(out[k].sizes(), 0.31 + static_cast<double>(k)).to(device)).sum();
  std::vector<Tensor> first = autograd::grad({loss}, wrt, {}, {}, /*create_graph=*/true, /*allow_unused=*/true);
  Tensor dot = zeros({}, TensorOptions(kFloat64).device(device));
  for (size_t i = 0; i < first.size(); ++i)
    if (first[i].defined() && first[i].requires_grad())
      dot = dot + (first[i] * pat(first[i].sizes(), 0.53 + static_cast<double>(i)).to(device)).sum();
  std::vector<Tensor> second(wrt.size());
  if (dot.requires_grad()) second = autograd::grad({dot}, wrt, {}, {}, false, /*allow_unused=*/true);
  for (size_t i = 0; i < second.size(); ++i)
    if (!second[i].defined()) second[i] = zeros(wrt[i].sizes(), wrt[i].options());
  return second;
}

void check_case(const SecondOrderCase& c) {
  INFO(c.name);
  const std::vector<Tensor> cpu = hessian_vector_products(c, kCPU);
  const std::vector<Tensor> gpu = hessian_vector_products(c, Device::cuda());
  REQUIRE(cpu.size() == gpu.size());
  bool any_nonzero = false;
  for (size_t i = 0; i < cpu.size(); ++i) {
    test::check_same(gpu[i], cpu[i], test::Tol{1e-9, 1e-10}, "Hessian-vector product of input " + std::to_string(i));
    for (double v : cpu[i].to_vector<double>()) any_nonzero = any_nonzero || v != 0.0;
  }
  CHECK_MESSAGE(any_nonzero, "every second derivative is 0: the case checks nothing");
}

Tensor f64(IntArrayRef shape, double seed) { return pat(shape, seed, 1.5).to(kFloat64); }
Tensor ints(std::vector<double> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return make(std::move(v), {n}, kInt64);
}

TEST_CASE("second order: activations, softmax, norms and losses") {
  LOOM_REQUIRE_GPU();
  const std::vector<SecondOrderCase> cases = {
      {"gelu (erf and tanh), silu, sigmoid, tanh",
       [](const auto& in) {
         const Tensor& x = in[0];
         return std::vector<Tensor>{gelu(x), gelu(x, "tanh"), silu(x), sigmoid(x), tanh(x)};
       },
       {f64({4, 5}, 0.1)}},
      {"relu times x (threshold_backward's second derivative is 0, the product's is not)",
       [](const auto& in) { return one(relu(in[0]) * in[0]); }, {f64({4, 5}, 0.2)}},
      {"softmax and log_softmax along the last and a middle dim",
       [](const auto& in) {
         return std::vector<Tensor>{softmax(in[0], -1), log_softmax(in[0], 1)};
       },
       {f64({2, 3, 4}, 0.3)}},
      {"layer_norm with weight and bias", [](const auto& in) { return one(layer_norm(in[0], {6}, in[1], in[2])); },
       {f64({4, 6}, 0.4), f64({6}, 0.5), f64({6}, 0.6)}},
      {"batch_norm in training",
       [](const auto& in) { return one(batch_norm(in[0], in[1], in[2], Tensor(), Tensor(), true)); },
       {f64({4, 3, 2, 2}, 0.7), f64({3}, 0.8), f64({3}, 0.9)}},
      {"cross_entropy with label smoothing and class weights",
       [](const auto& in) { return one(cross_entropy(in[0], in[1], in[2], -100, 0.1)); },
       {f64({5, 4}, 1.0), ints({0, 3, 1, 2, 3}), f64({4}, 1.1).abs() + 0.5}},
      {"mse_loss", [](const auto& in) { return one(mse_loss(in[0], in[1])); }, {f64({3, 4}, 1.2), f64({3, 4}, 1.3)}},
  };
  for (const SecondOrderCase& c : cases) check_case(c);
}

TEST_CASE("second order: matmul, linear, the fused linear blocks, convolution and pooling") {
  LOOM_REQUIRE_GPU();
  const std::vector<SecondOrderCase> cases = {
      {"tanh of matmul", [](const auto& in) { return one(tanh(matmul(in[0], in[1]))); },
       {f64({5, 4}, 0.1), f64({4, 3}, 0.2)}},
      {"linear_activation gelu, and relu times its input",
       [](const auto& in) {
         return std::vector<Tensor>{linear_activation(in[0], in[1], in[2], Activation::Gelu),
                                    linear_activation(in[0], in[1], in[2], Activation::Relu) * in[0].sum()};
       },
       {f64({6, 4}, 0.3), f64({8, 4}, 0.4), f64({8}, 0.5)}},
      {"linear_activation_linear with tanh GELU",
       [](const auto& in) {
         return one(linear_activation_linear(in[0], in[1], in[2], in[3], in[4], Activation::GeluTanh));
       },
       {f64({6, 4}, 0.6), f64({8, 4}, 0.7), f64({8}, 0.8), f64({2, 8}, 0.9), f64({2}, 1.0)}},
      {"conv2d then tanh, padding 1, stride 2",
       [](const auto& in) { return one(tanh(conv2d(in[0], in[1], in[2], {2, 2}, {1, 1}))); },
       {f64({2, 3, 5, 5}, 1.1), f64({4, 3, 3, 3}, 1.2), f64({4}, 1.3)}},
      {"max_pool2d and avg_pool2d of a square",
       [](const auto& in) {
         Tensor sq = in[0] * in[0];
         return std::vector<Tensor>{max_pool2d(sq, {2, 2}), avg_pool2d(sq, {2, 2}, {1, 1}, {1, 1}),
                                    adaptive_avg_pool2d(sq, {3, 2})};
       },
       {f64({2, 2, 4, 4}, 1.4)}},
      {"scaled_dot_product_attention (the math path in float64), causal",
       [](const auto& in) { return one(scaled_dot_product_attention(in[0], in[1], in[2], {}, 0.0, true)); },
       {f64({1, 2, 4, 3}, 1.5), f64({1, 2, 4, 3}, 1.6), f64({1, 2, 4, 3}, 1.7)}},
      {"pad, cat and index_select of a square",
       [](const auto& in) {
         Tensor sq = in[0] * in[0];
         return std::vector<Tensor>{pad(sq, {1, 1}), cat({sq, in[0]}, 0), index_select(sq, 1, ints({2, 0, 2}).to(sq.device()))};
       },
       {f64({3, 4}, 1.8)}},
  };
  for (bool cudnn : {true, false}) {
    test::CudnnEnabledGuard guard(cudnn);
    INFO(test::label("cudnn", cudnn));
    for (const SecondOrderCase& c : cases) check_case(c);
  }
}

}  // namespace
}  // namespace loom
