/*
 * The composite activations, norms and losses on CUDA against the CPU: leaky_relu, elu, selu,
 * celu, softplus, hardtanh, relu6, hardsigmoid, hardswish, mish, log_sigmoid, softsign and
 * prelu; group_norm and rms_norm; einsum, roll, conv1d, conv_transpose2d and conv_transpose1d
 * (the losses composed the same way are in tests/cuda/test_cuda_losses.cpp, which links nn).
 * They have no kernels of their own, so what this checks is that every op they are made of runs
 * on CUDA with the CPU's semantics (the comparisons and selects at the kinks included), forward
 * and backward, for every floating dtype, on values that cross each kink.
 */
#include <functional>
#include <string>
#include <vector>

#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::check_cuda_matches_cpu;
using test::cuda_float_dtypes;
using test::label;
using test::pat;

// [4, 6] values in (-4, 4), crossing 0 and +-3, with a transposed view for the strides.
Tensor activation_input(DType dt) {
  return (pat({6, 4}, 0.7, 4.0).t()).to(dt);
}

TEST_CASE("composite activations match the CPU, forward and backward, for every floating dtype") {
  LOOM_REQUIRE_GPU();
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> cases{
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.2); }},
      {"elu", [](const Tensor& x) { return elu(x, 1.5); }},
      {"selu", [](const Tensor& x) { return selu(x); }},
      {"celu", [](const Tensor& x) { return celu(x, 0.5); }},
      {"softplus", [](const Tensor& x) { return softplus(x, 2.0, 3.0); }},
      {"hardtanh", [](const Tensor& x) { return hardtanh(x, -1.5, 2.0); }},
      {"relu6", [](const Tensor& x) { return relu6(x * 2.0); }},
      {"hardsigmoid", [](const Tensor& x) { return hardsigmoid(x); }},
      {"hardswish", [](const Tensor& x) { return hardswish(x); }},
      {"mish", [](const Tensor& x) { return mish(x); }},
      {"log_sigmoid", [](const Tensor& x) { return log_sigmoid(x); }},
      {"softsign", [](const Tensor& x) { return softsign(x); }},
  };
  for (const auto& [name, fn] : cases) {
    for (DType dt : cuda_float_dtypes()) {
      INFO(label(name, dt));
      check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return fn(in[0]); },
                             {activation_input(dt)});
    }
  }
  for (DType dt : cuda_float_dtypes()) {
    INFO(label("prelu", dt));
    check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return prelu(in[0], in[1]); },
                           {pat({2, 3, 4}, 0.3, 2.0).to(dt), pat({3}, 1.2, 0.5).to(dt)});
  }
}

TEST_CASE("group_norm and rms_norm match the CPU, forward and backward, with their parameters") {
  LOOM_REQUIRE_GPU();
  for (DType dt : cuda_float_dtypes()) {
    INFO(label("group_norm", dt));
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) { return group_norm(in[0], 2, in[1], in[2]); },
        {pat({2, 4, 3, 2}, 0.4, 3.0).to(dt), (pat({4}, 1.1, 0.5) + 1.0).to(kFloat32), pat({4}, 2.3, 0.5)});
    INFO(label("rms_norm", dt));
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) {
          return rms_norm(in[0], {2, 3}, in[1]);
        },
        {pat({4, 2, 3}, 0.9, 3.0).to(dt), (pat({2, 3}, 1.7, 0.5) + 1.0).to(dt)});
  }
}

TEST_CASE("einsum, roll, conv1d and the transposed convolutions match the CPU, forward and backward") {
  LOOM_REQUIRE_GPU();
  for (DType dt : {kFloat32, kBFloat16}) {
    INFO(label("einsum", dt));
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{einsum("bij,bjk->bik", {in[0], in[1]}), einsum("...ii->...i", {in[2]}),
                                     einsum("ij,jk,k->i", {in[0].select(0, 0), in[1].select(0, 1), in[3]})};
        },
        {pat({2, 3, 4}, 0.1).to(dt), pat({2, 4, 5}, 0.2).to(dt), pat({2, 3, 3}, 0.3).to(dt), pat({5}, 0.4).to(dt)});
    INFO(label("roll", dt));
    check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return roll(in[0], {2, -1}, {0, 2}); },
                           {pat({3, 2, 5}, 0.5).to(dt)});
  }
  for (DType dt : cuda_float_dtypes()) {
    INFO(label("conv1d", dt));
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) { return conv1d(in[0], in[1], in[2], 2, 1, 2, 2); },
        {pat({2, 4, 9}, 0.6).to(dt), pat({6, 2, 3}, 0.7).to(dt), pat({6}, 0.8).to(dt)});
    INFO(label("conv_transpose2d", dt));
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) {
          return conv_transpose2d(in[0], in[1], in[2], {2, 2}, {1, 0}, {1, 1}, 2, {1, 2});
        },
        {pat({2, 4, 3, 4}, 0.9).to(dt), pat({4, 3, 3, 2}, 1.0).to(dt), pat({6}, 1.1).to(dt)});
    INFO(label("conv_transpose1d", dt));
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) { return conv_transpose1d(in[0], in[1], Tensor(), 3, 1, 2); },
        {pat({3, 5}, 1.2).to(dt), pat({3, 2, 4}, 1.3).to(dt)});
  }
}

}  // namespace
}  // namespace loom
