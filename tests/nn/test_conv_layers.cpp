/*
 * Conv1d, ConvTranspose1d and ConvTranspose2d as torch.nn's: parameter shapes, the default
 * initialisation bound (fan_in from the weight's layout, as torch), printing (strings torch
 * 1.13 printed), forward equal to the functional ops they wrap, padding modes, and errors.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "nn/layers/conv1d.h"
#include "nn/layers/conv_transpose.h"
#include "ops/ops.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

double largest(const Tensor& t) {
  return t.abs().max().item<double>();
}

}  // namespace

TEST_CASE("Conv1d: torch's shapes, init bound and printing, and loom::conv1d with each padding mode") {
  nn::Conv1d conv(3, 8, 5, {.padding = 2, .padding_mode = "reflect"});
  CHECK(conv.weight.sizes() == IntArrayRef{8, 3, 5});
  CHECK(conv.bias.sizes() == IntArrayRef{8});
  // torch: Conv1d(3, 8, kernel_size=(5,), stride=(1,), padding=(2,), padding_mode=reflect)
  CHECK(conv.extra_repr() == "3, 8, kernel_size=(5,), stride=(1,), padding=(2,), padding_mode=reflect");
  const double bound = 1 / std::sqrt(15.0);  // fan_in = 3 * 5
  CHECK(largest(conv.weight) <= bound);
  CHECK(largest(conv.weight) > 0.8 * bound);
  CHECK(largest(conv.bias) <= bound);
  const Tensor x = pat({2, 3, 9}, 1.0);
  check_close(conv.forward(x), values(conv1d(pad(x, {2, 2}, "reflect"), conv.weight, conv.bias)),
              tol_for(kFloat32));
  nn::Conv1d zeros_mode(3, 4, 3, {.stride = 2, .padding = 1, .dilation = 2, .groups = 1, .bias = false});
  CHECK(zeros_mode.extra_repr() ==
        "3, 4, kernel_size=(3,), stride=(2,), padding=(1,), dilation=(2,), bias=False");
  check_close(zeros_mode.forward(x), values(conv1d(x, zeros_mode.weight, {}, 2, 1, 2)), tol_for(kFloat32));
  CHECK(zeros_mode.forward(x.select(0, 0)).sizes() == IntArrayRef{4, 4});  // unbatched
}

TEST_CASE("ConvTranspose2d and ConvTranspose1d: torch's shapes, init bound and printing, and their ops") {
  nn::ConvTranspose2d up(16, 8, 3, {.stride = 2, .padding = 1, .output_padding = 1, .bias = false});
  CHECK(up.weight.sizes() == IntArrayRef{16, 8, 3, 3});  // [in, out / groups, kh, kw]
  // torch: ConvTranspose2d(16, 8, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1),
  // output_padding=(1, 1), bias=False)
  CHECK(up.extra_repr() ==
        "16, 8, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), output_padding=(1, 1), bias=False");
  const double bound = 1 / std::sqrt(72.0);  // torch's fan_in for this layout: 8 * 3 * 3
  CHECK(largest(up.weight) <= bound);
  CHECK(largest(up.weight) > 0.8 * bound);
  const Tensor x = pat({2, 16, 4, 5}, 2.0);
  const Tensor y = up.forward(x);
  CHECK(y.sizes() == IntArrayRef{2, 8, 8, 10});  // (4 - 1) * 2 - 2 + 2 + 1 + 1
  check_close(y, values(conv_transpose2d(x, up.weight, {}, {2, 2}, {1, 1}, {1, 1})), tol_for(kFloat32));

  nn::ConvTranspose1d up1(4, 6, 3, {.groups = 2, .dilation = 2});
  CHECK(up1.weight.sizes() == IntArrayRef{4, 3, 3});
  // torch: ConvTranspose1d(4, 6, kernel_size=(3,), stride=(1,), dilation=(2,), groups=2)
  CHECK(up1.extra_repr() == "4, 6, kernel_size=(3,), stride=(1,), dilation=(2,), groups=2");
  const Tensor x1 = pat({4, 7}, 3.0);  // unbatched
  const Tensor y1 = up1.forward(x1);
  CHECK(y1.sizes() == IntArrayRef{6, 11});
  check_close(y1, values(conv_transpose1d(x1, up1.weight, up1.bias, 1, 0, 0, 2, 2)), tol_for(kFloat32));
}

TEST_CASE("the new convolution layers refuse bad options and inputs, naming the layer") {
  CHECK(error_of([] {
          nn::Conv1d(3, 4, 3, {.groups = 2});
        }).find("Conv1d: in_channels=3 and out_channels=4") != std::string::npos);
  CHECK(error_of([] {
          nn::Conv1d(3, 4, 0);
        }).find("Conv1d: expected kernel_size, stride and dilation >= 1") != std::string::npos);
  CHECK(error_of([] {
          nn::Conv1d(3, 4, 3, {.padding_mode = "same"});
        }).find("Conv1d: padding_mode must be") != std::string::npos);
  CHECK(error_of([] {
          nn::ConvTranspose2d(4, 4, 3, {.stride = 2, .output_padding = 2});
        }).find("ConvTranspose2d: output_padding (2) must be smaller than the stride (2)") !=
        std::string::npos);
  CHECK(error_of([] {
          nn::ConvTranspose1d(4, 3, 3, {.groups = 2});
        }).find("ConvTranspose1d: in_channels=4 and out_channels=3 must be divisible by groups=2") !=
        std::string::npos);
  nn::Conv1d conv(3, 4, 3);
  CHECK(error_of([&] {
          conv.forward(zeros({2, 5, 9}));
        }).find("Conv1d(3, 4, kernel_size=(3,), stride=(1,)): expected 3 input channels") !=
        std::string::npos);
  nn::ConvTranspose2d up(4, 2, 3);
  CHECK(error_of([&] {
          up.forward(zeros({1, 3, 5, 5}));
        }).find("expected input [N, 4, H, W] or [4, H, W]") != std::string::npos);
}
