/*
 * Tests of nn::GradScaler against torch.cuda.amp.GradScaler's semantics (torch 1.13,
 * torch/cuda/amp/grad_scaler.py and the _amp_update_scale_ kernel), with sequences derived by
 * hand from those rules: the scale through finite and inf/NaN steps, skipped steps, the
 * unscaled gradients, the per-optimizer stage errors, the state dict and the disabled scaler.
 * The optimizer is a test-local plain SGD, p -= lr * grad, so that a step's effect is exact.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "autograd/autograd.h"
#include "nn/amp/amp.h"
#include "nn/optim/optim.h"
#include "tests/test_util.h"

namespace loom::test {
namespace {

class TestSgd final : public nn::Optimizer {
 public:
  TestSgd(std::vector<Tensor> params, double lr)
      : Optimizer({nn::ParamGroup(std::move(params))}, {{"lr", lr}}) {}
  void step() override {
    NoGradGuard no_grad;
    for (nn::ParamGroup& group : param_groups())
      for (Tensor& p : group.params)
        if (p.grad().defined()) p.sub_(p.grad(), group.lr());
    ++steps;
  }
  int steps = 0;
};

Tensor param(const std::vector<double>& v) {
  return make(v, {static_cast<int64_t>(v.size())}, kFloat32).requires_grad_();
}

// One iteration: grad of sum(p * x) is x, so the scaled gradient is scale * x.
bool iteration(nn::GradScaler& scaler, TestSgd& opt, const Tensor& p, const std::vector<double>& x) {
  opt.zero_grad();
  Tensor loss = (p * make(x, {static_cast<int64_t>(x.size())}, kFloat32)).sum();
  scaler.scale(loss).backward();
  const bool stepped = scaler.step(opt);
  scaler.update();
  return stepped;
}

}  // namespace

TEST_CASE("grad_scaler/scale sequence through finite and inf steps") {
  // init 8, growth x2 after 3 clean steps, backoff x0.5 on inf/NaN; by torch's rule:
  //   step      1  2  3   4    5  6  7    8  9  10
  //   inf/NaN   -  -  -   inf  -  -  nan  -  -  -
  //   scale     8  8  16  8    8  8  4    4  4  8     (after update)
  nn::GradScaler scaler(
      {.init_scale = 8.0, .growth_factor = 2.0, .backoff_factor = 0.5, .growth_interval = 3});
  Tensor p = param({1, 2, 3, 4});
  TestSgd opt({p}, 0.5);
  const std::vector<double> clean = {0.5, -1, 2, 0.25};
  const std::vector<bool> bad = {false, false, false, true, false, false, true, false, false, false};
  const std::vector<double> expected_scale = {8, 8, 16, 8, 8, 8, 4, 4, 4, 8};
  std::vector<double> expected_p = {1, 2, 3, 4};
  CHECK(scaler.get_scale() == 8.0);
  for (size_t i = 0; i < bad.size(); ++i) {
    CAPTURE(i);
    std::vector<double> x = clean;
    if (bad[i]) x[2] = i == 3 ? kInf : std::nan("");
    const bool stepped = iteration(scaler, opt, p, x);
    CHECK(stepped == !bad[i]);
    if (!bad[i])
      for (size_t j = 0; j < x.size(); ++j) expected_p[j] -= 0.5 * x[j];
    // Skipped steps leave the parameters exactly as they were (and the update is exact:
    // every value here is a short binary fraction).
    check_close(p, expected_p, {0, 0});
    CHECK(scaler.get_scale() == expected_scale[i]);
  }
  CHECK(opt.steps == 8);
}

TEST_CASE("grad_scaler/growth stops below float32 overflow") {
  // _amp_update_scale_ keeps the old scale when the grown one is not finite in float32.
  nn::GradScaler scaler({.init_scale = 0x1p127, .growth_interval = 1});
  Tensor p = param({1});
  TestSgd opt({p}, 0.0);
  iteration(scaler, opt, p, {1e-30});
  CHECK(scaler.get_scale() == 0x1p127);
}

TEST_CASE("grad_scaler/unscale_ divides every gradient by the scale") {
  // A scale that is not a power of two, so the rounding rule shows: torch multiplies by
  // float32(1 / scale), the reciprocal taken in double and rounded once.
  nn::GradScaler scaler({.init_scale = 3.0});
  scaler.scale(scalar_tensor(1.0));
  const float inv = static_cast<float>(1.0 / 3.0);
  // Sizes chosen so that the fused pass splits its range across threads and across tensor
  // boundaries (kParallelGrain = 32768 elements per chunk), with an empty gradient in between,
  // and the three dtypes the scaler accepts.
  const std::vector<int64_t> sizes = {5, 70001, 0, 40000, 3};
  const std::vector<DType> dtypes = {kFloat32, kFloat32, kFloat32, kBFloat16, kFloat64};
  std::vector<Tensor> params;
  std::vector<std::vector<double>> grads;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Tensor p = zeros({sizes[i]}, dtypes[i]).requires_grad_();
    std::vector<double> g = random_values(sizes[i], 100 + i, 1000.0);
    p.mutable_grad() = make(g, {sizes[i]}, dtypes[i]);
    grads.push_back(make(g, {sizes[i]}, dtypes[i]).to_vector<double>());  // the values as stored
    params.push_back(p);
  }
  TestSgd opt(params, 0.1);
  scaler.unscale_(opt);
  for (size_t i = 0; i < sizes.size(); ++i) {
    CAPTURE(i);
    std::vector<double> expected(grads[i].size());
    for (size_t j = 0; j < expected.size(); ++j) {
      if (dtypes[i] == kFloat64)
        expected[j] = grads[i][j] * static_cast<double>(inv);
      else if (dtypes[i] == kFloat32)
        expected[j] = static_cast<float>(grads[i][j]) * inv;
      else  // bfloat16: the float32 product, rounded to bfloat16
        expected[j] = static_cast<float>(BFloat16(static_cast<float>(grads[i][j]) * inv));
    }
    CHECK(params[i].grad().dtype() == dtypes[i]);
    check_close(params[i].grad(), expected, {0, 0});
  }
  CHECK(scaler.step(opt));  // no inf found
}

TEST_CASE("grad_scaler/inf or NaN anywhere in any gradient skips the step") {
  // The bad value sits at the start, the middle and the end of the big gradient, and in a
  // non-contiguous gradient (unscaled through a copy).
  for (int where : {0, 1, 2, 3}) {
    CAPTURE(where);
    nn::GradScaler scaler;
    scaler.scale(scalar_tensor(1.0));
    Tensor small = param({1, 2, 3});
    Tensor big = zeros({100000}).requires_grad_();
    Tensor mat = zeros({3, 4}).requires_grad_();
    small.mutable_grad() = full({3}, 65536.0);
    big.mutable_grad() = full({100000}, 65536.0);
    mat.mutable_grad() = full({4, 3}, 65536.0).t();  // strides (1, 3)
    REQUIRE(!mat.grad().is_contiguous());
    float* b = big.grad().data_ptr<float>();
    if (where == 0) b[0] = -INFINITY;
    if (where == 1) b[54321] = NAN;
    if (where == 2) b[99999] = INFINITY;
    if (where == 3) mat.grad().data_ptr<float>()[7] = NAN;
    TestSgd opt({small, big, mat}, 1.0);
    CHECK_FALSE(scaler.step(opt));
    CHECK(opt.steps == 0);
    check_close(small, {1, 2, 3}, {0, 0});
    // The finite gradients are unscaled all the same (torch unscales before deciding).
    check_close(small.grad(), {1, 1, 1}, {0, 0});
    CHECK(mat.grad().sizes() == IntArrayRef{3, 4});
    if (where != 3) check_close(mat.grad(), std::vector<double>(12, 1.0), {0, 0});
    scaler.update();
    CHECK(scaler.get_scale() == 32768.0);
  }
}

TEST_CASE("grad_scaler/stage errors follow torch") {
  nn::GradScaler scaler;
  Tensor p = param({1, 2});
  TestSgd opt({p}, 0.1);
  p.mutable_grad() = full({2}, 1.0);
  // unscale_ with no scale() before it: the gradients were never scaled by this scaler.
  CHECK_THROWS_WITH_AS(scaler.unscale_(opt), doctest::Contains("no scale() call"), Error);
  scaler.scale(scalar_tensor(1.0));
  scaler.unscale_(opt);
  CHECK_THROWS_WITH_AS(scaler.unscale_(opt), doctest::Contains("already been called on this optimizer"),
                       Error);
  CHECK(scaler.step(opt));
  CHECK_THROWS_WITH_AS(scaler.unscale_(opt), doctest::Contains("after step()"), Error);
  CHECK_THROWS_WITH_AS(scaler.step(opt), doctest::Contains("step() has already been called"), Error);
  scaler.update();
  // After update() the optimizer is ready again.
  scaler.unscale_(opt);
  CHECK(scaler.step(opt));
  scaler.update();
  // update() with nothing recorded, and step() on an optimizer without gradients.
  CHECK_THROWS_WITH_AS(scaler.update(), doctest::Contains("no inf checks were recorded"), Error);
  opt.zero_grad();
  CHECK_THROWS_WITH_AS(scaler.step(opt), doctest::Contains("none of its parameters has a gradient"), Error);
}

TEST_CASE("grad_scaler/two optimizers share one update") {
  // torch combines the inf checks of every optimizer stepped since the last update.
  nn::GradScaler scaler({.init_scale = 4.0, .growth_interval = 1});
  Tensor a = param({1}), b = param({1});
  TestSgd opt_a({a}, 1.0), opt_b({b}, 1.0);
  scaler.scale(scalar_tensor(1.0));
  a.mutable_grad() = full({1}, 4.0);
  b.mutable_grad() = full({1}, INFINITY);
  CHECK(scaler.step(opt_a));
  CHECK_FALSE(scaler.step(opt_b));
  scaler.update();
  CHECK(scaler.get_scale() == 2.0);
  check_close(a, {0}, {0, 0});
  check_close(b, {1}, {0, 0});
}

TEST_CASE("grad_scaler/update with an explicit new scale") {
  nn::GradScaler scaler;
  scaler.update(1024.0);
  CHECK(scaler.get_scale() == 1024.0);
  CHECK_THROWS_AS(scaler.update(0.0), Error);
  CHECK_THROWS_AS(scaler.update(1e40), Error);  // not finite in float32
}

TEST_CASE("grad_scaler/state_dict round trip") {
  nn::GradScaler scaler(
      {.init_scale = 16.0, .growth_factor = 4.0, .backoff_factor = 0.25, .growth_interval = 3});
  Tensor p = param({1});
  TestSgd opt({p}, 0.0);
  iteration(scaler, opt, p, {kInf});  // scale 4, tracker 0
  iteration(scaler, opt, p, {1});     // tracker 1
  iteration(scaler, opt, p, {1});     // tracker 2
  nn::StateDict state = scaler.state_dict();
  CHECK(state.keys() == std::vector<std::string>{"scale", "growth_factor", "backoff_factor",
                                                 "growth_interval", "_growth_tracker"});
  CHECK(state.at("scale").item<double>() == 4.0);
  CHECK(state.at("scale").dim() == 0);
  CHECK(state.at("growth_factor").item<double>() == 4.0);
  CHECK(state.at("backoff_factor").item<double>() == 0.25);
  CHECK(state.at("growth_interval").item<int64_t>() == 3);
  CHECK(state.at("_growth_tracker").item<int64_t>() == 2);

  nn::GradScaler restored;  // defaults everywhere, replaced by the state
  restored.load_state_dict(state);
  CHECK(restored.get_scale() == 4.0);
  CHECK(restored.get_growth_factor() == 4.0);
  CHECK(restored.get_backoff_factor() == 0.25);
  CHECK(restored.get_growth_interval() == 3);
  // The growth tracker came along: one more clean step completes the interval.
  Tensor q = param({1});
  TestSgd opt_q({q}, 0.0);
  iteration(restored, opt_q, q, {1});
  CHECK(restored.get_scale() == 16.0);

  // A bad state changes nothing.
  nn::StateDict missing{{"scale", scalar_tensor(2.0, kFloat64)}};
  CHECK_THROWS_WITH_AS(restored.load_state_dict(missing), doctest::Contains("missing key 'growth_factor'"),
                       Error);
  nn::StateDict bad = scaler.state_dict();
  bad.set("backoff_factor", scalar_tensor(1.5, kFloat64));
  CHECK_THROWS_WITH_AS(restored.load_state_dict(bad), doctest::Contains("backoff_factor"), Error);
  CHECK(restored.get_scale() == 16.0);
  CHECK(restored.get_backoff_factor() == 0.25);
  CHECK_THROWS_WITH_AS(restored.load_state_dict({}), doctest::Contains("empty"), Error);
}

TEST_CASE("grad_scaler/disabled scaler is a pass-through") {
  nn::GradScaler scaler({.enabled = false});
  CHECK_FALSE(scaler.is_enabled());
  CHECK(scaler.get_scale() == 1.0);
  Tensor p = param({1, 2});
  Tensor loss = (p * 3.0).sum();
  Tensor scaled = scaler.scale(loss);
  CHECK(scaled.is_same(loss));
  scaled.backward();
  p.mutable_grad().data_ptr<float>()[1] = INFINITY;
  TestSgd opt({p}, 1.0);
  scaler.unscale_(opt);  // no-op
  scaler.unscale_(opt);  // no error either
  check_close(p.grad(), {3, kInf}, {0, 0});
  CHECK(scaler.step(opt));  // steps even with an inf gradient: nothing is checked
  CHECK(opt.steps == 1);
  scaler.update();
  CHECK(scaler.state_dict().empty());
  scaler.load_state_dict({});  // ignored, as torch
  CHECK(scaler.get_scale() == 1.0);
}

TEST_CASE("grad_scaler/scale multiplies in float32 or wider and rejects bad options") {
  nn::GradScaler scaler;
  // 2 * 65536 overflows float16; the scaled loss is float32 (torch's float32 scale tensor
  // promotes a float16 loss the same way).
  Tensor half_loss = scalar_tensor(2.0, kFloat16);
  Tensor scaled = scaler.scale(half_loss);
  CHECK(scaled.dtype() == kFloat32);
  CHECK(scaled.item<double>() == 131072.0);
  CHECK(scaler.scale(scalar_tensor(2.0, kFloat64)).dtype() == kFloat64);
  CHECK_THROWS_AS(scaler.scale(scalar_tensor(2, kInt64)), Error);

  CHECK_THROWS_WITH_AS(nn::GradScaler({.growth_factor = 1.0}), doctest::Contains("growth_factor"), Error);
  CHECK_THROWS_WITH_AS(nn::GradScaler({.backoff_factor = 1.0}), doctest::Contains("backoff_factor"), Error);
  CHECK_THROWS_WITH_AS(nn::GradScaler({.growth_interval = 0}), doctest::Contains("growth_interval"), Error);
  CHECK_THROWS_WITH_AS(nn::GradScaler({.init_scale = -1.0}), doctest::Contains("init_scale"), Error);
  CHECK_THROWS_AS(scaler.set_growth_factor(0.5), Error);

  // float16 gradients are not master gradients (torch: "Attempting to unscale FP16 gradients").
  Tensor p = zeros({2}, kFloat16).requires_grad_();
  p.mutable_grad() = ones({2}, kFloat16);
  TestSgd opt({p}, 0.1);
  CHECK_THROWS_WITH_AS(scaler.unscale_(opt), doctest::Contains("float16 gradients"), Error);
}

// step_unless_found_inf, what GradScaler calls inside a CUDA graph capture, run eagerly on the
// CPU: a set flag leaves every parameter and state as it was; a clear one is step().
TEST_CASE("GradScaler: capturable optimizers skip on a device flag exactly when step() would be skipped") {
  auto run = [](bool adamw, float flag) {
    Tensor w = param({0.5, -1.0, 2.0});
    std::unique_ptr<nn::Optimizer> opt;
    if (adamw)
      opt = std::make_unique<nn::AdamW>(std::vector<Tensor>{w},
                                        nn::AdamWOptions{.lr = 0.1, .capturable = true});
    else
      opt = std::make_unique<nn::SGD>(std::vector<Tensor>{w},
                                      nn::SGDOptions{.lr = 0.1, .momentum = 0.9, .capturable = true});
    CHECK(opt->can_skip_on_device());
    for (int step = 0; step < 3; ++step) {
      w.mutable_grad() = make({1.0, 2.0, -3.0 + step}, {3}, kFloat32);
      if (step == 0)
        opt->step();  // SGD's momentum buffer starts here
      else
        opt->step_unless_found_inf(full({1}, flag));
    }
    return w.detach().clone();
  };
  for (bool adamw : {true, false}) {
    CAPTURE(adamw);
    const Tensor skipped = run(adamw, 1.0f), stepped = run(adamw, 0.0f);
    // Skipped twice, so only the first, plain step moved it; stepping moved it further.
    CHECK_FALSE(equal(skipped, stepped));
    CHECK_FALSE(equal(skipped, make({0.5, -1.0, 2.0}, {3}, kFloat32)));
    if (!adamw) CHECK(allclose(skipped, make({0.4, -1.2, 2.3}, {3}, kFloat32)));  // w - lr * grad, by hand
  }
  // SGD cannot skip a step that would start its momentum buffer, and a plain SGD cannot skip.
  Tensor w = param({1.0});
  w.mutable_grad() = ones({1});
  nn::SGD fresh({w}, {.lr = 0.1, .momentum = 0.9, .capturable = true});
  CHECK_THROWS_WITH_AS(fresh.step_unless_found_inf(zeros({1})),
                       doctest::Contains("momentum buffer of parameter 0 of group 0 does not exist yet"),
                       Error);
  nn::SGD plain({w}, {.lr = 0.1});
  CHECK_FALSE(plain.can_skip_on_device());
  CHECK_THROWS_WITH_AS(plain.step_unless_found_inf(zeros({1})), doctest::Contains("needs capturable = true"),
                       Error);
}

}  // namespace loom::test
