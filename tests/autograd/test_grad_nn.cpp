/*
 * Gradients of the nn and normalisation ops beyond gradcheck: cross_entropy against
 * softmax(x) - target worked out by hand (label smoothing, ignore_index), dropout's mask,
 * eval-mode batch_norm against its affine formula, the statistics outputs, second derivatives
 * through the fused backward kernels against the composite written with elementwise ops and
 * reductions, and float32 gradients of the fused kernels against the float64 composite.
 */
#include <cmath>

#include "tests/autograd/autograd_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

Tensor targets(const std::vector<double>& v, IntArrayRef shape) {
  return make(v, shape).to(kInt64);
}

// Row-wise softmax of an [n, c] row-major matrix, in double.
std::vector<double> softmax_rows(const std::vector<double>& x, int64_t n, int64_t c) {
  std::vector<double> p(x.size());
  for (int64_t i = 0; i < n; ++i) {
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < c; ++j) m = std::max(m, x[i * c + j]);
    for (int64_t j = 0; j < c; ++j) s += std::exp(x[i * c + j] - m);
    for (int64_t j = 0; j < c; ++j) p[i * c + j] = std::exp(x[i * c + j] - m) / s;
  }
  return p;
}

Tensor to32(const Tensor& t) {
  return t.detach().to(kFloat32).requires_grad_();
}

// (x - mean) / sqrt(var + 1e-5) * weight + bias with the statistics over dims: the normalisation
// composite of elementwise ops and reductions (weight and bias already broadcastable).
Tensor normalize_composite(const Tensor& x, IntArrayRef dims, const Tensor& weight, const Tensor& bias) {
  Tensor mean = x.mean(dims, true);
  Tensor var = x.var(dims, /*correction=*/0, true);
  return (x - mean) * (var + 1e-5).rsqrt() * weight + bias;
}

}  // namespace

// ---- cross_entropy --------------------------------------------------------------------------------

TEST_CASE("cross_entropy gradient is (softmax(x) - onehot(target)) / N") {
  const int64_t n = 3, c = 4;
  std::vector<double> xv = random_values(n * c, 11);
  const std::vector<int64_t> t = {2, 0, 3};
  Tensor x = make(xv, {n, c}).requires_grad_();
  cross_entropy(x, targets({2, 0, 3}, {n})).backward();
  std::vector<double> expected = softmax_rows(xv, n, c);
  for (int64_t i = 0; i < n; ++i) {
    expected[i * c + t[i]] -= 1;
    for (int64_t j = 0; j < c; ++j) expected[i * c + j] /= n;
  }
  check_close(x.grad(), expected, {1e-12, 1e-12});
}

TEST_CASE("cross_entropy with label smoothing eps: the target is (1 - eps) onehot + eps / C") {
  const int64_t n = 2, c = 3;
  const double eps = 0.3;
  std::vector<double> xv = random_values(n * c, 12);
  const std::vector<int64_t> t = {1, 2};
  Tensor x = make(xv, {n, c}).requires_grad_();
  cross_entropy(x, targets({1, 2}, {n}), {}, -100, eps).backward();
  std::vector<double> expected = softmax_rows(xv, n, c);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j)
      expected[i * c + j] = (expected[i * c + j] - ((j == t[i] ? 1 - eps : 0) + eps / c)) / n;
  check_close(x.grad(), expected, {1e-12, 1e-12});
}

TEST_CASE("cross_entropy gives ignored rows zero gradient and averages over the others") {
  const int64_t n = 4, c = 3;
  std::vector<double> xv = random_values(n * c, 13);
  const std::vector<int64_t> t = {1, -100, 0, -100};
  Tensor x = make(xv, {n, c}).requires_grad_();
  double eps = 0.0;
  SUBCASE("no smoothing") {}
  SUBCASE("with label smoothing (ignored rows get none of it either)") {
    eps = 0.2;
  }
  cross_entropy(x, targets({1, -100, 0, -100}, {n}), {}, -100, eps).backward();
  // The two counted rows are averaged over 2, not 4.
  std::vector<double> expected = softmax_rows(xv, n, c);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) {
      double& e = expected[i * c + j];
      e = t[i] == -100 ? 0.0 : (e - ((j == t[i] ? 1 - eps : 0) + eps / c)) / 2;
    }
  check_close(x.grad(), expected, {1e-12, 1e-12});
  std::vector<double> g = values(x.grad());
  for (int64_t j = 0; j < c; ++j) {  // exactly zero, not merely small
    CHECK(g[1 * c + j] == 0.0);
    CHECK(g[3 * c + j] == 0.0);
  }
}

TEST_CASE("cross_entropy with class weights: mean divides by the summed weights of the targets") {
  const int64_t n = 3, c = 3;
  std::vector<double> xv = random_values(n * c, 14);
  const std::vector<int64_t> t = {0, 2, 2};
  const std::vector<double> w = {0.5, 1.0, 2.0};
  Tensor x = make(xv, {n, c}).requires_grad_();
  cross_entropy(x, targets({0, 2, 2}, {n}), make(w, {c})).backward();
  std::vector<double> expected = softmax_rows(xv, n, c);
  const double total = w[0] + w[2] + w[2];
  for (int64_t i = 0; i < n; ++i) {
    expected[i * c + t[i]] -= 1;
    for (int64_t j = 0; j < c; ++j) expected[i * c + j] *= w[t[i]] / total;
  }
  check_close(x.grad(), expected, {1e-12, 1e-12});
}

// ---- dropout --------------------------------------------------------------------------------------

TEST_CASE("dropout's gradient uses the forward mask: 0 where dropped, 1/(1-p) where kept") {
  const double p = 0.3;
  Tensor x = leaf({50, 40}, 21, 1.0, 3.0);  // values near 3: none is 0 by chance
  Tensor y = dropout(x, p);
  y.sum().backward();
  std::vector<double> out = values(y), g = values(x.grad());
  int64_t dropped = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 0.0) {
      ++dropped;
      CHECK(g[i] == 0.0);
    } else {
      CHECK(g[i] == doctest::Approx(1.0 / (1.0 - p)).epsilon(1e-12));
    }
  }
  CHECK(dropped > 400);  // about 600 of 2000
  CHECK(dropped < 800);
}

TEST_CASE("dropout with p = 1, p = 0 and in eval: gradients 0, 1 and 1") {
  Tensor x = leaf({3, 4}, 22);
  Tensor all = dropout(x, 1.0);
  REQUIRE(all.requires_grad());
  check_close(all, std::vector<double>(12, 0.0));
  (all.sum() + dropout(x, 0.0).sum() + dropout(x, 0.5, /*training=*/false).sum()).backward();
  check_close(x.grad(), std::vector<double>(12, 2.0));
}

// ---- batch_norm / layer_norm ----------------------------------------------------------------------

TEST_CASE("eval batch_norm gradient is the per-channel affine map of the running statistics") {
  const int64_t n = 2, c = 3, s = 4;
  const std::vector<double> rm = {0.1, -0.2, 0.3}, rv = {0.5, 2.0, 1.5}, wv = {1.5, -0.5, 2.0};
  const double eps = 1e-3;
  std::vector<double> xv = random_values(n * c * s, 31), gv = random_values(n * c * s, 32);
  Tensor x = make(xv, {n, c, s}).requires_grad_();
  Tensor w = make(wv, {c}).requires_grad_(), b = make({0.0, 1.0, -1.0}, {c}).requires_grad_();
  Tensor running_mean = make(rm, {c}), running_var = make(rv, {c});
  Tensor y = batch_norm(x, w, b, running_mean, running_var, /*training=*/false, 0.1, eps);
  y.backward(make(gv, {n, c, s}));
  std::vector<double> gx(xv.size()), gw(c, 0.0), gb(c, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t j = 0; j < s; ++j) {
        const size_t e = static_cast<size_t>((i * c + k) * s + j);
        const double invstd = 1.0 / std::sqrt(rv[k] + eps);
        gx[e] = gv[e] * wv[k] * invstd;
        gw[k] += gv[e] * (xv[e] - rm[k]) * invstd;
        gb[k] += gv[e];
      }
  check_close(x.grad(), gx, {1e-12, 1e-12});
  check_close(w.grad(), gw, {1e-12, 1e-12});
  check_close(b.grad(), gb, {1e-12, 1e-12});
  // The running statistics are buffers: eval leaves them alone and they get no gradient.
  check_close(running_mean, rm);
  CHECK_FALSE(running_mean.requires_grad());
}

TEST_CASE("training batch_norm under autograd updates the running statistics once") {
  Tensor x = leaf({4, 2, 3}, 33);
  Tensor rm_grad = zeros({2}, TensorOptions(kFloat64)), rv_grad = ones({2}, TensorOptions(kFloat64));
  Tensor rm_plain = zeros({2}, TensorOptions(kFloat64)), rv_plain = ones({2}, TensorOptions(kFloat64));
  Tensor y = batch_norm(x, {}, {}, rm_grad, rv_grad, true);
  CHECK(y.requires_grad());
  Tensor y_plain = no_grad([&] { return batch_norm(x, {}, {}, rm_plain, rv_plain, true); });
  check_close(y, values(y_plain), {0, 0});
  check_close(rm_grad, values(rm_plain), {0, 0});
  check_close(rv_grad, values(rv_plain), {0, 0});
}

TEST_CASE("the statistics that batch_norm_forward and layer_norm_forward return carry no history") {
  Tensor x = leaf({4, 3}, 34), w = leaf({3}, 35);
  auto [y, mean, invstd] = batch_norm_forward(x, w, {}, {}, {}, true, 0.1, 1e-5);
  CHECK(y.requires_grad());
  CHECK_FALSE(mean.requires_grad());
  CHECK_FALSE(invstd.requires_grad());
  auto [z, lmean, rstd] = layer_norm_forward(x, {3}, w, {}, 1e-5);
  CHECK(z.requires_grad());
  CHECK_FALSE(lmean.requires_grad());
  CHECK_FALSE(rstd.requires_grad());
  // Their values are those the backward uses: still intact after the backward ran.
  (y.sum() + z.sum()).backward();
  CHECK(lmean.numel() == 4);
}

TEST_CASE("batch_norm and layer_norm with only a bias give the bias sum(g)") {
  Tensor x = leaf({3, 2, 2}, 36), b = leaf({2}, 37);
  Tensor g = make(random_values(12, 38), {3, 2, 2});
  batch_norm(x, {}, b, {}, {}, true).backward(g);
  std::vector<double> gv = values(g), expected(2, 0.0);
  for (size_t e = 0; e < gv.size(); ++e) expected[(e / 2) % 2] += gv[e];
  check_close(b.grad(), expected, {1e-12, 1e-12});

  Tensor lb = leaf({2}, 39);
  layer_norm(x, {2}, {}, lb).backward(g);
  std::vector<double> lexpected(2, 0.0);
  for (size_t e = 0; e < gv.size(); ++e) lexpected[e % 2] += gv[e];
  check_close(lb.grad(), lexpected, {1e-12, 1e-12});
}

// ---- second derivatives through the fused kernels -------------------------------------------------

TEST_CASE("second derivatives through softmax and log_softmax match the composite") {
  check_same_second_derivative(
      {leaf({3, 5}, 41)}, [](const auto& x) { return x[0].softmax(1); },
      [](const auto& x) {
        Tensor e = x[0].exp();
        return e / e.sum({1}, true);
      });
  check_same_second_derivative(
      {leaf({4, 3}, 42)}, [](const auto& x) { return x[0].log_softmax(0); },
      [](const auto& x) { return x[0] - x[0].exp().sum({0}, true).log(); });
}

TEST_CASE("second derivatives through cross_entropy with learned class weights match the composite") {
  Tensor t = targets({0, 2, -100, 1}, {4});
  check_same_second_derivative(
      {leaf({4, 3}, 43), make({0.5, 2.0, 1.25}, {3}).requires_grad_()},
      [&](const auto& x) { return cross_entropy(x[0], t, x[1]); },
      [&](const auto& x) {
        Tensor logp = x[0] - x[0].exp().sum({1}, true).log();
        Tensor hit = t.unsqueeze(1).eq(arange(0, 3, 1, t.options())).to(kFloat64);
        Tensor w = (hit * x[1]).sum({1});  // w[t_i], 0 for the ignored row
        return ((logp * hit).sum({1}) * w).sum().neg() / w.sum();
      });
}

TEST_CASE("second derivatives through training batch_norm and layer_norm match the composite") {
  SUBCASE("batch_norm") {
    check_same_second_derivative(
        {leaf({4, 2, 3}, 44, 2.0, -0.5), leaf({2}, 45, 0.5, 1.0), leaf({2}, 46)},
        [](const auto& x) { return batch_norm(x[0], x[1], x[2], {}, {}, true); },
        [](const auto& x) { return normalize_composite(x[0], {0, 2}, x[1].view({1, 2, 1}), x[2].view({1, 2, 1})); });
  }
  SUBCASE("layer_norm") {
    check_same_second_derivative(
        {leaf({3, 2, 4}, 47, 2.0, 0.5), leaf({2, 4}, 48, 0.5, 1.0), leaf({2, 4}, 49)},
        [](const auto& x) { return layer_norm(x[0], {2, 4}, x[1], x[2]); },
        [](const auto& x) { return normalize_composite(x[0], {1, 2}, x[1], x[2]); });
  }
}

TEST_CASE("eval batch_norm has second derivatives (written with forward ops)") {
  Tensor x = leaf({3, 2}, 44), w = leaf({2}, 45);
  Tensor rm = make({0.1, -0.3}, {2}), rv = make({0.8, 1.7}, {2});
  Tensor y = batch_norm(x, w, {}, rm, rv, false);
  // y = xhat w: d/dx sum(y^2) = 2 xhat w^2 invstd, whose sum has d/dw = sum(4 xhat w invstd)
  Tensor gx = autograd::grad({(y * y).sum()}, {x}, {}, {}, /*create_graph=*/true)[0];
  auto gw = autograd::grad({gx.sum()}, {w});
  std::vector<double> xv = values(x), wv = values(w), expected(2, 0.0);
  const std::vector<double> mean = {0.1, -0.3}, var = {0.8, 1.7};
  for (size_t e = 0; e < xv.size(); ++e) {
    const size_t k = e % 2;
    const double invstd = 1.0 / std::sqrt(var[k] + 1e-5), xhat = (xv[e] - mean[k]) * invstd;
    expected[k] += 4 * xhat * wv[k] * invstd;
  }
  check_close(gw[0], expected, {1e-10, 1e-12});
}

// ---- float32 fused kernels against the float64 composites -----------------------------------------

namespace {

// Gradients of sum(f(inputs) * r) for float32 inputs (fused kernels) and float64 inputs
// through `reference` (a composite of elementwise ops and reductions), for the same values.
void check_float32_against_composite(const std::vector<Tensor>& inputs64,
                                     const std::function<Tensor(const std::vector<Tensor>&)>& fused,
                                     const std::function<Tensor(const std::vector<Tensor>&)>& reference,
                                     Tol tol = {1e-4, 1e-5}) {
  Tensor y64 = reference(inputs64);
  Tensor r = make(random_values(y64.numel(), 51), y64.sizes());
  auto g64 = autograd::grad({(y64 * r).sum()}, inputs64);
  std::vector<Tensor> inputs32;
  for (const Tensor& t : inputs64) inputs32.push_back(to32(t));
  Tensor y32 = fused(inputs32);
  REQUIRE(y32.dtype() == kFloat32);
  check_close(y32, values(y64), tol);
  auto g32 = autograd::grad({(y32 * r.to(kFloat32)).sum()}, inputs32);
  for (size_t i = 0; i < inputs64.size(); ++i) {
    CAPTURE(i);
    CHECK(g32[i].dtype() == kFloat32);
    check_close(g32[i], values(g64[i]), tol);
  }
}

}  // namespace

TEST_CASE("float32 softmax and log_softmax gradients match the float64 composite") {
  SUBCASE("softmax, last dim") {
    check_float32_against_composite(
        {leaf({4, 33}, 61, 3.0)}, [](const auto& x) { return x[0].softmax(-1); },
        [](const auto& x) {
          Tensor e = (x[0] - x[0].amax({1}, true)).exp();
          return e / e.sum({1}, true);
        });
  }
  SUBCASE("log_softmax, a middle dim") {
    check_float32_against_composite(
        {leaf({2, 17, 5}, 62, 3.0)}, [](const auto& x) { return x[0].log_softmax(1); },
        [](const auto& x) { return x[0] - x[0].logsumexp({1}, true); });
  }
}

TEST_CASE("float32 cross_entropy gradients match the float64 composite") {
  Tensor t = targets({3, 0, 9, -100, 5, 5}, {6});
  auto composite = [&](const std::vector<Tensor>& x, double eps) {
    // -sum_c q_c logp_c over the counted rows, averaged; q = (1 - eps) onehot + eps / C
    Tensor logp = x[0] - x[0].logsumexp({1}, true);
    Tensor valid = t.ne(-100);
    Tensor onehot = t.unsqueeze(1).eq(arange(0, 10, 1, t.options())).to(kFloat64);
    Tensor q = onehot * (1 - eps) + eps / 10;
    Tensor per_row = (logp * q).sum({1}).neg().masked_fill(valid.logical_not(), 0.0);
    return per_row.sum() / 5.0;
  };
  for (double eps : {0.0, 0.1}) {
    CAPTURE(eps);
    check_float32_against_composite(
        {leaf({6, 10}, 63, 2.0)}, [&](const auto& x) { return cross_entropy(x[0], t, {}, -100, eps); },
        [&](const auto& x) { return composite(x, eps); });
  }
}

TEST_CASE("float32 layer_norm gradients match the float64 composite") {
  check_float32_against_composite(
      {leaf({3, 4, 24}, 71, 2.0, 0.5), leaf({4, 24}, 72, 0.5, 1.0), leaf({4, 24}, 73)},
      [](const auto& x) {
        return layer_norm(x[0], {4, 24}, x[1], x[2]);
      },
      [](const auto& x) { return normalize_composite(x[0], {1, 2}, x[1], x[2]); });
}

TEST_CASE("float32 training batch_norm gradients match the float64 composite") {
  check_float32_against_composite(
      {leaf({8, 3, 5}, 81, 2.0, -0.5), leaf({3}, 82, 0.5, 1.0), leaf({3}, 83)},
      [](const auto& x) { return batch_norm(x[0], x[1], x[2], {}, {}, true); },
      [](const auto& x) { return normalize_composite(x[0], {0, 2}, x[1].view({1, 3, 1}), x[2].view({1, 3, 1})); });
}
