/*
 * Tests of softmax, log_softmax, their backward functions, nll_loss, cross_entropy,
 * mse_loss, embedding, dropout and one_hot: values against float64 loops written here (and
 * PyTorch 1.13 literals for cross_entropy), backward functions against central finite
 * differences of the forward in float64, non-contiguous inputs, 16-bit dtypes, and errors.
 */
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/vector_isa.h"
#include "ops/ops.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

// [outer, size, inner] around dim of a shape.
struct Around {
  int64_t outer = 1, size = 1, inner = 1;
};
Around around(IntArrayRef shape, int64_t dim) {
  Around a;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim)
      a.outer *= shape[d];
    else if (d == dim)
      a.size = shape[d];
    else
      a.inner *= shape[d];
  }
  return a;
}

std::vector<double> softmax_ref(const std::vector<double>& x, IntArrayRef shape, int64_t dim, bool log) {
  Around g = around(shape, dim);
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t j = 0; j < g.inner; ++j) {
      auto at = [&](int64_t d) { return (o * g.size + d) * g.inner + j; };
      double m = -INFINITY, s = 0;
      for (int64_t d = 0; d < g.size; ++d) m = std::max(m, x[at(d)]);
      for (int64_t d = 0; d < g.size; ++d) s += std::exp(x[at(d)] - m);
      for (int64_t d = 0; d < g.size; ++d)
        y[at(d)] = log ? x[at(d)] - m - std::log(s) : std::exp(x[at(d)] - m) / s;
    }
  return y;
}

// softmax's gx = y * (gy - sum(gy * y)) and log_softmax's gx = gy - exp(y) * sum(gy), sums along dim.
std::vector<double> softmax_backward_ref(const std::vector<double>& gy, const std::vector<double>& y,
                                         IntArrayRef shape, int64_t dim, bool log) {
  Around g = around(shape, dim);
  std::vector<double> gx(y.size());
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t j = 0; j < g.inner; ++j) {
      auto at = [&](int64_t d) { return (o * g.size + d) * g.inner + j; };
      double s = 0;
      for (int64_t d = 0; d < g.size; ++d) s += log ? gy[at(d)] : gy[at(d)] * y[at(d)];
      for (int64_t d = 0; d < g.size; ++d)
        gx[at(d)] = log ? gy[at(d)] - std::exp(y[at(d)]) * s : y[at(d)] * (gy[at(d)] - s);
    }
  return gx;
}

}  // namespace

// ---- softmax / log_softmax ----------------------------------------------------------------

TEST_CASE("softmax and log_softmax along every dim of a 3-D tensor match float64 loops") {
  const DimVector shape{3, 4, 5};
  std::vector<double> x = random_values(60, 1, 2.0);
  for (DType dtype : {kFloat32, kFloat64}) {
    Tensor t = make(x, shape, dtype);
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      CAPTURE(dtype);
      CAPTURE(dim);
      const int64_t d = dim < 0 ? dim + 3 : dim;
      Tensor y = softmax(t, dim), ly = log_softmax(t, dim);
      CHECK(y.dtype() == dtype);
      CHECK(y.sizes() == t.sizes());
      check_close(y, softmax_ref(x, shape, d, false));
      check_close(ly, softmax_ref(x, shape, d, true));
      check_close(t.softmax(dim), softmax_ref(x, shape, d, false));
      check_close(t.log_softmax(dim), softmax_ref(x, shape, d, true));
    }
  }
}

TEST_CASE("softmax on long rows and on several blocks of inner columns") {
  // rows of 5000 (vector loops with tails), and dim 1 of [2, 3, 300] (inner block of 256 + 44)
  std::vector<double> x = random_values(3 * 5000, 2, 3.0);
  check_close(softmax(make(x, {3, 5000}, kFloat32), 1), softmax_ref(x, {3, 5000}, 1, false));
  check_close(log_softmax(make(x, {3, 5000}, kFloat32), 1), softmax_ref(x, {3, 5000}, 1, true));
  std::vector<double> z = random_values(2 * 3 * 300, 3);
  check_close(softmax(make(z, {2, 3, 300}, kFloat32), 1), softmax_ref(z, {2, 3, 300}, 1, false));
  check_close(log_softmax(make(z, {2, 3, 300}, kFloat64), 1), softmax_ref(z, {2, 3, 300}, 1, true));
  // a long softmax dim with a few inner columns
  std::vector<double> u = random_values(2 * 2000 * 40, 20);
  check_close(softmax(make(u, {2, 2000, 40}, kFloat32), 1), softmax_ref(u, {2, 2000, 40}, 1, false));
  check_close(log_softmax(make(u, {2, 2000, 40}, kFloat32), 1), softmax_ref(u, {2, 2000, 40}, 1, true));
  std::vector<double> gu = random_values(2 * 2000 * 40, 21);
  Tensor yu = softmax(make(u, {2, 2000, 40}), 1);
  Tensor gx32 = softmax_backward(make(gu, {2, 2000, 40}, kFloat32), yu.to(kFloat32), 1);
  check_close(gx32, values(softmax_backward(make(gu, {2, 2000, 40}), yu, 1)), {1e-5, 1e-6});
}

TEST_CASE(
    "softmax's vector loops under each ISA (baseline, AVX2, AVX-512 in portable builds) match float64") {
  using cpu::VectorIsa;
  const VectorIsa saved = cpu::vector_isa();
  // [6, 1003]: along dim 1, rows with a remainder for every vector width; along dim 0, blocks of
  // 256 columns and a remainder of 235. The maximum sits at a row's end in one row and at its
  // start in another; a masked (-inf) logit gives exactly 0.
  const int64_t rows = 6, n = 1003;
  const DimVector shape{rows, n};
  std::vector<double> x = random_values(rows * n, 31, 4.0);
  x[n - 1] = 30;
  x[n] = 25;
  x[2 * n + 7] = -INFINITY;
  const std::vector<double> gy = random_values(rows * n, 32);
  for (VectorIsa isa : {VectorIsa::Baseline, VectorIsa::Avx2, VectorIsa::Avx512}) {
    cpu::set_vector_isa(isa);
    const std::string isa_name = cpu::vector_isa_name(cpu::vector_isa());
    CAPTURE(isa_name);
    for (DType dtype : {kFloat32, kFloat64}) {
      CAPTURE(dtype);
      const bool f32 = dtype == kFloat32;
      const Tol tol = f32 ? Tol{1e-6, 1e-6} : Tol{1e-13, 1e-13}, log_tol = f32 ? Tol{1e-5, 1e-5} : tol;
      for (int64_t dim : {1, 0}) {
        CAPTURE(dim);
        Tensor t = make(x, shape, dtype), g = make(gy, shape, dtype);
        Tensor sm = softmax(t, dim);
        const std::vector<double> y = softmax_ref(x, shape, dim, false),
                                  ly = softmax_ref(x, shape, dim, true);
        check_close(sm, y, tol);
        CHECK(sm.to_vector<double>()[2 * n + 7] == 0.0);
        check_close(log_softmax(t, dim), ly, log_tol);
        // The backward from the reference's y, against the float64 formulas.
        check_close(softmax_backward(g, make(y, shape, dtype), dim),
                    softmax_backward_ref(gy, y, shape, dim, false), tol);
        check_close(log_softmax_backward(g, make(ly, shape, dtype), dim),
                    softmax_backward_ref(gy, ly, shape, dim, true), log_tol);
      }
    }
  }
  cpu::set_vector_isa(saved);
}

TEST_CASE("softmax of non-contiguous inputs: transposed, sliced and expanded views") {
  std::vector<double> x = random_values(6 * 8, 4);
  Tensor base = make(x, {6, 8}, kFloat32);
  // transposed: element (i, j) of base.t() is x[j * 8 + i]
  Tensor tr = base.t();
  REQUIRE_FALSE(tr.is_contiguous());
  std::vector<double> xt(48);
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t j = 0; j < 6; ++j) xt[i * 6 + j] = x[j * 8 + i];
  check_close(softmax(tr, 1), softmax_ref(xt, {8, 6}, 1, false));
  check_close(log_softmax(tr, 0), softmax_ref(xt, {8, 6}, 0, true));

  // every other column
  Tensor sl = base.slice(1, 0, 8, 2);
  std::vector<double> xs(24);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 4; ++j) xs[i * 4 + j] = x[i * 8 + 2 * j];
  check_close(softmax(sl, -1), softmax_ref(xs, {6, 4}, 1, false));

  // expanded along dim 0: softmax over the broadcast dim is uniform
  Tensor row = make({1.0, 2.0, 3.0}, {1, 3}, kFloat32).expand({4, 3});
  check_close(softmax(row, 0), std::vector<double>(12, 0.25));
  std::vector<double> rows;
  for (int i = 0; i < 4; ++i)
    for (double v : softmax_ref({1.0, 2.0, 3.0}, {3}, 0, false)) rows.push_back(v);
  check_close(softmax(row, 1), rows);
}

TEST_CASE("softmax stays finite for inputs of large magnitude") {
  Tensor x = make({1000.0, 999.0, -1000.0, 0.0, -1000.0, -1000.0, -1000.0, -999.0}, {2, 4}, kFloat32);
  std::vector<double> y = values(softmax(x, 1)), ly = values(log_softmax(x, 1));
  for (double v : y) CHECK(std::isfinite(v));
  for (double v : ly) CHECK(std::isfinite(v));
  const double a = 1.0 / (1.0 + std::exp(-1.0));  // softmax([1000, 999])[0]
  check_close(softmax(x, 1), {a, 1 - a, 0, 0, 1 / (3 + std::exp(1.0)), 1 / (3 + std::exp(1.0)),
                              1 / (3 + std::exp(1.0)), std::exp(1.0) / (3 + std::exp(1.0))});
  // x - logsumexp in float32 loses |x| * 2^-24 to the rounding of a logsumexp near 1000
  CHECK(ly[0] == doctest::Approx(std::log(a)).epsilon(1e-4));
  CHECK(ly[1] == doctest::Approx(std::log(1 - a)).epsilon(1e-4));
  CHECK(ly[2] == doctest::Approx(-2000 + std::log(a)).epsilon(1e-6));  // -1000 - 1000 - log(1 + e^-1)
  CHECK(ly[7] == doctest::Approx(1 - std::log(3 + std::exp(1.0))).epsilon(1e-4));
}

TEST_CASE("softmax in float16 and bfloat16 computes in float") {
  std::vector<double> x = random_values(4 * 37, 5, 2.0);
  for (DType dtype : {kFloat16, kBFloat16}) {
    CAPTURE(dtype);
    Tensor t = make(x, {4, 37}, dtype);
    std::vector<double> xr = values(t);  // the rounded inputs
    Tensor y = softmax(t, 1);
    CHECK(y.dtype() == dtype);
    check_close(y, softmax_ref(xr, {4, 37}, 1, false));
    check_close(log_softmax(t, 1), softmax_ref(xr, {4, 37}, 1, true));
    check_close(softmax(t, 0), softmax_ref(xr, {4, 37}, 0, false));
    check_close(log_softmax(t, 0), softmax_ref(xr, {4, 37}, 0, true));
  }
}

TEST_CASE("softmax of a 0-dim tensor and of an empty tensor") {
  Tensor s = scalar_tensor(3.5, kFloat32);
  CHECK(softmax(s, 0).dim() == 0);
  CHECK(softmax(s, -1).item<double>() == 1.0);
  CHECK(log_softmax(s, 0).item<double>() == 0.0);
  CHECK(softmax(empty({0, 4}), 1).sizes() == IntArrayRef{0, 4});
}

TEST_CASE("softmax_backward and log_softmax_backward match finite differences") {
  for (auto [shape, dim] :
       std::vector<std::pair<DimVector, int64_t>>{{{3, 4}, 1}, {{3, 4}, 0}, {{2, 3, 2}, 1}}) {
    CAPTURE(dim);
    const int64_t n = shape_numel(shape);
    std::vector<double> x = random_values(n, 6), gy = random_values(n, 7);
    for (bool log : {false, true}) {
      CAPTURE(log);
      auto f = [&](const std::vector<double>& v) {
        Tensor t = make(v, shape);
        return dot(log ? log_softmax(t, dim) : softmax(t, dim), gy);
      };
      Tensor y = log ? log_softmax(make(x, shape), dim) : softmax(make(x, shape), dim);
      Tensor gx =
          log ? log_softmax_backward(make(gy, shape), y, dim) : softmax_backward(make(gy, shape), y, dim);
      check_close(gx, numeric_grad(f, x), kFdTol);
    }
  }
}

TEST_CASE("softmax backward in float32 and bfloat16 against the float64 formula, non-contiguous grad") {
  std::vector<double> x = random_values(5 * 6, 8), gy = random_values(5 * 6, 9);
  Tensor y64 = softmax(make(x, {5, 6}), 1), ly64 = log_softmax(make(x, {5, 6}), 1);
  std::vector<double> expect = values(softmax_backward(make(gy, {5, 6}), y64, 1));
  std::vector<double> expect_log = values(log_softmax_backward(make(gy, {5, 6}), ly64, 1));
  // grad given as the transpose of a [6, 5] tensor
  std::vector<double> gyt(30);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 6; ++j) gyt[j * 5 + i] = gy[i * 6 + j];
  Tensor g32 = make(gyt, {6, 5}, kFloat32).t();
  check_close(softmax_backward(g32, y64.to(kFloat32), 1), expect);
  check_close(log_softmax_backward(g32, ly64.to(kFloat32), 1), expect_log);
  Tensor gbf = make(gy, {5, 6}, kBFloat16);
  std::vector<double> ybf = values(y64.to(kBFloat16)), gyb = values(gbf);
  std::vector<double> expect_bf(30);
  for (int i = 0; i < 5; ++i) {
    double s = 0;
    for (int j = 0; j < 6; ++j) s += gyb[i * 6 + j] * ybf[i * 6 + j];
    for (int j = 0; j < 6; ++j) expect_bf[i * 6 + j] = ybf[i * 6 + j] * (gyb[i * 6 + j] - s);
  }
  check_close(softmax_backward(gbf, y64.to(kBFloat16), 1), expect_bf, {1.6e-2, 1e-3});
}

TEST_CASE("softmax errors name the op") {
  CHECK_THROWS_WITH_AS(softmax(tensor<int64_t>({1, 2, 3}), 0), doctest::Contains("softmax"), Error);
  CHECK_THROWS_WITH_AS(softmax(empty({2, 3}), 2), doctest::Contains("softmax"), Error);
  CHECK_THROWS_WITH_AS(log_softmax(empty({2, 3}), -3), doctest::Contains("log_softmax"), Error);
  CHECK_THROWS_WITH_AS(softmax_backward(empty({2, 3}), empty({3, 2}), 1),
                       doctest::Contains("softmax_backward: expected grad_out and out of the same shape"),
                       Error);
}

// ---- nll_loss -----------------------------------------------------------------------------

namespace {

// Reference nll over [N, C] with targets [N]: returns per-sample losses and the total weight.
std::pair<std::vector<double>, double> nll_ref(const std::vector<double>& lp, int64_t c,
                                               const std::vector<int64_t>& target,
                                               const std::vector<double>& w, int64_t ignore) {
  std::vector<double> out(target.size());
  double total = 0;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == ignore) continue;
    double wi = w.empty() ? 1.0 : w[target[i]];
    out[i] = -wi * lp[i * c + target[i]];
    total += wi;
  }
  return {out, total};
}

double sum_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

}  // namespace

TEST_CASE("nll_loss with weights, ignore_index and every reduction") {
  const int64_t n = 6, c = 4;
  std::vector<double> lp = values(log_softmax(make(random_values(n * c, 10), {n, c}), 1));
  std::vector<int64_t> tg{0, 3, -100, 2, 3, 1};
  std::vector<double> w{0.5, 2.0, 1.0, 0.25};
  Tensor target = tensor<int64_t>(tg);
  for (DType dtype : {kFloat32, kFloat64, kBFloat16}) {
    CAPTURE(dtype);
    Tensor logp = make(lp, {n, c}, dtype);
    std::vector<double> lpr = values(logp);
    for (bool weighted : {false, true}) {
      CAPTURE(weighted);
      std::vector<double> wv = weighted ? w : std::vector<double>{};
      Tensor weight = weighted ? make(w, {c}, kFloat32) : Tensor();
      auto [per, total] = nll_ref(lpr, c, tg, wv, -100);
      check_close(nll_loss(logp, target, weight, -100, Reduction::None), per);
      check_close(nll_loss(logp, target, weight, -100, Reduction::Sum), {sum_of(per)});
      check_close(nll_loss(logp, target, weight), {sum_of(per) / total});
      auto [out, tw] = nll_loss_forward(logp, target, weight, -100, Reduction::Mean);
      check_close(tw, {total});
    }
  }
  // ignore_index as a valid class
  auto [per, total] = nll_ref(lp, c, {0, 3, 3, 2, 3, 1}, {}, 3);
  check_close(nll_loss(make(lp, {n, c}), tensor<int64_t>({0, 3, 3, 2, 3, 1}), {}, 3), {sum_of(per) / total});
}

TEST_CASE("nll_loss on [C] with a 0-dim target, on K-dim inputs and on a transposed input") {
  std::vector<double> lp = values(log_softmax(make(random_values(5, 11), {5}), 0));
  Tensor t0 = scalar_tensor(int64_t{2}, kInt64);
  check_close(nll_loss(make(lp, {5}), t0), {-lp[2]});
  CHECK(nll_loss(make(lp, {5}), t0, {}, -100, Reduction::None).dim() == 0);

  // [N, C, d1, d2] = [2, 3, 2, 2]: element (n, c, i, j) at ((n * 3 + c) * 2 + i) * 2 + j
  std::vector<double> lk = values(log_softmax(make(random_values(24, 12), {2, 3, 2, 2}), 1));
  std::vector<int64_t> tk{0, 2, 1, -100, 2, 2, 0, 1};
  std::vector<double> w{1.0, 0.5, 3.0};
  std::vector<double> per(8);
  double total = 0;
  for (int64_t nn = 0; nn < 2; ++nn)
    for (int64_t p = 0; p < 4; ++p) {
      int64_t t = tk[nn * 4 + p];
      if (t == -100) continue;
      per[nn * 4 + p] = -w[t] * lk[(nn * 3 + t) * 4 + p];
      total += w[t];
    }
  Tensor target = tensor<int64_t>(tk, {2, 2, 2});
  Tensor none = nll_loss(make(lk, {2, 3, 2, 2}), target, make(w, {3}), -100, Reduction::None);
  CHECK(none.sizes() == IntArrayRef{2, 2, 2});
  check_close(none, per);
  check_close(nll_loss(make(lk, {2, 3, 2, 2}), target, make(w, {3})), {sum_of(per) / total});

  // transposed [N, C]
  std::vector<double> lt = values(log_softmax(make(random_values(12, 13), {4, 3}), 1));
  Tensor logp_t = make(lt, {4, 3}).t().contiguous().t();
  REQUIRE_FALSE(logp_t.is_contiguous());
  auto [pt, tt] = nll_ref(lt, 3, {2, 0, 1, 1}, {}, -100);
  check_close(nll_loss(logp_t, tensor<int64_t>({2, 0, 1, 1}), {}, -100, Reduction::None), pt);
}

TEST_CASE("nll_loss mean over only ignored targets is NaN, as PyTorch") {
  Tensor logp = make({-0.5, -1.0, -2.0, -0.1}, {2, 2});
  CHECK(std::isnan(nll_loss(logp, tensor<int64_t>({-100, -100})).item<double>()));
  CHECK(nll_loss(logp, tensor<int64_t>({-100, -100}), {}, -100, Reduction::Sum).item<double>() == 0.0);
}

TEST_CASE("nll_loss_backward matches finite differences for every reduction and K-dim inputs") {
  std::vector<double> w{0.5, 2.0, 1.5};
  for (Reduction red : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
    CAPTURE(static_cast<int>(red));
    for (bool kdim : {false, true}) {
      DimVector shape = kdim ? DimVector{2, 3, 2} : DimVector{4, 3};
      Tensor target = kdim ? tensor<int64_t>({2, 0, -100, 1}, {2, 2}) : tensor<int64_t>({2, 0, -100, 1});
      std::vector<double> lp = random_values(12, 14), go = random_values(4, 15);
      Tensor grad_out = red == Reduction::None ? make(go, target.sizes()) : scalar_tensor(go[0], kFloat64);
      auto f = [&](const std::vector<double>& v) {
        Tensor out = nll_loss(make(v, shape), target, make(w, {3}), -100, red);
        return red == Reduction::None ? dot(out, go) : out.item<double>() * go[0];
      };
      auto [out, total] = nll_loss_forward(make(lp, shape), target, make(w, {3}), -100, red);
      Tensor g = nll_loss_backward(grad_out, make(lp, shape), target, make(w, {3}), total, -100, red);
      CHECK(g.sizes() == IntArrayRef(shape));
      check_close(g, numeric_grad(f, lp), kFdTol);
    }
  }
}

TEST_CASE("nll_loss errors name the target value and the class count") {
  Tensor logp = make({-1.0, -2.0, -0.5, -0.1, -3.0, -0.7}, {2, 3});
  CHECK_THROWS_WITH_AS(nll_loss(logp, tensor<int64_t>({0, 5})),
                       doctest::Contains("nll_loss: target 5 is out of bounds for 3 classes"), Error);
  CHECK_THROWS_WITH_AS(nll_loss(logp, tensor<int64_t>({-1, 0})), doctest::Contains("target -1"), Error);
  CHECK_THROWS_WITH_AS(nll_loss(logp, tensor<int64_t>({0, 1, 2})),
                       doctest::Contains("nll_loss: expected target of shape [2]"), Error);
  CHECK_THROWS_WITH_AS(nll_loss(logp, make({0, 1}, {2})), doctest::Contains("int64"), Error);
  CHECK_THROWS_WITH_AS(nll_loss(logp, tensor<int64_t>({0, 1}), make({1, 1}, {2})),
                       doctest::Contains("nll_loss: expected a floating weight of shape [3]"), Error);
}

// ---- cross_entropy (composite; PyTorch 1.13 literals) -------------------------------------

namespace {

// x[i][j] = ((i * 7 + j * 3) % 11) * 0.25 - 1, as in the script that produced the literals.
Tensor ce_logits(DType dtype) {
  std::vector<double> v;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) v.push_back(((i * 7 + j * 3) % 11) * 0.25 - 1.0);
  return make(v, {4, 5}, dtype);
}

}  // namespace

TEST_CASE("cross_entropy with label smoothing, ignore_index and class weights matches PyTorch") {
  // torch.nn.functional.cross_entropy(x, t, weight=w, ignore_index=-100, label_smoothing=0.1, reduction=...)
  Tensor t = tensor<int64_t>({1, -100, 4, 0});
  Tensor w = make({0.5, 1, 2, 1.5, 0.25}, {5});
  for (DType dtype : {kFloat64, kFloat32}) {
    CAPTURE(dtype);
    Tensor x = ce_logits(dtype);
    Tensor wd = w.to(dtype);
    check_close(cross_entropy(x, t, wd, -100, 0.1, Reduction::Mean), {1.8649321691743201});
    check_close(cross_entropy(x, t, wd, -100, 0.1, Reduction::Sum), {3.2636312960550606});
    check_close(cross_entropy(x, t, wd, -100, 0.1, Reduction::None),
                {2.1065471309659265, 0.0, 0.6250524928500073, 0.5320316722391268});
    check_close(cross_entropy(x, t, {}, -100, 0.1, Reduction::Mean), {1.665935465694421});
    check_close(cross_entropy(x, t, {}, -100, 0.1, Reduction::Sum), {4.997806397083263});
    check_close(cross_entropy(x, t, {}, -100, 0.1, Reduction::None),
                {2.1407434138964443, 0.0, 1.9851590692424466, 0.8719039139443727});
    // ignore_index = 2, a valid class, with label_smoothing 0.3
    Tensor t2 = tensor<int64_t>({1, 2, 4, 2});
    check_close(cross_entropy(x, t2, wd, 2, 0.3, Reduction::Mean), {2.2985860072269517});
    check_close(cross_entropy(x, t2, wd, 2, 0.3, Reduction::Sum), {2.8732325090336897});
    check_close(cross_entropy(x, t2, wd, 2, 0.3, Reduction::None),
                {1.9981545651048909, 0.0, 0.8750779439287987, 0.0});
    // without smoothing, and on [C] with a 0-dim target
    check_close(cross_entropy(x, t, wd), {1.7338486503881383});
    check_close(cross_entropy(x.select(0, 0), scalar_tensor(int64_t{3}, kInt64), {}, -100, 0.2),
                {0.9207434138964443});
  }
}

TEST_CASE("cross_entropy on K-dim inputs with label smoothing matches PyTorch") {
  // x3[i][c][k] = ((i * 5 + c * 3 + k * 2) % 7) * 0.5 - 1.5, targets [[2, -100], [0, 1]], w [1, 2, 0.5]
  std::vector<double> v;
  for (int i = 0; i < 2; ++i)
    for (int c = 0; c < 3; ++c)
      for (int k = 0; k < 2; ++k) v.push_back(((i * 5 + c * 3 + k * 2) % 7) * 0.5 - 1.5);
  Tensor x = make(v, {2, 3, 2});
  Tensor t = tensor<int64_t>({2, -100, 0, 1}, {2, 2});
  Tensor w = make({1.0, 2.0, 0.5}, {3});
  check_close(cross_entropy(x, t, w, -100, 0.25, Reduction::Mean), {1.3644201130216909});
  check_close(cross_entropy(x, t, w, -100, 0.25, Reduction::Sum), {4.775470395575918});
  Tensor none = cross_entropy(x, t, w, -100, 0.25, Reduction::None);
  CHECK(none.sizes() == IntArrayRef{2, 2});
  check_close(none, {0.6608741977714381, 0.0, 0.9322467912937402, 3.18234940651074});
}

TEST_CASE("cross_entropy errors") {
  Tensor x = ce_logits(kFloat32);
  CHECK_THROWS_WITH_AS(cross_entropy(x, tensor<int64_t>({0, 1, 2, 1}), {}, -100, 1.5),
                       doctest::Contains("cross_entropy: label_smoothing must be between 0.0 and 1.0"),
                       Error);
  CHECK_THROWS_WITH_AS(cross_entropy(x, tensor<int64_t>({0, 1, 7, 1})), doctest::Contains("target 7"), Error);
  CHECK_THROWS_WITH_AS(cross_entropy(scalar_tensor(1.0), tensor<int64_t>({0})),
                       doctest::Contains("cross_entropy"), Error);
}

// ---- mse_loss -------------------------------------------------------------------------------

TEST_CASE("mse_loss with broadcasting, a non-contiguous input and every reduction") {
  std::vector<double> a = random_values(12, 16), b = random_values(4, 17);
  Tensor input = make(a, {4, 3}).t();  // [3, 4], transposed
  std::vector<double> sq(12);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) sq[i * 4 + j] = std::pow(a[j * 3 + i] - b[j], 2);
  for (DType dtype : {kFloat32, kFloat64}) {
    Tensor in = input.to(dtype), tg = make(b, {4}, dtype);
    check_close(mse_loss(in, tg, Reduction::None), sq);
    check_close(mse_loss(in, tg, Reduction::Sum), {sum_of(sq)});
    check_close(mse_loss(in, tg), {sum_of(sq) / 12});
  }
  CHECK_THROWS_WITH_AS(mse_loss(empty({3, 4}), empty({3})), doctest::Contains("mse_loss"), Error);
}

// ---- embedding --------------------------------------------------------------------------------

TEST_CASE("embedding gathers rows and embedding_backward adds them up") {
  std::vector<double> wv = random_values(15, 18);
  Tensor weight = make(wv, {5, 3}, kFloat32);
  Tensor idx = tensor<int64_t>({0, 4, 2, 2}, {2, 2});
  Tensor out = embedding(weight, idx);
  CHECK(out.sizes() == IntArrayRef{2, 2, 3});
  std::vector<double> expect;
  for (int64_t i : {0, 4, 2, 2})
    for (int j = 0; j < 3; ++j) expect.push_back(wv[i * 3 + j]);
  check_close(out, expect);
  // a non-contiguous weight (columns reversed by a strided view of a transposed copy)
  check_close(embedding(weight.t().contiguous().t(), idx), expect);

  std::vector<double> gv = random_values(12, 19);
  Tensor g = embedding_backward(make(gv, {2, 2, 3}, kFloat32), idx, 5);
  CHECK(g.sizes() == IntArrayRef{5, 3});
  std::vector<double> ge(15, 0.0);
  const int64_t rows[] = {0, 4, 2, 2};
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j) ge[rows[k] * 3 + j] += gv[k * 3 + j];
  check_close(g, ge);

  CHECK_THROWS_WITH_AS(embedding(empty({5}), idx), doctest::Contains("embedding: expected weight of shape"),
                       Error);
  CHECK_THROWS_WITH_AS(embedding(weight, make({0, 1}, {2})), doctest::Contains("embedding"), Error);
  CHECK_THROWS_WITH_AS(embedding(weight, tensor<int64_t>({5})), doctest::Contains("embedding: "), Error);
  CHECK_THROWS_WITH_AS(embedding_backward(empty({2, 3}), idx, 5), doctest::Contains("embedding_backward"),
                       Error);
}

// ---- dropout ----------------------------------------------------------------------------------

TEST_CASE("dropout zeroes a fraction p, scales the rest by 1/(1-p), and is reproducible") {
  const int64_t n = 100000;
  const double p = 0.3;
  Tensor x = full({n}, 2.0, kFloat32);
  Generator gen(1234);
  std::vector<double> y = values(dropout(x, p, true, &gen));
  int64_t zeros_count = 0;
  bool scaled = true;
  for (double v : y) {
    if (v == 0)
      ++zeros_count;
    else
      scaled = scaled && std::abs(v - 2.0 / (1 - p)) < 1e-5;
  }
  CHECK(scaled);
  CHECK(static_cast<double>(zeros_count) / n == doctest::Approx(p).epsilon(0.03));  // 3% of p: ~7 sigma

  Generator g1(7), g2(7);
  Tensor a = dropout(x, 0.5, true, &g1), b = dropout(x, 0.5, true, &g2);
  CHECK(values(a) == values(b));
  CHECK(values(dropout(x, 0.5, true, &g1)) != values(a));  // the generator moved on

  CHECK(dropout(x, 0.5, false).is_same(x));
  CHECK(dropout(x, 0.0, true).is_same(x));
  std::vector<double> z = values(dropout(x, 1.0, true));
  CHECK(std::all_of(z.begin(), z.end(), [](double v) { return v == 0; }));
  CHECK_THROWS_WITH_AS(dropout(x, 1.5), doctest::Contains("dropout: probability has to be between 0 and 1"),
                       Error);
  CHECK_THROWS_WITH_AS(dropout(x, -0.1), doctest::Contains("dropout"), Error);
}

// ---- one_hot ----------------------------------------------------------------------------------

TEST_CASE("one_hot encodes int64 class indices") {
  Tensor idx = tensor<int64_t>({0, 2, 1, 0}, {2, 2});
  Tensor oh = one_hot(idx);
  CHECK(oh.dtype() == kInt64);
  CHECK(oh.sizes() == IntArrayRef{2, 2, 3});
  CHECK(oh.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 0});
  Tensor oh5 = one_hot(tensor<int64_t>({3, 1}), 5);
  CHECK(oh5.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0, 1, 0, 0, 1, 0, 0, 0});
  CHECK(one_hot(empty({0}, kInt64), 4).sizes() == IntArrayRef{0, 4});

  CHECK_THROWS_WITH_AS(one_hot(tensor<int64_t>({-1, 2})),
                       doctest::Contains("one_hot: class values must be non-negative"), Error);
  CHECK_THROWS_WITH_AS(one_hot(tensor<int64_t>({1, 2}), 2),
                       doctest::Contains("one_hot: class values must be smaller than num_classes = 2"),
                       Error);
  CHECK_THROWS_WITH_AS(one_hot(make({1, 2}, {2})), doctest::Contains("one_hot: expected an int64"), Error);
  CHECK_THROWS_WITH_AS(one_hot(empty({0}, kInt64)), doctest::Contains("one_hot"), Error);
}
