/*
 * Batch and layer normalisation (see norm_ops.h): validation, allocation and dispatch.
 *
 * The kernels get contiguous inputs (batch norm: or channels_last 4-D activations, which stay
 * channels_last, ops/memory_format.h), and weight/bias converted to the statistics dtype
 * (float32, or float64 for float64 inputs), so that 16-bit inputs may carry float32
 * parameters; gradients of the parameters come back in the parameters' own dtype.
 */
#include "ops/norm_ops.h"

#include <cfloat>
#include <cmath>
#include <sstream>
#include <utility>

#include "ops/autocast.h"
#include "ops/autograd_hook.h"
#include "ops/copy_ops.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/factories.h"
#include "ops/memory_format.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "ops/view_ops.h"

namespace loom {

namespace {

// Statistics (mean, invstd) and parameters are kept in this dtype inside the kernels.
DType stats_dtype(DType x) {
  return x == kFloat64 ? kFloat64 : kFloat32;
}

// An optional parameter: undefined, or a floating tensor of shape `expected` on x's device.
void check_param(const Tensor& p, const Tensor& x, IntArrayRef expected, std::string_view op,
                 std::string_view what) {
  if (!p.defined()) return;
  check_same_device(p, x, op);
  LOOM_CHECK(p.is_floating_point(), op, ": expected ", what, " to be floating point, got ", p.dtype());
  LOOM_CHECK(p.sizes() == expected, op, ": expected ", what, " of shape ", expected, ", got ", p.sizes(),
             " (input shape ", x.sizes(), ")");
}

// The parameter as the kernels want it: contiguous, in the stats dtype.
Tensor as_stats(const Tensor& p, DType dtype) {
  return p.defined() ? contiguous(to(p, dtype)) : Tensor();
}

// [N, C, *] input checks shared by batch_norm forward and backward.
void check_batch_norm_input(const Tensor& x, std::string_view op) {
  check_defined(x, op);
  check_floating(x, op);
  LOOM_CHECK(x.dim() >= 2, op, ": expected input of shape [N, C, *] (at least 2 dims), got ", x.sizes());
}

// Checks the trailing dims of x against normalized_shape; returns (M, D).
std::pair<int64_t, int64_t> layer_norm_rows(const Tensor& x, IntArrayRef normalized_shape,
                                            std::string_view op) {
  LOOM_CHECK(!normalized_shape.empty(), op, ": expected normalized_shape to have at least 1 dim, got []");
  const int64_t nd = static_cast<int64_t>(normalized_shape.size());
  bool match = x.dim() >= nd;
  for (int64_t i = 0; match && i < nd; ++i) match = x.sizes()[x.dim() - nd + i] == normalized_shape[i];
  if (!match) {
    std::ostringstream dims;
    for (int64_t size : normalized_shape) dims << ", " << size;
    LOOM_FAIL(op, ": given normalized_shape=", normalized_shape, ", expected input with shape [*", dims.str(),
              "], got ", x.sizes());
  }
  int64_t m = 1, d = 1;
  for (int64_t i = 0; i < x.dim(); ++i) (i < x.dim() - nd ? m : d) *= x.sizes()[i];
  return {m, d};
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> batch_norm_forward(const Tensor& x, const Tensor& weight,
                                                      const Tensor& bias, const Tensor& running_mean,
                                                      const Tensor& running_var, bool training,
                                                      double momentum, double eps) {
  // Running statistics are buffers, not inputs: no gradient reaches them.
  if (should_record(x, weight, bias)) {
    Tensor out, save_mean, save_invstd;
    {
      AutoGradMode below_autograd(false);
      std::tie(out, save_mean, save_invstd) =
          batch_norm_forward(x, weight, bias, running_mean, running_var, training, momentum, eps);
    }
    record<Op::batch_norm>({x, weight, bias}, {out, save_mean, save_invstd}, BatchNormAttrs{training, eps});
    // The statistics are constants to the backward: handed out without history (alias), a
    // gradient sent into them cannot be silently dropped.
    return {out, alias(save_mean), alias(save_invstd)};
  }
  constexpr std::string_view op = "batch_norm";
  check_batch_norm_input(x, op);
  const int64_t channels = x.sizes()[1];
  const DimVector c_shape{channels};
  check_param(weight, x, c_shape, op, "weight");
  check_param(bias, x, c_shape, op, "bias");
  check_param(running_mean, x, c_shape, op, "running_mean");
  check_param(running_var, x, c_shape, op, "running_var");
  LOOM_CHECK(eps >= 0, op, ": expected eps >= 0, got ", eps);
  if (training) {
    // PyTorch's rule: one value per channel has no variance. No values (a batch of 0) is allowed.
    LOOM_CHECK(channels == 0 || x.numel() / channels != 1, op,
               ": Expected more than 1 value per channel when training, got input shape ", x.sizes());
  } else {
    LOOM_CHECK(running_mean.defined() && running_var.defined(), op,
               ": running_mean and running_var must be defined in evaluation mode");
  }
  const DType sd = stats_dtype(x.dtype());
  const bool channels_last = is_channels_last(x);
  Tensor xc = in_format(x, channels_last);
  Tensor out = empty_4d(x.sizes(), x.options(), channels_last);
  Tensor save_mean = empty(c_shape, x.options().dtype(sd));
  Tensor save_invstd = empty(c_shape, x.options().dtype(sd));
  if (training && x.numel() == 0) {
    // A batch of 0, as PyTorch treats it: an empty output, running statistics left as they are
    // (there is no batch statistic to blend in), and the batch's mean and 1/std undefined (NaN,
    // as mean() of nothing is); the backward gives zero gradients to weight and bias.
    fill_(save_mean, NAN);
    fill_(save_invstd, NAN);
    return {out, save_mean, save_invstd};
  }
  get_kernel<Op::batch_norm>(x.device())(out, save_mean, save_invstd, xc, as_stats(weight, sd),
                                         as_stats(bias, sd), running_mean, running_var, training, momentum,
                                         eps);
  if (training) {
    if (running_mean.defined()) running_mean.storage()->bump_version();
    if (running_var.defined()) running_var.storage()->bump_version();
  }
  return {out, save_mean, save_invstd};
}

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps) {
  return std::get<0>(batch_norm_forward(x, weight, bias, running_mean, running_var, training, momentum, eps));
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& grad_out, const Tensor& x,
                                                       const Tensor& weight, const Tensor& save_mean,
                                                       const Tensor& save_invstd) {
  // Recorded like a forward op: its formula (autograd/formulas/norm.cpp) differentiates it again.
  if (should_record(grad_out, x, weight, save_mean, save_invstd)) {
    std::tuple<Tensor, Tensor, Tensor> grads;
    {
      AutoGradMode below_autograd(false);
      grads = batch_norm_backward(grad_out, x, weight, save_mean, save_invstd);
    }
    auto& [grad_input, grad_weight, grad_bias] = grads;
    if (weight.defined())
      record<Op::batch_norm_backward>({grad_out, x, weight, save_mean, save_invstd},
                                      {grad_input, grad_weight, grad_bias}, NoAttrs{});
    else  // no parameter gradients
      record<Op::batch_norm_backward>({grad_out, x, weight, save_mean, save_invstd}, {grad_input}, NoAttrs{});
    return grads;
  }
  constexpr std::string_view op = "batch_norm_backward";
  check_batch_norm_input(x, op);
  check_defined(grad_out, op, "grad_out");
  check_same_device(grad_out, x, op);
  LOOM_CHECK(grad_out.sizes() == x.sizes(), op, ": expected grad_out of the input's shape ", x.sizes(),
             ", got ", grad_out.sizes());
  const int64_t channels = x.sizes()[1];
  const DimVector c_shape{channels};
  check_defined(save_mean, op, "save_mean");
  check_defined(save_invstd, op, "save_invstd");
  check_param(weight, x, c_shape, op, "weight");
  check_param(save_mean, x, c_shape, op, "save_mean");
  check_param(save_invstd, x, c_shape, op, "save_invstd");
  const DType sd = stats_dtype(x.dtype());
  // The gradient takes x's format: channels_last stays channels_last, as in the forward.
  const bool channels_last = is_channels_last(x);
  Tensor grad_input = empty_4d(x.sizes(), x.options(), channels_last);
  Tensor grad_weight, grad_bias;
  if (weight.defined()) {
    grad_weight = empty(c_shape, x.options().dtype(sd));
    grad_bias = empty(c_shape, x.options().dtype(sd));
  }
  if (x.numel() == 0) {
    // Sums over no values, whatever the (undefined) statistics of a batch of 0 are.
    if (weight.defined()) {
      fill_(grad_weight, 0);
      fill_(grad_bias, 0);
    }
  } else {
    get_kernel<Op::batch_norm_backward>(x.device())(
        grad_input, grad_weight, grad_bias, in_format(to(grad_out, x.dtype()), channels_last),
        in_format(x, channels_last), as_stats(weight, sd), as_stats(save_mean, sd), as_stats(save_invstd, sd));
  }
  if (weight.defined()) {
    grad_weight = to(grad_weight, weight.dtype());
    grad_bias = to(grad_bias, weight.dtype());
  }
  return {grad_input, grad_weight, grad_bias};
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_forward(const Tensor& x, IntArrayRef normalized_shape,
                                                      const Tensor& weight, const Tensor& bias, double eps) {
  LOOM_AUTOCAST_FP32(layer_norm_forward, x, normalized_shape, weight, bias, eps);
  if (should_record(x, weight, bias)) {
    Tensor out, mean, rstd;
    {
      AutoGradMode below_autograd(false);
      std::tie(out, mean, rstd) = layer_norm_forward(x, normalized_shape, weight, bias, eps);
    }
    record<Op::layer_norm>({x, weight, bias}, {out, mean, rstd},
                           LayerNormAttrs{DimVector(normalized_shape), eps});
    return {out, alias(mean), alias(rstd)};  // constants to the backward, as in batch_norm
  }
  constexpr std::string_view op = "layer_norm";
  check_defined(x, op);
  check_floating(x, op);
  auto [m, d] = layer_norm_rows(x, normalized_shape, op);
  check_param(weight, x, normalized_shape, op, "weight");
  check_param(bias, x, normalized_shape, op, "bias");
  LOOM_CHECK(eps >= 0, op, ": expected eps >= 0, got ", eps);
  const DType sd = stats_dtype(x.dtype());
  const DimVector lead(IntArrayRef(x.sizes().data(), x.sizes().size() - normalized_shape.size()));
  Tensor out = empty(x.sizes(), x.options());
  Tensor mean = empty(lead, x.options().dtype(sd));
  Tensor rstd = empty(lead, x.options().dtype(sd));
  if (x.numel() == 0) {  // no values to normalise: statistics are undefined
    fill_(mean, NAN);
    fill_(rstd, NAN);
    return {out, mean, rstd};
  }
  get_kernel<Op::layer_norm>(x.device())(out.view({m, d}), mean.view({m}), rstd.view({m}),
                                         contiguous(x).view({m, d}), as_stats(weight, sd), as_stats(bias, sd),
                                         eps);
  return {out, mean, rstd};
}

Tensor layer_norm(const Tensor& x, IntArrayRef normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  return std::get<0>(layer_norm_forward(x, normalized_shape, weight, bias, eps));
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_backward(const Tensor& grad_out, const Tensor& x,
                                                       IntArrayRef normalized_shape, const Tensor& mean,
                                                       const Tensor& rstd, const Tensor& weight) {
  // Recorded like a forward op: its formula (autograd/formulas/norm.cpp) differentiates it again.
  if (should_record(grad_out, x, mean, rstd, weight)) {
    std::tuple<Tensor, Tensor, Tensor> grads;
    {
      AutoGradMode below_autograd(false);
      grads = layer_norm_backward(grad_out, x, normalized_shape, mean, rstd, weight);
    }
    auto& [grad_input, grad_weight, grad_bias] = grads;
    record<Op::layer_norm_backward>({grad_out, x, mean, rstd, weight}, {grad_input, grad_weight, grad_bias},
                                    LayerNormAttrs{DimVector(normalized_shape), /*eps: unused here*/ 0.0});
    return grads;
  }
  constexpr std::string_view op = "layer_norm_backward";
  check_defined(x, op);
  check_floating(x, op);
  check_defined(grad_out, op, "grad_out");
  check_same_device(grad_out, x, op);
  LOOM_CHECK(grad_out.sizes() == x.sizes(), op, ": expected grad_out of the input's shape ", x.sizes(),
             ", got ", grad_out.sizes());
  auto [m, d] = layer_norm_rows(x, normalized_shape, op);
  check_defined(mean, op, "mean");
  check_defined(rstd, op, "rstd");
  check_same_device(mean, x, op);
  check_same_device(rstd, x, op);
  LOOM_CHECK(mean.numel() == m && rstd.numel() == m, op, ": expected mean and rstd with ", m,
             " elements (the input's leading dims), got shapes ", mean.sizes(), " and ", rstd.sizes());
  check_param(weight, x, normalized_shape, op, "weight");
  const DType sd = stats_dtype(x.dtype());
  Tensor grad_input = empty(x.sizes(), x.options());
  Tensor grad_weight = empty(normalized_shape, x.options().dtype(sd));
  Tensor grad_bias = empty(normalized_shape, x.options().dtype(sd));
  if (x.numel() == 0) {
    fill_(grad_weight, 0);
    fill_(grad_bias, 0);
  } else {
    get_kernel<Op::layer_norm_backward>(x.device())(
        grad_input.view({m, d}), grad_weight.view({d}), grad_bias.view({d}),
        contiguous(to(grad_out, x.dtype())).view({m, d}), contiguous(x).view({m, d}),
        as_stats(mean, sd).view({m}), as_stats(rstd, sd).view({m}), as_stats(weight, sd));
  }
  const DType param_dtype = weight.defined() ? weight.dtype() : x.dtype();
  return {grad_input, to(grad_weight, param_dtype), to(grad_bias, param_dtype)};
}

// ---- composites ------------------------------------------------------------------------------

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  LOOM_AUTOCAST_FP32(group_norm, x, num_groups, weight, bias, eps);
  constexpr std::string_view op = "group_norm";
  check_defined(x, op);
  check_floating(x, op);
  LOOM_CHECK(x.dim() >= 2, op, ": expected input [N, C, *] with at least 2 dims, got ", x.sizes());
  const int64_t n = x.size(0), channels = x.size(1);
  LOOM_CHECK(num_groups >= 1 && channels % num_groups == 0, op, ": expected num_groups to divide the ", channels,
             " channels of input ", x.sizes(), ", got num_groups=", num_groups);
  check_param(weight, x, {channels}, op, "weight");
  check_param(bias, x, {channels}, op, "bias");
  // Each (sample, group) is one row of layer_norm: its channels are consecutive, and with their
  // positions they are contiguous in x [N, C, *].
  const int64_t group_size = x.numel() == 0 ? 0 : x.numel() / (n * num_groups);
  Tensor y = reshape(layer_norm(reshape(x, {n, num_groups, group_size}), {group_size}, {}, {}, eps), x.sizes());
  DimVector per_channel(static_cast<size_t>(x.dim() - 1), 1);  // [C, 1, ...] broadcasts along dim 1
  per_channel[0] = channels;
  if (weight.defined()) y = mul(y, reshape(weight, per_channel));
  if (bias.defined()) y = add(y, reshape(bias, per_channel));
  return to(y, x.dtype());  // float32 parameters do not widen a 16-bit input's result
}

Tensor rms_norm(const Tensor& x, IntArrayRef normalized_shape, const Tensor& weight, std::optional<double> eps) {
  constexpr std::string_view op = "rms_norm";
  check_defined(x, op);
  check_floating(x, op);
  layer_norm_rows(x, normalized_shape, op);  // throws unless x ends in normalized_shape
  check_param(weight, x, normalized_shape, op, "weight");
  const DType compute = stats_dtype(x.dtype());
  const double e = eps ? *eps : (compute == kFloat64 ? DBL_EPSILON : FLT_EPSILON);
  LOOM_CHECK(e >= 0, op, ": expected eps >= 0, got ", e);
  DimVector dims;
  for (int64_t d = x.dim() - static_cast<int64_t>(normalized_shape.size()); d < x.dim(); ++d) dims.push_back(d);
  Tensor xc = to(x, compute);
  Tensor out = to(mul(xc, rsqrt(add(mean(mul(xc, xc), dims, /*keepdim=*/true), e))), x.dtype());
  return weight.defined() ? mul(out, weight) : out;
}

}  // namespace loom
