/*
 * Convolution and pooling ops (see conv_pool.h): validation, output shapes and memory formats,
 * then the kernels. Tensors reach the kernels either contiguous (NCHW) or channels_last (NCHW
 * sizes with NHWC strides, as PyTorch's memory_format=channels_last); outputs follow the input's
 * format, so a channels_last network stays channels_last and oneDNN needs no reorders.
 *
 * Autograd: conv2d and the pools record themselves; their formulas call the backward functions
 * below, which record too, with formulas of their own (autograd/formulas/conv_pool.cpp), so
 * that a second derivative goes through them.
 */
#include "ops/conv_pool.h"

#include "ops/autocast.h"
#include "ops/autograd_hook.h"
#include "ops/copy_ops.h"
#include "ops/dispatch.h"
#include "ops/memory_format.h"
#include "ops/op_utils.h"
#include "ops/view_ops.h"

namespace loom {

namespace {

void check_pair(const std::array<int64_t, 2>& v, int64_t min, std::string_view op, std::string_view what) {
  LOOM_CHECK(v[0] >= min && v[1] >= min, op, ": expected ", what, " >= ", min, ", got (", v[0], ", ", v[1],
             ")");
}

void check_sizes_4d(IntArrayRef sizes, std::string_view op, std::string_view what) {
  LOOM_CHECK(sizes.size() == 4, op, ": expected ", what, " to have 4 dims [N, C, H, W], got ", sizes);
  for (int64_t s : sizes) LOOM_CHECK(s >= 0, op, ": negative size in ", what, " ", sizes);
}

void check_conv_params(const Conv2dParams& p, std::string_view op) {
  check_pair(p.stride, 1, op, "stride");
  check_pair(p.dilation, 1, op, "dilation");
  check_pair(p.padding, 0, op, "padding");
  LOOM_CHECK(p.groups >= 1, op, ": expected groups >= 1, got ", p.groups);
}

// The convolution output shape for input sizes x and weight sizes w; checks channels and groups.
DimVector conv_output_shape(IntArrayRef x, IntArrayRef w, const Conv2dParams& p, std::string_view op) {
  const int64_t g = p.groups;
  LOOM_CHECK(x[1] % g == 0, op, ": groups=", g, " does not divide the ", x[1],
             " input channels (input shape ", x, ")");
  LOOM_CHECK(w[0] % g == 0, op, ": groups=", g, " does not divide the ", w[0],
             " output channels (weight shape ", w, ")");
  LOOM_CHECK(w[1] * g == x[1], op, ": weight shape ", w, " with groups=", g, " expects ", w[1] * g,
             " input channels, got input shape ", x);
  DimVector out{x[0], w[0], 0, 0};
  for (int d = 0; d < 2; ++d) {
    const int64_t extent = p.dilation[d] * (w[2 + d] - 1) + 1, padded = x[2 + d] + 2 * p.padding[d];
    LOOM_CHECK(w[2 + d] >= 1 && padded >= extent, op, ": kernel ", w[2], "x", w[3], " (dilation ",
               p.dilation[0], ", ", p.dilation[1], ") is larger than the padded input ",
               x[2] + 2 * p.padding[0], "x", x[3] + 2 * p.padding[1], " (input shape ", x, ", weight shape ",
               w, "): output size would be < 1");
    out[2 + d] = (padded - extent) / p.stride[d] + 1;
  }
  return out;
}

void check_conv_tensor(const Tensor& t, std::string_view op, std::string_view what) {
  check_defined(t, op, what);
  LOOM_CHECK(t.dim() == 4, op, ": expected ", what, " to be 4-D [N, C, H, W], got shape ", t.sizes());
  check_floating(t, op);
}

// ---- pooling ----------------------------------------------------------------------------------

// floor(a / b) for b > 0.
int64_t div_floor(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// PyTorch's pooling_output_shape: with ceil_mode the last window must start inside the input or
// the left padding.
int64_t pool_out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil_mode) {
  int64_t out = div_floor(in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0), stride) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

DimVector pool_output_shape(IntArrayRef x, const Pool2dParams& p, std::string_view op) {
  check_pair(p.kernel, 1, op, "kernel_size");
  check_pair(p.stride, 1, op, "stride");
  check_pair(p.dilation, 1, op, "dilation");
  check_pair(p.padding, 0, op, "padding");
  LOOM_CHECK(p.padding[0] <= p.kernel[0] / 2 && p.padding[1] <= p.kernel[1] / 2, op,
             ": padding should be at most half the kernel size, got padding (", p.padding[0], ", ",
             p.padding[1], ") for kernel (", p.kernel[0], ", ", p.kernel[1], ")");
  DimVector out{x[0], x[1], 0, 0};
  for (int d = 0; d < 2; ++d)
    out[2 + d] = pool_out_size(x[2 + d], p.kernel[d], p.padding[d], p.stride[d], p.dilation[d], p.ceil_mode);
  LOOM_CHECK(out[2] >= 1 && out[3] >= 1, op, ": output size ", out[2], "x", out[3],
             " is too small for input shape ", x, " with kernel (", p.kernel[0], ", ", p.kernel[1],
             "), stride (", p.stride[0], ", ", p.stride[1], "), padding (", p.padding[0], ", ", p.padding[1],
             ")");
  return out;
}

void check_pool_input(const Tensor& x, std::string_view op) {
  check_defined(x, op);
  LOOM_CHECK(x.dim() == 4, op, ": expected a 4-D input [N, C, H, W], got shape ", x.sizes());
  check_floating(x, op);
  LOOM_CHECK(x.size(1) > 0 && x.size(2) > 0 && x.size(3) > 0, op,
             ": expected non-empty channel and spatial dims, got shape ", x.sizes());
}

void check_grad_shape(const Tensor& grad_out, IntArrayRef expected, std::string_view op) {
  LOOM_CHECK(grad_out.sizes() == expected, op, ": grad_out shape ", grad_out.sizes(),
             " does not match the forward output shape ", expected);
}

}  // namespace

// ---- convolution ----------------------------------------------------------------------------------

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, std::array<int64_t, 2> stride,
              std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation, int64_t groups) {
  LOOM_AUTOCAST_LOWER(conv2d, x, weight, bias, stride, padding, dilation, groups);
  constexpr std::string_view op = "conv2d";
  check_conv_tensor(x, op, "input");
  check_conv_tensor(weight, op, "weight");
  check_same_device(x, weight, op);
  LOOM_CHECK(x.dtype() == weight.dtype(), op, ": input dtype ", x.dtype(), " differs from weight dtype ",
             weight.dtype());
  Conv2dParams p{stride, padding, dilation, groups};
  check_conv_params(p, op);
  DimVector out_shape = conv_output_shape(x.sizes(), weight.sizes(), p, op);
  if (bias.defined()) {
    check_same_device(x, bias, op);
    LOOM_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), op, ": expected a bias of shape [",
               weight.size(0), "] for weight shape ", weight.sizes(), ", got ", bias.sizes());
    LOOM_CHECK(bias.dtype() == x.dtype(), op, ": bias dtype ", bias.dtype(), " differs from input dtype ",
               x.dtype());
  }
  if (should_record(x, weight, bias))
    return recorded<Op::conv2d>({x, weight, bias}, p,
                                [&] { return conv2d(x, weight, bias, stride, padding, dilation, groups); });
  const bool cl = is_channels_last(x);
  Tensor xin = in_format(x, cl);
  Tensor w = is_channels_last(weight) ? weight : contiguous(weight);
  Tensor b = bias.defined() ? contiguous(bias) : Tensor();
  Tensor out = empty_4d(out_shape, x.options(), cl);
  if (out.numel() > 0) get_kernel<Op::conv2d>(x.device())(out, xin, w, b, p);
  return out;
}

namespace {
// What both conv backward ops check first: grad_out and `other` (the weight or the input) are
// conv tensors with one device and dtype, `sizes` is a 4-D shape, the params are valid.
void check_conv_backward_args(const Tensor& grad_out, const Tensor& other, std::string_view other_name,
                              IntArrayRef sizes, std::string_view sizes_name, const Conv2dParams& params,
                              std::string_view op) {
  check_conv_tensor(grad_out, op, "grad_out");
  check_conv_tensor(other, op, other_name);
  check_same_device(grad_out, other, op);
  LOOM_CHECK(grad_out.dtype() == other.dtype(), op, ": grad_out dtype ", grad_out.dtype(), " differs from ",
             other_name, " dtype ", other.dtype());
  check_sizes_4d(sizes, op, sizes_name);
  check_conv_params(params, op);
}
}  // namespace

Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, IntArrayRef input_sizes,
                             const Conv2dParams& params) {
  constexpr std::string_view op = "conv2d_backward_input";
  check_conv_backward_args(grad_out, weight, "weight", input_sizes, "input_sizes", params, op);
  check_grad_shape(grad_out, conv_output_shape(input_sizes, weight.sizes(), params, op), op);
  if (should_record(grad_out, weight))
    return recorded<Op::conv2d_backward_input>({grad_out, weight}, params, [&] {
      return conv2d_backward_input(grad_out, weight, input_sizes, params);
    });
  const bool cl = is_channels_last(grad_out);
  Tensor grad_input = empty_4d(input_sizes, grad_out.options(), cl);
  if (grad_input.numel() == 0) return grad_input;
  if (grad_out.numel() == 0) {  // no output pixel reads the input
    fill_(grad_input, 0);
    return grad_input;
  }
  Tensor w = is_channels_last(weight) ? weight : contiguous(weight);
  get_kernel<Op::conv2d_backward_input>(grad_out.device())(grad_input, in_format(grad_out, cl), w, params);
  return grad_input;
}

std::tuple<Tensor, Tensor> conv2d_backward_weight(const Tensor& grad_out, const Tensor& x,
                                                  IntArrayRef weight_sizes, bool with_bias,
                                                  const Conv2dParams& params) {
  constexpr std::string_view op = "conv2d_backward_weight";
  check_conv_backward_args(grad_out, x, "input", weight_sizes, "weight_sizes", params, op);
  check_grad_shape(grad_out, conv_output_shape(x.sizes(), weight_sizes, params, op), op);
  if (should_record(grad_out, x)) {
    std::tuple<Tensor, Tensor> grads;
    {
      AutoGradMode below_autograd(false);
      grads = conv2d_backward_weight(grad_out, x, weight_sizes, with_bias, params);
    }
    if (with_bias)
      record<Op::conv2d_backward_weight>({grad_out, x}, {std::get<0>(grads), std::get<1>(grads)}, params);
    else
      record<Op::conv2d_backward_weight>({grad_out, x}, {std::get<0>(grads)}, params);
    return grads;
  }
  Tensor grad_weight = empty(weight_sizes, x.options());
  Tensor grad_bias = with_bias ? empty({weight_sizes[0]}, x.options()) : Tensor();
  if (grad_weight.numel() == 0 && !with_bias) return {grad_weight, grad_bias};
  // The kernel reads x and grad_out in one format: x's when it is channels_last, else NCHW.
  const bool cl = is_channels_last(x);
  get_kernel<Op::conv2d_backward_weight>(x.device())(grad_weight, grad_bias, in_format(grad_out, cl),
                                                     in_format(x, cl), params);
  return {grad_weight, grad_bias};
}

// ---- pooling --------------------------------------------------------------------------------------

Pool2dParams make_pool2d_params(std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride,
                                std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation,
                                bool ceil_mode, bool count_include_pad) {
  Pool2dParams p;
  p.kernel = kernel_size;
  p.stride = stride[0] == 0 && stride[1] == 0 ? kernel_size : stride;
  p.padding = padding;
  p.dilation = dilation;
  p.ceil_mode = ceil_mode;
  p.count_include_pad = count_include_pad;
  return p;
}

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dParams& params) {
  constexpr std::string_view op = "max_pool2d";
  check_pool_input(x, op);
  DimVector out_shape = pool_output_shape(x.sizes(), params, op);
  if (should_record(x)) {
    std::tuple<Tensor, Tensor> out;
    {
      AutoGradMode below_autograd(false);
      out = max_pool2d_with_indices(x, params);
    }
    record<Op::max_pool2d>({x}, {std::get<0>(out), std::get<1>(out)}, params);
    return out;
  }
  const bool cl = is_channels_last(x);
  Tensor out = empty_4d(out_shape, x.options(), cl);
  Tensor indices = empty_4d(out_shape, x.options().dtype(DType::Int64), cl);
  if (out.numel() > 0) get_kernel<Op::max_pool2d>(x.device())(out, indices, x, params);
  return {out, indices};
}

Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation, bool ceil_mode) {
  return std::get<0>(max_pool2d_with_indices(
      x, make_pool2d_params(kernel_size, stride, padding, dilation, ceil_mode, true)));
}

Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, IntArrayRef input_sizes,
                           const Pool2dParams& params) {
  constexpr std::string_view op = "max_pool2d_backward";
  check_defined(grad_out, op, "grad_out");
  check_defined(indices, op, "indices");
  check_floating(grad_out, op);
  check_same_device(grad_out, indices, op);
  check_sizes_4d(input_sizes, op, "input_sizes");
  LOOM_CHECK(indices.dtype() == DType::Int64, op, ": expected int64 indices, got ", indices.dtype());
  LOOM_CHECK(indices.sizes() == grad_out.sizes(), op, ": indices shape ", indices.sizes(),
             " differs from grad_out shape ", grad_out.sizes());
  check_grad_shape(grad_out, pool_output_shape(input_sizes, params, op), op);
  if (should_record(grad_out))
    return recorded<Op::max_pool2d_backward>({grad_out, indices}, params, [&] {
      return max_pool2d_backward(grad_out, indices, input_sizes, params);
    });
  Tensor grad_input = empty_4d(input_sizes, grad_out.options(), is_channels_last(grad_out));
  if (grad_input.numel() > 0)
    get_kernel<Op::max_pool2d_backward>(grad_out.device())(grad_input, grad_out, indices, params);
  return grad_input;
}

Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding, bool ceil_mode, bool count_include_pad) {
  constexpr std::string_view op = "avg_pool2d";
  check_pool_input(x, op);
  Pool2dParams p = make_pool2d_params(kernel_size, stride, padding, {1, 1}, ceil_mode, count_include_pad);
  DimVector out_shape = pool_output_shape(x.sizes(), p, op);
  if (should_record(x))
    return recorded<Op::avg_pool2d>(
        {x}, p, [&] { return avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad); });
  Tensor out = empty_4d(out_shape, x.options(), is_channels_last(x));
  if (out.numel() > 0) get_kernel<Op::avg_pool2d>(x.device())(out, Tensor(), x, p);
  return out;
}

Tensor avg_pool2d_backward(const Tensor& grad_out, IntArrayRef input_sizes, const Pool2dParams& params) {
  constexpr std::string_view op = "avg_pool2d_backward";
  check_defined(grad_out, op, "grad_out");
  check_floating(grad_out, op);
  check_sizes_4d(input_sizes, op, "input_sizes");
  LOOM_CHECK(params.dilation[0] == 1 && params.dilation[1] == 1, op,
             ": average pooling has no dilation, got (", params.dilation[0], ", ", params.dilation[1], ")");
  check_grad_shape(grad_out, pool_output_shape(input_sizes, params, op), op);
  if (should_record(grad_out))
    return recorded<Op::avg_pool2d_backward>(
        {grad_out}, params, [&] { return avg_pool2d_backward(grad_out, input_sizes, params); });
  Tensor grad_input = empty_4d(input_sizes, grad_out.options(), is_channels_last(grad_out));
  if (grad_input.numel() > 0)
    get_kernel<Op::avg_pool2d_backward>(grad_out.device())(grad_input, grad_out, Tensor(), params);
  return grad_input;
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  constexpr std::string_view op = "adaptive_avg_pool2d";
  check_pool_input(x, op);
  LOOM_CHECK(output_size[0] >= 1 && output_size[1] >= 1, op, ": expected an output size >= 1, got (",
             output_size[0], ", ", output_size[1], ") for input shape ", x.sizes());
  if (should_record(x))
    return recorded<Op::adaptive_avg_pool2d>({x}, NoAttrs{},
                                             [&] { return adaptive_avg_pool2d(x, output_size); });
  Tensor out =
      empty_4d({x.size(0), x.size(1), output_size[0], output_size[1]}, x.options(), is_channels_last(x));
  if (out.numel() > 0) get_kernel<Op::adaptive_avg_pool2d>(x.device())(out, x);
  return out;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, IntArrayRef input_sizes) {
  constexpr std::string_view op = "adaptive_avg_pool2d_backward";
  check_defined(grad_out, op, "grad_out");
  check_floating(grad_out, op);
  check_sizes_4d(input_sizes, op, "input_sizes");
  LOOM_CHECK(grad_out.dim() == 4 && grad_out.size(0) == input_sizes[0] &&
                 grad_out.size(1) == input_sizes[1] && grad_out.size(2) >= 1 && grad_out.size(3) >= 1,
             op, ": grad_out shape ", grad_out.sizes(), " does not fit input_sizes ", input_sizes);
  LOOM_CHECK(input_sizes[2] >= 1 && input_sizes[3] >= 1, op,
             ": expected non-empty spatial dims, got input_sizes ", input_sizes);
  if (should_record(grad_out))
    return recorded<Op::adaptive_avg_pool2d_backward>(
        {grad_out}, NoAttrs{}, [&] { return adaptive_avg_pool2d_backward(grad_out, input_sizes); });
  Tensor grad_input = empty_4d(input_sizes, grad_out.options(), is_channels_last(grad_out));
  if (grad_input.numel() > 0)
    get_kernel<Op::adaptive_avg_pool2d_backward>(grad_out.device())(grad_input, grad_out);
  return grad_input;
}

}  // namespace loom
