/* Factories, copies and casts, item(), and the counter-based RNG. */
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "ops/ops.h"

using namespace loom;

TEST_CASE("zeros, ones, full, eye, arange, linspace") {
  CHECK(zeros({2, 2}).to_vector<float>() == std::vector<float>{0, 0, 0, 0});
  CHECK(ones({3}, kInt32).to_vector<int32_t>() == std::vector<int32_t>{1, 1, 1});
  CHECK(full({2}, 2.5, kFloat64).to_vector<double>() == std::vector<double>{2.5, 2.5});
  CHECK(eye(2, 3).to_vector<float>() == std::vector<float>{1, 0, 0, 0, 1, 0});
  CHECK(eye(3).sizes() == IntArrayRef{3, 3});
  Tensor a = arange(5);
  CHECK(a.dtype() == kInt64);
  CHECK(a.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  Tensor b = arange(0.0, 1.0, 0.25);
  CHECK(b.dtype() == kFloat32);
  CHECK(b.to_vector<float>() == std::vector<float>{0, 0.25f, 0.5f, 0.75f});
  CHECK(arange(10, 0, -3).to_vector<int64_t>() == std::vector<int64_t>{10, 7, 4, 1});
  CHECK(linspace(0, 1, 5).to_vector<float>() == std::vector<float>{0, 0.25f, 0.5f, 0.75f, 1});
  CHECK_THROWS_WITH_AS(arange(0, 5, 0), doctest::Contains("arange: step must be nonzero"), Error);
  CHECK_THROWS_WITH_AS(arange(5, 0, 1), doctest::Contains("inconsistent"), Error);
  CHECK_THROWS_WITH_AS(full({2}, 2.5, kInt32), doctest::Contains("fill_"), Error);
}

TEST_CASE("tensor() from values") {
  Tensor t = tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(t.sizes() == IntArrayRef{2, 3});
  CHECK(t[1][0].item<float>() == 4.0f);
  CHECK_THROWS_WITH_AS(tensor<float>({1, 2, 3}, {2, 2}), doctest::Contains("do not fill shape [2, 2]"), Error);
}

TEST_CASE("casts round to nearest even and convert every pair of dtypes") {
  Tensor x = tensor<double>({1.0, -2.5, 0.1, 65519.0, 1e6, 3.999});
  CHECK(x.to(kFloat16).to_vector<double>() ==
        std::vector<double>{1.0, -2.5, 0.0999755859375, 65504.0, INFINITY, 3.998046875});  // torch 1.13
  CHECK(x.to(kBFloat16).to_vector<double>() ==
        std::vector<double>{1.0, -2.5, 0.10009765625, 65536.0, 999424.0, 4.0});
  CHECK(x.to(kInt32).to_vector<int32_t>() == std::vector<int32_t>{1, -2, 0, 65519, 1000000, 3});
  CHECK(tensor<float>({0.0f, -0.5f, 2.0f}).to(kBool).to_vector<bool>() == std::vector<bool>{false, true, true});
  // Every dtype pair through a non-contiguous source.
  Tensor base = tensor<int64_t>({0, 1, 2, 3, 4, 5}, {2, 3}).t();
  for (DType from : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kUInt8, kInt32, kInt64}) {
    for (DType to : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kUInt8, kInt32, kInt64}) {
      CAPTURE(from);
      CAPTURE(to);
      Tensor y = base.to(from).to(to);
      CHECK(y.dtype() == to);
      CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{0, 3, 1, 4, 2, 5});
    }
  }
}

TEST_CASE("copy_ broadcasts and converts; clone is independent") {
  Tensor dst = zeros({2, 3}, kFloat64);
  dst.copy_(tensor<int32_t>({7, 8, 9}));
  CHECK(dst.to_vector<double>() == std::vector<double>{7, 8, 9, 7, 8, 9});
  Tensor c = dst.clone();
  c.fill_(0);
  CHECK(dst[0][0].item<double>() == 7.0);
  CHECK_THROWS_WITH_AS(dst.copy_(zeros({4})), doctest::Contains("expand"), Error);
}

TEST_CASE("item") {
  CHECK(full({1, 1}, 3, kInt64).item<int64_t>() == 3);
  CHECK(full({}, 1.5, kBFloat16).item<float>() == 1.5f);
  CHECK(full({}, true, kBool).item().is_bool());
  CHECK_THROWS_WITH_AS(zeros({2}).item(), doctest::Contains("item: expected a tensor with one element"), Error);
}

TEST_CASE("rand, randn, randint: reproducible for a seed and independent of the thread count") {
  manual_seed(42);
  Tensor a = rand({100000});
  manual_seed(42);
  int threads = get_num_threads();
  set_num_threads(1);
  Tensor b = rand({100000});
  set_num_threads(threads);
  CHECK(equal(a, b));
  Tensor c = rand({100000});
  CHECK_FALSE(equal(a, c));  // the generator advanced

  std::vector<float> u = a.to_vector<float>();
  double mean = 0, lo = 1, hi = 0;
  for (float v : u) {
    mean += v;
    lo = std::min<double>(lo, v);
    hi = std::max<double>(hi, v);
  }
  mean /= u.size();
  CHECK(mean == doctest::Approx(0.5).epsilon(0.01));
  CHECK(lo >= 0.0);
  CHECK(hi < 1.0);

  Generator gen(7);
  std::vector<double> n = randn({200000}, kFloat64, &gen).to_vector<double>();
  double m = 0, m2 = 0;
  for (double v : n) m += v;
  m /= n.size();
  for (double v : n) m2 += (v - m) * (v - m);
  m2 /= n.size();
  CHECK(std::abs(m) < 0.01);
  CHECK(m2 == doctest::Approx(1.0).epsilon(0.02));

  std::vector<int64_t> r = randint(-3, 4, {70000}).to_vector<int64_t>();
  std::vector<int> counts(7, 0);
  for (int64_t v : r) {
    REQUIRE(v >= -3);
    REQUIRE(v < 4);
    ++counts[v + 3];
  }
  for (int k : counts) CHECK(k == doctest::Approx(10000).epsilon(0.05));
  CHECK_THROWS_WITH_AS(randint(3, 3, {2}), doctest::Contains("randint: expected low < high"), Error);
  CHECK_THROWS_WITH_AS(rand({2}, kInt32), doctest::Contains("uniform_: expected a floating-point tensor"), Error);
}

TEST_CASE("bernoulli_ on a non-contiguous tensor") {
  Generator gen(1);
  Tensor x = zeros({400, 500}).t();
  bernoulli_(x, 0.25, &gen);
  double frac = x.sum().item<double>() / x.numel();
  CHECK(frac == doctest::Approx(0.25).epsilon(0.02));
}
