/*
 * clip_grad_norm_ and clip_grad_value_ against torch.nn.utils (PyTorch 1.13): the norms of
 * several orders and the clipped gradients, non-finite norms, parameters without gradients,
 * the per-op path for non-contiguous gradients, version counters, and thread-count
 * independence of the norm on large gradients.
 *
 * Expected values printed by this Python (torch 1.13):
 *
 *   import torch, math
 *   from torch.nn.utils import clip_grad_norm_, clip_grad_value_
 *   def params(dtype=torch.float32):
 *       p0 = torch.zeros(2, 3, dtype=dtype, requires_grad=True); p1 = torch.zeros(4, dtype=dtype,
 * requires_grad=True) p2 = torch.zeros(3, dtype=dtype, requires_grad=True)  # never gets a gradient p0.grad =
 * torch.tensor([math.sin(0.7*i+0.1) for i in range(6)], dtype=dtype).reshape(2, 3) p1.grad =
 * torch.tensor([math.cos(1.1*i) for i in range(4)], dtype=dtype) return [p0, p1, p2] ps = params(); total =
 * clip_grad_norm_(ps, max_norm, norm_type)   # per test print(total.item(), ps[0].grad.flatten().tolist() +
 * ps[1].grad.tolist())
 *
 * Loom sums in float64 where torch 1.13 reduces float32 gradients in float32, and torch
 * scales by a float32 coefficient: assert_close's float32 tolerances cover both.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "autograd/autograd.h"
#include "nn/optim/clip_grad.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;
using loom::nn::clip_grad_norm_;
using loom::nn::clip_grad_value_;

namespace {

std::vector<Tensor> params(DType dtype = kFloat32) {
  std::vector<double> g0, g1;
  for (int i = 0; i < 6; ++i) g0.push_back(std::sin(0.7 * i + 0.1));
  for (int i = 0; i < 4; ++i) g1.push_back(std::cos(1.1 * i));
  std::vector<Tensor> ps{zeros({2, 3}, dtype).requires_grad_(), zeros({4}, dtype).requires_grad_(),
                         zeros({3}, dtype).requires_grad_()};
  ps[0].mutable_grad() = make(g0, {2, 3}, dtype);
  ps[1].mutable_grad() = make(g1, {4}, dtype);
  return ps;
}

std::vector<double> grads(const std::vector<Tensor>& ps) {
  std::vector<double> out = values(ps[0].grad());
  for (double v : values(ps[1].grad())) out.push_back(v);
  return out;
}

void check_clip(double max_norm, double norm_type, double expected_total,
                const std::vector<double>& expected) {
  std::vector<Tensor> ps = params();
  const double total = clip_grad_norm_(ps, max_norm, norm_type);
  CHECK(total == doctest::Approx(expected_total).epsilon(1.3e-6));
  const std::string bad = mismatch(grads(ps), expected, tol_for(kFloat32));
  CHECK_MESSAGE(bad.empty(), bad);
  CHECK_FALSE(ps[2].grad().defined());
}

}  // namespace

TEST_CASE("clip_grad_norm_ with the 2-norm matches torch") {
  // clip_grad_norm_(ps, 1.0)
  check_clip(1.0, 2.0, 2.22564435,
             {0.0448559411, 0.322313756, 0.448182374, 0.363263816, 0.107496612, -0.198827922, 0.449307889,
              0.203804314, -0.264418185, -0.443682432});
}

TEST_CASE("clip_grad_norm_ with the infinity norm matches torch") {
  // clip_grad_norm_(ps, 0.5, math.inf)
  check_clip(0.5, kInf, 1.0,
             {0.0499166586, 0.358677715, 0.498747021, 0.40424782, 0.119624555, -0.221260011, 0.499999523,
              0.226797834, -0.29425028, -0.493739396});
}

TEST_CASE("clip_grad_norm_ with the 1-norm and the 3-norm matches torch") {
  // clip_grad_norm_(ps, 0.7, 1.0)
  check_clip(0.7, 1.0, 6.33452702,
             {0.011032138, 0.079271771, 0.11022865, 0.0893432721, 0.0264383592, -0.0489009283, 0.110505469,
              0.0501248501, -0.0650325865, -0.109121911});
  // clip_grad_norm_(ps, 0.7, 3.0)
  check_clip(0.7, 3.0, 1.62000167,
             {0.0431378223, 0.309968144, 0.431015611, 0.349349707, 0.103379168, -0.191212207, 0.432098031,
              0.195997983, -0.254290164, -0.426688045});
}

TEST_CASE("clip_grad_norm_on_device_ clips as torch does and returns the norm as a tensor") {
  std::vector<Tensor> ps = params();
  const Tensor total = nn::clip_grad_norm_on_device_(ps, 1.0);  // torch's numbers: the 2-norm case above
  CHECK(total.dim() == 0);
  CHECK(total.dtype() == kFloat64);
  CHECK(total.item<double>() == doctest::Approx(2.22564435).epsilon(1.3e-6));
  const std::string bad = mismatch(grads(ps),
                                   {0.0448559411, 0.322313756, 0.448182374, 0.363263816, 0.107496612,
                                    -0.198827922, 0.449307889, 0.203804314, -0.264418185, -0.443682432},
                                   tol_for(kFloat32));
  CHECK_MESSAGE(bad.empty(), bad);
  CHECK_FALSE(nn::clip_grad_norm_on_device_({ps[2]}, 1.0).defined());  // no gradient: nothing to clip
  // A non-contiguous gradient (tensor ops instead of the foreach ones; its 2-norm is reduced in
  // float32): the same numbers within float32's tolerance, for the 2-norm and the infinity norm.
  for (double norm_type : {2.0, std::numeric_limits<double>::infinity()}) {
    CAPTURE(norm_type);
    std::vector<Tensor> contiguous = params(), strided = params();
    strided[0].mutable_grad() = strided[0].grad().t().contiguous().t();
    REQUIRE_FALSE(strided[0].grad().is_contiguous());
    const double max_norm = norm_type == 2.0 ? 1.0 : 0.5;
    CHECK(nn::clip_grad_norm_on_device_(strided, max_norm, norm_type).item<double>() ==
          doctest::Approx(nn::clip_grad_norm_(contiguous, max_norm, norm_type)).epsilon(1.3e-6));
    const std::string differs = mismatch(grads(strided), grads(contiguous), tol_for(kFloat32));
    CHECK_MESSAGE(differs.empty(), differs);
  }
  CHECK_THROWS_WITH_AS(nn::clip_grad_norm_on_device_(ps, -1.0),
                       doctest::Contains("clip_grad_norm_on_device_: max_norm must be >= 0"), Error);
}

TEST_CASE("clip_grad_norm_ below max_norm returns the norm and leaves the gradients alone") {
  std::vector<Tensor> ps = params();
  const std::vector<double> before = grads(ps);
  const uint64_t version = ps[0].grad().version();
  // clip_grad_norm_(ps, 100.0) -> 2.22564435, gradients unchanged
  CHECK(clip_grad_norm_(ps, 100.0) == doctest::Approx(2.22564435).epsilon(1.3e-6));
  CHECK(grads(ps) == before);
  CHECK(ps[0].grad().version() == version);
}

TEST_CASE("clip_grad_norm_ on float64 gradients matches torch") {
  std::vector<Tensor> ps = params(kFloat64);
  // clip_grad_norm_(params(torch.float64), 1.0)
  const double total = clip_grad_norm_(ps, 1.0);
  CHECK(total == doctest::Approx(2.2256444105348572).epsilon(1e-14));
  const std::string bad =
      mismatch(grads(ps),
               {0.04485593984301238, 0.3223137376259459, 0.44818234831232207, 0.36326379754504379,
                0.10749660663891966, -0.1988279180503007, 0.44930787054694593, 0.20380430740608005,
                -0.26441818380849796, -0.4436824326259402},
               tol_for(kFloat64));
  CHECK_MESSAGE(bad.empty(), bad);
}

TEST_CASE("clip_grad_norm_ bumps the version of the gradients it scales") {
  std::vector<Tensor> ps = params();
  const uint64_t v0 = ps[0].grad().version(), v1 = ps[1].grad().version();
  clip_grad_norm_(ps, 1.0);
  CHECK(ps[0].grad().version() > v0);
  CHECK(ps[1].grad().version() > v1);
}

TEST_CASE("a non-finite norm throws with error_if_nonfinite, else scales like torch") {
  SUBCASE("infinity") {
    std::vector<Tensor> ps = params();
    ps[1].mutable_grad() = make({1.0, kInf, -2.0, 0.5}, {4}, kFloat32);
    const std::vector<double> before = grads(ps);
    CHECK_THROWS_WITH_AS(clip_grad_norm_(ps, 1.0, 2.0, true),
                         doctest::Contains("the total norm of order 2 of the gradients is inf"), Error);
    CHECK(grads(ps) == before);  // unchanged after the error
    // torch: coefficient 1 / (inf + 1e-6) = 0, so finite elements become 0 and inf * 0 = NaN.
    CHECK(clip_grad_norm_(ps, 1.0) == kInf);
    const std::vector<double> after = grads(ps);
    CHECK(after[0] == 0.0);
    CHECK(std::isnan(after[7]));
    CHECK(after[8] == 0.0);
  }
  SUBCASE("NaN") {
    std::vector<Tensor> ps = params();
    ps[0].mutable_grad() = make({1, 2, kNaN, 4, 5, 6}, {2, 3}, kFloat32);
    CHECK_THROWS_WITH_AS(clip_grad_norm_(ps, 1.0, kInf, true), doctest::Contains("is nan"), Error);
    CHECK(std::isnan(clip_grad_norm_(ps, 1.0, kInf)));
    for (double g : grads(ps)) CHECK(std::isnan(g));  // torch multiplies by a NaN coefficient
  }
}

TEST_CASE("clip_grad_norm_ and clip_grad_value_ reject bad arguments and unsupported dtypes") {
  std::vector<Tensor> ps = params();
  CHECK_THROWS_WITH_AS(clip_grad_norm_(ps, -1.0), doctest::Contains("max_norm must be >= 0"), Error);
  CHECK_THROWS_WITH_AS(clip_grad_norm_(ps, 1.0, 0.0), doctest::Contains("norm_type must be > 0"), Error);
  CHECK_THROWS_WITH_AS(clip_grad_value_(ps, -0.5), doctest::Contains("clip_value must be >= 0"), Error);
  Tensor half = zeros({2}, kFloat16).requires_grad_();
  half.mutable_grad() = ones({2}, kFloat16);
  CHECK_THROWS_WITH_AS(clip_grad_norm_({half}, 1.0), doctest::Contains("has dtype float16"), Error);
  Tensor no_grad = zeros({2}).requires_grad_();
  CHECK(clip_grad_norm_({no_grad}, 1.0) == 0.0);
}

TEST_CASE("clip_grad_value_ matches torch") {
  std::vector<Tensor> ps = params();
  ps[0].grad().data_ptr<float>()[4] = NAN;
  // clip_grad_value_(ps, 0.5) (without the NaN, which torch's clamp keeps)
  clip_grad_value_(ps, 0.5);
  std::vector<double> actual = grads(ps);
  CHECK(std::isnan(actual[4]));
  actual[4] = 0.239249334;
  const std::string bad =
      mismatch(actual, {0.099833414, 0.5, 0.5, 0.5, 0.239249334, -0.44252044, 0.5, 0.453596115, -0.5, -0.5},
               tol_for(kFloat32));
  CHECK_MESSAGE(bad.empty(), bad);
}

TEST_CASE("non-contiguous gradients take the per-op path with the same results") {
  std::vector<Tensor> contiguous = params();
  std::vector<Tensor> strided = params();
  // The same values as a transposed view: strides (1, 2).
  strided[0].mutable_grad() = strided[0].grad().t().contiguous().t();
  REQUIRE_FALSE(strided[0].grad().is_contiguous());
  for (double norm_type : {2.0, kInf, 3.0}) {
    INFO("norm_type " << norm_type);
    std::vector<Tensor> a = params(), b = params();
    b[0].mutable_grad() = b[0].grad().t().contiguous().t();
    const double ta = clip_grad_norm_(a, 0.5, norm_type), tb = clip_grad_norm_(b, 0.5, norm_type);
    CHECK(tb == doctest::Approx(ta).epsilon(1e-6));
    const std::string bad = mismatch(grads(b), grads(a), tol_for(kFloat32));
    CHECK_MESSAGE(bad.empty(), bad);
  }
  clip_grad_value_(strided, 0.5);
  clip_grad_value_(contiguous, 0.5);
  CHECK(grads(strided) == grads(contiguous));
}

TEST_CASE("the norm of large gradients is exact in float64 and the same with 1 and 2 threads") {
  const std::vector<int64_t> sizes = {100003, 17, 65536, 40001};
  std::vector<Tensor> ps;
  long double reference = 0;  // a plain sum of squares in extended precision
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<double> g = random_values(sizes[i], 300 + i, 0.01);
    Tensor p = zeros({sizes[i]}).requires_grad_();
    p.mutable_grad() = make(g, {sizes[i]}, kFloat32);
    for (double v : values(p.grad())) reference += static_cast<long double>(v) * v;
    ps.push_back(p);
  }
  const int keep = get_num_threads();
  set_num_threads(1);
  const double one = clip_grad_norm_(ps, 1e9);
  set_num_threads(2);
  const double two = clip_grad_norm_(ps, 1e9);
  set_num_threads(keep);
  CHECK(std::memcmp(&one, &two, sizeof(double)) == 0);
  CHECK(one == doctest::Approx(static_cast<double>(std::sqrt(reference))).epsilon(1e-13));

  // Clipping then scales every element by the same coefficient, whatever the thread count.
  std::vector<double> before = values(ps[0].grad());
  const double total = clip_grad_norm_(ps, 0.5);
  const float coef = static_cast<float>(0.5 / (total + 1e-6));
  std::vector<double> after = values(ps[0].grad());
  for (size_t i = 0; i < before.size(); i += 997) CHECK(after[i] == static_cast<float>(before[i]) * coef);
}
