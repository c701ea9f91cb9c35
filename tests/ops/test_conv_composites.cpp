/*
 * conv1d, conv_transpose2d and conv_transpose1d against their definitions (references written
 * as plain loops in float64), against values PyTorch 1.13 gave, and through the adjoint
 * identity <conv2d(y, w), x> = <y, conv_transpose2d(x, w)>; strides, paddings, output
 * paddings, dilations, groups, biases and unbatched inputs; errors that name the op.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

// rnn_reference.py's pattern in float64: sin(seed + 0.61 i) * 0.5 (what the PyTorch values used).
Tensor pattern(IntArrayRef shape, double seed) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(seed + 0.61 * static_cast<double>(i)) * 0.5;
  return make(v, shape, kFloat64);
}

struct Conv1dArgs {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
};

// out[n, o, l] = b[o] + sum_{c, k} x[n, g * cg + c, l * stride - padding + k * dilation] w[o, c, k].
std::vector<double> conv1d_reference(const Tensor& x, const Tensor& w, const Tensor& b, Conv1dArgs a) {
  const int64_t n = x.size(0), cin = x.size(1), len = x.size(2), cout = w.size(0), cg = w.size(1),
                k = w.size(2);
  const int64_t lo = (len + 2 * a.padding - a.dilation * (k - 1) - 1) / a.stride + 1, og = cout / a.groups;
  const std::vector<double> xv = values(x.contiguous()), wv = values(w.contiguous());
  std::vector<double> out(static_cast<size_t>(n * cout * lo));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < cout; ++o)
      for (int64_t l = 0; l < lo; ++l) {
        double s = b.defined() ? b.to_vector<double>()[static_cast<size_t>(o)] : 0.0;
        for (int64_t c = 0; c < cg; ++c)
          for (int64_t t = 0; t < k; ++t) {
            const int64_t at = l * a.stride - a.padding + t * a.dilation;
            if (at < 0 || at >= len) continue;
            s += xv[static_cast<size_t>((i * cin + (o / og) * cg + c) * len + at)] *
                 wv[static_cast<size_t>((o * cg + c) * k + t)];
          }
        out[static_cast<size_t>((i * cout + o) * lo + l)] = s;
      }
  return out;
}

struct TransposeArgs {
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, output_padding{0, 0};
  int64_t groups = 1;
  std::array<int64_t, 2> dilation{1, 1};
};

// Each input element scatters x[n, c, i, j] * w[c, o, p, q] into out[n, g * og + o, i * s - pad +
// p * d, j * s - pad + q * d] (the definition of the transposed convolution), plus the bias.
std::vector<double> conv_transpose2d_reference(const Tensor& x, const Tensor& w, const Tensor& b,
                                               TransposeArgs a) {
  const int64_t n = x.size(0), cin = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t og = w.size(1), kh = w.size(2), kw = w.size(3), cout = og * a.groups, cg = cin / a.groups;
  const int64_t ho =
      (h - 1) * a.stride[0] - 2 * a.padding[0] + a.dilation[0] * (kh - 1) + a.output_padding[0] + 1;
  const int64_t wo =
      (wd - 1) * a.stride[1] - 2 * a.padding[1] + a.dilation[1] * (kw - 1) + a.output_padding[1] + 1;
  const std::vector<double> xv = values(x.contiguous()), wv = values(w.contiguous());
  std::vector<double> out(static_cast<size_t>(n * cout * ho * wo), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < cin; ++c)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t z = 0; z < wd; ++z)
          for (int64_t o = 0; o < og; ++o)
            for (int64_t p = 0; p < kh; ++p)
              for (int64_t q = 0; q < kw; ++q) {
                const int64_t oy = y * a.stride[0] - a.padding[0] + p * a.dilation[0];
                const int64_t oz = z * a.stride[1] - a.padding[1] + q * a.dilation[1];
                if (oy < 0 || oy >= ho || oz < 0 || oz >= wo) continue;
                const int64_t channel = (c / cg) * og + o;
                out[static_cast<size_t>(((i * cout + channel) * ho + oy) * wo + oz)] +=
                    xv[static_cast<size_t>(((i * cin + c) * h + y) * wd + z)] *
                    wv[static_cast<size_t>(((c * og + o) * kh + p) * kw + q)];
              }
  if (b.defined()) {
    const std::vector<double> bv = values(b);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < cout; ++ch)
        for (int64_t s = 0; s < ho * wo; ++s)
          out[static_cast<size_t>((i * cout + ch) * ho * wo + s)] += bv[ch];
  }
  return out;
}

constexpr Tol kTight{1e-12, 1e-12};

}  // namespace

TEST_CASE("conv1d matches its definition and PyTorch, with strides, padding, dilation, groups and bias") {
  // PyTorch 1.13: F.conv1d(pat([1, 2, 5], 4), pat([3, 2, 3], 5), stride=2, padding=1).
  const Tensor y = conv1d(pattern({1, 2, 5}, 4), pattern({3, 2, 3}, 5), {}, 2, 1);
  CHECK(y.sizes() == IntArrayRef{1, 3, 3});
  check_close(y,
              {0.533087585342, 0.845592474719, 0.13306729579, -0.277668935831, -0.697672689294,
               -0.166910987893, -0.05071586949, 0.366417688505, 0.156893622538},
              Tol{0, 1e-11});
  for (Conv1dArgs a :
       {Conv1dArgs{}, Conv1dArgs{2, 1, 1, 1}, Conv1dArgs{1, 2, 2, 2}, Conv1dArgs{3, 0, 1, 4}}) {
    CAPTURE(a.stride);
    CAPTURE(a.dilation);
    CAPTURE(a.groups);
    const Tensor x = pattern({2, 4, 11}, 6), w = pattern({8, 4 / a.groups, 3}, 7), b = pattern({8}, 8);
    check_close(conv1d(x, w, b, a.stride, a.padding, a.dilation, a.groups), conv1d_reference(x, w, b, a),
                kTight);
  }
  const Tensor x = pattern({3, 9}, 9), w = pattern({2, 3, 4}, 10);  // unbatched
  const Tensor u = conv1d(x, w);
  CHECK(u.sizes() == IntArrayRef{2, 6});
  check_close(u, conv1d_reference(x.unsqueeze(0), w, Tensor(), {}), kTight);
}

TEST_CASE("conv_transpose2d matches its definition and PyTorch, and is conv2d's adjoint") {
  // PyTorch 1.13: F.conv_transpose2d(pat([1, 2, 3, 3], 1), pat([2, 1, 3, 3], 2), pat([2], 3),
  // stride=2, padding=1, output_padding=1, groups=2); its first and last row of each channel.
  const TransposeArgs torch_args{{2, 2}, {1, 1}, {1, 1}, 2, {1, 1}};
  const Tensor y = conv_transpose2d(pattern({1, 2, 3, 3}, 1), pattern({2, 1, 3, 3}, 2), pattern({2}, 3),
                                    {2, 2}, {1, 1}, {1, 1}, 2);
  CHECK(y.sizes() == IntArrayRef{1, 2, 6, 6});
  const std::vector<double> v = values(y);
  const std::vector<double> first_row{-0.132051679132, -0.28663717754,  -0.17003771945,
                                      -0.291662029308, -0.121239207104, -0.117339568672};
  const std::vector<double> last_row{-0.145473089315, -0.102244682725, -0.10807441439,
                                     -0.031766490197, -0.113115613031, -0.016784748473};
  for (size_t i = 0; i < 6; ++i) {
    CHECK(v[i] == doctest::Approx(first_row[i]).epsilon(1e-10));
    CHECK(v[60 + i] == doctest::Approx(last_row[i]).epsilon(1e-10));
  }
  check_close(y,
              conv_transpose2d_reference(pattern({1, 2, 3, 3}, 1), pattern({2, 1, 3, 3}, 2), pattern({2}, 3),
                                         torch_args),
              kTight);
  for (TransposeArgs a : {TransposeArgs{}, TransposeArgs{{2, 1}, {0, 1}, {1, 0}, 1, {1, 2}},
                          TransposeArgs{{3, 3}, {2, 1}, {2, 0}, 3, {2, 1}}}) {
    CAPTURE(a.groups);
    const Tensor x = pattern({2, 6, 4, 5}, 11), w = pattern({6, 2, 3, 2}, 12),
                 b = pattern({2 * a.groups}, 13);
    const Tensor out = conv_transpose2d(x, w, b, a.stride, a.padding, a.output_padding, a.groups, a.dilation);
    check_close(out, conv_transpose2d_reference(x, w, b, a), kTight);
    // <conv2d(y, w), x> = <y, conv_transpose2d(x, w)> for any y of the output's shape.
    const Tensor r = pattern(out.sizes(), 14);
    const double lhs = (conv2d(r, w, {}, a.stride, a.padding, a.dilation, a.groups) * x).sum().item<double>();
    const double rhs =
        (r * conv_transpose2d(x, w, {}, a.stride, a.padding, a.output_padding, a.groups, a.dilation))
            .sum()
            .item<double>();
    CHECK(lhs == doctest::Approx(rhs).epsilon(1e-12));
  }
  // Unbatched, and conv_transpose1d as the 2-D op on a height of 1.
  const Tensor x3 = pattern({2, 3, 3}, 15), w3 = pattern({2, 3, 2, 2}, 16);
  check_close(conv_transpose2d(x3, w3), conv_transpose2d_reference(x3.unsqueeze(0), w3, Tensor(), {}),
              kTight);
  const Tensor x1 = pattern({2, 4, 7}, 17), w1 = pattern({4, 3, 3}, 18), b1 = pattern({6}, 19);
  const Tensor t1 = conv_transpose1d(x1, w1, b1, 2, 1, 1, 2, 2);
  check_close(t1,
              conv_transpose2d_reference(x1.unsqueeze(2), w1.unsqueeze(2), b1,
                                         TransposeArgs{{1, 2}, {0, 1}, {0, 1}, 2, {1, 2}}),
              kTight);
}

TEST_CASE("conv1d and the transposed convolutions refuse bad shapes and options, naming the op") {
  const Tensor x = zeros({1, 4, 5, 5}), w = zeros({4, 2, 3, 3});
  CHECK(error_of([&] {
          conv_transpose2d(zeros({4, 5}), w);
        }).find("conv_transpose2d: expected a 4-D input") != std::string::npos);
  CHECK(error_of([&] {
          conv_transpose2d(x, zeros({3, 2, 3, 3}));
        }).find("conv_transpose2d: expected the input's 4 channels to equal weight.size(0)") !=
        std::string::npos);
  CHECK(error_of([&] {
          conv_transpose2d(x, w, {}, {1, 1}, {0, 0}, {1, 0});
        }).find("conv_transpose2d: output_padding (1) must be smaller than the stride (1)") !=
        std::string::npos);
  CHECK(error_of([&] {
          conv_transpose2d(x, w, {}, {1, 1}, {0, 0}, {0, 0}, 3);
        }).find("expected groups >= 1 dividing the 4 input channels") != std::string::npos);
  CHECK(error_of([&] { conv_transpose2d(x, w, zeros({3})); }).find("expected a bias of shape [2]") !=
        std::string::npos);
  CHECK(error_of([&] {
          conv_transpose2d(zeros({1, 4, 1, 1}), zeros({4, 2, 1, 1}), {}, {1, 1}, {1, 1});
        }).find("the output would be empty") != std::string::npos);
  CHECK(error_of([&] {
          conv1d(zeros({2, 3, 4, 5}), zeros({2, 3, 3}));
        }).find("conv1d: expected a 3-D input") != std::string::npos);
  CHECK(error_of([&] {
          conv1d(zeros({2, 3, 5}), zeros({2, 3, 3, 1}));
        }).find("conv1d: expected a 3-D weight") != std::string::npos);
  CHECK(error_of([&] {
          conv_transpose1d(zeros({2, 3, 5}), zeros({3, 3}));
        }).find("conv_transpose1d: expected a 3-D weight") != std::string::npos);
}
