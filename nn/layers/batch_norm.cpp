/*
 * BatchNorm: torch's _BatchNorm.forward around loom::batch_norm, which normalises and updates
 * the running statistics in place in one pass. This layer decides which statistics to use and
 * keeps num_batches_tracked, which the cumulative average (momentum = None) divides by.
 */
#include "nn/layers/batch_norm.h"

#include "core/grad_mode.h"
#include "nn/init.h"
#include "nn/layers/repr.h"
#include "ops/ops.h"

namespace loom::nn {

BatchNormBase::BatchNormBase(const char* layer, int64_t num_features, double eps,
                             std::optional<double> momentum, bool affine, bool track_running_stats)
    : num_features_(num_features),
      eps_(eps),
      momentum_(momentum),
      affine_(affine),
      track_running_stats_(track_running_stats) {
  LOOM_CHECK(num_features >= 1, layer, ": expected num_features >= 1, got ", num_features);
  LOOM_CHECK(eps >= 0, layer, ": expected eps >= 0, got ", eps);
  LOOM_CHECK(!momentum || (*momentum >= 0 && *momentum <= 1), layer, ": expected momentum in [0, 1], got ",
             momentum.value_or(0));
  if (affine) {
    weight = register_parameter("weight", empty({num_features}));
    bias = register_parameter("bias", empty({num_features}));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", empty({num_features}));
    running_var = register_buffer("running_var", empty({num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", empty({}, kInt64));
  }
  reset_parameters();
}

void BatchNormBase::reset_running_stats() {
  if (!track_running_stats_) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

void BatchNormBase::reset_parameters() {
  reset_running_stats();
  if (affine_) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

Tensor BatchNormBase::forward(const Tensor& input) {
  LOOM_CHECK(input.defined(), type_name(), ": the input is undefined");
  check_input_dim(input);
  LOOM_CHECK(input.size(1) == num_features_, type_name(), "(", extra_repr(), "): expected ", num_features_,
             " channels in dim 1, got input of shape ", input.sizes());
  const bool update_running = is_training() && track_running_stats_;
  double factor = momentum_.value_or(0.0);
  // momentum = None: running = mean of all batches so far, i.e. factor 1/n for the n-th batch.
  if (update_running && !momentum_)
    factor = 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>() + 1);
  // Batch statistics in training, and also in eval when there are no running ones (torch).
  // batch_norm updates the running statistics only when given training = true, so in eval
  // mode they are read, never written.
  const bool use_batch_stats = is_training() || !track_running_stats_;
  Tensor out = batch_norm(input, weight, bias, running_mean, running_var, use_batch_stats, factor, eps_);
  if (update_running) {
    // Counted after batch_norm succeeded: a rejected batch leaves all the statistics as they were.
    NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  return out;
}

std::string BatchNormBase::extra_repr() const {
  return std::to_string(num_features_) + ", eps=" + detail::python_float(eps_) +
         ", momentum=" + (momentum_ ? detail::python_float(*momentum_) : std::string("None")) +
         ", affine=" + detail::python_bool(affine_) +
         ", track_running_stats=" + detail::python_bool(track_running_stats_);
}

void BatchNorm1d::check_input_dim(const Tensor& input) const {
  LOOM_CHECK(input.dim() == 2 || input.dim() == 3, "BatchNorm1d(", extra_repr(),
             "): expected a 2-D [N, C] or 3-D [N, C, L] input, got shape ", input.sizes());
}

void BatchNorm2d::check_input_dim(const Tensor& input) const {
  LOOM_CHECK(input.dim() == 4, "BatchNorm2d(", extra_repr(),
             "): expected a 4-D [N, C, H, W] input, got shape ", input.sizes());
}

}  // namespace loom::nn
