/*
 * cumsum, sort and the ops composed of sort (argsort, topk, kthvalue, median) against
 * references computed here: a running sum in float64 and a stable sort of (value, position)
 * pairs written with std::stable_sort and its own NaN rule, line by line in row-major order.
 * Every dim, both directions, every dtype, non-contiguous, expanded, long, 0-dim and empty
 * inputs; NaN, infinities and ties; values that PyTorch 1.13 gave (noted where used); errors.
 */
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "ops/ops.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

constexpr Tol kExact{0, 0};

std::vector<double> values_of(const Tensor& t) {
  return t.to_vector<double>();
}

struct Lines {
  int64_t outer = 1, size = 1, inner = 1;
  int64_t at(int64_t line, int64_t i) const {
    return (line / inner) * size * inner + line % inner + i * inner;
  }
  int64_t count() const { return outer * inner; }
};

Lines lines_of(IntArrayRef shape, int64_t d) {
  Lines l;
  for (int64_t k = 0; k < static_cast<int64_t>(shape.size()); ++k) {
    if (k < d) l.outer *= shape[k];
    if (k == d) l.size = shape[k];
    if (k > d) l.inner *= shape[k];
  }
  return l;
}

struct Sorted {
  std::vector<double> values, indices;
};

// Each line along d sorted stably; NaN after +inf ascending, before it descending.
Sorted reference_sort(const std::vector<double>& v, IntArrayRef shape, int64_t d, bool descending) {
  const Lines l = lines_of(shape, d);
  Sorted s{v, std::vector<double>(v.size())};
  auto rank = [](double x) { return std::isnan(x) ? 1 : 0; };
  for (int64_t line = 0; line < l.count(); ++line) {
    std::vector<int64_t> order(static_cast<size_t>(l.size));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const double x = v[static_cast<size_t>(l.at(line, a))], y = v[static_cast<size_t>(l.at(line, b))];
      if (rank(x) != rank(y)) return descending ? rank(x) > rank(y) : rank(x) < rank(y);
      return rank(x) == 0 && (descending ? x > y : x < y);
    });
    for (int64_t i = 0; i < l.size; ++i) {
      const auto at = static_cast<size_t>(l.at(line, i));
      s.values[at] = v[static_cast<size_t>(l.at(line, order[static_cast<size_t>(i)]))];
      s.indices[at] = static_cast<double>(order[static_cast<size_t>(i)]);
    }
  }
  return s;
}

void check_sort(const Tensor& x, int64_t dim, bool descending) {
  CAPTURE(x.sizes());
  CAPTURE(x.dtype());
  CAPTURE(dim);
  CAPTURE(descending);
  auto [values, indices] = sort(x, dim, descending);
  const int64_t d = dim < 0 ? dim + std::max<int64_t>(x.dim(), 1) : dim;
  const Sorted want = reference_sort(values_of(x), x.sizes(), d, descending);
  REQUIRE(values.sizes() == x.sizes());
  CHECK(values.dtype() == x.dtype());
  CHECK(indices.dtype() == kInt64);
  check_close(values, want.values, kExact);
  check_close(indices, want.indices, kExact);
}

// Values with ties (rounded to halves) in [-4, 4].
std::vector<double> tied_values(int64_t n, uint64_t seed) {
  std::vector<double> v = random_values(n, seed, 2.0);
  for (double& x : v) x = std::round(x * 2) / 2;
  return v;
}

std::vector<double> running_sums(const std::vector<double>& v, IntArrayRef shape, int64_t d) {
  const Lines l = lines_of(shape, d);
  std::vector<double> out(v.size());
  for (int64_t line = 0; line < l.count(); ++line) {
    double acc = 0;
    for (int64_t i = 0; i < l.size; ++i) {
      acc += v[static_cast<size_t>(l.at(line, i))];
      out[static_cast<size_t>(l.at(line, i))] = acc;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("sort matches a stable reference along every dim, in both directions, for every dtype") {
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kUInt8, kInt32, kInt64, kBool}) {
    for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{9}, {3, 5}, {2, 3, 4}}) {
      std::vector<double> v = tied_values(shape_numel(shape), 7);
      if (dtype == kUInt8 || dtype == kBool)
        for (double& x : v) x = std::abs(x) * 2;
      const Tensor x = make(v, shape, dtype);
      for (int64_t dim = -static_cast<int64_t>(shape.size()); dim < static_cast<int64_t>(shape.size()); ++dim)
        for (bool descending : {false, true}) check_sort(x, dim, descending);
    }
  }
}

TEST_CASE("sort orders NaN and infinities as PyTorch, ties stably") {
  // torch.sort(x, stable=True) and with descending=True, PyTorch 1.13.
  const Tensor x = make({3, kNaN, -kInf, 1, kNaN, kInf, 1}, kFloat32);
  auto [up, up_i] = sort(x);
  check_close(up, {-kInf, 1, 1, 3, kInf, kNaN, kNaN}, kExact);
  check_close(up_i, {2, 3, 6, 0, 5, 1, 4}, kExact);
  auto [down, down_i] = x.sort(0, true);
  check_close(down, {kNaN, kNaN, kInf, 3, 1, 1, -kInf}, kExact);
  check_close(down_i, {1, 4, 5, 0, 3, 6, 2}, kExact);
  // -0.0 and 0.0 are equal: they keep their order.
  auto [zeros_sorted, zero_i] = sort(make({0.0, -0.0, 0.0, -1.0}, kFloat64));
  check_close(zero_i, {3, 0, 1, 2}, kExact);
  CHECK(std::signbit(zeros_sorted.to_vector<double>()[2]));
  for (DType dtype : {kFloat16, kBFloat16, kFloat64})
    for (bool descending : {false, true}) check_sort(x.to(dtype), 0, descending);
}

TEST_CASE("sort of non-contiguous, expanded, long, 0-dim and empty inputs") {
  const Tensor base = make(tied_values(60, 11), {5, 12}, kFloat32);
  check_sort(base.t(), 0, false);  // transposed
  check_sort(base.t(), 1, true);
  check_sort(slice(base, 1, 1, 12, 3), -1, false);                           // step-sliced
  check_sort(base.select(1, 2).unsqueeze(1).expand({5, 4}), 1, true);        // stride 0 along the dim
  check_sort(make(random_values(5000, 12), {2, 2500}, kFloat32), 1, false);  // long lines
  check_sort(make(tied_values(3000, 13), {3000, 1}, kBFloat16), 0, true);

  auto [v, i] = sort(scalar_tensor(2.5));
  CHECK(v.dim() == 0);
  CHECK(v.item<double>() == 2.5);
  CHECK(i.item<int64_t>() == 0);
  for (int64_t dim : {0, 1}) {
    auto [ev, ei] = sort(zeros({3, 0}), dim);
    CHECK(ev.sizes() == IntArrayRef{3, 0});
    CHECK(ei.dtype() == kInt64);
  }
}

TEST_CASE("argsort, topk and kthvalue pick from the stable sort") {
  const Tensor x = make({1, 3, 2, 3, 0, 3}, kFloat32);
  check_close(argsort(x), {4, 0, 2, 1, 3, 5}, kExact);
  check_close(x.argsort(0, true), {1, 3, 5, 2, 0, 4}, kExact);

  // PyTorch 1.13 gives values [3, 3, 3] with indices [3, 5, 1]: which of tied elements topk
  // returns is unspecified there; here the lower index comes first.
  auto [top, top_i] = topk(x, 3);
  check_close(top, {3, 3, 3}, kExact);
  check_close(top_i, {1, 3, 5}, kExact);
  auto [low, low_i] = x.topk(2, 0, /*largest=*/false);
  check_close(low, {0, 1}, kExact);  // PyTorch 1.13: values [0, 1], indices [4, 0]
  check_close(low_i, {4, 0}, kExact);
  CHECK(std::get<0>(topk(x, 0)).sizes() == IntArrayRef{0});
  CHECK(std::get<0>(topk(x, 6)).sizes() == IntArrayRef{6});

  const Tensor m = make(tied_values(24, 21), {2, 3, 4}, kFloat64);
  const Sorted down = reference_sort(values_of(m), m.sizes(), 1, true);
  auto [t2, t2_i] = topk(m, 2, 1);
  CHECK(t2.sizes() == IntArrayRef{2, 2, 4});
  CHECK(t2.is_contiguous());
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t k = 0; k < 2; ++k)
      for (int64_t c = 0; c < 4; ++c) {
        const auto at = static_cast<size_t>(a * 12 + k * 4 + c);
        CHECK(t2.to_vector<double>()[static_cast<size_t>(a * 8 + k * 4 + c)] == down.values[at]);
        CHECK(t2_i.to_vector<double>()[static_cast<size_t>(a * 8 + k * 4 + c)] == down.indices[at]);
      }

  // kthvalue: the k-th smallest, NaN the largest (PyTorch 1.13: kthvalue([4, 1, 3, 2, nan], 5)
  // is (nan, 4)).
  auto [k5, k5_i] = kthvalue(make({4, 1, 3, 2, kNaN}, kFloat32), 5);
  CHECK(std::isnan(k5.item<double>()));
  CHECK(k5_i.item<int64_t>() == 4);
  auto [k2, k2_i] = m.kthvalue(2, -1, /*keepdim=*/true);
  CHECK(k2.sizes() == IntArrayRef{2, 3, 1});
  const Sorted up = reference_sort(values_of(m), m.sizes(), 2, false);
  for (int64_t r = 0; r < 6; ++r) {
    CHECK(k2.to_vector<double>()[static_cast<size_t>(r)] == up.values[static_cast<size_t>(r * 4 + 1)]);
    CHECK(k2_i.to_vector<double>()[static_cast<size_t>(r)] == up.indices[static_cast<size_t>(r * 4 + 1)]);
  }
}

TEST_CASE("median: the lower median, NaN where a line holds one, as PyTorch") {
  // PyTorch 1.13: median([[1, nan, 3, nan], [4, 1, 3, 2]], 1) = ([nan, 2], [1, 3]).
  auto [m, m_i] = median(make({1, kNaN, 3, kNaN, 4, 1, 3, 2}, {2, 4}, kFloat32), 1);
  check_close(m, {kNaN, 2}, kExact);
  check_close(m_i, {1, 3}, kExact);
  CHECK(median(make({4, 1, 3, 2}, kFloat32)).item<double>() == 2);
  CHECK(median(make({4, 1, 3, 2, 9}, {5}, kInt32)).item<int64_t>() == 3);
  CHECK(std::isnan(median(make({4, kNaN, 3}, kFloat64)).item<double>()));
  auto [mk, mk_i] = make({5, 1, 4, 2, 8, 7}, {3, 2}, kFloat64).median(0, /*keepdim=*/true);
  CHECK(mk.sizes() == IntArrayRef{1, 2});
  check_close(mk, {5, 2}, kExact);  // columns [5, 4, 8] and [1, 2, 7]
  check_close(mk_i, {0, 1}, kExact);
  CHECK(median(scalar_tensor(1.5)).item<double>() == 1.5);
}

TEST_CASE("cumsum matches a float64 running sum along every dim") {
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    const Tensor x = make(random_values(2 * 3 * 70, 31), {2, 3, 70}, dtype);
    for (int64_t dim = -3; dim < 3; ++dim) {
      CAPTURE(dtype);
      CAPTURE(dim);
      const Tensor y = cumsum(x, dim);
      CHECK(y.dtype() == dtype);
      // One rounding of the exact sum to the dtype (the accumulator is wider than the result).
      const std::vector<double> want = running_sums(values_of(x), x.sizes(), dim < 0 ? dim + 3 : dim);
      check_close(y, make(want, x.sizes(), dtype).to_vector<double>(),
                  dtype == kFloat64 ? tol_for(dtype) : kExact);
    }
  }
  const Tensor base = make(random_values(40, 32), {5, 8}, kFloat32);
  check_close(cumsum(base.t(), 1), running_sums(values_of(base.t().contiguous()), {8, 5}, 1),
              tol_for(kFloat32));
  const Tensor expanded = base.select(0, 1).unsqueeze(0).expand({3, 8});
  check_close(expanded.cumsum(0), running_sums(values_of(expanded.contiguous()), {3, 8}, 0),
              tol_for(kFloat32));
  CHECK(cumsum(scalar_tensor(2.0), 0).item<double>() == 2.0);
  CHECK(cumsum(zeros({0, 3}), 0).sizes() == IntArrayRef{0, 3});
}

TEST_CASE("cumsum dtypes follow PyTorch: integers and bool in int64, an explicit dtype casts first") {
  // PyTorch 1.13: cumsum([True, False, True]) = [1, 1, 2] (int64).
  const Tensor b = cumsum(make({1, 0, 1}, kBool), 0);
  CHECK(b.dtype() == kInt64);
  check_close(b, {1, 1, 2}, kExact);
  // int8 sums in int64 unless told otherwise; with dtype=int8 it wraps: [100, -56].
  const Tensor i8 = make({100, 100}, kInt8);
  check_close(cumsum(i8, 0), {100, 200}, kExact);
  const Tensor wrapped = cumsum(i8, 0, kInt8);
  CHECK(wrapped.dtype() == kInt8);
  check_close(wrapped, {100, -56}, kExact);
  // int64 overflow wraps too: [2^62, -2^63, -2^62].
  const Tensor big = full({3}, int64_t{1} << 62, TensorOptions().dtype(kInt64));
  const std::vector<int64_t> sums = cumsum(big, 0).to_vector<int64_t>();
  CHECK(sums[1] == std::numeric_limits<int64_t>::min());
  CHECK(sums[2] == -(int64_t{1} << 62));
  const Tensor as_double = cumsum(make({1, 2, 3}, kInt32), 0, kFloat64);
  CHECK(as_double.dtype() == kFloat64);
  check_close(as_double, {1, 3, 6}, kExact);
}

TEST_CASE("the sort family's errors name the op and the problem") {
  const Tensor x = zeros({2, 3});
  CHECK(error_of([&] { sort(x, 2); }).find("sort: dim 2 out of range") != std::string::npos);
  CHECK(error_of([&] { cumsum(x, -3); }).find("cumsum: dim -3 out of range") != std::string::npos);
  CHECK(error_of([&] { cumsum(x, 0, kBool); }).find("cumsum: a bool result") != std::string::npos);
  CHECK(error_of([&] { topk(x, 4); }).find("topk: k (4) out of range [0, 3]") != std::string::npos);
  CHECK(error_of([&] { topk(x, -1, 0); }).find("topk: k (-1) out of range [0, 2]") != std::string::npos);
  CHECK(error_of([&] { kthvalue(x, 0); }).find("kthvalue: k (0) out of range [1, 3]") != std::string::npos);
  CHECK(error_of([&] {
          median(zeros({2, 0}), 1);
        }).find("median: expected a non-empty dim") != std::string::npos);
  CHECK(error_of([&] { median(zeros({0})); }).find("median: expected a non-empty tensor") !=
        std::string::npos);
  CHECK(error_of([&] { argsort(Tensor()); }).find("argsort: input is an undefined tensor") !=
        std::string::npos);
}

// ---- multinomial ------------------------------------------------------------------------------

namespace {

// How often each category appears in `samples` (any shape), as fractions.
std::vector<double> frequencies(const Tensor& samples, int64_t categories) {
  std::vector<double> f(static_cast<size_t>(categories));
  const std::vector<int64_t> s = samples.to_vector<int64_t>();
  for (int64_t c : s) f[static_cast<size_t>(c)] += 1.0 / static_cast<double>(s.size());
  return f;
}

// |f - p| within 5 standard deviations of a frequency over n draws (the seed is fixed, so the
// check is deterministic; 5 sigma keeps it meaningful for any seed).
void check_frequencies(const std::vector<double>& f, const std::vector<double>& p, int64_t n) {
  REQUIRE(f.size() == p.size());
  for (size_t c = 0; c < p.size(); ++c) {
    CAPTURE(c);
    CHECK(std::abs(f[c] - p[c]) <= 5 * std::sqrt(p[c] * (1 - p[c]) / static_cast<double>(n)) + 1e-12);
  }
}

}  // namespace

TEST_CASE("multinomial with replacement draws each category in proportion to its weight") {
  Generator gen(123);
  // Unnormalised weights; the zero-weight category is never drawn.
  const Tensor w = make({1, 2, 0, 7}, kFloat32);
  const Tensor s = multinomial(w, 20000, /*replacement=*/true, &gen);
  CHECK(s.sizes() == IntArrayRef{20000});
  CHECK(s.dtype() == kInt64);
  check_frequencies(frequencies(s, 4), {0.1, 0.2, 0, 0.7}, 20000);
  // Rows are independent distributions.
  const Tensor rows = make({0, 0, 5, 0, 1, 0, 3, 3}, {2, 4}, kFloat64);
  const Tensor r = multinomial(rows, 4000, true, &gen);
  CHECK(r.sizes() == IntArrayRef{2, 4000});
  check_frequencies(frequencies(r.select(0, 0), 4), {0, 0, 1, 0}, 4000);
  check_frequencies(frequencies(r.select(0, 1), 4), {1.0 / 7, 0, 3.0 / 7, 3.0 / 7}, 4000);
  // 5000 draws over 4096 categories are made in two chunks of keys: uniform all the same (mean
  // within 5 standard deviations, 4096 / sqrt(12 * 5000) each, of the middle).
  const std::vector<int64_t> many = multinomial(ones({4096}), 5000, true, &gen).to_vector<int64_t>();
  double mean = 0;
  for (int64_t c : many) {
    REQUIRE((c >= 0 && c < 4096));
    mean += static_cast<double>(c) / 5000.0;
  }
  CHECK(std::abs(mean - 2047.5) <= 5 * 4096 / std::sqrt(12.0 * 5000));
  // The same generator state gives the same samples.
  Generator a(9), b(9);
  CHECK(multinomial(w.to(kBFloat16), 50, true, &a).to_vector<int64_t>() ==
        multinomial(w.to(kBFloat16), 50, true, &b).to_vector<int64_t>());
}

TEST_CASE("multinomial without replacement draws distinct categories in the order of successive draws") {
  Generator gen(321);
  // 6000 rows of weights [1, 0, 2, 3, 0], 3 draws each: the first is 3 with probability 1/2;
  // the pair (first, second) = (3, 2) has probability 3/6 * 2/3 = 1/3; 1 and 4 never appear.
  const Tensor w = make({1, 0, 2, 3, 0}, {1, 5}, kFloat32).expand({6000, 5});
  const Tensor s = multinomial(w, 3, false, &gen);
  CHECK(s.sizes() == IntArrayRef{6000, 3});
  const std::vector<int64_t> v = s.to_vector<int64_t>();
  int64_t first_is_3 = 0, pair_32 = 0;
  for (size_t r = 0; r < 6000; ++r) {
    const int64_t a = v[r * 3], b = v[r * 3 + 1], c = v[r * 3 + 2];
    CHECK((a != b && b != c && a != c));
    CHECK((a != 1 && b != 1 && c != 1 && a != 4 && b != 4 && c != 4));
    first_is_3 += a == 3;
    pair_32 += a == 3 && b == 2;
  }
  check_frequencies({first_is_3 / 6000.0}, {0.5}, 6000);
  check_frequencies({pair_32 / 6000.0}, {1.0 / 3}, 6000);
  // Drawing every category: a permutation.
  std::vector<int64_t> all = multinomial(make({1, 1, 1, 1}, kFloat64), 4, false, &gen).to_vector<int64_t>();
  std::sort(all.begin(), all.end());
  CHECK(all == std::vector<int64_t>{0, 1, 2, 3});
}

TEST_CASE("multinomial refuses weights that are not a distribution, naming the problem") {
  const Tensor ok = make({1, 2}, kFloat32);
  CHECK(error_of([&] {
          multinomial(make({1, -1}, kFloat32), 1);
        }).find("weights must be non-negative") != std::string::npos);
  CHECK(error_of([&] {
          multinomial(make({1, kNaN}, kFloat32), 1);
        }).find("weights must be finite") != std::string::npos);
  CHECK(error_of([&] {
          multinomial(make({1, kInf}, kFloat64), 1);
        }).find("weights must be finite") != std::string::npos);
  CHECK(error_of([&] {
          multinomial(make({1, 2, 0, 0}, {2, 2}, kFloat32), 1);
        }).find("sums to 0") != std::string::npos);
  CHECK(error_of([&] { multinomial(ok, 3); }).find("cannot draw 3 samples without replacement from 2") !=
        std::string::npos);
  CHECK(error_of([&] {
          multinomial(make({1, 0, 0}, kFloat32), 2);
        }).find("with 1 non-zero weights") != std::string::npos);
  CHECK(error_of([&] { multinomial(ok, 0, true); }).find("a positive number of samples") !=
        std::string::npos);
  CHECK(error_of([&] { multinomial(zeros({1, 1, 2}), 1); }).find("shape [C] or [B, C]") != std::string::npos);
  CHECK(error_of([&] { multinomial(make({1, 2}, kInt64), 1); }).find("floating-point") != std::string::npos);
}
