/*
 * The losses of nn/loss.h, written with public ops so that autograd records them.
 * cross_entropy and nll_loss with class indices wrap the primitive nll_loss of the ops layer
 * (which carries ignore_index and the weighted mean); the others are a few elementwise ops
 * and a reduction.
 */
#include "nn/loss.h"

#include <string_view>
#include <vector>

#include "core/grad_mode.h"
#include "ops/autocast.h"
#include "ops/ops.h"

namespace loom::nn {
namespace functional {
namespace {

void check_inputs(const Tensor& input, const Tensor& target, std::string_view op) {
  LOOM_CHECK(input.defined(), op, ": input is an undefined tensor");
  LOOM_CHECK(target.defined(), op, ": target is an undefined tensor");
  LOOM_CHECK(input.device() == target.device(), op, ": expected input and target on the same device, got ",
             input.device(), " and ", target.device());
}

void check_same_shape(const Tensor& input, const Tensor& target, std::string_view op) {
  LOOM_CHECK(input.sizes() == target.sizes(), op, ": expected target of the input's shape ", input.sizes(),
             ", got ", target.sizes());
}

void check_floating(const Tensor& t, std::string_view op, std::string_view what) {
  LOOM_CHECK(t.is_floating_point(), op, ": expected a floating-point ", what, ", got ", t.dtype());
}

// The checks every elementwise loss makes: defined, one device, a floating input (and target,
// where it must be), and the same shape (no broadcasting, see loss.h).
void check_elementwise_inputs(const Tensor& input, const Tensor& target, std::string_view op,
                              bool floating_target) {
  check_inputs(input, target, op);
  check_floating(input, op, "input");
  if (floating_target) check_floating(target, op, "target");
  check_same_shape(input, target, op);
}

Tensor reduce(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::None:
      return loss;
    case Reduction::Sum:
      return loss.sum();
    case Reduction::Mean:
      break;
  }
  return loss.mean();
}

// torch's cross_entropy_loss_prob_target (aten/src/ATen/native/LossNLL.cpp, 1.13):
//   loss_i = -sum_c w_c * t_ic * logp_ic, the mean dividing by the number of samples
//   (input.numel() / C), not by the weights as the class-index form does.
Tensor cross_entropy_probabilities(const Tensor& input, const Tensor& target, const CrossEntropyOptions& o) {
  constexpr std::string_view op = "cross_entropy";
  check_floating(input, op, "input");
  LOOM_CHECK(input.dim() >= 1, op, ": expected input of shape [C], [N, C] or [N, C, d1, ...], got ",
             input.sizes());
  LOOM_CHECK(o.ignore_index < 0, op, ": ignore_index (", o.ignore_index,
             ") is not supported with class-probability targets");
  LOOM_CHECK(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0, op,
             ": label_smoothing must be between 0.0 and 1.0, got ", o.label_smoothing);
  const int64_t class_dim = input.dim() == 1 ? 0 : 1;
  const int64_t classes = input.size(class_dim);
  Tensor logp = input.log_softmax(class_dim);
  Tensor t = target;
  if (o.label_smoothing > 0.0) {
    t = t * (1.0 - o.label_smoothing) + o.label_smoothing / static_cast<double>(classes);
  }
  Tensor terms = logp * t;
  if (o.weight.defined()) {
    LOOM_CHECK(o.weight.is_floating_point() && o.weight.sizes() == IntArrayRef{classes}, op,
               ": expected a floating weight of shape [", classes, "] (one per class), got ", o.weight.dtype(),
               " ", o.weight.sizes());
    DimVector wshape(static_cast<size_t>(input.dim()), 1);
    wshape[class_dim] = classes;
    terms = terms * o.weight.to(logp.dtype()).reshape(wshape);
  }
  switch (o.reduction) {
    case Reduction::None:
      return terms.sum({class_dim}).neg();
    case Reduction::Sum:
      return terms.sum().neg();
    case Reduction::Mean:
      break;
  }
  return terms.sum().neg() / static_cast<double>(input.numel() / classes);
}

void check_weight_broadcasts(const Tensor& w, const Tensor& input, std::string_view op, std::string_view what) {
  if (!w.defined()) return;
  LOOM_CHECK(w.device() == input.device(), op, ": expected ", what, " on the input's device ", input.device(),
             ", got ", w.device());
  LOOM_CHECK(IntArrayRef(broadcast_shapes(w.sizes(), input.sizes(), op)) == input.sizes(), op, ": ", what,
             " of shape ", w.sizes(), " does not broadcast to the input's shape ", input.sizes());
}

// max(log(p), -100), or max(log(1 - p), -100) (with log1p's accuracy for a small p) when
// of_complement, whose gradient stays finite at the pole (p = 0, or 1): the log is taken of 1
// there. A clamp alone would pass 0 to the log's gradient 1 / 0 = inf, and 0 * inf is NaN.
Tensor clamped_log(const Tensor& p, bool of_complement) {
  Tensor at_pole = p.eq(of_complement ? 1.0 : 0.0);
  Tensor safe = where(at_pole, of_complement ? 0.0 : 1.0, p);
  Tensor log = of_complement ? safe.neg().log1p() : safe.log();
  return where(at_pole, -100.0, log.clamp(-100.0));
}

}  // namespace

Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options) {
  check_inputs(input, target, "cross_entropy");
  // torch's rule: a target of the input's shape holds probabilities; any other is indices.
  if (target.is_floating_point()) {
    LOOM_CHECK(input.sizes() == target.sizes(), "cross_entropy: a floating target holds class probabilities "
               "and must have the input's shape ", input.sizes(), ", got ", target.sizes(),
               " (class indices must be int64)");
    return cross_entropy_probabilities(input, target, options);
  }
  return loom::cross_entropy(input, target, options.weight, options.ignore_index, options.label_smoothing,
                             options.reduction);
}

Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossOptions& options) {
  check_inputs(input, target, "nll_loss");
  return loom::nll_loss(input, target, options.weight, options.ignore_index, options.reduction);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  constexpr std::string_view op = "mse_loss";
  check_inputs(input, target, op);
  check_same_shape(input, target, op);
  return loom::mse_loss(input, target, reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  constexpr std::string_view op = "l1_loss";
  check_elementwise_inputs(input, target, op, /*floating_target=*/false);
  return reduce((input - target).abs(), reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  constexpr std::string_view op = "smooth_l1_loss";
  check_elementwise_inputs(input, target, op, /*floating_target=*/false);
  LOOM_CHECK(beta >= 0, op, ": expected beta >= 0, got ", beta);
  if (beta == 0) return l1_loss(input, target, reduction);  // the quadratic part has no width
  Tensor d = input - target;
  Tensor a = d.abs();
  return reduce(where(a.lt(beta), d * d * (0.5 / beta), a - 0.5 * beta), reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  constexpr std::string_view op = "huber_loss";
  check_elementwise_inputs(input, target, op, /*floating_target=*/false);
  LOOM_CHECK(delta > 0, op, ": expected delta > 0, got ", delta);
  Tensor d = input - target;
  Tensor a = d.abs();
  return reduce(where(a.lt(delta), d * d * 0.5, (a - 0.5 * delta) * delta), reduction);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction) {
  // The logs of 16-bit probabilities lose too much: computed in float32 under autocast.
  LOOM_AUTOCAST_FP32(binary_cross_entropy, input, target, weight, reduction);
  constexpr std::string_view op = "binary_cross_entropy";
  check_elementwise_inputs(input, target, op, /*floating_target=*/true);
  check_weight_broadcasts(weight, input, op, "weight");
  if (input.numel() > 0) {
    // A probability outside [0, 1] (or NaN) would give NaN losses silently; torch's CPU kernel
    // refuses it too. The range comes back in one copy, which waits for the input on its device.
    NoGradGuard no_grad;
    const std::vector<double> range = stack({input.amin(), input.amax()}).to(kCPU).to_vector<double>();
    const double lo = range[0], hi = range[1];
    LOOM_CHECK(lo >= 0 && hi <= 1, op, ": expected every element of input to be a probability in [0, 1], got "
               "values in [", lo, ", ", hi, "] (binary_cross_entropy_with_logits takes logits)");
  }
  Tensor loss = (target * clamped_log(input, false) + (1.0 - target) * clamped_log(input, true)).neg();
  if (weight.defined()) loss = loss * weight;
  return reduce(loss, reduction);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BCELossOptions& options) {
  return binary_cross_entropy(input, target, options.weight, options.reduction);
}

// softplus(-x) = log(1 + e^-x) as torch 1.13 writes it: m + log(e^-m + e^(-x-m)) with
// m = max(-x, 0), so neither exponent is positive. The tidier m + log1p(e^-|x|) has the same
// value but kinks at x = 0 in both |x| and m, where autograd's conventions (abs'(0) = 0,
// relu'(0) = 0) would give a gradient of 0 instead of -1/2 — and zero logits are common
// (a zero-initialised head). clamp passes the gradient at its bound, which makes this exact.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight,
                                        const Tensor& pos_weight, Reduction reduction) {
  // Exponentials and logs of 16-bit logits lose too much: computed in float32 under autocast.
  LOOM_AUTOCAST_FP32(binary_cross_entropy_with_logits, input, target, weight, pos_weight, reduction);
  constexpr std::string_view op = "binary_cross_entropy_with_logits";
  check_elementwise_inputs(input, target, op, /*floating_target=*/true);
  check_weight_broadcasts(weight, input, op, "weight");
  check_weight_broadcasts(pos_weight, input, op, "pos_weight");

  Tensor m = input.neg().clamp(0.0);
  Tensor softplus_neg = ((m.neg()).exp() + (input.neg() - m).exp()).log() + m;
  Tensor loss;
  if (pos_weight.defined()) {
    Tensor log_weight = (pos_weight - 1.0) * target + 1.0;
    loss = (1.0 - target) * input + log_weight * softplus_neg;
  } else {
    loss = (1.0 - target) * input + softplus_neg;
  }
  if (weight.defined()) loss = loss * weight;
  return reduce(loss, reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BCEWithLogitsLossOptions& options) {
  return binary_cross_entropy_with_logits(input, target, options.weight, options.pos_weight, options.reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, KLDivReduction reduction, bool log_target) {
  LOOM_AUTOCAST_FP32(kl_div, input, target, reduction, log_target);  // float32 under autocast, as torch
  constexpr std::string_view op = "kl_div";
  check_elementwise_inputs(input, target, op, /*floating_target=*/true);
  Tensor loss;
  if (log_target) {
    loss = target.exp() * (target - input);
  } else {
    // torch's xlogy(t, t) - t * input, with 0 log 0 = 0. Taking the log of 1 where t = 0
    // keeps both the value and the gradient finite there (t * log t would be 0 * -inf).
    Tensor zero = target.eq(0.0);
    Tensor log_t = where(zero, 1.0, target).log();
    loss = target * log_t - target * input;
  }
  switch (reduction) {
    case KLDivReduction::None:
      return loss;
    case KLDivReduction::Sum:
      return loss.sum();
    case KLDivReduction::Mean:
      return loss.mean();
    case KLDivReduction::BatchMean:
      break;
  }
  // torch divides by input.size(0); a 0-dim input is its own batch of one.
  return input.dim() == 0 ? loss.sum() : loss.sum() / static_cast<double>(input.size(0));
}

Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target) {
  KLDivReduction r = reduction == Reduction::None  ? KLDivReduction::None
                     : reduction == Reduction::Sum ? KLDivReduction::Sum
                                                   : KLDivReduction::Mean;
  return kl_div(input, target, r, log_target);
}

}  // namespace functional

// ---- modules ---------------------------------------------------------------------------------

CrossEntropyLoss::CrossEntropyLoss(CrossEntropyOptions options) : options_(std::move(options)) {
  if (options_.weight.defined()) register_buffer("weight", options_.weight);
}

Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target) {
  return functional::cross_entropy(input, target, options_);
}

NLLLoss::NLLLoss(NLLLossOptions options) : options_(std::move(options)) {
  if (options_.weight.defined()) register_buffer("weight", options_.weight);
}

Tensor NLLLoss::forward(const Tensor& input, const Tensor& target) {
  return functional::nll_loss(input, target, options_);
}

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) {
  return functional::mse_loss(input, target, reduction_);
}

Tensor L1Loss::forward(const Tensor& input, const Tensor& target) {
  return functional::l1_loss(input, target, reduction_);
}

SmoothL1Loss::SmoothL1Loss(Reduction reduction, double beta) : reduction_(reduction), beta_(beta) {
  LOOM_CHECK(beta >= 0, "SmoothL1Loss: expected beta >= 0, got ", beta);
}

Tensor SmoothL1Loss::forward(const Tensor& input, const Tensor& target) {
  return functional::smooth_l1_loss(input, target, reduction_, beta_);
}

HuberLoss::HuberLoss(Reduction reduction, double delta) : reduction_(reduction), delta_(delta) {
  LOOM_CHECK(delta > 0, "HuberLoss: expected delta > 0, got ", delta);
}

Tensor HuberLoss::forward(const Tensor& input, const Tensor& target) {
  return functional::huber_loss(input, target, reduction_, delta_);
}

BCELoss::BCELoss(BCELossOptions options) : options_(std::move(options)) {
  if (options_.weight.defined()) register_buffer("weight", options_.weight);
}

Tensor BCELoss::forward(const Tensor& input, const Tensor& target) {
  return functional::binary_cross_entropy(input, target, options_);
}

BCEWithLogitsLoss::BCEWithLogitsLoss(BCEWithLogitsLossOptions options) : options_(std::move(options)) {
  if (options_.weight.defined()) register_buffer("weight", options_.weight);
  if (options_.pos_weight.defined()) register_buffer("pos_weight", options_.pos_weight);
}

Tensor BCEWithLogitsLoss::forward(const Tensor& input, const Tensor& target) {
  return functional::binary_cross_entropy_with_logits(input, target, options_);
}

Tensor KLDivLoss::forward(const Tensor& input, const Tensor& target) {
  return functional::kl_div(input, target, options_.reduction, options_.log_target);
}

}  // namespace loom::nn
