/* The observer base, the min/max observers and make_observer (see observer.h). */
#include "quant/observer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "core/grad_mode.h"
#include "ops/dim_geometry.h"
#include "ops/ops.h"

namespace loom::quant {

namespace {

// Nonzero when v is NaN or infinite (the exponent bits all ones). Integer bits, unlike
// comparisons with NaN, OR together in a loop that vectorises.
inline uint32_t non_finite_bits(float v) {
  const auto bits = std::bit_cast<uint32_t>(v);
  return (bits & 0x7f800000u) == 0x7f800000u ? 1u : 0u;
}

}  // namespace

// ---- Observer ---------------------------------------------------------------------------------

Observer::Observer(ObserverOptions options) : options_(options) {
  LOOM_CHECK(options_.dtype == kUInt8 || options_.dtype == kInt8,
             "Observer: expected dtype uint8 or int8, got ", options_.dtype);
  LOOM_CHECK(options_.axis >= -1, "Observer: expected axis -1 (per tensor) or >= 0 (per channel), got ",
             options_.axis);
  quant_range();  // throws for bits outside [2, 8]
}

std::pair<int64_t, int64_t> Observer::quant_range() const {
  return quant::quant_range(options_.dtype, options_.reduce_range, options_.bits);
}

QParams Observer::qparams_for(float min, float max) const {
  const auto [qmin, qmax] = quant_range();
  return choose_qparams(min, max, options_.dtype, options_.symmetric, qmin, qmax);
}

Tensor Observer::prepare(const Tensor& x, const std::string& who) {
  LOOM_CHECK(x.defined(), who, "::observe: the tensor is undefined");
  LOOM_CHECK(x.is_floating_point(), who, "::observe: expected a floating-point tensor, got ", x.dtype(),
             " of shape ", x.sizes());
  NoGradGuard no_grad;
  return x.detach().to(kCPU).to(kFloat32).contiguous();
}

// ---- MinMaxObserver -----------------------------------------------------------------------------

MinMaxObserver::MinMaxObserver(ObserverOptions options) : Observer(options) {}

void MinMaxObserver::observe(const Tensor& x) {
  const std::string who = name() == "minmax" ? "MinMaxObserver" : "MovingAverageMinMaxObserver";
  Tensor input = prepare(x, who);
  if (input.numel() == 0) return;
  const int64_t axis = options_.axis;
  int64_t outer = 1, channels = 1, inner = input.numel();
  if (axis >= 0) {
    LOOM_CHECK(axis < input.dim(), who, "::observe: per-channel axis ", axis, " is out of range for shape ",
               input.sizes());
    channels = input.size(axis);
    LOOM_CHECK(min_.empty() || static_cast<int64_t>(min_.size()) == channels, who, "::observe: expected ",
               min_.size(), " channels along axis ", axis, " (as in earlier batches), got shape ",
               input.sizes());
    const DimGeometry g = geometry_around(input, axis);
    outer = g.outer;
    inner = g.inner;
  }
  std::vector<float> lo(channels, std::numeric_limits<float>::infinity());
  std::vector<float> hi(channels, -std::numeric_limits<float>::infinity());
  const float* p = input.data_ptr<float>();
  uint32_t special = 0;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < channels; ++c, p += inner) {
      // The extrema as selects vectorise. NaN fails every comparison, so they would skip it:
      // the exponent bits catch it (and infinities).
      float l = lo[c], h = hi[c];
      uint32_t bad = 0;
      // One min/max per vector lane (see histogram_observer.cpp's extrema).
#pragma omp simd reduction(min : l) reduction(max : h) reduction(| : bad)
      for (int64_t i = 0; i < inner; ++i) {
        const float v = p[i];
        l = v < l ? v : l;
        h = v > h ? v : h;
        bad |= non_finite_bits(v);
      }
      lo[c] = l;
      hi[c] = h;
      special |= bad;
    }
  }
  LOOM_CHECK(special == 0, who, "::observe: the tensor (shape ", input.sizes(),
             ") has NaN or infinite values");
  update(lo, hi);
}

void MinMaxObserver::update(const std::vector<float>& batch_min, const std::vector<float>& batch_max) {
  if (min_.empty()) {
    min_ = batch_min;
    max_ = batch_max;
    return;
  }
  for (size_t c = 0; c < min_.size(); ++c) {
    min_[c] = std::min(min_[c], batch_min[c]);
    max_[c] = std::max(max_[c], batch_max[c]);
  }
}

void MinMaxObserver::check_observed(const char* what) const {
  LOOM_CHECK(observed(), name() == "minmax" ? "MinMaxObserver::" : "MovingAverageMinMaxObserver::", what,
             ": the observer has observed no data");
}

QParams MinMaxObserver::qparams() const {
  check_observed("qparams");
  if (options_.axis < 0) return qparams_for(min_[0], max_[0]);
  const auto [qmin, qmax] = quant_range();
  const auto [mins, maxs] = channel_ranges();
  return choose_qparams_per_channel(mins, maxs, options_.axis, options_.dtype, options_.symmetric, qmin,
                                    qmax);
}

void MinMaxObserver::reset() {
  min_.clear();
  max_.clear();
}

std::pair<float, float> MinMaxObserver::range() const {
  check_observed("range");
  LOOM_CHECK(options_.axis < 0, name(),
             " observer: range() is per tensor, but this observer is per channel (axis ", options_.axis,
             "); use channel_ranges()");
  return {min_[0], max_[0]};
}

std::pair<Tensor, Tensor> MinMaxObserver::channel_ranges() const {
  check_observed("channel_ranges");
  return {tensor<float>(min_), tensor<float>(max_)};
}

// ---- MovingAverageMinMaxObserver ---------------------------------------------------------------

MovingAverageMinMaxObserver::MovingAverageMinMaxObserver(ObserverOptions options, double averaging_constant)
    : MinMaxObserver(options), averaging_constant_(averaging_constant) {
  LOOM_CHECK(averaging_constant > 0 && averaging_constant <= 1,
             "MovingAverageMinMaxObserver: expected 0 < averaging_constant <= 1, got ", averaging_constant);
}

void MovingAverageMinMaxObserver::update(const std::vector<float>& batch_min,
                                         const std::vector<float>& batch_max) {
  if (min_.empty()) {
    min_ = batch_min;
    max_ = batch_max;
    return;
  }
  // In float32, as torch's tensor arithmetic: min + c * (batch_min - min).
  const float c = static_cast<float>(averaging_constant_);
  for (size_t i = 0; i < min_.size(); ++i) {
    min_[i] = min_[i] + c * (batch_min[i] - min_[i]);
    max_[i] = max_[i] + c * (batch_max[i] - max_[i]);
  }
}

// ---- make_observer ------------------------------------------------------------------------------

std::unique_ptr<Observer> make_observer(const std::string& method, ObserverOptions options) {
  if (method == "minmax") return std::make_unique<MinMaxObserver>(options);
  if (method == "moving_average") return std::make_unique<MovingAverageMinMaxObserver>(options);
  if (method == "percentile") return std::make_unique<PercentileObserver>(options);
  if (method == "entropy") return std::make_unique<EntropyObserver>(options);
  LOOM_FAIL("make_observer: unknown method '", method,
            "'; expected one of minmax, moving_average, percentile, entropy");
}

}  // namespace loom::quant
