/*
 * Tests of batch_norm and layer_norm: forward values and running-stat updates against
 * float64 loops written here, backward functions against central finite differences of
 * the forward in float64, non-contiguous inputs, 16-bit dtypes, and errors.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "ops/cpu/vector_isa.h"
#include "ops/ops.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

// Batch norm reference over x [N, C, S] (contiguous values).
struct BnRef {
  std::vector<double> out, mean, var_biased, var_unbiased;
};
BnRef batch_norm_ref(const std::vector<double>& x, int64_t n, int64_t c, int64_t s,
                     const std::vector<double>& w, const std::vector<double>& b, double eps,
                     const std::vector<double>* use_mean = nullptr,
                     const std::vector<double>* use_var = nullptr) {
  BnRef r;
  r.out.resize(x.size());
  const double m = static_cast<double>(n * s);
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < s; ++k) mean += x[(i * c + ch) * s + k];
    mean /= m;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < s; ++k) sq += std::pow(x[(i * c + ch) * s + k] - mean, 2);
    r.mean.push_back(mean);
    r.var_biased.push_back(sq / m);
    r.var_unbiased.push_back(sq / (m - 1));
    const double mu = use_mean ? (*use_mean)[ch] : mean, var = use_var ? (*use_var)[ch] : sq / m;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < s; ++k) {
        const int64_t j = (i * c + ch) * s + k;
        r.out[j] = (x[j] - mu) / std::sqrt(var + eps) * (w.empty() ? 1.0 : w[ch]) + (b.empty() ? 0.0 : b[ch]);
      }
  }
  return r;
}

std::vector<double> layer_norm_ref(const std::vector<double>& x, int64_t m, int64_t d,
                                   const std::vector<double>& w, const std::vector<double>& b, double eps) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < m; ++r) {
    double mean = 0, sq = 0;
    for (int64_t j = 0; j < d; ++j) mean += x[r * d + j];
    mean /= static_cast<double>(d);
    for (int64_t j = 0; j < d; ++j) sq += std::pow(x[r * d + j] - mean, 2);
    const double rstd = 1 / std::sqrt(sq / static_cast<double>(d) + eps);
    for (int64_t j = 0; j < d; ++j)
      out[r * d + j] = (x[r * d + j] - mean) * rstd * (w.empty() ? 1.0 : w[j]) + (b.empty() ? 0.0 : b[j]);
  }
  return out;
}

}  // namespace

// ---- batch_norm -------------------------------------------------------------------------------

TEST_CASE("batch_norm in training normalises with batch stats and updates the running stats") {
  const int64_t n = 3, c = 4, s = 5;
  std::vector<double> x = random_values(n * c * s, 1, 2.0, 0.5);
  std::vector<double> w = random_values(c, 2), b = random_values(c, 3);
  std::vector<double> rm0 = random_values(c, 4), rv0{0.5, 1.0, 2.0, 1.5};
  for (DType dtype : {kFloat32, kFloat64}) {
    CAPTURE(dtype);
    Tensor rm = make(rm0, {c}, kFloat32), rv = make(rv0, {c}, kFloat32);
    // [N, C, H, W] = [3, 4, 1, 5]
    auto [out, save_mean, save_invstd] = batch_norm_forward(make(x, {n, c, 1, s}, dtype), make(w, {c}, dtype),
                                                            make(b, {c}, dtype), rm, rv, true, 0.1, 1e-5);
    BnRef ref = batch_norm_ref(x, n, c, s, w, b, 1e-5);
    CHECK(out.sizes() == IntArrayRef{n, c, 1, s});
    check_close(out, ref.out);
    check_close(save_mean, ref.mean);
    std::vector<double> invstd, new_rm, new_rv;
    for (int64_t ch = 0; ch < c; ++ch) {
      invstd.push_back(1 / std::sqrt(ref.var_biased[ch] + 1e-5));
      new_rm.push_back(0.9 * rm0[ch] + 0.1 * ref.mean[ch]);
      new_rv.push_back(0.9 * rv0[ch] + 0.1 * ref.var_unbiased[ch]);  // unbiased variance
    }
    check_close(save_invstd, invstd);
    check_close(rm, new_rm, tol_for(kFloat32));
    check_close(rv, new_rv, tol_for(kFloat32));
  }
}

TEST_CASE("batch_norm in eval uses the running stats and leaves them alone") {
  const int64_t n = 2, c = 3, s = 4;
  std::vector<double> x = random_values(n * c * s, 5);
  std::vector<double> rm0{0.1, -0.2, 0.3}, rv0{0.5, 1.5, 2.0}, w{1.0, 2.0, -1.0}, b{0.0, 0.5, 1.0};
  Tensor rm = make(rm0, {c}), rv = make(rv0, {c});
  const uint64_t version = rm.version();
  Tensor out = batch_norm(make(x, {n, c, s}), make(w, {c}), make(b, {c}), rm, rv, false, 0.1, 1e-3);
  check_close(out, batch_norm_ref(x, n, c, s, w, b, 1e-3, &rm0, &rv0).out);
  check_close(rm, rm0);
  check_close(rv, rv0);
  CHECK(rm.version() == version);
}

TEST_CASE("batch_norm on [N, C], without weight and bias, and without running stats") {
  std::vector<double> x = random_values(8 * 3, 6, 3.0);
  check_close(batch_norm(make(x, {8, 3}, kFloat32), {}, {}, {}, {}, true),
              batch_norm_ref(x, 8, 3, 1, {}, {}, 1e-5).out);
  // momentum 1 replaces the running stats with the batch stats
  Tensor rm = zeros({3}), rv = ones({3});
  batch_norm(make(x, {8, 3}), {}, {}, rm, rv, true, 1.0);
  BnRef ref = batch_norm_ref(x, 8, 3, 1, {}, {}, 1e-5);
  check_close(rm, ref.mean);
  check_close(rv, ref.var_unbiased);
}

TEST_CASE("batch_norm of a non-contiguous input and of 16-bit inputs with float32 parameters") {
  const int64_t n = 4, c = 3, s = 6;
  std::vector<double> x = random_values(n * c * s, 7, 1.5);
  std::vector<double> w = random_values(c, 8), b = random_values(c, 9);
  // x [N, C, S] given as the permutation of a contiguous [C, S, N] tensor
  std::vector<double> xcsn(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t k = 0; k < s; ++k) xcsn[(ch * s + k) * n + i] = x[(i * c + ch) * s + k];
  Tensor xp = make(xcsn, {c, s, n}, kFloat32).permute({2, 0, 1});
  REQUIRE_FALSE(xp.is_contiguous());
  check_close(batch_norm(xp, make(w, {c}), make(b, {c}), {}, {}, true),
              batch_norm_ref(x, n, c, s, w, b, 1e-5).out);
  for (DType dtype : {kBFloat16, kFloat16}) {
    CAPTURE(dtype);
    Tensor xh = make(x, {n, c, s}, dtype);
    Tensor out = batch_norm(xh, make(w, {c}, kFloat32), make(b, {c}, kFloat32), {}, {}, true);
    CHECK(out.dtype() == dtype);
    check_close(out, batch_norm_ref(values(xh), n, c, s, w, b, 1e-5).out);
  }
}

TEST_CASE("batch_norm on channels_last activations: NCHW's values, in the input's format") {
  // 40 x 7 x 9 = 2,520 rows of 3 channels: several chunks of the NHWC kernels' sums.
  const int64_t n = 40, c = 3, h = 7, w = 9;
  Tensor x = make(random_values(n * c * h * w, 13, 1.5, 0.5), {n, c, h, w}, kFloat32);
  Tensor cl = contiguous(x.permute({0, 2, 3, 1})).permute({0, 3, 1, 2});  // NHWC memory
  REQUIRE_FALSE(cl.is_contiguous());
  Tensor weight = make(random_values(c, 14), {c}), bias = make(random_values(c, 15), {c});
  Tensor rm_nchw = zeros({c}), rv_nchw = ones({c}), rm_cl = zeros({c}), rv_cl = ones({c});
  auto [want, want_mean, want_invstd] =
      batch_norm_forward(x, weight, bias, rm_nchw, rv_nchw, true, 0.1, 1e-5);
  auto [got, got_mean, got_invstd] = batch_norm_forward(cl, weight, bias, rm_cl, rv_cl, true, 0.1, 1e-5);
  CHECK(got.stride(1) == 1);
  check_close(got, want.to_vector<double>(), {1e-5, 1e-5});
  check_close(got_mean, want_mean.to_vector<double>(), {1e-6, 1e-6});
  check_close(got_invstd, want_invstd.to_vector<double>(), {1e-6, 1e-6});
  check_close(rm_cl, rm_nchw.to_vector<double>(), {1e-6, 1e-6});
  check_close(rv_cl, rv_nchw.to_vector<double>(), {1e-6, 1e-6});
  Tensor gy = make(random_values(n * c * h * w, 16), {n, c, h, w}, kFloat32);
  auto [gx_want, gw_want, gb_want] = batch_norm_backward(gy, x, weight, want_mean, want_invstd);
  auto [gx_got, gw_got, gb_got] = batch_norm_backward(gy, cl, weight, got_mean, got_invstd);
  CHECK(gx_got.stride(1) == 1);
  check_close(gx_got, gx_want.to_vector<double>(), {1e-5, 1e-5});
  check_close(gw_got, gw_want.to_vector<double>(), {1e-4, 1e-5});
  check_close(gb_got, gb_want.to_vector<double>(), {1e-4, 1e-5});
  // Evaluation reads the running statistics; bfloat16 activations with float32 parameters.
  Tensor cl16 = contiguous(x.to(kBFloat16).permute({0, 2, 3, 1})).permute({0, 3, 1, 2});
  Tensor eval = batch_norm(cl16, weight, bias, rm_cl, rv_cl, false);
  CHECK(eval.stride(1) == 1);
  check_close(eval, batch_norm(x.to(kBFloat16), weight, bias, rm_cl, rv_cl, false).to_vector<double>(),
              {1e-2, 1e-2});
}

TEST_CASE("batch_norm over many channels and a long spatial dim (parallel path)") {
  const int64_t n = 4, c = 16, s = 1500;
  std::vector<double> x = random_values(n * c * s, 10, 2.0, 1.0);
  Tensor rm = zeros({c}), rv = ones({c});
  Tensor out = batch_norm(make(x, {n, c, s}, kFloat32), {}, {}, rm, rv, true, 0.1, 1e-5);
  BnRef ref = batch_norm_ref(x, n, c, s, {}, {}, 1e-5);
  check_close(out, ref.out, {1e-5, 1e-5});
  std::vector<double> new_rv;
  for (double v : ref.var_unbiased) new_rv.push_back(0.9 + 0.1 * v);
  check_close(rv, new_rv);
}

TEST_CASE(
    "batch_norm's vector loops under each ISA (baseline, AVX2, AVX-512 in portable builds) match float64") {
  using cpu::VectorIsa;
  const VectorIsa saved = cpu::vector_isa();
  // S = 4133 crosses the loops' 4096-value sum blocks and leaves a remainder for every vector
  // width; channels_last with 19 channels leaves one too.
  const int64_t n = 2, c = 3, s = 4133;
  const std::vector<double> xv = random_values(n * c * s, 21, 2.0, 0.5), gyv = random_values(n * c * s, 22);
  const std::vector<double> wv = random_values(c, 23), bv = random_values(c, 24);
  const int64_t cn = 5, cc = 19, ch = 9, cw = 11;
  Tensor xcl64 = make(random_values(cn * cc * ch * cw, 25, 1.5, -0.3), {cn, cc, ch, cw});
  Tensor gycl64 = make(random_values(cn * cc * ch * cw, 26), {cn, cc, ch, cw});
  Tensor wcl = make(random_values(cc, 27), {cc}, kFloat32), bcl = make(random_values(cc, 28), {cc}, kFloat32);
  auto channels_last = [](const Tensor& t) {
    return contiguous(t.permute({0, 2, 3, 1})).permute({0, 3, 1, 2});
  };
  // Both layouts, forward and backward, in `dtype`.
  auto run = [&](DType dtype) {
    Tensor x = make(xv, {n, c, s}, dtype), gy = make(gyv, {n, c, s}, dtype);
    Tensor w = make(wv, {c}, dtype), b = make(bv, {c}, dtype);
    auto [y, mean, invstd] = batch_norm_forward(x, w, b, {}, {}, true, 0.1, 1e-5);
    auto [gx, gw, gb] = batch_norm_backward(gy, x, w, mean, invstd);
    Tensor xcl = channels_last(xcl64.to(dtype)), gycl = channels_last(gycl64.to(dtype));
    auto [ycl, mean_cl, invstd_cl] =
        batch_norm_forward(xcl, wcl.to(dtype), bcl.to(dtype), {}, {}, true, 0.1, 1e-5);
    auto [gxcl, gwcl, gbcl] = batch_norm_backward(gycl, xcl, wcl.to(dtype), mean_cl, invstd_cl);
    return std::vector<Tensor>{y, mean, invstd, gx, gw, gb, ycl, mean_cl, invstd_cl, gxcl, gwcl, gbcl};
  };
  const std::vector<Tensor> reference = run(kFloat64);
  // The float64 forward against the loops written here, so that the reference is independent.
  check_close(reference[0], batch_norm_ref(xv, n, c, s, wv, bv, 1e-5).out, {1e-12, 1e-12});
  for (VectorIsa isa : {VectorIsa::Baseline, VectorIsa::Avx2, VectorIsa::Avx512}) {
    cpu::set_vector_isa(isa);
    const std::string isa_name = cpu::vector_isa_name(cpu::vector_isa());
    CAPTURE(isa_name);
    const std::vector<Tensor> got = run(kFloat32);
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      // The parameter gradients add up 8,266 (NCHW) and 495 (NHWC) products of terms of about 1.
      CHECK(allclose(got[i].to(kFloat64), reference[i], 1e-5, i % 6 >= 4 ? 1e-4 : 1e-5));
    }
  }
  cpu::set_vector_isa(saved);
}

TEST_CASE("batch_norm_backward matches finite differences of the training forward") {
  const int64_t n = 3, c = 2, s = 3;
  std::vector<double> x = random_values(n * c * s, 11), gy = random_values(n * c * s, 12);
  std::vector<double> w{1.5, -0.7}, b{0.2, 0.3};
  const DimVector shape{n, c, s};
  auto forward = [&](const std::vector<double>& xv, const std::vector<double>& wv,
                     const std::vector<double>& bv) {
    return dot(batch_norm(make(xv, shape), make(wv, {c}), make(bv, {c}), {}, {}, true), gy);
  };
  auto [out, save_mean, save_invstd] =
      batch_norm_forward(make(x, shape), make(w, {c}), make(b, {c}), {}, {}, true, 0.1, 1e-5);
  auto [gx, gw, gb] =
      batch_norm_backward(make(gy, shape), make(x, shape), make(w, {c}), save_mean, save_invstd);
  check_close(gx, numeric_grad([&](const std::vector<double>& v) { return forward(v, w, b); }, x), kFdTol);
  check_close(gw, numeric_grad([&](const std::vector<double>& v) { return forward(x, v, b); }, w), kFdTol);
  check_close(gb, numeric_grad([&](const std::vector<double>& v) { return forward(x, w, v); }, b), kFdTol);

  // without weight: gradient of the input only, for a 2-D input
  std::vector<double> x2 = random_values(10, 13), gy2 = random_values(10, 14);
  auto [o2, m2, i2] = batch_norm_forward(make(x2, {5, 2}), {}, {}, {}, {}, true, 0.1, 1e-5);
  auto [gx2, gw2, gb2] = batch_norm_backward(make(gy2, {5, 2}), make(x2, {5, 2}), {}, m2, i2);
  CHECK_FALSE(gw2.defined());
  CHECK_FALSE(gb2.defined());
  auto f2 = [&](const std::vector<double>& v) {
    return dot(batch_norm(make(v, {5, 2}), {}, {}, {}, {}, true), gy2);
  };
  check_close(gx2, numeric_grad(f2, x2), kFdTol);

  // float32 against the float64 result
  auto [o3, m3, i3] =
      batch_norm_forward(make(x, shape, kFloat32), make(w, {c}, kFloat32), {}, {}, {}, true, 0.1, 1e-5);
  auto [gx3, gw3, gb3] = batch_norm_backward(make(gy, shape, kFloat32), make(x, shape, kFloat32),
                                             make(w, {c}, kFloat32), m3, i3);
  check_close(gx3, values(gx), {1e-5, 1e-5});
  check_close(gw3, values(gw), {1e-5, 1e-5});
  CHECK(gw3.dtype() == kFloat32);
}

TEST_CASE("batch_norm of a batch of 0: an empty output, running stats untouched, zero parameter gradients") {
  // torch.nn.functional.batch_norm(torch.empty(0, 3, 2, 2), rm, rv, w, b, training=True) returns
  // an empty tensor and leaves rm and rv alone; w and b get zero gradients.
  for (bool training : {true, false}) {
    CAPTURE(training);
    Tensor rm = make({0.5, -1, 2}, {3}, kFloat32), rv = make({1, 2, 3}, {3}, kFloat32);
    Tensor w = make({1, 2, 3}, {3}, kFloat32), b = make({0, 1, 0}, {3}, kFloat32);
    Tensor x = zeros({0, 3, 2, 2});
    auto [out, save_mean, save_invstd] = batch_norm_forward(x, w, b, rm, rv, training, 0.1, 1e-5);
    CHECK(out.sizes() == IntArrayRef{0, 3, 2, 2});
    check_close(rm, {0.5, -1, 2}, {0, 0});
    check_close(rv, {1, 2, 3}, {0, 0});
    auto [gx, gw, gb] = batch_norm_backward(zeros({0, 3, 2, 2}), x, w, save_mean, save_invstd);
    CHECK(gx.sizes() == IntArrayRef{0, 3, 2, 2});
    check_close(gw, {0, 0, 0}, {0, 0});
    check_close(gb, {0, 0, 0}, {0, 0});
  }
}

TEST_CASE("batch_norm errors") {
  CHECK_THROWS_WITH_AS(batch_norm(zeros({1, 3}), {}, {}, {}, {}, true),
                       doctest::Contains("batch_norm: Expected more than 1 value per channel when training"),
                       Error);
  CHECK_THROWS_WITH_AS(batch_norm(zeros({2, 3, 4}), zeros({4}), {}, {}, {}, true),
                       doctest::Contains("batch_norm: expected weight of shape [3], got [4]"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(zeros({2, 3, 4}), {}, {}, zeros({2}), ones({3}), true),
                       doctest::Contains("running_mean of shape [3]"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(zeros({2, 3}), {}, {}, {}, {}, false),
                       doctest::Contains("batch_norm: running_mean and running_var must be defined"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(zeros({3}), {}, {}, {}, {}, true),
                       doctest::Contains("batch_norm: expected input"), Error);
  CHECK_THROWS_WITH_AS(batch_norm(zeros({2, 3}, kInt64), {}, {}, {}, {}, true),
                       doctest::Contains("batch_norm"), Error);
  CHECK_THROWS_WITH_AS(batch_norm_backward(zeros({2, 3}), zeros({2, 4}), {}, zeros({4}), ones({4})),
                       doctest::Contains("batch_norm_backward: expected grad_out"), Error);
}

// ---- layer_norm -------------------------------------------------------------------------------

TEST_CASE("layer_norm over the trailing dims with and without weight and bias") {
  const int64_t m = 6, d = 12;
  std::vector<double> x = random_values(m * d, 20, 2.0, -1.0);
  std::vector<double> w = random_values(d, 21), b = random_values(d, 22);
  for (DType dtype : {kFloat32, kFloat64}) {
    CAPTURE(dtype);
    // [2, 3, 3, 4] normalised over [3, 4]
    Tensor xt = make(x, {2, 3, 3, 4}, dtype);
    auto [out, mean, rstd] =
        layer_norm_forward(xt, {3, 4}, make(w, {3, 4}, dtype), make(b, {3, 4}, dtype), 1e-5);
    CHECK(out.sizes() == xt.sizes());
    CHECK(mean.sizes() == IntArrayRef{2, 3});
    check_close(out, layer_norm_ref(x, m, d, w, b, 1e-5));
    check_close(layer_norm(xt, {3, 4}), layer_norm_ref(x, m, d, {}, {}, 1e-5));
    check_close(layer_norm(xt, {3, 4}, make(w, {3, 4}, dtype)), layer_norm_ref(x, m, d, w, {}, 1e-5));
    check_close(layer_norm(xt, {3, 4}, {}, make(b, {3, 4}, dtype), 0.5), layer_norm_ref(x, m, d, {}, b, 0.5));
    std::vector<double> mv = values(mean), rv = values(rstd);
    double mean0 = 0;
    for (int j = 0; j < d; ++j) mean0 += x[j];
    CHECK(mv[0] == doctest::Approx(mean0 / d).epsilon(1e-6));
    CHECK(rv.size() == 6);
  }
}

TEST_CASE("layer_norm of a transposed input, of long rows, and of 16-bit inputs") {
  std::vector<double> x = random_values(5 * 7, 23);
  Tensor xt = make(x, {7, 5}, kFloat32).t();  // [5, 7], non-contiguous
  std::vector<double> xr(35);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 7; ++j) xr[i * 7 + j] = x[j * 5 + i];
  check_close(layer_norm(xt, {7}), layer_norm_ref(xr, 5, 7, {}, {}, 1e-5));

  std::vector<double> big = random_values(40 * 1025, 24, 1.0, 3.0);
  check_close(layer_norm(make(big, {40, 1025}, kFloat32), {1025}),
              layer_norm_ref(big, 40, 1025, {}, {}, 1e-5), {1e-5, 1e-5});

  std::vector<double> w = random_values(7, 25);
  for (DType dtype : {kBFloat16, kFloat16}) {
    CAPTURE(dtype);
    Tensor xh = make(xr, {5, 7}, dtype);
    Tensor out = layer_norm(xh, {7}, make(w, {7}, kFloat32));
    CHECK(out.dtype() == dtype);
    check_close(out, layer_norm_ref(values(xh), 5, 7, w, {}, 1e-5));
  }
}

TEST_CASE("layer_norm_backward matches finite differences") {
  const DimVector shape{3, 2, 4};
  const int64_t m = 3, d = 8;
  std::vector<double> x = random_values(m * d, 26), gy = random_values(m * d, 27);
  std::vector<double> w = random_values(d, 28), b = random_values(d, 29);
  auto forward = [&](const std::vector<double>& xv, const std::vector<double>& wv,
                     const std::vector<double>& bv) {
    return dot(layer_norm(make(xv, shape), {2, 4}, make(wv, {2, 4}), make(bv, {2, 4})), gy);
  };
  auto [out, mean, rstd] = layer_norm_forward(make(x, shape), {2, 4}, make(w, {2, 4}), make(b, {2, 4}), 1e-5);
  auto [gx, gw, gb] =
      layer_norm_backward(make(gy, shape), make(x, shape), {2, 4}, mean, rstd, make(w, {2, 4}));
  CHECK(gw.sizes() == IntArrayRef{2, 4});
  check_close(gx, numeric_grad([&](const std::vector<double>& v) { return forward(v, w, b); }, x), kFdTol);
  check_close(gw, numeric_grad([&](const std::vector<double>& v) { return forward(x, v, b); }, w), kFdTol);
  check_close(gb, numeric_grad([&](const std::vector<double>& v) { return forward(x, w, v); }, b), kFdTol);

  // without weight
  auto [o2, m2, r2] = layer_norm_forward(make(x, shape), {4}, {}, {}, 1e-5);
  auto [gx2, gw2, gb2] = layer_norm_backward(make(gy, shape), make(x, shape), {4}, m2, r2, {});
  auto f2 = [&](const std::vector<double>& v) { return dot(layer_norm(make(v, shape), {4}), gy); };
  check_close(gx2, numeric_grad(f2, x), kFdTol);

  // float32 and bfloat16 against float64 on the same (rounded) inputs; enough rows for the
  // threaded path
  const int64_t mb = 128, db = 600;  // 76800 elements: two tasks
  std::vector<double> xb = random_values(mb * db, 30), gyb = random_values(mb * db, 31),
                      wb = random_values(db, 32);
  for (DType dtype : {kFloat32, kBFloat16}) {
    CAPTURE(dtype);
    Tensor xd = make(xb, {mb, db}, dtype), gyd = make(gyb, {mb, db}, dtype);
    auto [o64, m64, r64] = layer_norm_forward(xd.to(kFloat64), {db}, make(wb, {db}), {}, 1e-5);
    auto [gx64, gw64, gb64] =
        layer_norm_backward(gyd.to(kFloat64), xd.to(kFloat64), {db}, m64, r64, make(wb, {db}));
    auto [o, mm, rr] = layer_norm_forward(xd, {db}, make(wb, {db}, kFloat32), {}, 1e-5);
    auto [g1, g2, g3] = layer_norm_backward(gyd, xd, {db}, mm, rr, make(wb, {db}, kFloat32));
    CHECK(g2.dtype() == kFloat32);
    const Tol t = tol_for(dtype);
    check_close(g1, values(gx64), t);
    check_close(g2, values(gw64), t);
    check_close(g3, values(gb64), t);
  }
}

TEST_CASE("layer_norm errors name the op and the shapes") {
  CHECK_THROWS_WITH_AS(
      layer_norm(zeros({2, 3}), {4}),
      doctest::Contains("layer_norm: given normalized_shape=[4], expected input with shape [*, 4], "
                        "got [2, 3]"),
      Error);
  CHECK_THROWS_WITH_AS(layer_norm(zeros({3}), {2, 3}), doctest::Contains("layer_norm"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(zeros({2, 3}), {3}, zeros({2})),
                       doctest::Contains("layer_norm: expected weight of shape [3], got [2]"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(zeros({2, 3}, kInt32), {3}), doctest::Contains("layer_norm"), Error);
  CHECK_THROWS_WITH_AS(layer_norm(zeros({2, 3}), {}), doctest::Contains("layer_norm"), Error);
  CHECK_THROWS_WITH_AS(layer_norm_backward(zeros({2, 3}), zeros({2, 3}), {3}, zeros({3}), zeros({3}), {}),
                       doctest::Contains("layer_norm_backward: expected mean and rstd with 2 elements"),
                       Error);
}
