/*
 * The composite activations of activation_ops.h. Each branch that where() does not select is
 * still computed, and its gradient is multiplied by where's zero: a branch must therefore stay
 * finite everywhere, not just where it is selected (exp(x) for a large x is inf, and 0 * inf
 * would turn the gradient into NaN). The exponentials below clamp their argument for that.
 */
#include "ops/activation_ops.h"

#include <algorithm>
#include <string_view>

#include "ops/elementwise.h"
#include "ops/op_utils.h"
#include "ops/view_ops.h"

namespace loom {

namespace {

void check_activation_input(const Tensor& x, std::string_view op) {
  check_defined(x, op);
  check_floating(x, op);
}

// exp(x) - 1 for x <= 0, without the cancellation of exp(x) - 1 near 0 (expm1's accuracy):
// with t = tanh(x / 2), e^x - 1 = 2t / (1 - t), and 1 - t >= 1 here.
Tensor expm1_nonpositive(const Tensor& x) {
  Tensor t = tanh(mul(x, 0.5));
  return div(mul(t, 2.0), add(neg(t), 1.0));
}

// x > 0 ? x : alpha * expm1(input_scale * x), shared by elu, selu and celu.
Tensor exponential_linear(const Tensor& x, double alpha, double input_scale) {
  Tensor negative = mul(expm1_nonpositive(mul(clamp(x, std::nullopt, 0.0), input_scale)), alpha);
  return where(gt(x, 0.0), x, negative);
}

}  // namespace

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  check_activation_input(x, "leaky_relu");
  return where(gt(x, 0.0), x, mul(x, negative_slope));
}

Tensor elu(const Tensor& x, double alpha) {
  check_activation_input(x, "elu");
  return exponential_linear(x, alpha, 1.0);
}

Tensor selu(const Tensor& x) {
  check_activation_input(x, "selu");
  constexpr double kAlpha = 1.6732632423543772848170429916717;
  constexpr double kScale = 1.0507009873554804934193349852946;
  return mul(exponential_linear(x, kAlpha, 1.0), kScale);
}

Tensor celu(const Tensor& x, double alpha) {
  check_activation_input(x, "celu");
  LOOM_CHECK(alpha != 0.0, "celu: alpha must not be 0 (it divides the input)");
  return exponential_linear(x, alpha, 1.0 / alpha);
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  check_activation_input(x, "softplus");
  LOOM_CHECK(beta != 0.0, "softplus: beta must not be 0 (it divides the result)");
  Tensor scaled = mul(x, beta);
  // Clamped at the threshold so that exp stays finite where the linear branch is taken.
  Tensor smooth = div(log1p(exp(clamp(scaled, std::nullopt, threshold))), beta);
  return where(gt(scaled, threshold), x, smooth);
}

Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  check_activation_input(x, "hardtanh");
  LOOM_CHECK(min_val <= max_val, "hardtanh: min_val (", min_val, ") must not be greater than max_val (",
             max_val, ")");
  // Scalars on the bounds, so that the gradient there is 0 (torch's hardtanh_backward); a NaN
  // fails both comparisons and passes through.
  return where(le(x, min_val), Scalar(min_val), where(ge(x, max_val), Scalar(max_val), x));
}

Tensor relu6(const Tensor& x) {
  check_activation_input(x, "relu6");
  return hardtanh(x, 0.0, 6.0);
}

Tensor hardsigmoid(const Tensor& x) {
  check_activation_input(x, "hardsigmoid");
  return where(le(x, -3.0), Scalar(0.0), where(ge(x, 3.0), Scalar(1.0), add(div(x, 6.0), 0.5)));
}

Tensor hardswish(const Tensor& x) {
  check_activation_input(x, "hardswish");
  // The quadratic's derivative, x / 3 + 1/2, is taken on both closed ends, as torch's.
  Tensor quadratic = div(mul(x, add(x, 3.0)), 6.0);
  return where(lt(x, -3.0), Scalar(0.0), where(le(x, 3.0), quadratic, x));
}

Tensor mish(const Tensor& x) {
  check_activation_input(x, "mish");
  return mul(x, tanh(softplus(x)));
}

Tensor log_sigmoid(const Tensor& x) {
  check_activation_input(x, "log_sigmoid");
  // x - log(1 + e^x) below 0 and -log(1 + e^-x) from 0 up: neither exponent is positive. The
  // clamps keep the other branch finite and pass the gradient on their bound, so that at 0 it
  // is sigmoid(-0) = 1/2.
  Tensor below = sub(x, log1p(exp(clamp(x, std::nullopt, 0.0))));
  Tensor above = neg(log1p(exp(neg(clamp(x, 0.0)))));
  return where(lt(x, 0.0), below, above);
}

Tensor softsign(const Tensor& x) {
  check_activation_input(x, "softsign");
  return div(x, add(abs(x), 1.0));
}

Tensor prelu(const Tensor& x, const Tensor& weight) {
  constexpr std::string_view op = "prelu";
  check_activation_input(x, op);
  check_defined(weight, op, "weight");
  check_same_device(x, weight, op);
  LOOM_CHECK(weight.dtype() == x.dtype(), op, ": expected a weight of the input's dtype ", x.dtype(),
             ", got ", weight.dtype());
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 1;
  LOOM_CHECK(weight.dim() <= 1 && (weight.numel() == 1 || weight.numel() == channels), op,
             ": expected a weight of 1 element or one per channel (", channels, " for input ", x.sizes(),
             "), got weight ", weight.sizes());
  // [C] -> [C, 1, ...] so that it broadcasts along dim 1 of x [N, C, *].
  DimVector shape(static_cast<size_t>(std::max<int64_t>(x.dim() - 1, 1)), 1);
  if (weight.numel() > 1) shape[0] = channels;
  Tensor slope = weight.numel() == 1 ? reshape(weight, {}) : reshape(weight, shape);
  return where(gt(x, 0.0), x, mul(slope, x));
}

}  // namespace loom
