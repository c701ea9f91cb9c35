/*
 * The convolutions composed of conv2d's ops (ops/conv_pool.h): conv1d is conv2d over a height
 * of 1; conv_transpose2d is conv2d's input gradient with the transposed convolution's input as
 * the output gradient (the two are adjoint: <conv2d(y, w), x> = <y, conv_transpose2d(x, w)>),
 * plus a bias; conv_transpose1d is that over a height of 1. Their kernels (oneDNN, cuDNN or
 * Loom's), autocast policy and gradient formulas are conv2d's, so every device and autograd
 * take them as they are. Each checks its own arguments first, so that errors name it.
 */
#include <array>
#include <string_view>

#include "ops/autocast.h"
#include "ops/conv_pool.h"
#include "ops/elementwise.h"
#include "ops/op_utils.h"
#include "ops/view_ops.h"

namespace loom {

namespace {

// A batched input of rank `rank` (or an unbatched one of rank - 1, returned with a batch of 1
// and a true second) for `op`.
std::pair<Tensor, bool> batched(const Tensor& x, int64_t rank, std::string_view op, std::string_view layout) {
  check_defined(x, op);
  LOOM_CHECK(x.dim() == rank || x.dim() == rank - 1, op, ": expected a ", rank, "-D input ", layout, " (or ",
             rank - 1, "-D unbatched), got shape ", x.sizes());
  return {x.dim() == rank ? x : x.unsqueeze(0), x.dim() == rank - 1};
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation, int64_t groups) {
  constexpr std::string_view op = "conv1d";
  auto [input, unbatched] = batched(x, 3, op, "[N, C, L]");
  check_defined(weight, op, "weight");
  LOOM_CHECK(weight.dim() == 3, op, ": expected a 3-D weight [Cout, Cin/groups, k], got shape ",
             weight.sizes());
  const Tensor out =
      conv2d(input.unsqueeze(2), weight.unsqueeze(2), bias, {1, stride}, {0, padding}, {1, dilation}, groups)
          .squeeze(2);
  return unbatched ? out.squeeze(0) : out;
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                        std::array<int64_t, 2> output_padding, int64_t groups,
                        std::array<int64_t, 2> dilation) {
  LOOM_AUTOCAST_LOWER(conv_transpose2d, x, weight, bias, stride, padding, output_padding, groups, dilation);
  constexpr std::string_view op = "conv_transpose2d";
  auto [input, unbatched] = batched(x, 4, op, "[N, C, H, W]");
  check_defined(weight, op, "weight");
  LOOM_CHECK(weight.dim() == 4, op, ": expected a 4-D weight [Cin, Cout/groups, kh, kw], got shape ",
             weight.sizes());
  LOOM_CHECK(groups >= 1 && input.size(1) % groups == 0, op, ": expected groups >= 1 dividing the ",
             input.size(1), " input channels, got groups=", groups);
  LOOM_CHECK(input.size(1) == weight.size(0), op, ": expected the input's ", input.size(1),
             " channels to equal weight.size(0), got weight of shape ", weight.sizes());
  DimVector out_shape{input.size(0), weight.size(1) * groups, 0, 0};
  for (size_t i = 0; i < 2; ++i) {
    LOOM_CHECK(stride[i] >= 1 && dilation[i] >= 1 && padding[i] >= 0 && output_padding[i] >= 0, op,
               ": expected stride and dilation >= 1 and paddings >= 0, got stride (", stride[0], ", ",
               stride[1], "), padding (", padding[0], ", ", padding[1], "), output_padding (",
               output_padding[0], ", ", output_padding[1], "), dilation (", dilation[0], ", ", dilation[1],
               ")");
    // torch also takes an output_padding below the dilation but not the stride; the extra rows
    // then lie beyond what conv2d's input gradient computes, so Loom refuses it.
    LOOM_CHECK(output_padding[i] < stride[i], op, ": output_padding (", output_padding[i],
               ") must be smaller than the stride (", stride[i], ")");
    const int64_t size = (input.size(2 + i) - 1) * stride[i] - 2 * padding[i] +
                         dilation[i] * (weight.size(2 + i) - 1) + output_padding[i] + 1;
    LOOM_CHECK(size >= 1, op, ": the output would be empty (size ", size, " along spatial dim ", i,
               ") for input of shape ", x.sizes(), " and weight of shape ", weight.sizes());
    out_shape[2 + i] = size;
  }
  if (bias.defined())
    LOOM_CHECK(bias.dim() == 1 && bias.size(0) == out_shape[1], op, ": expected a bias of shape [",
               out_shape[1], "], got ", bias.sizes());
  Tensor out =
      conv2d_backward_input(input, weight, out_shape, Conv2dParams{stride, padding, dilation, groups});
  if (bias.defined()) out = out + bias.view({1, out_shape[1], 1, 1});
  return unbatched ? out.squeeze(0) : out;
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride,
                        int64_t padding, int64_t output_padding, int64_t groups, int64_t dilation) {
  constexpr std::string_view op = "conv_transpose1d";
  auto [input, unbatched] = batched(x, 3, op, "[N, C, L]");
  check_defined(weight, op, "weight");
  LOOM_CHECK(weight.dim() == 3, op, ": expected a 3-D weight [Cin, Cout/groups, k], got shape ",
             weight.sizes());
  const Tensor out = conv_transpose2d(input.unsqueeze(2), weight.unsqueeze(2), bias, {1, stride},
                                      {0, padding}, {0, output_padding}, groups, {1, dilation})
                         .squeeze(2);
  return unbatched ? out.squeeze(0) : out;
}

}  // namespace loom
