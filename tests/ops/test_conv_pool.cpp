/*
 * conv2d (forward and both backward functions) against direct float64 loops written here, plus
 * one case computed with PyTorch; pooling against PyTorch-computed literals and loops; gradient
 * checks of every backward function against central differences of its forward in float64.
 * Inputs are multiples of 1/8 in [-1, 1] (exact in bf16, exact sums in f32), so f32 results must
 * match the reference up to the final rounding whatever order oneDNN sums in.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "ops/cpu/vector_isa.h"
#include "ops/ops.h"
#include "tests/test_util.h"

using namespace loom;

namespace {

Tensor grid(IntArrayRef sizes, DType dtype, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(-8, 8);
  std::vector<double> v(static_cast<size_t>(shape_numel(sizes)));
  for (double& x : v) x = dist(gen) / 8.0;
  return from_blob(v.data(), sizes, TensorOptions(kFloat64)).clone().to(dtype);
}

// A float64 tensor from literal values.
Tensor lit(std::vector<double> v, IntArrayRef sizes) {
  return from_blob(v.data(), sizes, TensorOptions(kFloat64)).clone();
}

// The same values laid out channels_last (NCHW sizes, NHWC strides).
Tensor channels_last(const Tensor& t) {
  Tensor out = empty({t.size(0), t.size(2), t.size(3), t.size(1)}, t.options()).permute({0, 3, 1, 2});
  out.copy_(t);
  return out;
}

bool is_nhwc(const Tensor& t) {
  return t.stride(1) == 1 && t.stride(3) == t.size(1) && t.stride(2) == t.size(1) * t.size(3);
}

// Shape first, then values with the dtype's tolerance (tests/test_util.h).
void check_close(const Tensor& actual, const std::vector<double>& expected, IntArrayRef shape) {
  REQUIRE(actual.sizes() == shape);
  test::check_close(actual, expected, test::tol_for(actual.dtype()));
}

void check_equal_ints(const Tensor& actual, const std::vector<int64_t>& expected) {
  std::vector<int64_t> got = actual.to_vector<int64_t>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == expected[i]);
  }
}

// ---- direct float64 convolution loops ----------------------------------------------------------

struct Conv {
  int64_t n, c, h, w, o, kh, kw, ho, wo;
  Conv2dParams p;
  int64_t cg() const { return c / p.groups; }
  int64_t og() const { return o / p.groups; }
};

Conv conv_geom(IntArrayRef x, IntArrayRef w, const Conv2dParams& p) {
  Conv g{x[0], x[1], x[2], x[3], w[0], w[2], w[3], 0, 0, p};
  g.ho = (g.h + 2 * p.padding[0] - p.dilation[0] * (g.kh - 1) - 1) / p.stride[0] + 1;
  g.wo = (g.w + 2 * p.padding[1] - p.dilation[1] * (g.kw - 1) - 1) / p.stride[1] + 1;
  return g;
}

// Calls f(n, oc, oh, ow, ic, i, j, ih, iw) for every (output, weight tap) pair that reads an
// in-bounds input pixel.
template <class F>
void for_each_tap(const Conv& g, const F& f) {
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t oc = 0; oc < g.o; ++oc) {
      const int64_t grp = oc / g.og();
      for (int64_t oh = 0; oh < g.ho; ++oh)
        for (int64_t ow = 0; ow < g.wo; ++ow)
          for (int64_t c = 0; c < g.cg(); ++c)
            for (int64_t i = 0; i < g.kh; ++i)
              for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t ih = oh * g.p.stride[0] - g.p.padding[0] + i * g.p.dilation[0];
                const int64_t iw = ow * g.p.stride[1] - g.p.padding[1] + j * g.p.dilation[1];
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                f(n, oc, oh, ow, grp * g.cg() + c, c, i, j, ih, iw);
              }
    }
}

std::vector<double> ref_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  Conv g = conv_geom(x.sizes(), w.sizes(), p);
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> y(static_cast<size_t>(g.n * g.o * g.ho * g.wo), 0.0);
  if (b.defined()) {
    auto bv = b.to_vector<double>();
    for (size_t k = 0; k < y.size(); ++k) y[k] = bv[(k / (g.ho * g.wo)) % g.o];
  }
  for_each_tap(g, [&](int64_t n, int64_t oc, int64_t oh, int64_t ow, int64_t ic, int64_t c, int64_t i,
                      int64_t j, int64_t ih, int64_t iw) {
    y[((n * g.o + oc) * g.ho + oh) * g.wo + ow] +=
        xv[((n * g.c + ic) * g.h + ih) * g.w + iw] * wv[((oc * g.cg() + c) * g.kh + i) * g.kw + j];
  });
  return y;
}

std::vector<double> ref_conv_grad_input(const Tensor& gy, const Tensor& w, IntArrayRef xs,
                                        const Conv2dParams& p) {
  Conv g = conv_geom(xs, w.sizes(), p);
  auto gyv = gy.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> gx(static_cast<size_t>(shape_numel(xs)), 0.0);
  for_each_tap(g, [&](int64_t n, int64_t oc, int64_t oh, int64_t ow, int64_t ic, int64_t c, int64_t i,
                      int64_t j, int64_t ih, int64_t iw) {
    gx[((n * g.c + ic) * g.h + ih) * g.w + iw] +=
        gyv[((n * g.o + oc) * g.ho + oh) * g.wo + ow] * wv[((oc * g.cg() + c) * g.kh + i) * g.kw + j];
  });
  return gx;
}

std::pair<std::vector<double>, std::vector<double>> ref_conv_grad_weight(const Tensor& gy, const Tensor& x,
                                                                         IntArrayRef ws,
                                                                         const Conv2dParams& p) {
  Conv g = conv_geom(x.sizes(), ws, p);
  auto gyv = gy.to_vector<double>(), xv = x.to_vector<double>();
  std::vector<double> gw(static_cast<size_t>(shape_numel(ws)), 0.0), gb(static_cast<size_t>(g.o), 0.0);
  for_each_tap(g, [&](int64_t n, int64_t oc, int64_t oh, int64_t ow, int64_t ic, int64_t c, int64_t i,
                      int64_t j, int64_t ih, int64_t iw) {
    gw[((oc * g.cg() + c) * g.kh + i) * g.kw + j] +=
        gyv[((n * g.o + oc) * g.ho + oh) * g.wo + ow] * xv[((n * g.c + ic) * g.h + ih) * g.w + iw];
  });
  for (size_t k = 0; k < gyv.size(); ++k) gb[(k / (g.ho * g.wo)) % g.o] += gyv[k];
  return {gw, gb};
}

struct ConvCase {
  const char* name;
  DimVector x, w;
  Conv2dParams p;
  bool bias;
};

std::vector<ConvCase> conv_cases() {
  return {
      {"3x3 pad 1", {2, 3, 8, 8}, {4, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
      {"stride 2, odd size (negative right padding)",
       {2, 4, 9, 7},
       {5, 4, 3, 3},
       {{2, 2}, {0, 0}, {1, 1}, 1},
       true},
      {"stride 2 pad 1 non-square kernel", {1, 3, 10, 9}, {6, 3, 3, 2}, {{2, 1}, {1, 0}, {1, 1}, 1}, false},
      {"dilation 2", {2, 2, 9, 10}, {3, 2, 3, 3}, {{1, 1}, {2, 1}, {2, 2}, 1}, true},
      {"groups 2", {2, 4, 7, 6}, {6, 2, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 2}, true},
      {"groups 2, stride 2, dilation 2, pad 2",
       {1, 6, 11, 12},
       {4, 3, 3, 3},
       {{2, 2}, {2, 2}, {2, 2}, 2},
       true},
      {"depthwise", {2, 4, 6, 6}, {4, 1, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 4}, false},
      {"1x1", {3, 16, 5, 5}, {32, 16, 1, 1}, {{1, 1}, {0, 0}, {1, 1}, 1}, true},
      {"first layer 3->16", {4, 3, 12, 12}, {16, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}, true},
  };
}

// Sum of f(x) * g over all elements, in float64 (the scalar loss of the gradient checks).
double dot(const Tensor& a, const std::vector<double>& g) {
  auto av = a.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < av.size(); ++i) s += av[i] * g[i];
  return s;
}

// Central differences of L(t) = dot(f(t), g) with respect to every element of the float64
// tensor t, against `analytic`.
template <class F>
void check_gradient(const Tensor& t, const std::vector<double>& g, const F& f, const Tensor& analytic) {
  const double eps = 1e-6;
  auto a = analytic.to_vector<double>();
  REQUIRE(a.size() == static_cast<size_t>(t.numel()));
  double* p = t.data_ptr<double>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double keep = p[i];
    p[i] = keep + eps;
    const double up = dot(f(), g);
    p[i] = keep - eps;
    const double down = dot(f(), g);
    p[i] = keep;
    CAPTURE(i);
    CHECK(std::abs((up - down) / (2 * eps) - a[static_cast<size_t>(i)]) <= 1e-6 + 1e-6 * std::abs(a[i]));
  }
}

}  // namespace

TEST_CASE("conv2d forward and backward against float64 loops (f32, f64, bf16, f16)") {
  for (const ConvCase& cc : conv_cases()) {
    for (DType t : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
      CAPTURE(cc.name);
      CAPTURE(t);
      Tensor x = grid(cc.x, t, 1), w = grid(cc.w, t, 2), b = cc.bias ? grid({cc.w[0]}, t, 3) : Tensor();
      const Conv2dParams& p = cc.p;
      Tensor y = conv2d(x, w, b, p.stride, p.padding, p.dilation, p.groups);
      CHECK(y.dtype() == t);
      CHECK(y.is_contiguous());
      Conv g = conv_geom(x.sizes(), w.sizes(), p);
      check_close(y, ref_conv(x, w, b, p), {g.n, g.o, g.ho, g.wo});

      Tensor gy = grid(y.sizes(), t, 4);
      Tensor gx = conv2d_backward_input(gy, w, x.sizes(), p);
      check_close(gx, ref_conv_grad_input(gy, w, x.sizes(), p), x.sizes());
      auto [gw, gb] = conv2d_backward_weight(gy, x, w.sizes(), cc.bias, p);
      auto [rgw, rgb] = ref_conv_grad_weight(gy, x, w.sizes(), p);
      check_close(gw, rgw, w.sizes());
      CHECK(gb.defined() == cc.bias);
      if (cc.bias) check_close(gb, rgb, {cc.w[0]});
    }
  }
}

TEST_CASE("conv2d matches PyTorch (groups 2, stride (2,1), padding (1,2), dilation (2,1), bias)") {
  // x[i] = ((7 i) mod 23 - 11) / 8, w[i] = ((5 i) mod 17 - 8) / 8, as in the generating script.
  auto pattern = [](IntArrayRef shape, int mul, int mod, int off) {
    std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<double>(static_cast<int64_t>(i) * mul % mod - off) / 8.0;
    return lit(v, shape);
  };
  Tensor x = pattern({2, 4, 5, 6}, 7, 23, 11).to(kFloat32), w = pattern({6, 2, 3, 2}, 5, 17, 8).to(kFloat32);
  Tensor b = lit({0.5, -0.25, 1.0, 0.0, 0.125, -1.0}, {6}).to(kFloat32);
  Tensor y = conv2d(x, w, b, {2, 1}, {1, 2}, {2, 1}, 2);
  std::vector<double> expected = {
      0.5,   1.703125,  -0.953125, 1.46875,   1.375,    -1.234375, 1.1875,    0.265625,  0.5,
      0.5,   -0.9375,   2.421875,  -0.421875, -0.75,    2.515625,  -0.328125, 0.78125,   0.5,
      -0.25, -1.0,      0.625,     0.90625,   -0.96875, 0.75,      1.03125,   -0.65625,  -0.25,
      -0.25, 0.609375,  -2.109375, 0.875,     0.625,    -2.140625, 0.84375,   -0.140625, -0.25,
      1.0,   2.546875,  -0.84375,  -0.84375,  3.46875,  -0.84375,  -0.84375,  2.546875,  1.0,
      1.0,   -0.09375,  3.328125,  -0.078125, -0.25,    3.171875,  -0.234375, 0.9375,    1.0,
      0.0,   0.5625,    0.9375,    -0.78125,  1.09375,  -1.703125, 0.890625,  0.09375,   0.0,
      0.0,   -1.828125, 0.828125,  0.734375,  -1.875,   0.546875,  -1.34375,  0.046875,  0.0,
      0.125, 0.6875,    -1.46875,  1.140625,  1.234375, -0.46875,  0.34375,   0.765625,  0.125,
      0.125, 0.6875,    1.34375,   -0.53125,  1.1875,   -1.40625,  1.03125,   0.1875,    0.125,
      -1.0,  -0.4375,   1.25,      -2.171875, -2.0,     -0.75,     0.140625,  -2.46875,  -1.0,
      -1.0,  -2.828125, -2.84375,  1.46875,   -2.84375, -2.484375, 0.03125,   -0.390625, -1.0,
      0.5,   0.671875,  1.09375,   1.0,       1.625,    -0.984375, 0.71875,   1.546875,  0.5,
      0.5,   -0.9375,   -0.65625,  1.53125,   -0.59375, 0.15625,   1.625,     -1.578125, 0.5,
      -0.25, 0.546875,  -0.84375,  0.515625,  -3.875,   0.71875,   0.640625,  -2.234375, -0.25,
      -0.25, 0.265625,  0.59375,   -0.015625, 0.8125,   -1.59375,  -0.046875, 0.75,      -0.25,
      1.0,   0.828125,  3.46875,   2.03125,   0.59375,  2.03125,   2.03125,   1.03125,   1.0,
      1.0,   -0.78125,  -0.40625,  2.296875,  -0.03125, 0.515625,  2.140625,  -1.03125,  1.0,
      0.0,   -0.015625, 0.96875,   -3.625,    0.765625, -0.59375,  1.28125,   0.703125,  0.0,
      0.0,   0.734375,  0.359375,  0.984375,  -1.625,   1.15625,   -1.453125, 0.609375,  0.0,
      0.125, 0.125,     -1.359375, 1.25,      0.625,    0.71875,   0.8125,    -1.796875, 0.125,
      0.125, 0.078125,  0.953125,  -3.4375,   1.15625,  -0.71875,  1.0,       0.765625,  0.125,
      -1.0,  -0.984375, -1.484375, -2.03125,  0.296875, -2.40625,  -2.234375, 1.09375,   -1.0,
      -1.0,  -0.234375, 0.03125,   -1.40625,  0.03125,  1.46875,   -2.84375,  -2.984375, -1.0};
  check_close(y, expected, {2, 6, 2, 9});
  check_close(conv2d(x.to(kFloat64), w.to(kFloat64), b.to(kFloat64), {2, 1}, {1, 2}, {2, 1}, 2), expected,
              {2, 6, 2, 9});
}

TEST_CASE("conv2d: channels_last and non-contiguous inputs") {
  struct ClCase {
    DimVector x, w;
    Conv2dParams p;
  };
  const ClCase cases[] = {
      {{2, 8, 6, 7}, {16, 8, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},   // few input channels: GEMM backward data
      {{2, 3, 9, 8}, {5, 3, 3, 2}, {{2, 1}, {2, 1}, {2, 1}, 1}},    // ... with stride, dilation, padding
      {{2, 16, 5, 6}, {8, 16, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},  // oneDNN nhwc kernels
      {{1, 16, 7, 7}, {8, 8, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 2}},   // groups
  };
  for (const ClCase& cc : cases)
    for (DType t : {kFloat32, kBFloat16, kFloat64}) {
      CAPTURE(t);
      CAPTURE(cc.x);
      const Conv2dParams& p = cc.p;
      Tensor x = grid(cc.x, t, 5), w = grid(cc.w, t, 6), b = grid({cc.w[0]}, t, 7);
      Tensor xcl = channels_last(x);
      REQUIRE(is_nhwc(xcl));
      REQUIRE_FALSE(xcl.is_contiguous());
      Tensor y = conv2d(xcl, w, b, p.stride, p.padding, p.dilation, p.groups);
      CHECK(is_nhwc(y));  // the output follows the input's memory format
      Conv g = conv_geom(x.sizes(), w.sizes(), p);
      std::vector<double> ref = ref_conv(x, w, b, p);
      check_close(y, ref, {g.n, g.o, g.ho, g.wo});
      // Weights channels_last too.
      check_close(conv2d(xcl, channels_last(w), b, p.stride, p.padding, p.dilation, p.groups), ref,
                  {g.n, g.o, g.ho, g.wo});
      Tensor gy = channels_last(grid(y.sizes(), t, 8));
      Tensor gx = conv2d_backward_input(gy, w, x.sizes(), p);
      CHECK(is_nhwc(gx));
      check_close(gx, ref_conv_grad_input(gy, w, x.sizes(), p), x.sizes());
      auto [gw, gb] = conv2d_backward_weight(gy, xcl, w.sizes(), true, p);
      auto [rgw, rgb] = ref_conv_grad_weight(gy, x, w.sizes(), p);
      check_close(gw, rgw, w.sizes());
      check_close(gb, rgb, {cc.w[0]});
      // Mixed formats: NCHW grad_out with a channels_last input, channels_last grad_out with NCHW weights.
      auto [gw2, gb2] = conv2d_backward_weight(gy.contiguous(), xcl, w.sizes(), true, p);
      check_close(gw2, rgw, w.sizes());
      check_close(conv2d_backward_input(gy.contiguous(), channels_last(w), x.sizes(), p),
                  ref_conv_grad_input(gy, w, x.sizes(), p), x.sizes());
    }
  // A sliced (non-contiguous, non-channels_last) input and a transposed-spatial one.
  Tensor big = grid({2, 6, 9, 12}, kFloat32, 9);
  Tensor xs = big.slice(1, 0, 6, 2).slice(3, 1, 11);  // [2, 3, 9, 10]
  Tensor w = grid({4, 3, 3, 3}, kFloat32, 10);
  Conv2dParams p{{2, 1}, {1, 1}, {1, 1}, 1};
  check_close(conv2d(xs, w, {}, p.stride, p.padding), ref_conv(xs, w, {}, p), {2, 4, 5, 10});
  Tensor xt = big.transpose(2, 3);  // [2, 6, 12, 9]
  Tensor w6 = grid({2, 6, 2, 2}, kFloat32, 11);
  Conv2dParams q{{1, 1}, {0, 0}, {1, 1}, 1};
  check_close(conv2d(xt, w6), ref_conv(xt, w6, {}, q), {2, 2, 11, 8});
  // Expanded (stride-0) batch.
  Tensor xe = grid({1, 3, 5, 5}, kFloat32, 12).expand({3, 3, 5, 5});
  Tensor we = grid({2, 3, 3, 3}, kFloat32, 13);
  check_close(conv2d(xe, we), ref_conv(xe, we, {}, q), {3, 2, 3, 3});
}

TEST_CASE("conv2d: repeated calls hit the primitive cache and stay correct") {
  Tensor w = grid({8, 4, 3, 3}, kFloat32, 14);
  for (int i = 0; i < 3; ++i) {
    Tensor x = grid({2, 4, 6, 6}, kFloat32, 20 + i);
    Conv2dParams p{{1, 1}, {1, 1}, {1, 1}, 1};
    check_close(conv2d(x, w, {}, {1, 1}, {1, 1}), ref_conv(x, w, {}, p), {2, 8, 6, 6});
  }
}

TEST_CASE("conv2d: reordered activations are reused only while the tensor is unchanged") {
  // 16+ channels in NCHW: oneDNN computes in blocked layouts and the backward kernels may reuse the
  // blocked copies of x and grad_out made by the forward and data-gradient kernels.
  Conv2dParams p{{1, 1}, {1, 1}, {1, 1}, 1};
  Tensor x = grid({2, 16, 6, 6}, kFloat32, 70), w = grid({16, 16, 3, 3}, kFloat32, 71);
  Tensor y = conv2d(x, w, {}, p.stride, p.padding);
  Tensor gy = grid(y.sizes(), kFloat32, 72);
  Tensor gx = conv2d_backward_input(gy, w, x.sizes(), p);
  // In-place changes between the kernels bump the version counters.
  x.copy_(grid(x.sizes(), kFloat32, 73));
  gy.copy_(grid(gy.sizes(), kFloat32, 74));
  auto [gw, gb] = conv2d_backward_weight(gy, x, w.sizes(), true, p);
  auto [rgw, rgb] = ref_conv_grad_weight(gy, x, w.sizes(), p);
  check_close(gw, rgw, w.sizes());
  check_close(gb, rgb, {16});
  // Unchanged tensors: the same results as freshly made copies of them.
  conv2d(x, w, {}, p.stride, p.padding);
  conv2d_backward_input(gy, w, x.sizes(), p);
  auto [gw2, gb2] = conv2d_backward_weight(gy, x, w.sizes(), true, p);
  check_close(gw2, rgw, w.sizes());
  auto [gw3, gb3] = conv2d_backward_weight(gy.clone(), x.clone(), w.sizes(), true, p);
  check_close(gw3, rgw, w.sizes());
  // A new tensor in place of a dead one (possibly at the same address) is not mistaken for it.
  for (int i = 0; i < 3; ++i) {
    Tensor xi = grid({2, 16, 6, 6}, kFloat32, 80 + i);
    conv2d(xi, w, {}, p.stride, p.padding);
  }
  Tensor xn = grid({2, 16, 6, 6}, kFloat32, 90);
  auto [gw4, gb4] = conv2d_backward_weight(gy, xn, w.sizes(), false, p);
  check_close(gw4, ref_conv_grad_weight(gy, xn, w.sizes(), p).first, w.sizes());
}

TEST_CASE("conv2d: gradient checks against finite differences (float64)") {
  for (const ConvCase& cc : conv_cases()) {
    if (cc.x[1] > 6 || cc.x[2] > 10) continue;  // tiny shapes only
    CAPTURE(cc.name);
    const Conv2dParams& p = cc.p;
    Tensor x = grid(cc.x, kFloat64, 30), w = grid(cc.w, kFloat64, 31),
           b = cc.bias ? grid({cc.w[0]}, kFloat64, 32) : Tensor();
    auto fwd = [&] { return conv2d(x, w, b, p.stride, p.padding, p.dilation, p.groups); };
    Tensor y = fwd();
    Tensor gy = grid(y.sizes(), kFloat64, 33);
    std::vector<double> g = gy.to_vector<double>();
    check_gradient(x, g, fwd, conv2d_backward_input(gy, w, x.sizes(), p));
    auto [gw, gb] = conv2d_backward_weight(gy, x, w.sizes(), cc.bias, p);
    check_gradient(w, g, fwd, gw);
    if (cc.bias) check_gradient(b, g, fwd, gb);
  }
}

TEST_CASE("conv2d: bad inputs throw loom::Error naming the op and shapes") {
  Tensor x = grid({1, 4, 5, 5}, kFloat32, 1), w = grid({6, 3, 3, 3}, kFloat32, 2);
  CHECK_THROWS_WITH_AS(conv2d(x, w),
                       doctest::Contains("conv2d: weight shape [6, 3, 3, 3] with groups=1 expects 3"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, w), doctest::Contains("[1, 4, 5, 5]"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, grid({6, 2, 3, 3}, kFloat32, 3), {}, {1, 1}, {0, 0}, {1, 1}, 3),
                       doctest::Contains("conv2d: groups=3 does not divide the 4 input channels"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, grid({5, 2, 3, 3}, kFloat32, 3), {}, {1, 1}, {0, 0}, {1, 1}, 2),
                       doctest::Contains("does not divide the 5 output channels"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, grid({6, 4, 7, 3}, kFloat32, 3)),
                       doctest::Contains("output size would be < 1"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, grid({6, 4, 3, 3}, kFloat32, 3), grid({5}, kFloat32, 4)),
                       doctest::Contains("conv2d: expected a bias of shape [6]"), Error);
  CHECK_THROWS_WITH_AS(conv2d(grid({4, 5, 5}, kFloat32, 1), w),
                       doctest::Contains("conv2d: expected input to be 4-D"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x, grid({6, 4, 3, 3}, kFloat32, 3), {}, {0, 1}), doctest::Contains("stride"),
                       Error);
  CHECK_THROWS_WITH_AS(conv2d(x, grid({6, 4, 3, 3}, kFloat64, 3)),
                       doctest::Contains("differs from weight dtype"), Error);
  CHECK_THROWS_WITH_AS(conv2d(x.to(kInt32), grid({6, 4, 3, 3}, kInt32, 3)), doctest::Contains("floating"),
                       Error);
  Conv2dParams p;
  CHECK_THROWS_WITH_AS(conv2d_backward_input(grid({1, 6, 4, 4}, kFloat32, 1), grid({6, 4, 3, 3}, kFloat32, 2),
                                             {1, 4, 5, 5}, p),
                       doctest::Contains("conv2d_backward_input: grad_out shape [1, 6, 4, 4] does not match"),
                       Error);
  CHECK_THROWS_WITH_AS(conv2d_backward_weight(grid({1, 6, 3, 3}, kFloat32, 1), x, {6, 3, 3, 3}, true, p),
                       doctest::Contains("conv2d_backward_weight: weight shape [6, 3, 3, 3]"), Error);
}

// ---- pooling ----------------------------------------------------------------------------------

namespace {

// x[i] = ((37 i) mod 71 - 35) / 4 over [1, 2, 5, 7], the input of the PyTorch literals below.
Tensor pool_input(DType t = kFloat64) {
  std::vector<double> v(70);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<double>(static_cast<int64_t>(i) * 37 % 71 - 35) / 4.0;
  return lit(v, {1, 2, 5, 7}).to(t);
}
// grad_out pattern: ((13 i) mod 29 - 14) / 8.
Tensor pool_grad(IntArrayRef shape, DType t = kFloat64) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<double>(static_cast<int64_t>(i) * 13 % 29 - 14) / 8.0;
  return lit(v, shape).to(t);
}

}  // namespace

TEST_CASE("max_pool2d: values, indices and backward match PyTorch") {
  for (DType t : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    CAPTURE(t);
    Tensor x = pool_input(t);
    // kernel (3, 2), stride 2, padding 1, ceil_mode
    Pool2dParams p = make_pool2d_params({3, 2}, {2, 2}, {1, 1}, {1, 1}, true, true);
    auto [y, idx] = max_pool2d_with_indices(x, p);
    check_close(y, {2.75, 3.5,  4.25, 5.0,  8.0, 8.75, 6.5, 7.25, 8.0, 8.75, 3.25, 4.0,
                    7.0,  7.75, 8.5,  6.25, 7.0, 7.75, 8.5, 5.25, 6.0, 6.75, 7.5,  8.25},
                {1, 2, 3, 4});
    CHECK(idx.dtype() == kInt64);
    check_equal_ints(
        idx, {7, 9, 11, 13, 21, 23, 17, 19, 21, 23, 32, 34, 7, 9, 11, 5, 7, 9, 11, 26, 28, 30, 32, 34});
    check_close(max_pool2d(x, {3, 2}, {2, 2}, {1, 1}, {1, 1}, true), y.to_vector<double>(), {1, 2, 3, 4});
    Tensor gx = max_pool2d_backward(pool_grad({1, 2, 3, 4}, t), idx, x.sizes(), p);
    check_close(gx,
                {0.0,  0.0, 0.0,  0.0,  0.0,   0.0,   0.0,   -1.75, 0.0, -0.125, 0.0, 1.5,   0.0,   -0.5,
                 0.0,  0.0, 0.0,  0.75, 0.0,   -1.25, 0.0,   1.5,   0.0, -2.5,   0.0, 0.0,   0.0,   0.0,
                 0.0,  0.0, 0.0,  0.0,  0.0,   0.0,   1.625, 0.0,   0.0, 0.0,    0.0, 0.0,   0.875, 0.0,
                 -1.5, 0.0, 1.75, 0.0,  -2.25, 0.0,   0.0,   0.0,   0.0, 0.0,    0.0, 0.0,   0.0,   0.0,
                 0.0,  0.0, 0.0,  0.0,  0.0,   0.125, 0.0,   1.75,  0.0, -0.25,  0.0, 1.375, 0.0,   -0.625},
                x.sizes());
    // kernel 2, stride 1, padding 1, dilation 2
    auto [y2, idx2] =
        max_pool2d_with_indices(x, make_pool2d_params({2, 2}, {1, 1}, {1, 1}, {2, 2}, false, true));
    check_close(y2,
                {-5.75, 3.5,  -5.0,  4.25, -4.25, 5.0,  -4.25, 5.75, -2.75, 6.5,   -2.0, 7.25, -1.25, 7.25,
                 -0.5,  8.75, 0.25,  8.75, 1.0,   5.0,  1.0,   5.75, 2.5,   6.5,   3.25, 7.25, 4.0,   7.25,
                 -0.5,  8.75, 0.25,  8.75, 1.0,   -7.5, 1.0,   -1.5, 7.75,  -0.75, 8.5,  0.0,  8.5,   0.0,
                 4.75,  1.5,  5.5,   2.25, 6.25,  3.0,  6.25,  3.75, 7.75,  4.5,   8.5,  5.25, 8.5,   5.25,
                 -2.5,  6.75, -1.75, 7.5,  -1.0,  8.25, -1.0,  3.75, -4.75, 4.5,   -4.0, 5.25, -3.25, 5.25},
                {1, 2, 5, 7});
    check_equal_ints(
        idx2, {8,  9,  10, 11, 12, 13, 12, 15, 16, 17, 18, 19, 20, 19, 22, 23, 24, 23, 26, 13, 26, 15, 30, 17,
               32, 19, 34, 19, 22, 23, 24, 23, 26, 27, 26, 8,  9,  10, 11, 12, 11, 12, 1,  16, 3,  18, 5,  20,
               5,  22, 9,  24, 11, 26, 11, 26, 29, 30, 31, 32, 33, 34, 33, 22, 23, 24, 25, 26, 27, 26});
  }
}

TEST_CASE("max_pool2d: NaN propagates, channels_last and strided inputs") {
  Tensor x = pool_input(kFloat32).clone();
  x.data_ptr<float>()[9] = std::nanf("");
  auto [y, idx] = max_pool2d_with_indices(x, make_pool2d_params({2, 2}, {2, 2}, {0, 0}, {1, 1}, false, true));
  CHECK(std::isnan(y.to_vector<double>()[0 * 3 + 1]));  // window (0, 1) covers element 9 = (1, 2)
  CHECK(idx.to_vector<int64_t>()[1] == 9);
  // channels_last and sliced inputs give the same result as contiguous ones.
  Tensor base = grid({2, 6, 9, 8}, kFloat32, 40);
  Pool2dParams p = make_pool2d_params({3, 3}, {2, 2}, {1, 1}, {1, 1}, false, true);
  auto [ref_y, ref_i] = max_pool2d_with_indices(base, p);
  auto [cl_y, cl_i] = max_pool2d_with_indices(channels_last(base), p);
  CHECK(is_nhwc(cl_y));
  check_close(cl_y, ref_y.to_vector<double>(), ref_y.sizes());
  check_equal_ints(cl_i, ref_i.to_vector<int64_t>());
  Tensor sliced = grid({2, 12, 9, 8}, kFloat32, 41).slice(1, 0, 12, 2);
  auto [s_y, s_i] = max_pool2d_with_indices(sliced, p);
  auto [c_y, c_i] = max_pool2d_with_indices(sliced.contiguous(), p);
  check_close(s_y, c_y.to_vector<double>(), c_y.sizes());
  check_equal_ints(s_i, c_i.to_vector<int64_t>());
  Tensor gcl = max_pool2d_backward(channels_last(pool_grad(cl_y.sizes(), kFloat32)), cl_i, base.sizes(), p);
  Tensor gref = max_pool2d_backward(pool_grad(cl_y.sizes(), kFloat32), ref_i, base.sizes(), p);
  check_close(gcl, gref.to_vector<double>(), base.sizes());
}

TEST_CASE(
    "max_pool2d's 2x2 fast path under each ISA (baseline, AVX2, AVX-512 in portable builds) matches a window "
    "scan") {
  using cpu::VectorIsa;
  const VectorIsa saved = cpu::vector_isa();
  // 38 columns: 19 outputs per row, a remainder for every vector width. Values are multiples of
  // 1/8 in [-1, 1], so most windows hold ties (the first maximum wins); NaNs sit at each window
  // position, one window holds two (the later one wins, as in PyTorch), and a row ends in one.
  const int64_t N = 2, C = 3, H = 10, W = 38, Ho = H / 2, Wo = W / 2;
  const std::vector<double> base = grid({N, C, H, W}, kFloat64, 43).to_vector<double>();
  for (DType dtype : {kFloat32, kFloat64}) {
    CAPTURE(dtype);
    std::vector<double> x = base;
    for (int64_t i : {int64_t{0}, W + 3, 4 * W + 8, 5 * W + 9, 6 * W + 20, 7 * W + 21, W * H + 2 * W - 1})
      x[static_cast<size_t>(i)] = NAN;
    // The reference: each window scanned in (0,0), (0,1), (1,0), (1,1) order.
    std::vector<double> ref_y;
    std::vector<int64_t> ref_i;
    for (int64_t plane = 0; plane < N * C; ++plane)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          double best = -INFINITY;
          int64_t at = -1;
          for (int64_t i = 0; i < 2; ++i)
            for (int64_t j = 0; j < 2; ++j) {
              const int64_t offset = (2 * oh + i) * W + 2 * ow + j;
              const double v = x[static_cast<size_t>(plane * H * W + offset)];
              if (at < 0 || v > best || std::isnan(v)) {
                best = v;
                at = offset;
              }
            }
          ref_y.push_back(best);
          ref_i.push_back(at);
        }
    const Tensor input = lit(x, {N, C, H, W}).to(dtype);
    for (VectorIsa isa : {VectorIsa::Baseline, VectorIsa::Avx2, VectorIsa::Avx512}) {
      cpu::set_vector_isa(isa);
      const std::string isa_name = cpu::vector_isa_name(cpu::vector_isa());
      CAPTURE(isa_name);
      auto [y, idx] =
          max_pool2d_with_indices(input, make_pool2d_params({2, 2}, {2, 2}, {0, 0}, {1, 1}, false, true));
      check_close(y, ref_y, {N, C, Ho, Wo});
      check_equal_ints(idx, ref_i);
    }
  }
  cpu::set_vector_isa(saved);
}

TEST_CASE("avg_pool2d: ceil_mode and count_include_pad match PyTorch, forward and backward") {
  for (DType t : {kFloat32, kFloat64, kBFloat16}) {
    CAPTURE(t);
    Tensor x = pool_input(t);
    Pool2dParams inc = make_pool2d_params({3, 3}, {2, 2}, {1, 1}, {1, 1}, true, true);
    Pool2dParams exc = make_pool2d_params({3, 3}, {2, 2}, {1, 1}, {1, 1}, true, false);
    Tensor y1 = avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, true, true);
    check_close(y1,
                {-1.25,
                 -1.5,
                 -1.0,
                 -0.4166666666666667,
                 0.75,
                 1.1944444444444444,
                 -0.027777777777777776,
                 0.027777777777777776,
                 0.2777777777777778,
                 -0.19444444444444445,
                 -1.6666666666666667,
                 -0.8611111111111112,
                 0.6388888888888888,
                 1.3333333333333333,
                 1.8333333333333333,
                 -0.5,
                 -0.3611111111111111,
                 -0.4722222222222222,
                 0.2777777777777778,
                 -1.0833333333333333,
                 0.19444444444444445,
                 0.6666666666666666,
                 1.1666666666666667,
                 1.0277777777777777},
                {1, 2, 3, 4});
    Tensor y2 = avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, true, false);
    std::vector<double> y2_expected = {-2.8125,
                                       -2.25,
                                       -1.5,
                                       -0.9375,
                                       1.125,
                                       1.1944444444444444,
                                       -0.027777777777777776,
                                       0.041666666666666664,
                                       0.625,
                                       -0.2916666666666667,
                                       -2.5,
                                       -1.9375,
                                       1.4375,
                                       2.0,
                                       2.75,
                                       -1.125,
                                       -0.5416666666666666,
                                       -0.4722222222222222,
                                       0.2777777777777778,
                                       -1.625,
                                       0.4375,
                                       1.0,
                                       1.75,
                                       2.3125};
    check_close(y2, y2_expected, {1, 2, 3, 4});
    Tensor g = pool_grad({1, 2, 3, 4}, t);
    std::vector<double> gx_exc = {-0.4375,
                                  -0.4583333333333333,
                                  -0.020833333333333332,
                                  0.22916666666666666,
                                  0.25,
                                  0.125,
                                  -0.125,
                                  -0.25,
                                  -0.3680555555555555,
                                  -0.11805555555555555,
                                  0.21527777777777773,
                                  0.3333333333333333,
                                  0.0,
                                  -0.33333333333333337,
                                  0.1875,
                                  0.09027777777777778,
                                  -0.09722222222222222,
                                  -0.013888888888888895,
                                  0.08333333333333333,
                                  -0.125,
                                  -0.20833333333333334,
                                  0.28125,
                                  -0.08680555555555552,
                                  -0.3680555555555555,
                                  -0.2847222222222222,
                                  0.08333333333333333,
                                  0.28125,
                                  0.19791666666666666,
                                  0.09375,
                                  -0.17708333333333331,
                                  -0.2708333333333333,
                                  -0.2708333333333333,
                                  0.0,
                                  0.40625,
                                  0.40625,
                                  -0.09375,
                                  0.11458333333333334,
                                  0.20833333333333334,
                                  0.08333333333333334,
                                  -0.125,
                                  0.09375,
                                  0.21875,
                                  -0.28125,
                                  -0.017361111111111105,
                                  0.2638888888888889,
                                  -0.027777777777777762,
                                  -0.29166666666666663,
                                  -0.05208333333333333,
                                  0.23958333333333334,
                                  -0.1875,
                                  -0.13194444444444445,
                                  0.05555555555555555,
                                  -0.1111111111111111,
                                  -0.16666666666666666,
                                  -0.14583333333333331,
                                  0.020833333333333332,
                                  0.25,
                                  0.2638888888888889,
                                  0.013888888888888888,
                                  0.0763888888888889,
                                  0.0625,
                                  -0.07291666666666666,
                                  -0.13541666666666666,
                                  0.4375,
                                  0.3958333333333333,
                                  -0.041666666666666664,
                                  0.1875,
                                  0.22916666666666666,
                                  0.07291666666666666,
                                  -0.15625};
    if (t != kBFloat16) {  // bf16 grads: sums of rounded terms, checked by the f32/f64 runs
      check_close(avg_pool2d_backward(g, x.sizes(), exc), gx_exc, x.sizes());
      check_close(avg_pool2d_backward(g, x.sizes(), inc),
                  {-0.19444444444444445,
                   -0.20833333333333334,
                   -0.013888888888888888,
                   0.15277777777777776,
                   0.16666666666666666,
                   0.1111111111111111,
                   -0.05555555555555555,
                   -0.06944444444444445,
                   -0.18055555555555558,
                   -0.1111111111111111,
                   0.13888888888888887,
                   0.25,
                   0.055555555555555525,
                   -0.19444444444444445,
                   0.125,
                   0.027777777777777776,
                   -0.09722222222222222,
                   -0.013888888888888895,
                   0.08333333333333333,
                   -0.055555555555555566,
                   -0.1388888888888889,
                   0.16666666666666666,
                   -0.1111111111111111,
                   -0.2777777777777778,
                   -0.19444444444444445,
                   0.08333333333333333,
                   0.12499999999999999,
                   0.04166666666666666,
                   0.041666666666666664,
                   -0.1388888888888889,
                   -0.18055555555555555,
                   -0.18055555555555555,
                   0.0,
                   0.18055555555555555,
                   0.18055555555555555,
                   -0.041666666666666664,
                   0.09722222222222224,
                   0.1388888888888889,
                   0.055555555555555566,
                   -0.08333333333333333,
                   0.013888888888888895,
                   0.09722222222222222,
                   -0.16666666666666666,
                   0.02777777777777779,
                   0.19444444444444445,
                   -0.05555555555555554,
                   -0.25,
                   -0.13888888888888887,
                   0.1111111111111111,
                   -0.125,
                   -0.06944444444444445,
                   0.05555555555555555,
                   -0.1111111111111111,
                   -0.16666666666666666,
                   -0.15277777777777776,
                   0.013888888888888888,
                   0.06944444444444445,
                   0.09722222222222222,
                   0.027777777777777776,
                   0.013888888888888895,
                   -0.013888888888888867,
                   -0.06944444444444442,
                   -0.05555555555555556,
                   0.19444444444444445,
                   0.16666666666666669,
                   -0.027777777777777776,
                   0.125,
                   0.1527777777777778,
                   0.08333333333333334,
                   -0.06944444444444445},
                  x.sizes());
    }
  }
  // ceil_mode overhang: kernel 2, stride 4, padding 1 over 6x6; the overhang beyond the right
  // padding is not counted even with count_include_pad.
  std::vector<double> v(36);
  for (size_t i = 0; i < 36; ++i) v[i] = static_cast<double>(static_cast<int64_t>(i) * 37 % 71 - 35) / 4.0;
  Tensor x6 = lit(v, {1, 1, 6, 6});
  check_close(avg_pool2d(x6, {2, 2}, {4, 4}, {1, 1}, true, true), {-2.1875, -1.5, -0.4375, 0.4375},
              {1, 1, 2, 2});
  check_close(avg_pool2d(x6, {2, 2}, {4, 4}, {1, 1}, true, false), {-8.75, -3.0, -0.875, 0.4375},
              {1, 1, 2, 2});
  Pool2dParams p6 = make_pool2d_params({2, 2}, {4, 4}, {1, 1}, {1, 1}, true, true);
  std::vector<double> g6 = {-0.4375, 0.0, 0.0, -0.03125, -0.03125, 0.0, 0.0,   0.0, 0.0, 0.0,    0.0,    0.0,
                            0.0,     0.0, 0.0, 0.0,      0.0,      0.0, 0.375, 0.0, 0.0, -0.125, -0.125, 0.0,
                            0.375,   0.0, 0.0, -0.125,   -0.125,   0.0, 0.0,   0.0, 0.0, 0.0,    0.0,    0.0};
  check_close(avg_pool2d_backward(pool_grad({1, 1, 2, 2}), x6.sizes(), p6), g6, x6.sizes());
  // channels_last input gives the same values.
  Tensor base = grid({2, 5, 7, 6}, kFloat32, 50);
  Tensor ref = avg_pool2d(base, {3, 3}, {2, 2}, {1, 1}, true, false);
  Tensor cl = avg_pool2d(channels_last(base), {3, 3}, {2, 2}, {1, 1}, true, false);
  CHECK(is_nhwc(cl));
  check_close(cl, ref.to_vector<double>(), ref.sizes());
}

TEST_CASE("adaptive_avg_pool2d: non-divisible sizes match PyTorch, forward and backward") {
  for (DType t : {kFloat32, kFloat64, kFloat16}) {
    CAPTURE(t);
    Tensor x = pool_input(t);
    Tensor y = adaptive_avg_pool2d(x, {3, 4});
    check_close(y,
                {-2.8125,
                 -2.25,
                 -1.5,
                 -0.9375,
                 1.125,
                 1.1944444444444444,
                 -0.027777777777777776,
                 0.041666666666666664,
                 0.625,
                 -0.2916666666666667,
                 -2.5,
                 -1.9375,
                 1.4375,
                 2.0,
                 2.75,
                 -1.125,
                 -0.5416666666666666,
                 -0.47222222222222227,
                 0.2777777777777778,
                 -1.625,
                 0.4375,
                 1.0,
                 1.75,
                 2.3125},
                {1, 2, 3, 4});
  }
  Tensor x = pool_input();
  Tensor gx = adaptive_avg_pool2d_backward(pool_grad({1, 2, 3, 4}), x.sizes());
  Tensor gx_avg = avg_pool2d_backward(pool_grad({1, 2, 3, 4}), x.sizes(),
                                      make_pool2d_params({3, 3}, {2, 2}, {1, 1}, {1, 1}, true, false));
  // Same windows as the exclude-pad average pool above (checked against PyTorch there).
  check_close(gx, gx_avg.to_vector<double>(), x.sizes());
  CHECK(gx.to_vector<double>()[0] == doctest::Approx(-0.4375));
  // Output larger than input (overlapping bins) and global pooling.
  Tensor small = grid({2, 3, 3, 2}, kFloat64, 60);
  Tensor up = adaptive_avg_pool2d(small, {5, 3});
  auto sv = small.to_vector<double>();
  std::vector<double> ref;
  for (int64_t pl = 0; pl < 6; ++pl)
    for (int64_t oh = 0; oh < 5; ++oh)
      for (int64_t ow = 0; ow < 3; ++ow) {
        int64_t h0 = oh * 3 / 5, h1 = ((oh + 1) * 3 + 4) / 5, w0 = ow * 2 / 3, w1 = ((ow + 1) * 2 + 2) / 3;
        double s = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) s += sv[static_cast<size_t>(pl * 6 + h * 2 + w)];
        ref.push_back(s / static_cast<double>((h1 - h0) * (w1 - w0)));
      }
  check_close(up, ref, {2, 3, 5, 3});
  Tensor global = adaptive_avg_pool2d(channels_last(small), {1, 1});
  std::vector<double> means;
  for (int64_t pl = 0; pl < 6; ++pl) {
    double s = 0;
    for (int64_t k = 0; k < 6; ++k) s += sv[static_cast<size_t>(pl * 6 + k)];
    means.push_back(s / 6);
  }
  check_close(global, means, {2, 3, 1, 1});
}

TEST_CASE("pooling: gradient checks against finite differences (float64)") {
  // Distinct values so that no max is tied (finite differences are then exact per window).
  std::vector<double> v(2 * 3 * 7 * 6);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(static_cast<int64_t>(i) * 97 % 251) / 50.0;
  Tensor x = lit(v, {2, 3, 7, 6});
  for (bool ceil : {false, true}) {
    Pool2dParams p = make_pool2d_params({3, 2}, {2, 2}, {1, 1}, {2, 1}, ceil, true);
    auto [y, idx] = max_pool2d_with_indices(x, p);
    std::vector<double> g = pool_grad(y.sizes()).to_vector<double>();
    check_gradient(
        x, g, [&] { return std::get<0>(max_pool2d_with_indices(x, p)); },
        max_pool2d_backward(pool_grad(y.sizes()), idx, x.sizes(), p));
    for (bool include : {false, true}) {
      Pool2dParams a = make_pool2d_params({3, 2}, {2, 3}, {1, 1}, {1, 1}, ceil, include);
      Tensor ya = avg_pool2d(x, a.kernel, a.stride, a.padding, ceil, include);
      std::vector<double> ga = pool_grad(ya.sizes()).to_vector<double>();
      check_gradient(
          x, ga, [&] { return avg_pool2d(x, a.kernel, a.stride, a.padding, ceil, include); },
          avg_pool2d_backward(pool_grad(ya.sizes()), x.sizes(), a));
    }
  }
  Tensor ya = adaptive_avg_pool2d(x, {4, 5});
  std::vector<double> g = pool_grad(ya.sizes()).to_vector<double>();
  check_gradient(
      x, g,
      [&] {
        return adaptive_avg_pool2d(x, {4, 5});
      },
      adaptive_avg_pool2d_backward(pool_grad(ya.sizes()), x.sizes()));
}

TEST_CASE("pooling: bad inputs throw loom::Error naming the op and shapes") {
  Tensor x = grid({1, 2, 4, 4}, kFloat32, 1);
  CHECK_THROWS_WITH_AS(max_pool2d(x, {5, 5}), doctest::Contains("max_pool2d: output size"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(x, {5, 5}), doctest::Contains("[1, 2, 4, 4]"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(x, {2, 2}, {2, 2}, {2, 2}),
                       doctest::Contains("at most half the kernel size"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(x, {0, 2}), doctest::Contains("kernel_size"), Error);
  CHECK_THROWS_WITH_AS(avg_pool2d(grid({2, 4, 4}, kFloat32, 1), {2, 2}),
                       doctest::Contains("avg_pool2d: expected a 4-D input"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(x.to(kInt64), {2, 2}), doctest::Contains("floating"), Error);
  CHECK_THROWS_WITH_AS(adaptive_avg_pool2d(x, {0, 2}),
                       doctest::Contains("adaptive_avg_pool2d: expected an output"), Error);
  Pool2dParams p = make_pool2d_params({2, 2}, {2, 2}, {0, 0}, {1, 1}, false, true);
  auto [y, idx] = max_pool2d_with_indices(x, p);
  CHECK_THROWS_WITH_AS(max_pool2d_backward(y, idx, {1, 2, 6, 6}, p),
                       doctest::Contains("max_pool2d_backward: grad_out shape [1, 2, 2, 2]"), Error);
  Tensor bad = idx.clone();
  bad.data_ptr<int64_t>()[3] = 99;
  CHECK_THROWS_WITH_AS(max_pool2d_backward(y, bad, x.sizes(), p), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(avg_pool2d_backward(y, {1, 2, 6, 6}, p), doctest::Contains("avg_pool2d_backward"),
                       Error);
}

TEST_CASE("max_pool2d 2x2 stride 2 with ceil_mode keeps the last, partial window inside the input") {
  // torch: F.max_pool2d(torch.arange(25.).view(1, 1, 5, 5), 2, ceil_mode=True, return_indices=True)
  Tensor x = arange(25).to(kFloat32).view({1, 1, 5, 5});
  auto [out, indices] = max_pool2d_with_indices(x, make_pool2d_params({2, 2}, {2, 2}, {0, 0}, {1, 1}, true, true));
  check_close(out, {6, 8, 9, 16, 18, 19, 21, 23, 24}, {1, 1, 3, 3});
  CHECK(indices.to_vector<int64_t>() == std::vector<int64_t>{6, 8, 9, 16, 18, 19, 21, 23, 24});
  // Without ceil_mode the fast 2x2 path runs: the same values minus the partial windows.
  check_close(max_pool2d(x, {2, 2}), {6, 8, 16, 18}, {1, 1, 2, 2});
}
