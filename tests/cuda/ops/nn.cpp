/*
 * CUDA nn kernels against the CPU: softmax and log_softmax (along the last dim, short rows one
 * warp each and long rows one block each; along a middle and the first dim, a thread per
 * column), layer_norm (with and without affine parameters, short and long rows), batch_norm
 * (training with running statistics of other dtypes and strides, checked after the update;
 * eval; [N, C] and [N, C, H, W]; channels_last activations through cuDNN's batch norm and, with
 * cuDNN off, Loom's kernels), nll_loss (class weights, ignore_index, each reduction,
 * strided logp and target) and cross_entropy end to end, for every floating dtype, forward and
 * backward (the backward kernels are reached through autograd). Out-of-range targets must raise
 * the CPU's error on CUDA too.
 */
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ops/cuda/cudnn_conv.h"
#include "ops/memory_format.h"
#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::check_cuda_matches_cpu;
using test::cuda_float_dtypes;
using test::CudaCase;
using test::label;
using test::make;
using test::pat;

LOOM_CUDA_COVERS(Op::softmax, Op::softmax_backward, Op::log_softmax, Op::log_softmax_backward, Op::layer_norm,
                 Op::layer_norm_backward, Op::batch_norm, Op::batch_norm_backward, Op::nll_loss,
                 Op::nll_loss_backward);

Tensor values(IntArrayRef shape, DType dt, double seed, double scale = 2.0) {
  return pat(shape, seed, scale).to(dt);
}

// Int64 class indices in [0, classes), with `ignored` at every third position when given.
Tensor targets(int64_t n, int64_t classes, std::optional<int64_t> ignored = std::nullopt) {
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(ignored && i % 3 == 1 ? *ignored : (i * 7 + 2) % classes);
  return make(v, {n}, kInt64);
}

// ---- softmax family ---------------------------------------------------------------------------

struct SoftmaxCase {
  std::string name;
  std::vector<int64_t> base;
  std::function<Tensor(const Tensor&)> view;  // applied inside the compared function
  int64_t dim;
};

const std::vector<SoftmaxCase>& softmax_cases() {
  static const std::vector<SoftmaxCase> cases = {
      {"last dim, warp per row", {5, 7}, [](const Tensor& x) { return x; }, -1},
      {"last dim of a transposed view", {9, 6}, [](const Tensor& x) { return x.t(); }, 1},
      {"middle dim", {3, 4, 5}, [](const Tensor& x) { return x; }, 1},
      {"first dim of a step-sliced view",
       {6, 2, 5},
       [](const Tensor& x) { return x.slice(0, 0, 6, 2).slice(2, 1, 5); },
       0},
      {"long rows, block per row", {3, 2000}, [](const Tensor& x) { return x; }, -1},
  };
  return cases;
}

TEST_CASE("nn softmax and log_softmax match the CPU, forward and backward") {
  LOOM_REQUIRE_GPU();
  for (const SoftmaxCase& c : softmax_cases()) {
    for (DType dt : cuda_float_dtypes()) {
      for (bool log : {false, true}) {
        INFO(label(c.name, dt, log ? "log_softmax" : "softmax"));
        check_cuda_matches_cpu(
            [&](const std::vector<Tensor>& in) {
              Tensor x = c.view(in[0]);
              return log ? log_softmax(x, c.dim) : softmax(x, c.dim);
            },
            {values(c.base, dt, 0.3, 4.0)});
      }
    }
  }
}

TEST_CASE("nn softmax keeps -inf logits at exactly zero probability") {
  LOOM_REQUIRE_GPU();
  Tensor x = make({1.0, -test::kInf, 2.0, 0.5, -test::kInf, -1.0}, {2, 3}, kFloat32);
  check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return softmax(in[0], -1); }, {x},
                         CudaCase{.backward = false, .tol = std::nullopt, .grad_tol = std::nullopt});
  CHECK(softmax(x.to(Device::cuda()), -1).to(kCPU).to_vector<double>()[1] == 0.0);
}

// ---- layer_norm -------------------------------------------------------------------------------

TEST_CASE("nn layer_norm matches the CPU, with and without affine parameters") {
  LOOM_REQUIRE_GPU();
  struct Case {
    std::string name;
    std::vector<int64_t> base;
    std::function<Tensor(const Tensor&)> view;
    std::vector<int64_t> normalized;
  };
  const std::vector<Case> cases = {
      {"[6, 10], warp per row", {6, 10}, [](const Tensor& x) { return x; }, {10}},
      {"[2, 3, 8] over the last two dims, transposed input",
       {8, 3, 2},
       [](const Tensor& x) {
         return x.permute({2, 1, 0});
       },
       {3, 8}},
      {"[2, 1500], block per row", {2, 1500}, [](const Tensor& x) { return x; }, {1500}},
  };
  for (const Case& c : cases) {
    for (DType dt : cuda_float_dtypes()) {
      for (bool affine : {true, false}) {
        INFO(label(c.name, dt, affine ? "affine" : "plain"));
        std::vector<Tensor> inputs{values(c.base, dt, 0.7, 3.0)};
        if (affine) {
          inputs.push_back(values(c.normalized, dt, 1.1, 1.0) + 1.0);  // weight
          inputs.push_back(values(c.normalized, dt, 2.3, 0.5));        // bias
        }
        check_cuda_matches_cpu(
            [&](const std::vector<Tensor>& in) {
              Tensor x = c.view(in[0]);
              auto [out, mean, rstd] = layer_norm_forward(x, c.normalized, affine ? in[1] : Tensor(),
                                                          affine ? in[2] : Tensor(), 1e-5);
              return std::vector<Tensor>{out, mean, rstd};
            },
            inputs);
      }
    }
  }
}

// ---- batch_norm -------------------------------------------------------------------------------

// x, weight, bias, then running mean (float32 every other element of a [2C] tensor) and
// running var (float64, contiguous), which the compared function updates and returns.
std::vector<Tensor> batch_norm_inputs(const std::vector<int64_t>& shape, DType dt) {
  const int64_t c = shape[1];
  return {values(shape, dt, 0.4, 3.0), values({c}, dt, 1.3, 1.0) + 1.0, values({c}, dt, 2.1, 0.5),
          pat({2 * c}, 0.9, 0.5), (pat({c}, 1.7, 0.5).abs() + 0.5).to(kFloat64)};
}

TEST_CASE("nn batch_norm training matches the CPU, running stats included") {
  LOOM_REQUIRE_GPU();
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{6, 3}, std::vector<int64_t>{2, 3, 4, 5}}) {
    for (DType dt : cuda_float_dtypes()) {
      for (bool affine : {true, false}) {
        INFO(label(dt, affine ? "affine, running stats" : "plain", "rank", shape.size()));
        check_cuda_matches_cpu(
            [&](const std::vector<Tensor>& in) {
              // Running stats are buffers: fresh copies without history, updated in place (the
              // plain case runs without them).
              Tensor running_mean = affine ? in[3].detach().clone().slice(0, 0, 2 * shape[1], 2) : Tensor();
              Tensor running_var = affine ? in[4].detach().clone() : Tensor();
              auto [out, save_mean, save_invstd] =
                  batch_norm_forward(in[0], affine ? in[1] : Tensor(), affine ? in[2] : Tensor(),
                                     running_mean, running_var, /*training=*/true, 0.1, 1e-5);
              if (!affine) return std::vector<Tensor>{out, save_mean, save_invstd};
              return std::vector<Tensor>{out, save_mean, save_invstd, running_mean, running_var};
            },
            batch_norm_inputs(shape, dt));
      }
    }
  }
}

TEST_CASE("nn batch_norm eval uses the running stats") {
  LOOM_REQUIRE_GPU();
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{6, 3}, std::vector<int64_t>{2, 3, 4, 5}}) {
    for (DType dt : cuda_float_dtypes()) {
      INFO(label(dt, "rank", shape.size()));
      check_cuda_matches_cpu(
          [&](const std::vector<Tensor>& in) {
            Tensor running_mean = in[3].detach().slice(0, 0, 2 * shape[1], 2).to(kBFloat16);
            Tensor running_var = in[4].detach();
            auto [out, save_mean, save_invstd] = batch_norm_forward(
                in[0], in[1], in[2], running_mean, running_var, /*training=*/false, 0.1, 1e-5);
            return std::vector<Tensor>{out, save_mean, save_invstd};
          },
          batch_norm_inputs(shape, dt));
    }
  }
}

// x as channels_last: NCHW sizes over NHWC memory, through differentiable views.
Tensor as_channels_last(const Tensor& x) {
  return contiguous(x.permute({0, 2, 3, 1})).permute({0, 3, 1, 2});
}

// cuDNN's batch norm takes channels_last activations with float32 statistics, parameters and
// running statistics (what BatchNorm2d keeps for f32, f16 and bf16 activations); float64 goes to
// Loom's kernels. With cuDNN off, every case runs Loom's kernels on NCHW copies. Either way the
// output and the input's gradient stay channels_last, on the CPU too.
TEST_CASE("nn batch_norm on channels_last activations matches the CPU, with cuDNN and without") {
  LOOM_REQUIRE_GPU();
  const std::vector<int64_t> shape{3, 5, 4, 3};
  const int64_t c = shape[1];
  for (bool cudnn : {true, false}) {
    test::CudnnEnabledGuard use(cudnn);
    for (DType dt : cuda_float_dtypes()) {
      for (bool training : {true, false}) {
        for (bool affine : {true, false}) {
          INFO(label(dt, training ? "training" : "eval", affine ? "affine" : "plain",
                     cudnn ? "cuDNN" : "Loom"));
          check_cuda_matches_cpu(
              [&](const std::vector<Tensor>& in) {
                Tensor x = as_channels_last(in[0]);
                Tensor running_mean = contiguous(in[3].detach().slice(0, 0, 2 * c, 2));
                Tensor running_var = in[4].detach().to(kFloat32);
                auto [out, save_mean, save_invstd] =
                    batch_norm_forward(x, affine ? in[1] : Tensor(), affine ? in[2] : Tensor(), running_mean,
                                       running_var, training, 0.1, 1e-5);
                CHECK(is_channels_last(out));
                return std::vector<Tensor>{out, save_mean, save_invstd, running_mean, running_var};
              },
              batch_norm_inputs(shape, dt));
        }
      }
    }
  }
}

TEST_CASE("nn batch_norm backward keeps channels_last gradients") {
  LOOM_REQUIRE_GPU();
  for (Device device : {Device::cpu(), Device::cuda()}) {
    Tensor x = as_channels_last(values({2, 3, 4, 5}, kFloat32, 0.4, 3.0).to(device));
    Tensor w = ones({3}, TensorOptions(kFloat32).device(device));
    auto [out, save_mean, save_invstd] =
        batch_norm_forward(x, w, Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
    auto [grad_input, grad_weight, grad_bias] =
        batch_norm_backward(ones_like(out), x, w, save_mean, save_invstd);
    CHECK(is_channels_last(grad_input));
    CHECK(grad_input.abs().max().item<double>() < 1e-5);  // a constant upstream gradient has none left
  }
}

// ---- nll_loss and cross_entropy ---------------------------------------------------------------

TEST_CASE("nn nll_loss matches the CPU: weights, ignore_index, every reduction") {
  LOOM_REQUIRE_GPU();
  const int64_t n = 7, classes = 5;
  for (DType dt : cuda_float_dtypes()) {
    for (Reduction reduction : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
      for (bool weighted : {false, true}) {
        for (bool ignoring : {false, true}) {
          INFO(label(dt, "reduction", static_cast<int>(reduction), weighted ? "weighted" : "",
                     ignoring ? "ignore_index" : ""));
          const int64_t ignore_index = ignoring ? 3 : -100;
          std::vector<Tensor> inputs{values({classes, n}, dt, 0.2, 3.0),
                                     // every other element of a [2n] target: a strided target
                                     make(std::vector<double>(2 * n, 0.0), {2 * n}, kInt64),
                                     (pat({classes}, 0.5, 0.5).abs() + 0.25).to(dt)};
          Tensor t = targets(n, classes, ignoring ? std::optional<int64_t>(ignore_index) : std::nullopt);
          inputs[1].slice(0, 0, 2 * n, 2).copy_(t);
          check_cuda_matches_cpu(
              [&](const std::vector<Tensor>& in) {
                Tensor logp = log_softmax(in[0].t(), 1);  // [n, classes], then a transposed view
                Tensor strided_logp = logp.t().contiguous().t();
                auto [loss, total_weight] =
                    nll_loss_forward(strided_logp, in[1].slice(0, 0, 2 * n, 2), weighted ? in[2] : Tensor(),
                                     ignore_index, reduction);
                return std::vector<Tensor>{loss, total_weight};
              },
              inputs);
        }
      }
    }
  }
}

TEST_CASE("nn cross_entropy runs end to end on CUDA") {
  LOOM_REQUIRE_GPU();
  for (DType dt : cuda_float_dtypes()) {
    INFO(label(dt));
    // [N, C] logits
    check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1]); },
                           {values({6, 4}, dt, 0.1, 3.0), targets(6, 4)});
    // [N, C, d] logits (class dim moved last inside the ops), with class weights and ignore_index
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) {
          return cross_entropy(in[0], in[1], in[2].detach(), /*ignore_index=*/0, 0.0, Reduction::Sum);
        },
        {values({2, 3, 4}, dt, 0.6, 3.0), targets(8, 3).view({2, 4}), (pat({3}, 0.8).abs() + 0.5).to(dt)});
    // label smoothing: the composite's extra terms (sum, masked_fill, div) on top of nll_loss
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) {
          return cross_entropy(in[0], in[1], Tensor(), /*ignore_index=*/2, 0.1, Reduction::Mean);
        },
        {values({5, 4}, dt, 0.9, 3.0), targets(5, 4)});
  }
}

TEST_CASE("nn nll_loss reports out-of-range targets on CUDA at the next wait for the GPU") {
  LOOM_REQUIRE_GPU();
  Tensor logp = log_softmax(pat({4, 5}, 0.1), 1).to(Device::cuda());
  Tensor bad = make({1, 4, 7, -2}, {4}, kInt64).to(Device::cuda());
  // The op does not wait for its check; the host's next wait reports the first bad sample.
  for (Reduction reduction : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
    CHECK_NOTHROW(nll_loss(logp, bad, Tensor(), -100, reduction));
    CHECK_THROWS_WITH_AS(
        cuda::synchronize(),
        doctest::Contains("nll_loss: a target out of bounds for 5 classes (at batch index 2)"), Error);
  }
  Tensor total_weight = make({4}, {}, kFloat32).to(Device::cuda());
  Tensor grad = nll_loss_backward(make({1}, {}, kFloat32).to(Device::cuda()), logp, bad, Tensor(),
                                  total_weight, -100, Reduction::Mean);
  CHECK_THROWS_WITH_AS(
      (void)grad.to(kCPU),
      doctest::Contains("nll_loss_backward: a target out of bounds for 5 classes (at batch index 2)"), Error);
  // ignore_index may lie outside [0, C): ignored targets are never range-checked.
  Tensor ignored = make({1, -2, 3, -2}, {4}, kInt64).to(Device::cuda());
  CHECK_NOTHROW(nll_loss(logp, ignored, Tensor(), -2, Reduction::Sum).to(kCPU));
}

}  // namespace
}  // namespace loom
