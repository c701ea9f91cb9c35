/*
 * Tests of bfloat16 autocast on the CPU (core/autocast.h, the policy in ops/autocast.h):
 * the guard's state (nesting, enabled = false, restore on exception, per device type), the
 * dtypes and values of the lower-precision and float32 ops, that backward runs outside
 * autocast, that float32 master weights get float32 gradients close to a float32 run's, that
 * every op a bf16 network uses has a bf16 kernel forward and backward, and that an MLP trained
 * with bf16 autocast reaches the accuracy of the same MLP trained in float32.
 *
 * References: the same op in float32 on the bf16-rounded inputs (then only the output rounding
 * to bf16 differs: bf16 tolerance), the op in float32 on the exact inputs (a relative error
 * bound), or the op in float32 outside autocast (float32 tolerance, for the float32 ops).
 */
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "autograd/autograd.h"
#include "nn/amp/amp.h"
#include "tests/test_util.h"

namespace loom::test {
namespace {

constexpr DeviceType kCpuType = DeviceType::CPU;

Tensor randf(IntArrayRef shape, uint64_t seed, double scale = 1.0) {
  return make(random_values(shape_numel(shape), seed, scale), shape, kFloat32);
}

// x rounded to bf16 and back: what a bf16 kernel reads.
Tensor rounded(const Tensor& x) {
  return x.defined() ? x.to(kBFloat16).to(kFloat32) : x;
}

// ||a - b|| / ||b|| in float64.
double relative_error(const Tensor& a, const Tensor& b) {
  std::vector<double> va = values(a), vb = values(b);
  REQUIRE(va.size() == vb.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    num += (va[i] - vb[i]) * (va[i] - vb[i]);
    den += vb[i] * vb[i];
  }
  return std::sqrt(num / den);
}

// A lower-precision op under autocast: bf16 output, equal within bf16 tolerance to the float32
// op on bf16-rounded inputs (the kernels accumulate in float32, so only the output rounding
// differs), and within 1% (norm) of the float32 op on the exact inputs (inputs rounded to
// 8 mantissa bits: about 0.3% relative error per product term, averaging out over the sum).
template <class Op>
void check_lower(const Op& op, const std::vector<Tensor>& inputs) {
  Tensor out;
  {
    AutocastGuard autocast(kCpuType);
    out = op(inputs);
  }
  CHECK(out.dtype() == kBFloat16);
  std::vector<Tensor> r;
  for (const Tensor& x : inputs) r.push_back(rounded(x));
  check_close(out, values(op(r)), tol_for(kBFloat16));
  CHECK(relative_error(out, op(inputs)) < 1e-2);
}

// A float32 op under autocast: float32 output from bf16 inputs, equal (float32 tolerance) to
// the op run outside autocast on the inputs converted to float32.
template <class Op>
void check_fp32(const Op& op, const std::vector<Tensor>& bf16_inputs) {
  Tensor out;
  {
    AutocastGuard autocast(kCpuType);
    out = op(bf16_inputs);
  }
  CHECK(out.dtype() == kFloat32);
  std::vector<Tensor> f;
  for (const Tensor& x : bf16_inputs) f.push_back(x.defined() && x.is_floating_point() ? x.to(kFloat32) : x);
  Tensor expected = op(f);
  REQUIRE(expected.dtype() == kFloat32);
  check_close(out, values(expected), tol_for(kFloat32));
}

}  // namespace

TEST_CASE("amp/autocast guard: on, nested, disabled, restored") {
  CHECK_FALSE(autocast_enabled(kCPU));
  CHECK_FALSE(AutocastMode::any_enabled());
  CHECK(autocast_dtype(kCPU) == kBFloat16);             // torch's CPU default
  CHECK(autocast_dtype(DeviceType::CUDA) == kFloat16);  // torch's CUDA default
  {
    AutocastGuard outer(kCPU);
    CHECK(autocast_enabled(kCPU));
    CHECK_FALSE(autocast_enabled(DeviceType::CUDA));
    CHECK(autocast_dtype(kCPU) == kBFloat16);
    {
      AutocastGuard off(kCPU, std::nullopt, /*enabled=*/false);
      CHECK_FALSE(autocast_enabled(kCPU));
      {
        AutocastGuard half(kCPU, kFloat16);
        CHECK(autocast_enabled(kCPU));
        CHECK(autocast_dtype(kCPU) == kFloat16);
      }
      CHECK_FALSE(autocast_enabled(kCPU));
      CHECK(autocast_dtype(kCPU) == kBFloat16);
    }
    CHECK(autocast_enabled(kCPU));
    // A guard for another device type leaves the CPU's state alone.
    {
      AutocastGuard cuda(DeviceType::CUDA, std::nullopt, false);
      CHECK(autocast_enabled(kCPU));
    }
    CHECK(autocast_enabled(kCPU));
  }
  CHECK_FALSE(autocast_enabled(kCPU));
  // Only float16 and bfloat16 are lower-precision dtypes; a refused guard changes nothing.
  CHECK_THROWS_WITH_AS(AutocastGuard(kCPU, kFloat64), doctest::Contains("bfloat16 or float16"), Error);
  CHECK_FALSE(autocast_enabled(kCPU));
  CHECK(autocast_dtype(kCPU) == kBFloat16);
}

TEST_CASE("amp/autocast state is restored when an exception leaves the region") {
  Tensor x = randf({2, 3}, 1), w = randf({4, 5}, 2);
  try {
    AutocastGuard autocast(kCPU);
    {
      AutocastGuard inner(kCPU, kFloat16);
      linear(x, w);  // shapes do not fit: throws inside two guards
    }
    FAIL("linear should have thrown");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("linear") != std::string::npos);
  }
  CHECK_FALSE(AutocastMode::any_enabled());
  CHECK(autocast_dtype(kCPU) == kBFloat16);
}

TEST_CASE("amp/lower-precision ops run in bf16") {
  SUBCASE("linear with bias") {
    check_lower([](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); },
                {randf({6, 40}, 1), randf({24, 40}, 2, 0.2), randf({24}, 3)});
  }
  SUBCASE("linear without bias, 3-D input") {
    check_lower([](const std::vector<Tensor>& t) { return linear(t[0], t[1]); },
                {randf({2, 5, 33}, 4), randf({9, 33}, 5)});
  }
  SUBCASE("matmul with broadcast batch dims, and the Tensor method") {
    check_lower([](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); },
                {randf({2, 3, 5, 40}, 6), randf({40, 7}, 7)});
    check_lower([](const std::vector<Tensor>& t) { return t[0].matmul(t[1]); },
                {randf({3, 5, 16}, 8), randf({1, 16, 4}, 9)});
  }
  SUBCASE("mm and bmm") {
    check_lower([](const std::vector<Tensor>& t) { return mm(t[0], t[1]); },
                {randf({7, 30}, 10), randf({30, 11}, 11)});
    check_lower([](const std::vector<Tensor>& t) { return bmm(t[0], t[1]); },
                {randf({3, 7, 30}, 12), randf({3, 30, 11}, 13)});
  }
  SUBCASE("conv2d with bias, stride and padding") {
    check_lower(
        [](const std::vector<Tensor>& t) {
          return conv2d(t[0], t[1], t[2], {2, 2}, {1, 1});
        },
        {randf({2, 3, 9, 9}, 14), randf({4, 3, 3, 3}, 15, 0.3), randf({4}, 16)});
  }
  SUBCASE("mixed bf16 and float32 operands are both cast (they would not pass validation otherwise)") {
    Tensor x = randf({4, 8}, 17).to(kBFloat16), w = randf({3, 8}, 18);
    CHECK_THROWS_AS(linear(x, w), Error);
    AutocastGuard autocast(kCPU);
    CHECK(linear(x, w).dtype() == kBFloat16);
  }
  SUBCASE("float64 is left alone") {
    Tensor x = randf({4, 8}, 19).to(kFloat64), w = randf({3, 8}, 20).to(kFloat64);
    AutocastGuard autocast(kCPU);
    CHECK(linear(x, w).dtype() == kFloat64);
    CHECK(matmul(x, w.t()).dtype() == kFloat64);
  }
  SUBCASE("enabled = false and autocast for another device type do not cast CPU tensors") {
    Tensor x = randf({4, 8}, 21), w = randf({3, 8}, 22);
    AutocastGuard autocast(kCPU);
    {
      AutocastGuard off(kCPU, std::nullopt, false);
      CHECK(linear(x, w).dtype() == kFloat32);
    }
    AutocastGuard only_cuda(kCPU, std::nullopt, false);
    AutocastGuard cuda(DeviceType::CUDA);
    CHECK(linear(x, w).dtype() == kFloat32);
  }
}

TEST_CASE("amp/float32 ops run in float32 from bf16 inputs") {
  Tensor x = randf({4, 10}, 30, 3.0).to(kBFloat16);
  Tensor target = tensor<int64_t>({3, 0, 9, 5}, {4});
  SUBCASE("softmax and log_softmax") {
    check_fp32([](const std::vector<Tensor>& t) { return softmax(t[0], 1); }, {x});
    check_fp32([](const std::vector<Tensor>& t) { return log_softmax(t[0], -1); }, {x});
    check_fp32([](const std::vector<Tensor>& t) { return t[0].softmax(0); }, {x});
  }
  SUBCASE("layer_norm with bf16 or float32 parameters") {
    check_fp32([](const std::vector<Tensor>& t) { return layer_norm(t[0], {10}, t[1], t[2]); },
               {x, randf({10}, 31).to(kBFloat16), randf({10}, 32).to(kBFloat16)});
    Tensor w = randf({10}, 33), b = randf({10}, 34);
    check_fp32([&](const std::vector<Tensor>& t) { return layer_norm(t[0], {10}, w, b); }, {x});
  }
  SUBCASE("cross_entropy, with class weights and label smoothing") {
    check_fp32([&](const std::vector<Tensor>& t) { return cross_entropy(t[0], target); }, {x});
    check_fp32([&](const std::vector<Tensor>& t) { return cross_entropy(t[0], target, t[1], -100, 0.1); },
               {x, randf({10}, 35, 0.2).abs().to(kBFloat16)});
  }
  SUBCASE("nll_loss and mse_loss") {
    Tensor logp = log_softmax(x.to(kFloat32), 1).to(kBFloat16);
    check_fp32([&](const std::vector<Tensor>& t) { return nll_loss(t[0], target); }, {logp});
    check_fp32(
        [&](const std::vector<Tensor>& t) { return nll_loss(t[0], target, {}, -100, Reduction::None); },
        {logp});
    check_fp32([](const std::vector<Tensor>& t) { return mse_loss(t[0], t[1]); },
               {x, randf({4, 10}, 36).to(kBFloat16)});
  }
  SUBCASE("a float32 input stays float32, float64 stays float64") {
    AutocastGuard autocast(kCPU);
    CHECK(softmax(x.to(kFloat32), 1).dtype() == kFloat32);
    CHECK(softmax(x.to(kFloat64), 1).dtype() == kFloat64);
  }
}

TEST_CASE("amp/ops outside the policy keep their inputs' dtype; bf16 + float32 promotes") {
  AutocastGuard autocast(kCPU);
  Tensor xb = randf({4, 6}, 40).to(kBFloat16), xf = randf({4, 6}, 41);
  CHECK(xb.relu().dtype() == kBFloat16);
  CHECK(add(xb, xb).dtype() == kBFloat16);
  CHECK(add(xb, xf).dtype() == kFloat32);
  CHECK(mul(xf, xb).dtype() == kFloat32);
  CHECK(xb.sum().dtype() == kBFloat16);
  CHECK(linear(xf, randf({3, 6}, 42)).relu().dtype() == kBFloat16);
}

TEST_CASE("amp/a bf16 CNN runs forward and backward on bf16 kernels") {
  // Every op a small convolutional classifier uses, under autocast: conv2d and linear produce
  // bf16, and the ops after them (batch_norm, relu, gelu, pools, add, mul, dropout, reshape)
  // must have bf16 kernels forward and backward. The loss is float32.
  Generator gen(7);
  Tensor x = randn({4, 3, 12, 12}, kFloat32, &gen);
  Tensor target = tensor<int64_t>({1, 0, 4, 2}, {4});
  Tensor w1 = (randn({8, 3, 3, 3}, kFloat32, &gen) * 0.2).requires_grad_();
  Tensor b1 = zeros({8}).requires_grad_();
  Tensor gamma = ones({8}).requires_grad_(), beta = zeros({8}).requires_grad_();
  Tensor running_mean = zeros({8}), running_var = ones({8});
  Tensor w2 = (randn({8, 8, 3, 3}, kFloat32, &gen) * 0.1).requires_grad_();
  Tensor w3 = (randn({5, 8 * 3 * 3}, kFloat32, &gen) * 0.1).requires_grad_();
  Tensor b3 = zeros({5}).requires_grad_();
  Tensor loss;
  {
    AutocastGuard autocast(kCPU);
    Tensor h = conv2d(x, w1, b1, {1, 1}, {1, 1});
    CHECK(h.dtype() == kBFloat16);
    h = batch_norm(h, gamma, beta, running_mean, running_var, /*training=*/true);
    CHECK(h.dtype() == kBFloat16);
    h = max_pool2d(h.relu(), {2, 2});
    Tensor skip = avg_pool2d(h, {3, 3}, {1, 1}, {1, 1});
    h = conv2d(h, w2, {}, {1, 1}, {1, 1}).gelu();
    h = add(h, mul(skip, 0.5));
    h = dropout(adaptive_avg_pool2d(h, {3, 3}), 0.1, true, &gen);
    CHECK(h.dtype() == kBFloat16);
    Tensor logits = linear(h.reshape({4, -1}), w3, b3);
    CHECK(logits.dtype() == kBFloat16);
    loss = cross_entropy(logits, target);
  }
  CHECK(loss.dtype() == kFloat32);
  loss.backward();
  for (const Tensor& p : {w1, b1, gamma, beta, w2, w3, b3}) {
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == kFloat32);
    CHECK(p.grad().abs().sum().item<double>() > 0);
    CHECK(std::isfinite(p.grad().sum().item<double>()));
  }
}

TEST_CASE("amp/backward runs with autocast off") {
  Tensor x = randf({5, 16}, 50), w = randf({8, 16}, 51).requires_grad_();
  Tensor y = linear(x, w);  // float32 forward, outside autocast
  bool seen_autocast = true;
  y.register_hook([&](const Tensor&) {
    seen_autocast = AutocastMode::any_enabled();
    return Tensor();
  });
  {
    // backward() called inside an autocast region: its formulas (matmuls) must still run in
    // float32, so the gradient equals the float32 one exactly, not to bf16 precision.
    AutocastGuard autocast(kCPU);
    (y * y).sum().backward();
    CHECK(autocast_enabled(kCPU));  // the region's state is back after backward
  }
  CHECK_FALSE(seen_autocast);
  CHECK(w.grad().dtype() == kFloat32);
  Tensor expected = matmul((linear(x, w.detach()) * 2.0).t(), x);
  check_close(w.grad(), values(expected), {1e-5, 1e-5});  // accumulation order may differ
  // autograd::grad too.
  Tensor z = linear(x, w).sum();
  Tensor expected_z = ones({5, 8}).t().matmul(x);
  AutocastGuard autocast(kCPU);
  std::vector<Tensor> g = autograd::grad({z}, {w});
  CHECK(g[0].dtype() == kFloat32);
  check_close(g[0], values(expected_z), {1e-5, 1e-5});
}

TEST_CASE("amp/float32 master weights get float32 gradients close to a float32 run's") {
  // A two-layer MLP with a layer_norm and a cross_entropy loss; the same weights trained in
  // float32 and under bf16 autocast. The casts of the weights are recorded, so the gradients
  // come back through them to the float32 leaves in float32.
  Tensor x = randf({32, 24}, 60, 2.0);
  Generator gen(61);
  Tensor target = randint(0, 10, {32}, kInt64, &gen);
  Tensor w1 = (randf({48, 24}, 62) * 0.2).requires_grad_(), b1 = randf({48}, 63, 0.1).requires_grad_();
  Tensor ln_w = ones({48}).requires_grad_(), ln_b = zeros({48}).requires_grad_();
  Tensor w2 = (randf({10, 48}, 64) * 0.2).requires_grad_(), b2 = zeros({10}).requires_grad_();
  const std::vector<Tensor> params = {w1, b1, ln_w, ln_b, w2, b2};
  auto forward = [&] {
    Tensor h = layer_norm(linear(x, w1, b1).relu(), {48}, ln_w, ln_b);
    return cross_entropy(linear(h, w2, b2), target);
  };

  Tensor loss32 = forward();
  loss32.backward();
  std::vector<Tensor> grads32;
  for (const Tensor& p : params) grads32.push_back(p.grad().clone());
  for (Tensor p : params) p.mutable_grad() = Tensor();

  Tensor loss16;
  {
    AutocastGuard autocast(kCPU);
    loss16 = forward();
  }
  CHECK(loss16.dtype() == kFloat32);
  CHECK(std::abs(loss16.item<double>() - loss32.item<double>()) < 1e-2 * loss32.item<double>());
  loss16.backward();
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(i);
    const Tensor& g = params[i].grad();
    REQUIRE(g.defined());
    CHECK(g.dtype() == kFloat32);
    // bf16's relative tolerance, taken relative to the gradient's scale: an element that is
    // a near-cancelling sum of bf16 products is off by 2^-8 of its terms, not of itself.
    const double scale = grads32[i].abs().max().item<double>();
    check_close(g, values(grads32[i]), {1.6e-2, 1.6e-2 * scale});
    CHECK(relative_error(g, grads32[i]) < 1.6e-2);
  }
}

TEST_CASE("amp/bf16 autocast training reaches the accuracy of float32 training") {
  // A 10-class problem that is not linearly separable: 30 Gaussian clusters in 64-D (3 per
  // class, centres N(0, 0.45^2) per coordinate, unit noise), so that the clusters overlap and
  // the best accuracy is well below 100%. A 64-128-10 ReLU MLP trained by minibatch SGD with
  // momentum from the same initial weights and batches, once in float32 and once under bf16
  // autocast (float32 master weights, float32 loss and update).
  constexpr int64_t kDim = 64, kClusters = 30, kClasses = 10, kHidden = 128;
  constexpr int64_t kTrain = 4000, kTest = 2000, kBatch = 100, kSteps = 400;
  Generator gen(2024);
  Tensor centres = randn({kClusters, kDim}, kFloat32, &gen) * 0.45;
  auto sample = [&](int64_t n, Tensor& xs, Tensor& ys) {
    Tensor cluster = randint(0, kClusters, {n}, kInt64, &gen);
    xs = add(index_select(centres, 0, cluster), randn({n, kDim}, kFloat32, &gen));
    std::vector<int64_t> labels = cluster.to_vector<int64_t>();
    for (int64_t& c : labels) c %= kClasses;
    ys = tensor<int64_t>(labels, {n});
  };
  Tensor x_train, y_train, x_test, y_test;
  sample(kTrain, x_train, y_train);
  sample(kTest, x_test, y_test);

  const double bound1 = 1.0 / std::sqrt(double(kDim)), bound2 = 1.0 / std::sqrt(double(kHidden));
  const Tensor w1_init = (rand({kHidden, kDim}, kFloat32, &gen) * 2.0 - 1.0) * bound1;
  const Tensor w2_init = (rand({kClasses, kHidden}, kFloat32, &gen) * 2.0 - 1.0) * bound2;

  auto train_and_evaluate = [&](bool bf16) {
    Tensor w1 = w1_init.clone().requires_grad_(), b1 = zeros({kHidden}).requires_grad_();
    Tensor w2 = w2_init.clone().requires_grad_(), b2 = zeros({kClasses}).requires_grad_();
    std::vector<Tensor> params = {w1, b1, w2, b2}, velocity;
    for (const Tensor& p : params) velocity.push_back(zeros_like(p));
    auto logits = [&](const Tensor& x) {
      AutocastGuard autocast(kCPU, std::nullopt, bf16);
      return linear(linear(x, w1, b1).relu(), w2, b2);
    };
    for (int64_t step = 0; step < kSteps; ++step) {
      const int64_t start = (step * kBatch) % kTrain;
      Tensor xb = narrow(x_train, 0, start, kBatch), yb = narrow(y_train, 0, start, kBatch);
      Tensor loss;
      {
        AutocastGuard autocast(kCPU, std::nullopt, bf16);
        loss = cross_entropy(logits(xb), yb);
      }
      REQUIRE(loss.dtype() == kFloat32);
      for (Tensor p : params) p.mutable_grad() = Tensor();
      loss.backward();
      NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        REQUIRE(params[i].grad().dtype() == kFloat32);
        velocity[i].mul_(0.9).add_(params[i].grad());
        params[i].sub_(velocity[i], 0.05);
      }
    }
    NoGradGuard no_grad;
    Tensor predicted = argmax(logits(x_test), 1);
    return 100.0 * eq(predicted, y_test).to(kFloat64).mean().item<double>();
  };

  const double acc32 = train_and_evaluate(false);
  const double acc16 = train_and_evaluate(true);
  MESSAGE("test accuracy: float32 " << acc32 << "%, bf16 autocast " << acc16 << "%");
  // Measured: 81.9% and 81.8%; with seeds 1-6 instead of 2024, 78.4-82.4% with the two runs
  // never more than 0.2 points apart. 75% is far above chance (10%) and below every seed's.
  CHECK(acc32 > 75.0);
  CHECK(acc16 > 75.0);
  CHECK(std::abs(acc32 - acc16) < 1.5);
}

}  // namespace loom::test
