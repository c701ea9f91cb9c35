/*
 * Tests of the losses in nn/loss.h: every loss and option against PyTorch 1.13 values,
 * gradients against float64 finite differences (gradcheck), the module forms, and the errors
 * on inputs that do not fit.
 *
 * Inputs are made by a formula both sides can write, seq(shape, a, b, s)[i] = s * sin(a * i + b)
 * in row-major order; the reference values were printed by /usr/bin/python3 (torch 1.13) with
 *
 *   def seq(shape, a, b, s=1.0):
 *       n = math.prod(shape)
 *       return (torch.sin(torch.arange(n, dtype=torch.float64) * a + b) * s).reshape(shape)
 *
 * and the line of Python given with each literal.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "nn/loss.h"
#include "ops/ops.h"
#include "tests/autograd/autograd_test_util.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;
namespace F = loom::nn::functional;

namespace {

Tensor seq(IntArrayRef shape, double a, double b, double s = 1.0, DType dtype = kFloat64) {
  const int64_t n = shape_numel(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = s * std::sin(a * static_cast<double>(i) + b);
  return make(v, shape, dtype);
}

Tensor ints(std::vector<int64_t> v, IntArrayRef shape = {}) { return tensor<int64_t>(v, shape); }

// The common inputs: x = seq([4, 5], 0.7, 0.1, 2.0), tgt = [1, 0, 4, 2],
// w = [0.5, 1.0, 2.0, 1.5, 0.25].
Tensor logits(DType dtype = kFloat64) { return seq({4, 5}, 0.7, 0.1, 2.0, dtype); }
Tensor class_weight() { return make({0.5, 1.0, 2.0, 1.5, 0.25}, kFloat64); }

}  // namespace

// ---- cross_entropy with class indices ---------------------------------------------------------

TEST_CASE("cross_entropy with class indices matches torch for every reduction, weight and dtype") {
  const Tensor tgt = ints({1, 0, 4, 2});
  for (DType dtype : {kFloat64, kFloat32}) {
    CAPTURE(dtype);
    const Tensor x = logits(dtype);
    // F.cross_entropy(x, tgt, reduction=...)
    check_close(F::cross_entropy(x, tgt, {.reduction = Reduction::None}),
                {1.53175239697, 1.72426942413, 3.83634528193, 2.9215739948});
    check_close(F::cross_entropy(x, tgt, {.reduction = Reduction::Sum}), {10.0139410978});
    check_close(F::cross_entropy(x, tgt), {2.50348527446});
    // F.cross_entropy(x, tgt, weight=w): the mean divides by the summed weights of the targets
    check_close(F::cross_entropy(x, tgt, {.weight = class_weight().to(dtype)}), {2.4522990451});
    check_close(F::cross_entropy(x, tgt, {.weight = class_weight().to(dtype), .reduction = Reduction::None}),
                {1.53175239697, 0.862134712066, 0.959086320481, 5.84314798959});
    // F.cross_entropy(x, torch.tensor([1, -100, 4, 2]))
    check_close(F::cross_entropy(x, ints({1, -100, 4, 2})), {2.76322389123});
    // F.cross_entropy(x, tgt, label_smoothing=0.2)
    check_close(F::cross_entropy(x, tgt, {.label_smoothing = 0.2}), {2.41431241614});
  }
}

TEST_CASE("cross_entropy combines ignore_index, label_smoothing and weight as torch does") {
  // F.cross_entropy(x, torch.tensor([1, 3, 4, 2]), weight=w, ignore_index=3, label_smoothing=0.2,
  //                 reduction=...)
  const Tensor x = logits(), tgt = ints({1, 3, 4, 2});
  nn::CrossEntropyOptions o{.weight = class_weight(), .ignore_index = 3, .label_smoothing = 0.2};
  o.reduction = Reduction::None;
  check_close(F::cross_entropy(x, tgt, o), {1.52557390228, 0, 1.12634025113, 5.23097716599});
  o.reduction = Reduction::Sum;
  check_close(F::cross_entropy(x, tgt, o), {7.8828913194});
  o.reduction = Reduction::Mean;
  check_close(F::cross_entropy(x, tgt, o), {2.42550502135});
}

TEST_CASE("cross_entropy over [N, C, d] logits with [N, d] targets matches torch") {
  // xk = seq([2, 3, 4], 0.9, 0.2, 1.5); tk = [[0, 2, 1, 1], [2, 2, 0, 1]]
  const Tensor x = seq({2, 3, 4}, 0.9, 0.2, 1.5), tgt = ints({0, 2, 1, 1, 2, 2, 0, 1}, {2, 4});
  Tensor none = F::cross_entropy(x, tgt, {.reduction = Reduction::None});
  CHECK(none.sizes() == IntArrayRef{2, 4});
  check_close(none, {1.42414219657, 0.713611657754, 2.68676091068, 0.841752476713, 2.40109006044,
                     0.794191799477, 1.39884053717, 3.5664065344});
  check_close(F::cross_entropy(x, tgt), {1.72834952165});
}

// ---- cross_entropy with class probabilities ---------------------------------------------------

TEST_CASE("cross_entropy with class-probability targets matches torch") {
  // tp = torch.softmax(seq([4, 5], 1.3, 0.5), 1)
  const Tensor x = logits(), tp = seq({4, 5}, 1.3, 0.5).softmax(1);
  // F.cross_entropy(x, tp, reduction=...)
  check_close(F::cross_entropy(x, tp, {.reduction = Reduction::None}),
              {1.83352665413, 2.12111272858, 1.64273323974, 2.96073636656});
  check_close(F::cross_entropy(x, tp, {.reduction = Reduction::Sum}), {8.55810898901});
  check_close(F::cross_entropy(x, tp), {2.13952724725});
  // F.cross_entropy(x, tp, weight=w, label_smoothing=0.1, reduction=...): the mean divides by
  // the number of samples, not by the weights
  nn::CrossEntropyOptions o{.weight = class_weight(), .label_smoothing = 0.1};
  check_close(F::cross_entropy(x, tp, o), {1.88898240502});
  o.reduction = Reduction::None;
  check_close(F::cross_entropy(x, tp, o), {1.50779611242, 2.25028842684, 1.26797100894, 2.52987407188});
}

TEST_CASE("cross_entropy gradients match finite differences in float64") {
  const Tensor tgt = ints({1, 3, 4, 2});
  const Tensor w = class_weight();
  const Tensor tp = seq({4, 5}, 1.3, 0.5).softmax(1);
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    CAPTURE(static_cast<int>(r));
    auto indices = [&](const std::vector<Tensor>& in) {
      return std::vector{
          F::cross_entropy(in[0], tgt, {.weight = w, .ignore_index = 3, .label_smoothing = 0.2, .reduction = r})};
    };
    LOOM_CHECK_GRADCHECK(indices, std::vector{leaf({4, 5}, 11)});
    // probabilities: the target is differentiable too
    auto probs = [&](const std::vector<Tensor>& in) {
      return std::vector{F::cross_entropy(in[0], in[1], {.weight = w, .label_smoothing = 0.1, .reduction = r})};
    };
    LOOM_CHECK_GRADCHECK(probs, (std::vector{leaf({4, 5}, 12), tp.detach().requires_grad_()}));
  }
}

TEST_CASE("cross_entropy rejects targets that do not fit, naming the shapes") {
  const Tensor x = logits();
  std::string e = error_of([&] { F::cross_entropy(x, ints({1, 0, 4})); });
  CHECK(e.find("[4, 5]") != std::string::npos);
  CHECK(e.find("[3]") != std::string::npos);
  // a floating target is a distribution and must have the input's shape
  e = error_of([&] { F::cross_entropy(x, seq({4, 4}, 1.0, 0.0)); });
  CHECK(e.find("[4, 5]") != std::string::npos);
  CHECK(e.find("[4, 4]") != std::string::npos);
  // ignore_index has no meaning for probabilities (torch's check)
  e = error_of([&] { F::cross_entropy(x, seq({4, 5}, 1.0, 0.0).softmax(1), {.ignore_index = 2}); });
  CHECK(e.find("ignore_index") != std::string::npos);
  e = error_of([&] { F::cross_entropy(x, seq({4, 5}, 1.0, 0.0), {.weight = make({1.0, 2.0}, kFloat64)}); });
  CHECK(e.find("weight") != std::string::npos);
  CHECK_THROWS_AS(F::cross_entropy(x, ints({1, 0, 4, 2}), {.label_smoothing = 1.5}), Error);
  CHECK_THROWS_AS(F::cross_entropy(x, ints({1, 0, 4, 2}).to(kInt32)), Error);
}

// ---- nll_loss ---------------------------------------------------------------------------------

TEST_CASE("nll_loss matches torch with weight and ignore_index, and its gradient checks") {
  const Tensor lp = logits().log_softmax(1);
  // F.nll_loss(lp, tgt)
  check_close(F::nll_loss(lp, ints({1, 0, 4, 2})), {2.50348527446});
  // F.nll_loss(lp, torch.tensor([1, 3, 4, 2]), weight=w, ignore_index=3, reduction=...)
  const Tensor tgt = ints({1, 3, 4, 2});
  check_close(F::nll_loss(lp, tgt, {.weight = class_weight(), .ignore_index = 3}), {2.56430360217});
  check_close(F::nll_loss(lp, tgt, {.weight = class_weight(), .ignore_index = 3, .reduction = Reduction::None}),
              {1.53175239697, 0, 0.959086320481, 5.84314798959});
  auto fn = [&](const std::vector<Tensor>& in) {
    return std::vector{F::nll_loss(in[0], tgt, {.weight = class_weight(), .ignore_index = 3})};
  };
  LOOM_CHECK_GRADCHECK(fn, std::vector{leaf({4, 5}, 13)});
  CHECK_THROWS_AS(F::nll_loss(lp, ints({1, 0})), Error);
}

// ---- mse_loss ---------------------------------------------------------------------------------

TEST_CASE("mse_loss matches torch, checks its gradient and rejects mismatched shapes") {
  // y = seq([4, 5], 0.3, 1.1); F.mse_loss(x, y, reduction=...)
  const Tensor x = logits(), y = seq({4, 5}, 0.3, 1.1);
  check_close(F::mse_loss(x, y, Reduction::None),
              {0.478228300162, 0.201836750607, 1.00666138222,   0.500832752025, 0.0713993423663,
               1.9615186176,   4.29144867943,  3.45764506619,   0.563382131835, 0.713951149997,
               5.18115559718,  8.69476543071,  6.74387653623,   1.9731936166,   0.00685655960499,
               1.47448613137,  2.35365253589,  0.980211740888,  0.00263621606591, 0.973455389118});
  check_close(F::mse_loss(x, y, Reduction::Sum), {41.6311939261});
  check_close(F::mse_loss(x, y), {2.0815596963});
  auto fn = [](const std::vector<Tensor>& in) { return std::vector{F::mse_loss(in[0], in[1])}; };
  LOOM_CHECK_GRADCHECK(fn, (std::vector{leaf({3, 4}, 14), leaf({3, 4}, 15)}));
  // torch would broadcast [4, 5] against [4, 1] with a warning; here it is an error
  const std::string e = error_of([&] { F::mse_loss(x, seq({4, 1}, 1.0, 0.0)); });
  CHECK(e.find("mse_loss") != std::string::npos);
  CHECK(e.find("[4, 5]") != std::string::npos);
  CHECK(e.find("[4, 1]") != std::string::npos);
}

// ---- binary_cross_entropy_with_logits ---------------------------------------------------------

namespace {
// Includes 0 and logits of +-100 and -30, where a naive log(sigmoid(x)) overflows or underflows.
Tensor bce_logits(DType dtype = kFloat64) {
  return make({0.0, 1.5, -2.0, 100.0, -100.0, 0.3, -0.7, 3.0, -30.0, 20.0, -0.1, 0.0}, {4, 3}, dtype);
}
Tensor bce_targets(DType dtype = kFloat64) {
  return make({1.0, 0.0, 0.25, 0.0, 1.0, 1.0, 0.5, 1.0, 0.0, 1.0, 0.0, 0.0}, {4, 3}, dtype);
}
Tensor bce_weight() { return make({1.0, 0.5, 2.0, 1.5}, {4, 1}); }
Tensor bce_pos_weight() { return make({2.0, 0.5, 3.0}, kFloat64); }
}  // namespace

TEST_CASE("binary_cross_entropy_with_logits matches torch, stable at large logits") {
  for (DType dtype : {kFloat64, kFloat32}) {
    CAPTURE(dtype);
    const Tensor x = bce_logits(dtype), y = bce_targets(dtype);
    // F.binary_cross_entropy_with_logits(xb, yb, reduction=...)
    check_close(F::binary_cross_entropy_with_logits(x, y, {}, {}, Reduction::None),
                {0.69314718056, 1.70141327798, 0.626928011043, 100, 100, 0.554355244469, 0.753186048885,
                 0.0485873515737, 9.34807786734e-14, 2.06115369004e-09, 0.644396660074, 0.69314718056});
    check_close(F::binary_cross_entropy_with_logits(x, y, {}, {}, Reduction::Sum), {205.715160957});
    check_close(F::binary_cross_entropy_with_logits(x, y), {17.1429300798});
    // F.binary_cross_entropy_with_logits(xb, yb, weight=wb, pos_weight=pw, reduction=...)
    const Tensor w = bce_weight().to(dtype), pw = bce_pos_weight().to(dtype);
    check_close(F::binary_cross_entropy_with_logits(x, y, w, pw, Reduction::None),
                {1.38629436112, 1.70141327798, 1.69039201656, 50, 25, 0.831532866703, 2.60955814666,
                 0.0485873515737, 1.84741111298e-13, 6.18346107013e-09, 0.96659499011, 1.03972077084});
    check_close(F::binary_cross_entropy_with_logits(x, y, {.weight = w, .pos_weight = pw}), {7.10617448231});
  }
}

TEST_CASE("binary_cross_entropy_with_logits gradient: torch's values at 0 and +-100, and finite differences") {
  // xg = xb.clone().requires_grad_(); F.binary_cross_entropy_with_logits(xg, yb, pos_weight=pw).backward()
  // The logits of exactly 0 check the gradient at the kink of max(-x, 0): -1/2 * ..., not 0.
  Tensor x = bce_logits().requires_grad_();
  F::binary_cross_entropy_with_logits(x, bce_targets(), {}, bce_pos_weight()).backward();
  check_close(x.grad(), {-0.0833333333333, 0.0681312063495, -0.0475996347472, 0.0833333333333, -0.0416666666667,
                         -0.106389370797, -0.0418568048544, -0.00197607804907, 7.7980191407e-15,
                         -3.43525615361e-10, 0.0395850677101, 0.0416666666667},
              {1e-7, 1e-12});
  for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    CAPTURE(static_cast<int>(r));
    auto fn = [&](const std::vector<Tensor>& in) {
      return std::vector{F::binary_cross_entropy_with_logits(in[0], in[1], in[2], in[3], r)};
    };
    Tensor logits = make({0.0, 1.5, -2.0, 4.0, -3.0, 0.3, -0.7, 3.0, -5.0, 2.0, -0.1, 0.0}, {4, 3})
                        .requires_grad_();
    LOOM_CHECK_GRADCHECK(fn, (std::vector{logits, bce_targets().requires_grad_(), bce_weight().requires_grad_(),
                                          bce_pos_weight().requires_grad_()}));
  }
}

TEST_CASE("binary_cross_entropy_with_logits rejects shapes that do not fit") {
  const Tensor x = bce_logits(), y = bce_targets();
  std::string e = error_of([&] { F::binary_cross_entropy_with_logits(x, y.reshape({3, 4})); });
  CHECK(e.find("[4, 3]") != std::string::npos);
  CHECK(e.find("[3, 4]") != std::string::npos);
  // pos_weight must broadcast along the last dim: [4] against [4, 3] does not
  e = error_of([&] { F::binary_cross_entropy_with_logits(x, y, {}, make({1.0, 2.0, 3.0, 4.0}, kFloat64)); });
  CHECK(e.find("[4]") != std::string::npos);
  // a weight larger than the input cannot be a rescaling of it
  e = error_of([&] { F::binary_cross_entropy_with_logits(x, y, seq({2, 4, 3}, 1.0, 0.0)); });
  CHECK(e.find("weight") != std::string::npos);
  CHECK(e.find("[2, 4, 3]") != std::string::npos);
  CHECK_THROWS_AS(F::binary_cross_entropy_with_logits(x, ints({1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1}, {4, 3})),
                  Error);
}

// ---- kl_div -----------------------------------------------------------------------------------

TEST_CASE("kl_div matches torch for every reduction, with zero targets and log targets") {
  // inp = torch.log_softmax(seq([3, 4], 0.8, 0.3), 1)
  // tq = [[0.1, 0.2, 0.3, 0.4], [0.0, 0.5, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25]]
  const Tensor inp = seq({3, 4}, 0.8, 0.3).log_softmax(1);
  const Tensor tq = make({0.1, 0.2, 0.3, 0.4, 0.0, 0.5, 0.5, 0.0, 0.25, 0.25, 0.25, 0.25}, {3, 4});
  using R = nn::KLDivReduction;
  // F.kl_div(inp, tq, reduction=...): 0 log 0 = 0, so the zero targets contribute 0
  check_close(F::kl_div(inp, tq, R::None),
              {-0.0532345403491, -0.0869770752662, -0.0253538987546, 0.288835713623, 0, 0.503107644053,
               0.507932016843, 0, 0.0687644203765, -0.064523093663, -0.0555660579084, 0.0902023099433});
  check_close(F::kl_div(inp, tq, R::Sum), {1.1731874389});
  check_close(F::kl_div(inp, tq), {0.0977656199081});  // torch's default "mean": over all 12 elements
  check_close(F::kl_div(inp, tq, R::BatchMean), {0.391062479632});
  check_close(F::kl_div(inp, tq, Reduction::Sum), {1.1731874389});
  // tl = torch.log_softmax(seq([3, 4], 0.4, 0.9, 2.0), 1); F.kl_div(inp, tl, reduction=..., log_target=True)
  const Tensor tl = seq({3, 4}, 0.4, 0.9, 2.0).log_softmax(1);
  check_close(F::kl_div(inp, tl, R::None, true),
              {0.0265951699755, -0.0276904424597, -0.0289598826896, 0.0375916360188, 0.29748937548,
               0.103861390214, -0.0484102510502, -0.0978712239719, 0.126261778952, -0.0892887978956,
               -0.0829426920718, 0.139205024719});
  check_close(F::kl_div(inp, tl, R::BatchMean, true), {0.118613695073});
  // the same distributions given as probabilities and as log-probabilities agree
  check_close(F::kl_div(inp, tl.exp(), R::BatchMean), {0.118613695073});
}

TEST_CASE("kl_div gradients match finite differences, including zero targets") {
  using R = nn::KLDivReduction;
  const Tensor tq = make({0.1, 0.2, 0.3, 0.4, 0.0, 0.5, 0.5, 0.0, 0.25, 0.25, 0.25, 0.25}, {3, 4});
  for (R r : {R::None, R::Sum, R::Mean, R::BatchMean}) {
    CAPTURE(static_cast<int>(r));
    auto zero_targets = [&](const std::vector<Tensor>& in) { return std::vector{F::kl_div(in[0], tq, r)}; };
    LOOM_CHECK_GRADCHECK(zero_targets, std::vector{leaf({3, 4}, 16)});
    auto both = [&](const std::vector<Tensor>& in) { return std::vector{F::kl_div(in[0], in[1], r)}; };
    // a target in [0.3, 0.7]: positive, where the pointwise loss is differentiable in it
    Tensor target = (seq({3, 4}, 1.1, 0.4, 0.2) + 0.5).requires_grad_();
    LOOM_CHECK_GRADCHECK(both, (std::vector{leaf({3, 4}, 17), target}));
    auto log_target = [&](const std::vector<Tensor>& in) { return std::vector{F::kl_div(in[0], in[1], r, true)}; };
    LOOM_CHECK_GRADCHECK(log_target, (std::vector{leaf({3, 4}, 19), leaf({3, 4}, 20)}));
  }
  // no NaN reaches the input's gradient from 0 * log 0
  Tensor x = seq({3, 4}, 0.8, 0.3).requires_grad_();
  F::kl_div(x, tq, R::BatchMean).backward();
  check_close(x.grad(), {-0.1 / 3, -0.2 / 3, -0.3 / 3, -0.4 / 3, 0, -0.5 / 3, -0.5 / 3, 0, -0.25 / 3, -0.25 / 3,
                         -0.25 / 3, -0.25 / 3});
  const std::string e = error_of([&] { F::kl_div(seq({3, 4}, 1.0, 0.0), seq({4, 3}, 1.0, 0.0)); });
  CHECK(e.find("kl_div") != std::string::npos);
  CHECK(e.find("[3, 4]") != std::string::npos);
  CHECK(e.find("[4, 3]") != std::string::npos);
}

// ---- modules ----------------------------------------------------------------------------------

TEST_CASE("loss modules hold their options, register class weights as buffers and call the functions") {
  const Tensor x = logits();
  nn::CrossEntropyLoss ce({.weight = class_weight(), .ignore_index = 3, .label_smoothing = 0.2});
  check_close(ce(x, ints({1, 3, 4, 2})), {2.42550502135});
  CHECK(ce.state_dict().keys() == std::vector<std::string>{"weight"});
  CHECK(ce.parameters().empty());
  CHECK(nn::CrossEntropyLoss().state_dict().empty());

  nn::NLLLoss nll({.weight = class_weight(), .ignore_index = 3});
  check_close(nll.forward(x.log_softmax(1), ints({1, 3, 4, 2})), {2.56430360217});

  nn::MSELoss mse(Reduction::Sum);
  check_close(mse(x, seq({4, 5}, 0.3, 1.1)), {41.6311939261});

  nn::BCEWithLogitsLoss bce({.weight = bce_weight(), .pos_weight = bce_pos_weight()});
  check_close(bce(bce_logits(), bce_targets()), {7.10617448231});
  CHECK(bce.state_dict().keys() == std::vector<std::string>{"weight", "pos_weight"});
  // the buffers follow the module's dtype
  bce.to(kFloat32);
  CHECK(bce.options().pos_weight.dtype() == kFloat32);
  check_close(bce(bce_logits(kFloat32), bce_targets(kFloat32)), {7.10617448231});

  nn::KLDivLoss kl({.reduction = nn::KLDivReduction::BatchMean, .log_target = true});
  const Tensor inp = seq({3, 4}, 0.8, 0.3).log_softmax(1), tl = seq({3, 4}, 0.4, 0.9, 2.0).log_softmax(1);
  check_close(kl(inp, tl), {0.118613695073});
  // a loss has no one-argument forward
  CHECK_THROWS_AS(kl(inp), Error);
}
