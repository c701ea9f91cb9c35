/*
 * The LR schedules (see lr_scheduler.h): the base class that applies a schedule to the
 * optimizer's groups and checkpoints its position, and the closed formulas of each schedule.
 */
#include "nn/optim/lr_scheduler.h"

#include <cmath>
#include <numbers>
#include <set>

#include "core/cuda_graph.h"
#include "ops/ops.h"

// The schedules reproduce torch's Python arithmetic, where every product is rounded before
// it is added: a fused multiply-add would move lrs by an ulp and phase boundaries of
// OneCycleLR across a step (0.1 * 10 - 1 is 0 in Python, 5.6e-17 as an fma).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace loom::nn {

namespace {

constexpr std::string_view kLastStep = "last_step";
constexpr std::string_view kBaseLrs = "base_lrs.";
constexpr std::string_view kLastLr = "last_lr.";

// a * b rounded on its own, as Python rounds it before the next operation. The pragma above
// does not reach OneCycleLR's constructor (GCC 12 still fuses its phase ends into fmas),
// where 0.1 * 10 - 1 must be 0 as in torch, not 5.6e-17: the volatile forces the rounding.
double python_product(double a, double b) {
  volatile double product = a * b;
  return product;
}

double one_number(const StateDict& state, const std::string& key) {
  const Tensor* t = state.find(key);
  LOOM_CHECK(t != nullptr, "LRScheduler::load_state_dict: the state has no '", key, "'");
  LOOM_CHECK(t->defined() && t->numel() == 1, "LRScheduler::load_state_dict: '", key,
             "' should hold one number");
  return t->to(kCPU).to(kFloat64).item<double>();
}

}  // namespace

// ---- LRScheduler -------------------------------------------------------------------------

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (const ParamGroup& group : optimizer.param_groups()) base_lrs_.push_back(group.lr());
}

void LRScheduler::apply() {
  // A replay runs the captured kernels only: this host code would not run again, and the lr the
  // capture saw would stay in the graph.
  LOOM_CHECK(!cuda::current_stream_capturing(),
             "LRScheduler: stepped while a CUDA graph is being captured; step the schedule between replays, "
             "outside the capture (with a capturable optimizer, each replay then reads the new lr)");
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  LOOM_CHECK(groups.size() == base_lrs_.size(), "LRScheduler: the optimizer has ", groups.size(),
             " parameter groups but had ", base_lrs_.size(),
             " when the schedule was created; create the schedule after adding every group");
  std::vector<double> lrs(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) lrs[g] = lr_at(last_step_, g);
  // Set only once every value is known: a schedule that throws leaves the groups unchanged.
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].lr() = lrs[g];
    adjust_group(last_step_, g, groups[g]);
  }
  last_lr_ = std::move(lrs);
  optimizer_.hyperparameters_changed();
}

void LRScheduler::step() {
  ++last_step_;
  try {
    apply();
  } catch (...) {
    --last_step_;
    throw;
  }
}

StateDict LRScheduler::state_dict() const {
  StateDict out;
  out.insert(std::string(kLastStep), scalar_tensor(last_step_, kInt64));
  for (size_t g = 0; g < base_lrs_.size(); ++g)
    out.insert(std::string(kBaseLrs) + std::to_string(g), scalar_tensor(base_lrs_[g], kFloat64));
  for (size_t g = 0; g < last_lr_.size(); ++g)
    out.insert(std::string(kLastLr) + std::to_string(g), scalar_tensor(last_lr_[g], kFloat64));
  return out;
}

void LRScheduler::load_state_dict(const StateDict& state) {
  const size_t groups = base_lrs_.size();
  std::set<std::string> expected{std::string(kLastStep)};
  for (size_t g = 0; g < groups; ++g) {
    expected.insert(std::string(kBaseLrs) + std::to_string(g));
    expected.insert(std::string(kLastLr) + std::to_string(g));
  }
  for (const auto& [key, value] : state) {
    LOOM_CHECK(expected.contains(key), "LRScheduler::load_state_dict: unexpected key '", key,
               "' (this schedule has ", groups,
               " groups; expected 'last_step', 'base_lrs.<g>' and 'last_lr.<g>' for g < ", groups, ")");
  }
  const double step = one_number(state, std::string(kLastStep));
  LOOM_CHECK(step >= 0 && step == std::floor(step),
             "LRScheduler::load_state_dict: 'last_step' should be a "
             "non-negative whole number, got ",
             step);
  std::vector<double> base(groups);
  for (size_t g = 0; g < groups; ++g) {
    base[g] = one_number(state, std::string(kBaseLrs) + std::to_string(g));
    one_number(state, std::string(kLastLr) + std::to_string(g));  // present and well formed
  }
  const std::vector<double> keep_base = base_lrs_;
  const int64_t keep_step = last_step_;
  base_lrs_ = std::move(base);
  last_step_ = static_cast<int64_t>(step);
  try {
    apply();
  } catch (...) {
    base_lrs_ = keep_base;
    last_step_ = keep_step;
    throw;
  }
}

// ---- StepLR ------------------------------------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  LOOM_CHECK(step_size >= 1, "StepLR: step_size must be >= 1, got ", step_size);
  LOOM_CHECK(gamma >= 0, "StepLR: gamma must be >= 0, got ", gamma);
  apply();
}

double StepLR::lr_at(int64_t step, size_t g) const {
  return base_lrs_[g] * std::pow(gamma_, static_cast<double>(step / step_size_));
}

// ---- LinearLR ----------------------------------------------------------------------------

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  LOOM_CHECK(start_factor > 0 && start_factor <= 1, "LinearLR: start_factor must be in (0, 1], got ",
             start_factor);
  LOOM_CHECK(end_factor >= 0 && end_factor <= 1, "LinearLR: end_factor must be in [0, 1], got ", end_factor);
  LOOM_CHECK(total_iters >= 1, "LinearLR: total_iters must be >= 1, got ", total_iters);
  apply();
}

double LinearLR::lr_at(int64_t step, size_t g) const {
  const double done = static_cast<double>(std::min(step, total_iters_)) / static_cast<double>(total_iters_);
  return base_lrs_[g] * (start_factor_ + (end_factor_ - start_factor_) * done);
}

// ---- CosineWithWarmup --------------------------------------------------------------------

CosineWithWarmup::CosineWithWarmup(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps,
                                   double min_lr, double warmup_start_factor)
    : LRScheduler(optimizer),
      warmup_steps_(warmup_steps),
      total_steps_(total_steps),
      min_lr_(min_lr),
      start_factor_(warmup_start_factor) {
  LOOM_CHECK(warmup_steps >= 0, "CosineWithWarmup: warmup_steps must be >= 0, got ", warmup_steps);
  LOOM_CHECK(total_steps > warmup_steps, "CosineWithWarmup: total_steps (", total_steps,
             ") must be larger than warmup_steps (", warmup_steps, ")");
  LOOM_CHECK(min_lr >= 0, "CosineWithWarmup: min_lr must be >= 0, got ", min_lr);
  LOOM_CHECK(warmup_start_factor >= 0 && warmup_start_factor <= 1,
             "CosineWithWarmup: warmup_start_factor must be in [0, 1], got ", warmup_start_factor);
  apply();
}

double CosineWithWarmup::lr_at(int64_t step, size_t g) const {
  const double base = base_lrs_[g];
  if (step < warmup_steps_)
    return base * (start_factor_ +
                   (1.0 - start_factor_) * static_cast<double>(step) / static_cast<double>(warmup_steps_));
  if (step > total_steps_) return min_lr_;
  const double progress =
      static_cast<double>(step - warmup_steps_) / static_cast<double>(total_steps_ - warmup_steps_);
  return min_lr_ + (base - min_lr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

// ---- OneCycleLR --------------------------------------------------------------------------

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, OneCycleOptions options)
    : OneCycleLR(optimizer, std::vector<double>(optimizer.param_groups().size(), max_lr), total_steps,
                 options) {}

OneCycleLR::OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps,
                       OneCycleOptions options)
    : LRScheduler(optimizer), total_steps_(total_steps), options_(options) {
  const OneCycleOptions& o = options_;
  LOOM_CHECK(total_steps >= 1, "OneCycleLR: total_steps must be >= 1, got ", total_steps);
  LOOM_CHECK(o.pct_start >= 0 && o.pct_start <= 1, "OneCycleLR: pct_start must be in [0, 1], got ",
             o.pct_start);
  LOOM_CHECK(o.div_factor > 0 && o.final_div_factor > 0,
             "OneCycleLR: div_factor and final_div_factor must be > 0, got ", o.div_factor, " and ",
             o.final_div_factor);
  const size_t groups = optimizer.param_groups().size();
  LOOM_CHECK(max_lrs.size() == groups, "OneCycleLR: got ", max_lrs.size(), " max_lr values for ", groups,
             " parameter groups");

  enum { kInitial = 0, kMax = 1, kMin = 2 };
  const double total = static_cast<double>(total_steps);
  if (o.three_phase) {
    phases_ = {{python_product(o.pct_start, total) - 1, kInitial, kMax, true, false},
               {python_product(2 * o.pct_start, total) - 2, kMax, kInitial, false, true},
               {total - 1, kInitial, kMin, true, true}};
  } else {
    phases_ = {{python_product(o.pct_start, total) - 1, kInitial, kMax, true, false},
               {total - 1, kMax, kMin, false, true}};
  }
  // torch divides by each phase's length; a zero-length phase would make the lr NaN.
  double start = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    LOOM_CHECK(phases_[i].end_step != start, "OneCycleLR: phase ", i, " has zero length (ends at step ",
               phases_[i].end_step, "); change pct_start (", o.pct_start, ") or total_steps (", total_steps,
               ")");
    start = phases_[i].end_step;
  }

  for (double max_lr : max_lrs) {
    LOOM_CHECK(max_lr >= 0, "OneCycleLR: max_lr must be >= 0, got ", max_lr);
    const double initial = max_lr / o.div_factor;
    lrs_.push_back({initial, max_lr, initial / o.final_div_factor});
  }
  base_lrs_.clear();
  for (const auto& lr : lrs_) base_lrs_.push_back(lr[kInitial]);

  if (o.cycle_momentum) {
    const ParamGroup& first = optimizer.param_groups().front();
    momentum_key_ = first.options.contains("beta1")      ? "beta1"
                    : first.options.contains("momentum") ? "momentum"
                                                         : "";
    LOOM_CHECK(
        !momentum_key_.empty(),
        "OneCycleLR: cycle_momentum needs groups with a 'beta1' or 'momentum' "
        "option; this optimizer's have: ",
        [&] {
          std::string names;
          for (const auto& [name, v] : first.options) names += (names.empty() ? "" : ", ") + name;
          return names;
        }(),
        " (pass cycle_momentum = false)");
  }
  apply();
}

std::pair<const OneCycleLR::Phase*, double> OneCycleLR::locate(int64_t step) const {
  LOOM_CHECK(step <= total_steps_, "OneCycleLR: tried to step ", step + 1,
             " times; the schedule has total_steps = ", total_steps_);
  const double s = static_cast<double>(step);
  double start = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& phase = phases_[i];
    if (s <= phase.end_step || i + 1 == phases_.size())
      return {&phase, (s - start) / (phase.end_step - start)};
    start = phase.end_step;
  }
  return {&phases_.back(), 1.0};  // not reached: the last phase always matches
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy == OneCycleOptions::Anneal::kCos)
    return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
  return (end - start) * pct + start;
}

double OneCycleLR::lr_at(int64_t step, size_t g) const {
  const auto [phase, pct] = locate(step);
  return anneal(lrs_[g][static_cast<size_t>(phase->start_lr)], lrs_[g][static_cast<size_t>(phase->end_lr)],
                pct);
}

void OneCycleLR::adjust_group(int64_t step, size_t g, ParamGroup& group) const {
  if (momentum_key_.empty()) return;
  const auto [phase, pct] = locate(step);
  const double start = phase->start_at_max_momentum ? options_.max_momentum : options_.base_momentum;
  const double end = phase->end_at_max_momentum ? options_.max_momentum : options_.base_momentum;
  LOOM_CHECK(group.options.contains(momentum_key_), "OneCycleLR: group ", g, " has no '", momentum_key_,
             "' option to cycle");
  group.options[momentum_key_] = anneal(start, end, pct);
}

}  // namespace loom::nn
