/*
 * Reductions: every op against float64 references computed here (the input's values grouped
 * per output in row-major order, then folded with plain double loops), over single, multiple,
 * negative and all dims, keepdim on and off, contiguous, transposed, step-sliced and expanded
 * inputs, several dtypes; shapes large enough to take every path of the CPU engine (rows,
 * columns, chunked partials, pairwise blocks); NaN propagation, ties, empty inputs and errors.
 * A few hand-computed values come from PyTorch 1.13 (noted where used).
 */
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

constexpr float kInfF = std::numeric_limits<float>::infinity();

void check_tensor(const Tensor& actual, IntArrayRef shape, DType dtype, const std::vector<double>& want,
                  Tol tol) {
  REQUIRE(actual.sizes() == shape);
  REQUIRE(actual.dtype() == dtype);
  // The reference rounded to the result dtype (a float32 product of 1e40 is inf).
  std::vector<double> rounded = want;
  if (is_floating(dtype) && dtype != kFloat64 && !want.empty())
    rounded = tensor<double>(want).to(dtype).to_vector<double>();
  check_close(actual, rounded, tol);
}

// Row-major shape with `dims` (wrapped, sorted) removed or kept as 1.
std::vector<int64_t> ref_shape(IntArrayRef sizes, const std::vector<int64_t>& dims, bool keepdim) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
    bool reduced = dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced)
      out.push_back(sizes[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

std::vector<int64_t> wrap(IntArrayRef dims, int64_t ndim) {
  std::vector<int64_t> out;
  for (int64_t d : dims) out.push_back(d < 0 ? d + ndim : d);
  std::sort(out.begin(), out.end());
  return out;
}

// The values of x grouped per output of a reduction over `dims` (empty = all), each group in
// row-major order (so, for one dim, position k is index k along it).
std::vector<std::vector<double>> groups(const Tensor& x, const std::vector<int64_t>& dims) {
  const std::vector<double> v = x.to_vector<double>();
  const int64_t nd = x.dim();
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  auto reduced = [&](int64_t d) {
    return dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end();
  };
  int64_t n_out = 1;
  for (int64_t d = 0; d < nd; ++d)
    if (!reduced(d)) n_out *= sizes[d];
  std::vector<std::vector<double>> out(static_cast<size_t>(n_out));
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
    int64_t rest = i, o = 0, scale = 1;
    for (int64_t d = nd - 1; d >= 0; --d) {
      int64_t idx = rest % sizes[d];
      rest /= sizes[d];
      if (!reduced(d)) {
        o += idx * scale;
        scale *= sizes[d];
      }
    }
    out[static_cast<size_t>(o)].push_back(v[static_cast<size_t>(i)]);
  }
  return out;
}

using Fold = std::function<double(const std::vector<double>&)>;

std::vector<double> reference(const Tensor& x, const std::vector<int64_t>& dims, const Fold& f) {
  std::vector<double> out;
  for (const auto& g : groups(x, dims)) out.push_back(f(g));
  return out;
}

double ref_sum(const std::vector<double>& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}
double ref_prod(const std::vector<double>& g) {
  double s = 1;
  for (double v : g) s *= v;
  return s;
}
double ref_max(const std::vector<double>& g) {
  double m = -kInf;
  for (double v : g) {
    if (std::isnan(v)) return v;
    m = std::max(m, v);
  }
  return m;
}
double ref_min(const std::vector<double>& g) {
  double m = kInf;
  for (double v : g) {
    if (std::isnan(v)) return v;
    m = std::min(m, v);
  }
  return m;
}
double ref_argmax(const std::vector<double>& g) {
  size_t best = 0;
  for (size_t k = 0; k < g.size(); ++k) {
    if (std::isnan(g[k])) return static_cast<double>(k);
    if (g[k] > g[best]) best = k;
  }
  return static_cast<double>(best);
}
double ref_argmin(const std::vector<double>& g) {
  size_t best = 0;
  for (size_t k = 0; k < g.size(); ++k) {
    if (std::isnan(g[k])) return static_cast<double>(k);
    if (g[k] < g[best]) best = k;
  }
  return static_cast<double>(best);
}
Fold ref_var(int64_t correction) {
  return [correction](const std::vector<double>& g) {
    const double n = static_cast<double>(g.size());
    const double mean = ref_sum(g) / n;
    double m2 = 0;
    for (double v : g) m2 += (v - mean) * (v - mean);
    return m2 / std::max(0.0, n - static_cast<double>(correction));
  };
}
double ref_logsumexp(const std::vector<double>& g) {
  double m = ref_max(g);
  if (std::isinf(m)) m = 0;
  double s = 0;
  for (double v : g) s += std::exp(v - m);
  return std::log(s) + m;
}
Fold ref_norm(double p) {
  return [p](const std::vector<double>& g) {
    if (std::isinf(p)) {
      double m = p > 0 ? 0 : kInf;
      for (double v : g) m = p > 0 ? std::max(m, std::abs(v)) : std::min(m, std::abs(v));
      return m;
    }
    double s = 0;
    for (double v : g) s += p == 0 ? (v != 0) : std::pow(std::abs(v), p);
    return p == 0 ? s : std::pow(s, 1.0 / p);
  };
}

// [a, b, c] inputs with the same values pattern in four layouts.
struct Layout {
  std::string name;
  Tensor x;
};

Tensor random_tensor(IntArrayRef shape, DType dtype) {
  if (dtype == kBool) return randint(0, 2, shape).to(kBool);
  if (dtype == kUInt8) return randint(0, 7, shape).to(dtype);
  if (is_integral(dtype)) return randint(-3, 4, shape).to(dtype);
  return randn(shape, kFloat64).to(dtype);
}

std::vector<Layout> layouts(int64_t a, int64_t b, int64_t c, DType dtype) {
  return {
      {"contiguous", random_tensor({a, b, c}, dtype)},
      {"transposed", random_tensor({c, b, a}, dtype).permute({2, 1, 0})},
      {"step-sliced", random_tensor({2 * a, b, 2 * c}, dtype).slice(0, 0, 2 * a, 2).slice(2, 1, 2 * c, 2)},
      {"expanded", random_tensor({a, 1, c}, dtype).expand({a, b, c})},
  };
}

const std::vector<std::vector<int64_t>> kDimSets = {{},     {0},      {1},    {2},      {-1},
                                                    {0, 2}, {-3, -2}, {1, 2}, {2, 0, 1}};
const std::vector<DType> kFloatTypes = {kFloat32, kFloat64, kBFloat16, kFloat16};

// Runs `op(x, dims, keepdim)` on every layout, dim set and keepdim against `fold`.
void sweep(const std::vector<DType>& dtypes,
           const std::function<Tensor(const Tensor&, IntArrayRef, bool)>& op, const Fold& fold,
           const std::function<DType(DType)>& result_dtype, double extra_rtol = 1.0,
           std::optional<Tol> tol_override = {}) {
  for (DType dt : dtypes)
    for (auto [a, b, c] : {std::array<int64_t, 3>{4, 5, 6}, std::array<int64_t, 3>{3, 70, 41}})
      for (const Layout& l : layouts(a, b, c, dt))
        for (const auto& dims : kDimSets)
          for (bool keepdim : {false, true}) {
            CAPTURE(dt);
            CAPTURE(l.name);
            CAPTURE(l.x.sizes());
            CAPTURE(IntArrayRef(dims));
            CAPTURE(keepdim);
            std::vector<int64_t> w = wrap(dims, 3);
            Tensor got = op(l.x, dims, keepdim);
            Tol tol = tol_override.value_or(tol_for(result_dtype(dt)));
            tol.rtol *= extra_rtol;
            check_tensor(got, ref_shape(l.x.sizes(), w, keepdim), result_dtype(dt), reference(l.x, w, fold),
                         tol);
          }
}

DType same(DType t) {
  return t;
}
DType int64_for_integers(DType t) {
  return is_integral(t, true) ? kInt64 : t;
}

}  // namespace

TEST_CASE("sum matches a float64 reference over dims, keepdim, layouts and dtypes") {
  manual_seed(1);
  sweep(
      kFloatTypes, [](const Tensor& x, IntArrayRef d, bool k) { return sum(x, d, k); }, ref_sum, same);
  sweep(
      {kInt32, kInt64, kInt8, kUInt8, kBool},
      [](const Tensor& x, IntArrayRef d, bool k) { return x.sum(d, k); }, ref_sum, int64_for_integers);
}

TEST_CASE("sum with a dtype casts as PyTorch") {
  Tensor h = tensor<float>({1000.5f, 1000.5f, 0.25f}).to(kFloat16);  // float16 rounds 1000.5 to 1000.5
  check_tensor(sum(h, {}, false, kFloat32), {}, kFloat32, {2001.25}, tol_for(kFloat32));
  check_tensor(sum(h, {}, false), {}, kFloat16, {2001.0}, tol_for(kFloat16));  // 2001.25 -> f16 2001
  Tensor i = tensor<int32_t>({1, 2, 3, 4}, {2, 2});
  check_tensor(sum(i, {0}, false, kFloat32), {2}, kFloat32, {4, 6}, tol_for(kFloat32));
  check_tensor(sum(i, {1}, true, kInt32), {2, 1}, kInt32, {3, 7}, {0, 0});
  check_tensor(sum(tensor<double>({0.5, 1.25}), {}, false, kInt64), {}, kInt64, {1},
               {0, 0});  // casts first: 0 + 1
  check_tensor(sum(tensor<float>({1.5f, 2.25f}), {}, false, kFloat64), {}, kFloat64, {3.75},
               tol_for(kFloat64));
  check_tensor(sum(tensor<double>({1.0, 1e-9}), {}, false, kFloat32), {}, kFloat32, {1.0}, {0, 0});
  check_tensor(sum(tensor<bool>({true, true, false})), {}, kInt64, {2}, {0, 0});
}

TEST_CASE("prod matches a float64 reference") {
  manual_seed(2);
  sweep(
      kFloatTypes, [](const Tensor& x, IntArrayRef d, bool k) { return prod(x, d, k); }, ref_prod, same);
  // Integer products of values in [-3, 3] over at most 6 * 5 elements stay far below 2^63 only
  // for the small shape; the sweep's 70 * 41 groups wrap, so integers use a small case.
  Tensor i = tensor<int32_t>({1, -2, 3, 4, 5, -6}, {2, 3});
  check_tensor(prod(i, {1}), {2}, kInt64, {-6, -120}, {0, 0});
  check_tensor(i.prod({0}, true), {1, 3}, kInt64, {4, -10, -18}, {0, 0});
  check_tensor(prod(tensor<bool>({true, false, true}, {3})), {}, kInt64, {0}, {0, 0});
  check_tensor(prod(tensor<uint8_t>({2, 3, 7}).expand({2, 3}), {}), {}, kInt64, {1764}, {0, 0});
}

TEST_CASE("amax and amin match a reference for every dtype") {
  manual_seed(3);
  const std::vector<DType> all = {kFloat32, kFloat64, kBFloat16, kFloat16, kInt32,
                                  kInt64,   kInt8,    kUInt8,    kBool};
  sweep(
      all, [](const Tensor& x, IntArrayRef d, bool k) { return amax(x, d, k); }, ref_max, same);
  sweep(
      all, [](const Tensor& x, IntArrayRef d, bool k) { return x.amin(d, k); }, ref_min, same);
}

TEST_CASE("var matches a two-pass float64 reference for corrections 0, 1 and 2") {
  manual_seed(4);
  for (int64_t c : {0, 1, 2}) {
    CAPTURE(c);
    sweep(
        kFloatTypes, [c](const Tensor& x, IntArrayRef d, bool k) { return var(x, d, c, k); }, ref_var(c),
        same);
  }
}

TEST_CASE("var: n - correction <= 0 gives inf or nan, as PyTorch") {
  // torch.var(torch.tensor([2., 3.]), dim=0, correction=2) -> inf (also correction=3);
  // torch.tensor(3.).var() -> nan; torch.zeros(0).var() -> nan.
  check_tensor(var(tensor<float>({2, 3}), {0}, 2), {}, kFloat32, {kInf}, {0, 0});
  check_tensor(var(tensor<float>({2, 3}), {0}, 3), {}, kFloat32, {kInf}, {0, 0});
  check_tensor(var(scalar_tensor(3.0)), {}, kFloat32, {kNaN}, {0, 0});
  check_tensor(var(zeros({0})), {}, kFloat32, {kNaN}, {0, 0});
  check_tensor(tensor<double>({1, 2, 3, 4}).var({0}, -1), {}, kFloat64, {1.0}, tol_for(kFloat64));  // 5 / 5
}

TEST_CASE("max and min along a dim give values and first indices") {
  manual_seed(5);
  const std::vector<DType> types = {kFloat32, kFloat64, kBFloat16, kInt32, kInt64, kUInt8, kBool};
  for (DType dt : types)
    for (auto [a, b, c] : {std::array<int64_t, 3>{4, 5, 6}, std::array<int64_t, 3>{3, 70, 41}})
      for (const Layout& l : layouts(a, b, c, dt))
        for (int64_t dim : {0, 1, 2, -1})
          for (bool keepdim : {false, true}) {
            CAPTURE(dt);
            CAPTURE(l.name);
            CAPTURE(dim);
            CAPTURE(keepdim);
            std::vector<int64_t> w = wrap({dim}, 3);
            auto shape = ref_shape(l.x.sizes(), w, keepdim);
            auto [vmax, imax] = max(l.x, dim, keepdim);
            check_tensor(vmax, shape, dt, reference(l.x, w, ref_max), {0, 0});
            check_tensor(imax, shape, kInt64, reference(l.x, w, ref_argmax), {0, 0});
            auto [vmin, imin] = l.x.min(dim, keepdim);
            check_tensor(vmin, shape, dt, reference(l.x, w, ref_min), {0, 0});
            check_tensor(imin, shape, kInt64, reference(l.x, w, ref_argmin), {0, 0});
            check_tensor(argmax(l.x, dim, keepdim), shape, kInt64, reference(l.x, w, ref_argmax), {0, 0});
            check_tensor(l.x.argmin(dim, keepdim), shape, kInt64, reference(l.x, w, ref_argmin), {0, 0});
          }
}

TEST_CASE("argmax and argmin without a dim index the flattened tensor") {
  // Values from PyTorch: x = [[1, 5, 5], [7, 7, 2]]; x.argmax() = 3, x.argmin() = 0,
  // x.argmax(0) = [1, 1, 0], x.argmax(keepdim=True).shape = [1, 1].
  Tensor x = tensor<float>({1, 5, 5, 7, 7, 2}, {2, 3});
  check_tensor(argmax(x), {}, kInt64, {3}, {0, 0});
  check_tensor(argmin(x), {}, kInt64, {0}, {0, 0});
  check_tensor(argmax(x, 0), {3}, kInt64, {1, 1, 0}, {0, 0});
  check_tensor(argmax(x, {}, true), {1, 1}, kInt64, {3}, {0, 0});
  check_tensor(argmax(x.t()), {}, kInt64, {1}, {0, 0});  // x.t() flattened: 1 7 5 7 5 2
  check_tensor(argmin(x.t(), {}, true), {1, 1}, kInt64, {0}, {0, 0});
  auto [v, i] = min(x, 1);
  check_tensor(v, {2}, kFloat32, {1, 2}, {0, 0});
  check_tensor(i, {2}, kInt64, {0, 2}, {0, 0});
}

TEST_CASE("ties give the first index on every path") {
  // Rows path, columns path (dim 0 of a wide matrix), and the chunked full reduction.
  Tensor row = tensor<float>({1, 5, 2, 5, 5});
  check_tensor(argmax(row), {}, kInt64, {1}, {0, 0});
  Tensor cols = zeros({40, 300});  // every column ties everywhere: index 0
  cols.select(0, 7).fill_(3.0);
  cols.select(0, 9).fill_(3.0);
  auto [cv, ci] = max(cols, 0);
  check_tensor(ci, {300}, kInt64, std::vector<double>(300, 7), {0, 0});
  check_tensor(argmin(cols, 0), {300}, kInt64, std::vector<double>(300, 0), {0, 0});
  Tensor big = zeros({200000});  // spans several chunks
  check_tensor(argmax(big), {}, kInt64, {0}, {0, 0});
  big.narrow(0, 150000, 1).fill_(1.0);
  big.narrow(0, 90000, 1).fill_(1.0);
  big.narrow(0, 190000, 1).fill_(1.0);
  check_tensor(argmax(big), {}, kInt64, {90000}, {0, 0});
  Tensor neg = full({100000, 3}, -kInf);  // all -inf: the first index, on the columns path with chunks
  auto [nv, ni] = max(neg, 0);
  check_tensor(nv, {3}, kFloat32, {-kInf, -kInf, -kInf}, {0, 0});
  check_tensor(ni, {3}, kInt64, {0, 0, 0}, {0, 0});
  Tensor negcols = full({100, 20}, -kInf);  // columns path, one chunk
  check_tensor(argmax(negcols, 0), {20}, kInt64, std::vector<double>(20, 0), {0, 0});
}

TEST_CASE("NaN propagates through max, min, amax, amin and their indices") {
  // torch.tensor([1., nan, 3, nan]).max(0) -> (nan, 1); .argmax() -> 1; .amin() -> nan.
  Tensor x = tensor<double>({1, kNaN, 3, kNaN});
  auto [v, i] = max(x, 0);
  check_tensor(v, {}, kFloat64, {kNaN}, {0, 0});
  check_tensor(i, {}, kInt64, {1}, {0, 0});
  check_tensor(argmin(x), {}, kInt64, {1}, {0, 0});
  check_tensor(amin(x), {}, kFloat64, {kNaN}, {0, 0});
  check_tensor(x.max(), {}, kFloat64, {kNaN}, {0, 0});
  for (DType dt : {kFloat32, kBFloat16, kFloat16}) {
    CAPTURE(dt);
    // Rows path with a long row (vector lanes), columns path, chunked path.
    Tensor r = randn({5, 1000}).to(dt);
    r.select(0, 2).narrow(0, 637, 1).fill_(kNaN);
    check_tensor(amax(r, {1}), {5}, dt, reference(r, {1}, ref_max), {0, 0});
    check_tensor(argmax(r, 1), {5}, kInt64, reference(r, {1}, ref_argmax), {0, 0});
    CHECK(argmax(r, 1).to_vector<int64_t>()[2] == 637);
    Tensor c = randn({1000, 20}).to(dt);
    c.select(0, 600).narrow(0, 3, 1).fill_(kNaN);
    c.select(0, 800).narrow(0, 3, 1).fill_(kNaN);
    check_tensor(amin(c, {0}), {20}, dt, reference(c, {0}, ref_min), {0, 0});
    check_tensor(argmin(c, 0), {20}, kInt64, reference(c, {0}, ref_argmin), {0, 0});
    check_tensor(argmax(c, 0), {20}, kInt64, reference(c, {0}, ref_argmax), {0, 0});
    Tensor big = randn({300000}).to(dt);
    big.narrow(0, 250000, 1).fill_(kNaN);
    big.narrow(0, 280000, 1).fill_(kNaN);
    check_tensor(big.max(), {}, dt, {kNaN}, {0, 0});
    check_tensor(big.min(), {}, dt, {kNaN}, {0, 0});
    check_tensor(argmax(big), {}, kInt64, {250000}, {0, 0});
  }
}

TEST_CASE("float32 sums are accurate") {
  // 10^7 ones: a float accumulator would stop at 2^24.
  Tensor ones_f = ones({10000000});
  CHECK(sum(ones_f).item<double>() == 1e7);
  CHECK(sum(ones_f.view({10000, 1000}), {0}).to_vector<float>() == std::vector<float>(1000, 10000.0f));
  CHECK(sum(ones_f.view({1000, 10000}), {1}).to_vector<float>() == std::vector<float>(1000, 10000.0f));
  // 10^6 random values against float64.
  manual_seed(6);
  Tensor r = rand({1000000});
  const double want = ref_sum(r.to_vector<double>());
  CHECK(std::abs(sum(r).item<double>() - want) <= 1e-5 * std::abs(want));
  // float64: pairwise summation keeps 10^6 values of mixed sign within a few ulps.
  Tensor d = randn({1000000}, kFloat64);
  long double exact = 0;
  for (double v : d.to_vector<double>()) exact += v;
  CHECK(std::abs(sum(d).item<double>() - static_cast<double>(exact)) <=
        1e-12 * std::max(1.0, std::abs(static_cast<double>(exact))));
}

TEST_CASE("results do not depend on the number of threads") {
  // float64, so that a different grouping of the partial sums would show in the last bits.
  manual_seed(12);
  Tensor x = randn({1000003}, kFloat64);
  Tensor cols = randn({50000, 5}, kFloat64);
  const int saved = get_num_threads();
  set_num_threads(1);
  const double one = sum(x).item<double>();
  const std::vector<double> one_cols = var(cols, {0}).to_vector<double>();
  const int64_t one_arg = argmax(x).item<int64_t>();
  set_num_threads(2);
  const double two = sum(x).item<double>();
  const std::vector<double> two_cols = var(cols, {0}).to_vector<double>();
  const int64_t two_arg = argmax(x).item<int64_t>();
  set_num_threads(saved);
  CHECK(one == two);
  CHECK(one_cols == two_cols);
  CHECK(one_arg == two_arg);
}

TEST_CASE("every engine path agrees with the reference on large shapes") {
  manual_seed(7);
  struct Case {
    std::vector<int64_t> shape;
    std::vector<int64_t> dims;
  };
  const std::vector<Case> cases = {
      {{3, 100000}, {1}},       // few rows: chunked rows, pairwise blocks
      {{100000, 10}, {0}},      // few columns: chunked columns, cascade of 512 rows
      {{1500, 1100}, {0}},      // columns in two blocks (1,024 + 76) per line, chunked
      {{16, 70000}, {0}},       // 69 column blocks: parallel over units, unchunked
      {{500, 20, 30}, {0, 2}},  // rows of 30 with an outer reduced dim
      {{70, 8, 90}, {1}},       // middle dim: columns over the inner 90
      {{400000}, {0}},          // full reduction
  };
  for (const Case& cs : cases)
    for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
      CAPTURE(IntArrayRef(cs.shape));
      CAPTURE(IntArrayRef(cs.dims));
      CAPTURE(dt);
      Tensor x = randn(cs.shape, kFloat64).to(dt);
      auto shape = ref_shape(x.sizes(), cs.dims, false);
      check_tensor(sum(x, cs.dims), shape, dt, reference(x, cs.dims, ref_sum), tol_for(dt));
      check_tensor(amax(x, cs.dims), shape, dt, reference(x, cs.dims, ref_max), {0, 0});
      check_tensor(amin(x, cs.dims), shape, dt, reference(x, cs.dims, ref_min), {0, 0});
      check_tensor(var(x, cs.dims), shape, dt, reference(x, cs.dims, ref_var(1)), tol_for(dt));
      if (dt == kFloat32 || dt == kFloat64) {  // 16-bit products of 10^5 values leave the range
        Tensor y = uniform_(empty(cs.shape, dt), 0.999, 1.001);
        check_tensor(prod(y, cs.dims), shape, dt, reference(y, cs.dims, ref_prod), tol_for(dt));
      }
      if (cs.dims.size() == 1) {
        auto [v, i] = max(x, cs.dims[0]);
        check_tensor(v, shape, dt, reference(x, cs.dims, ref_max), {0, 0});
        check_tensor(i, shape, kInt64, reference(x, cs.dims, ref_argmax), {0, 0});
        check_tensor(argmin(x, cs.dims[0]), shape, kInt64, reference(x, cs.dims, ref_argmin), {0, 0});
      }
    }
  // Integer sums on the chunked and columns paths (exact).
  Tensor ints = randint(-1000, 1000, {300000, 4}, kInt32);
  check_tensor(sum(ints, {0}), {4}, kInt64, reference(ints, {0}, ref_sum), {0, 0});
  check_tensor(sum(ints), {}, kInt64, reference(ints, {}, ref_sum), {0, 0});
  check_tensor(amax(ints.t(), {1}), {4}, kInt32, reference(ints.t(), {1}, ref_max), {0, 0});
}

TEST_CASE("mean matches a reference and keeps 16-bit dtypes") {
  manual_seed(8);
  sweep(
      kFloatTypes, [](const Tensor& x, IntArrayRef d, bool k) { return x.mean(d, k); },
      [](const std::vector<double>& g) { return ref_sum(g) / static_cast<double>(g.size()); }, same);
  check_tensor(mean(zeros({0})), {}, kFloat32, {kNaN}, {0, 0});  // torch.zeros(0).mean() -> nan
}

TEST_CASE("std is the square root of var") {
  manual_seed(9);
  sweep(
      kFloatTypes, [](const Tensor& x, IntArrayRef d, bool k) { return x.std(d, 1, k); },
      [](const std::vector<double>& g) { return std::sqrt(ref_var(1)(g)); }, same);
  check_tensor(loom::std(tensor<double>({2, 4, 4, 4, 5, 5, 7, 9}), {}, 0), {}, kFloat64, {2.0},
               tol_for(kFloat64));
}

TEST_CASE("logsumexp is stable and handles infinite rows as PyTorch") {
  manual_seed(10);
  // 16-bit: x - max, exp, sum, log and + max each round to the dtype (as in PyTorch), so the
  // error is a few roundings of values near 1: rtol 1.6e-2, atol 3e-2.
  sweep(
      {kFloat32, kFloat64}, [](const Tensor& x, IntArrayRef d, bool k) { return logsumexp(x, d, k); },
      ref_logsumexp, same);
  sweep(
      {kBFloat16, kFloat16}, [](const Tensor& x, IntArrayRef d, bool k) { return x.logsumexp(d, k); },
      ref_logsumexp, same, 1.0, Tol{1.6e-2, 3e-2});
  // Large values do not overflow: log(e^1000 + e^1000) = 1000 + log 2.
  check_tensor(logsumexp(tensor<float>({1000, 1000}), {0}), {}, kFloat32, {1000 + std::log(2.0)},
               tol_for(kFloat32));
  // PyTorch: logsumexp([-inf]*3) = -inf; logsumexp([inf, 1]) = inf; logsumexp of [0, 3] over 0 = [-inf]*3.
  Tensor rows = tensor<float>({-kInfF, -kInfF, -kInfF, kInfF, 1, 2, 0.5f, 1.5f, -kInfF}, {3, 3});
  check_tensor(logsumexp(rows, {1}), {3}, kFloat32, {-kInf, kInf, ref_logsumexp({0.5, 1.5, -kInf})},
               tol_for(kFloat32));
  check_tensor(logsumexp(zeros({0, 3}), {0}), {3}, kFloat32, {-kInf, -kInf, -kInf}, {0, 0});
}

TEST_CASE("norm for p = 2, 1, 3, 0.5, 0, inf and -inf") {
  manual_seed(11);
  for (double p : {2.0, 1.0, 3.0, 0.5, 0.0, kInf, -kInf}) {
    CAPTURE(p);
    sweep(
        kFloatTypes, [p](const Tensor& x, IntArrayRef d, bool k) { return norm(x, p, d, k); }, ref_norm(p),
        same,
        p == 3.0 || p == 0.5 ? 4.0 : 1.0);  // pow's float rounding
  }
  // float16 squares above 256 overflow; norm computes in float32 (torch gives 300).
  check_tensor(tensor<float>({300, 0}).to(kFloat16).norm(), {}, kFloat16, {300}, tol_for(kFloat16));
  check_tensor(norm(tensor<float>({3, 0, -4})), {}, kFloat32, {5}, tol_for(kFloat32));
}

TEST_CASE("reductions of 0-dim and empty tensors") {
  Tensor s = scalar_tensor(3.5);
  check_tensor(sum(s), {}, kFloat32, {3.5}, {0, 0});
  check_tensor(sum(s, {0}, true), {}, kFloat32, {3.5}, {0, 0});
  check_tensor(amax(s, {-1}), {}, kFloat32, {3.5}, {0, 0});
  check_tensor(prod(s), {}, kFloat32, {3.5}, {0, 0});
  auto [v, i] = max(s, 0);
  check_tensor(v, {}, kFloat32, {3.5}, {0, 0});
  check_tensor(i, {}, kInt64, {0}, {0, 0});
  check_tensor(argmax(s), {}, kInt64, {0}, {0, 0});
  // torch: zeros(0).sum() = 0, .prod() = 1; zeros(0, 3).amax(1) has shape [0].
  check_tensor(sum(zeros({0})), {}, kFloat32, {0}, {0, 0});
  check_tensor(prod(zeros({0}, kInt32)), {}, kInt64, {1}, {0, 0});
  check_tensor(sum(zeros({0, 3}), {0}), {3}, kFloat32, {0, 0, 0}, {0, 0});
  check_tensor(amax(zeros({0, 3}), {1}), {0}, kFloat32, {}, {0, 0});
  auto [ev, ei] = max(zeros({0, 3}), 1, true);
  check_tensor(ei, {0, 1}, kInt64, {}, {0, 0});
}

TEST_CASE("reductions reject bad dims, dtypes and empty inputs with messages naming the op") {
  Tensor x = zeros({2, 3, 4});
  CHECK_THROWS_WITH_AS(sum(x, {3}), doctest::Contains("sum: dim 3 out of range"), Error);
  CHECK_THROWS_WITH_AS(x.amax({-4}), doctest::Contains("amax: dim -4"), Error);
  CHECK_THROWS_WITH_AS(prod(x, {0, -3}), doctest::Contains("prod: dim 0 appears more than once"), Error);
  CHECK_THROWS_WITH_AS(var(x, {1, 1}), doctest::Contains("var: dim 1 appears more than once"), Error);
  CHECK_THROWS_WITH_AS(max(x, 5), doctest::Contains("max: dim 5"), Error);
  CHECK_THROWS_WITH_AS(argmin(x, -4), doctest::Contains("argmin: dim -4"), Error);
  Tensor ints = zeros({2, 3}, kInt64);
  CHECK_THROWS_WITH_AS(mean(ints), doctest::Contains("mean: expected a floating-point tensor, got int64"),
                       Error);
  CHECK_THROWS_WITH_AS(var(ints), doctest::Contains("var: expected a floating-point"), Error);
  CHECK_THROWS_WITH_AS(ints.std(), doctest::Contains("std: expected a floating-point"), Error);
  CHECK_THROWS_WITH_AS(logsumexp(ints, {0}), doctest::Contains("logsumexp: expected a floating-point"),
                       Error);
  CHECK_THROWS_WITH_AS(norm(ints), doctest::Contains("norm: expected a floating-point"), Error);
  Tensor empty_t = zeros({0, 3});
  CHECK_THROWS_WITH_AS(max(empty_t), doctest::Contains("max: expected a non-empty tensor"), Error);
  CHECK_THROWS_WITH_AS(empty_t.min(), doctest::Contains("min: expected a non-empty tensor"), Error);
  CHECK_THROWS_WITH_AS(amax(empty_t, {0}),
                       doctest::Contains("amax: expected a non-empty reduction, but dim 0 has size 0"),
                       Error);
  CHECK_THROWS_WITH_AS(max(empty_t, 0), doctest::Contains("max: expected a non-empty reduction, but dim 0"),
                       Error);
  CHECK_THROWS_WITH_AS(argmax(empty_t), doctest::Contains("argmax: expected a non-empty tensor"), Error);
  CHECK_THROWS_WITH_AS(norm(empty_t, kInf), doctest::Contains("norm: expected a non-empty reduction"), Error);
  CHECK_THROWS_WITH_AS(sum(Tensor()), doctest::Contains("sum: input is an undefined tensor"), Error);
}
