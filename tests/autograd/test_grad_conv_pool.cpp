/*
 * Gradients of conv2d and the pools beyond gradcheck: float32 (oneDNN) against the float64
 * reference path, ties in max pooling, values by hand, and second derivatives through their
 * backward functions against composites of matmul and reductions.
 */
#include "tests/autograd/autograd_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

Tensor to32(const Tensor& t) {
  return t.detach().to(kFloat32).requires_grad_();
}

// Gradients of sum(conv2d(x, w, b) * r) in float32 against float64, for the same values.
void check_conv_float32(IntArrayRef x_shape, IntArrayRef w_shape, std::array<int64_t, 2> stride,
                        std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation, int64_t groups,
                        bool channels_last) {
  Tensor x64 = leaf(x_shape, 41), w64 = leaf(w_shape, 42), b64 = leaf({w_shape[0]}, 43);
  if (channels_last)
    x64 = x64.detach().permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}).requires_grad_();
  Tensor y64 = conv2d(x64, w64, b64, stride, padding, dilation, groups);
  Tensor r = make(random_values(y64.numel(), 44), y64.sizes());
  auto g64 = autograd::grad({(y64 * r).sum()}, {x64, w64, b64});
  Tensor x32 = to32(x64), w32 = to32(w64), b32 = to32(b64);
  if (channels_last)
    x32 = x32.detach().permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}).requires_grad_();
  auto g32 = autograd::grad(
      {(conv2d(x32, w32, b32, stride, padding, dilation, groups) * r.to(kFloat32)).sum()}, {x32, w32, b32});
  const Tol tol{1e-4, 1e-4};  // float32 sums of up to a few hundred products
  for (size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(g32[i].dtype() == kFloat32);
    CHECK(g32[i].sizes() == g64[i].sizes());
    check_close(g32[i], values(g64[i]), tol);
  }
}

}  // namespace

TEST_CASE("float32 conv2d gradients match the float64 reference") {
  SUBCASE("3x3, padding 1") {
    check_conv_float32({2, 3, 6, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, false);
  }
  SUBCASE("stride 2, dilation 2") {
    check_conv_float32({1, 4, 9, 8}, {6, 4, 3, 2}, {2, 2}, {2, 1}, {2, 2}, 1, false);
  }
  SUBCASE("groups 2") {
    check_conv_float32({2, 4, 5, 5}, {6, 2, 3, 3}, {1, 2}, {1, 1}, {1, 1}, 2, false);
  }
  SUBCASE("one input channel") {
    check_conv_float32({2, 1, 7, 7}, {8, 1, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1, false);
  }
  SUBCASE("channels_last") {
    check_conv_float32({2, 8, 5, 5}, {4, 8, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true);
  }
}

namespace {

// Squared, so that pooling (linear in x) has a second derivative.
Tensor square(const Tensor& t) { return t * t; }

// [N, C, 4, 4] -> [N, C, 2, 2, 4]: each 2x2 window of stride 2 in the last dim.
Tensor windows_2x2(const Tensor& x) {
  return x.reshape({x.size(0), x.size(1), 2, 2, 2, 2}).permute({0, 1, 2, 4, 3, 5}).reshape(
      {x.size(0), x.size(1), 2, 2, 4});
}

}  // namespace

TEST_CASE("second derivatives through conv2d and the pools match composites of matmul and reductions") {
  SUBCASE("conv2d with a 1x1 kernel is a matmul over channels") {
    check_same_second_derivative(
        {leaf({2, 3, 2, 2}, 51), leaf({4, 3, 1, 1}, 52), leaf({4}, 53)},
        [](const auto& x) { return square(conv2d(x[0], x[1], x[2])); },
        [](const auto& x) {
          Tensor rows = x[0].permute({0, 2, 3, 1}).matmul(x[1].view({4, 3}).t()) + x[2];
          return square(rows.permute({0, 3, 1, 2}));
        });
  }
  Tensor x = leaf({1, 2, 4, 4}, 54);
  SUBCASE("max_pool2d 2x2 is amax over each window") {
    check_same_second_derivative(
        {x}, [](const auto& t) { return square(max_pool2d(t[0], {2, 2})); },
        [](const auto& t) { return square(windows_2x2(t[0]).amax({4})); });
  }
  SUBCASE("avg_pool2d 2x2 is the mean of each window") {
    check_same_second_derivative(
        {x}, [](const auto& t) { return square(avg_pool2d(t[0], {2, 2})); },
        [](const auto& t) { return square(windows_2x2(t[0]).mean({4})); });
  }
  SUBCASE("adaptive_avg_pool2d to 2x2 of a 4x4 is the mean of each window") {
    check_same_second_derivative(
        {x}, [](const auto& t) { return square(adaptive_avg_pool2d(t[0], {2, 2})); },
        [](const auto& t) { return square(windows_2x2(t[0]).mean({4})); });
  }
}

TEST_CASE("max_pool2d gives a tied window's gradient to the element whose index it returned") {
  Tensor x = make({1, 1, 0, 2, 1, 1, 2, 0, 4, 3, 3, 3, 3, 3, 3, 3}, {1, 1, 4, 4}).requires_grad_();
  auto [y, indices] =
      max_pool2d_with_indices(x, make_pool2d_params({2, 2}, {2, 2}, {0, 0}, {1, 1}, false, true));
  CHECK_FALSE(indices.requires_grad());
  check_close(y, {1, 2, 4, 3});
  check_close(autograd::grad({y.sum()}, {x})[0], {1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0});
}

TEST_CASE("overlapping max_pool2d windows add their gradients") {
  Tensor x = make({0, 0, 0, 0, 9, 0, 0, 0, 0}, {1, 1, 3, 3}).requires_grad_();
  Tensor y = max_pool2d(x, {2, 2}, {1, 1});  // all four windows pick the centre
  check_close(autograd::grad({y.sum()}, {x})[0], {0, 0, 0, 0, 4, 0, 0, 0, 0});
}

TEST_CASE("avg_pool2d and adaptive_avg_pool2d gradients by hand") {
  Tensor x = leaf({1, 1, 3, 3}, 61);
  // 3x3, padding 1, count_include_pad: every window divides by 9; corners are in 4 windows, edges
  // in 6, the centre in 9
  check_close(autograd::grad({avg_pool2d(x, {3, 3}, {1, 1}, {1, 1}).sum()}, {x})[0],
              {4.0 / 9, 6.0 / 9, 4.0 / 9, 6.0 / 9, 1, 6.0 / 9, 4.0 / 9, 6.0 / 9, 4.0 / 9});
  // without count_include_pad the corner windows hold 1 element, the edge windows 2
  check_close(autograd::grad({avg_pool2d(x, {2, 2}, {2, 2}, {1, 1}, false, false).sum()}, {x})[0],
              {1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.5, 0.25, 0.25});
  // 3 -> 2 adaptive bins [0, 2) and [1, 3) overlap on the middle row and column
  check_close(autograd::grad({adaptive_avg_pool2d(x, {2, 2}).sum()}, {x})[0],
              {0.25, 0.5, 0.25, 0.5, 1, 0.5, 0.25, 0.5, 0.25});
}

TEST_CASE("conv2d of tensors that need no gradient records nothing") {
  Tensor x = leaf({1, 1, 3, 3}, 71).detach(), w = leaf({1, 1, 2, 2}, 72).detach();
  Tensor y = conv2d(x, w);
  CHECK_FALSE(y.requires_grad());
  CHECK(y.sizes() == IntArrayRef{1, 1, 2, 2});
}

TEST_CASE("recording keeps the ops' own errors") {
  Tensor x = leaf({1, 3, 4, 4}, 81), w = leaf({2, 2, 3, 3}, 82);
  CHECK_THROWS_WITH_AS(conv2d(x, w), doctest::Contains("conv2d: weight shape"), Error);
  CHECK_THROWS_WITH_AS(max_pool2d(x, {5, 5}), doctest::Contains("max_pool2d: output size"), Error);
  CHECK_THROWS_WITH_AS(avg_pool2d(x, {2, 2}, {0, 0}, {2, 2}), doctest::Contains("avg_pool2d: padding"), Error);
}
