/*
 * The histogram observers (percentile and TensorRT's entropy calibrator) and the histogram
 * they share (see observer.h). Observing a batch is two passes over it: one for the extrema
 * (which also rejects NaN and infinities, and tells the histogram whether it must widen), one
 * that bins every value with a precomputed 1 / bin width.
 */
#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "quant/observer.h"

namespace loom::quant {

namespace {

// Nonzero when v is NaN or infinite (the exponent bits all ones). Integer bits, unlike
// comparisons with NaN, OR together in a loop that vectorises.
inline uint32_t non_finite_bits(float v) {
  const auto bits = std::bit_cast<uint32_t>(v);
  return (bits & 0x7f800000u) == 0x7f800000u ? 1u : 0u;
}

// The min and max of n floats; throws (naming `who`) on NaN or infinity.
std::pair<float, float> extrema(const float* p, int64_t n, const char* who, const Tensor& x) {
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  uint32_t special = 0;
  // The reduction clauses let the compiler keep one min/max per vector lane (reassociating,
  // which it may not do on its own): about 10x faster.
#pragma omp simd reduction(min : lo) reduction(max : hi) reduction(| : special)
  for (int64_t i = 0; i < n; ++i) {
    const float v = p[i];
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
    special |= non_finite_bits(v);
  }
  LOOM_CHECK(special == 0, who, "::observe: the tensor (shape ", x.sizes(), ") has NaN or infinite values");
  return {lo, hi};
}

}  // namespace

// ---- Histogram ---------------------------------------------------------------------------------

Histogram::Histogram(int64_t bins, bool of_absolute_values) : of_absolute_values_(of_absolute_values) {
  LOOM_CHECK(bins >= 2, "Histogram: expected at least 2 bins, got ", bins);
  counts_.assign(static_cast<size_t>(bins), 0);
}

void Histogram::reset() {
  std::fill(counts_.begin(), counts_.end(), 0);
  total_ = 0;
  lo_ = width_ = 0;
}

void Histogram::cover(double min, double max) {
  const auto bins = static_cast<double>(counts_.size());
  if (total_ == 0) {
    // The first batch defines the grid. A batch of one value gets a narrow range around it
    // (any width works; a later, wider batch widens it by doubling).
    lo_ = min;
    double span = max - min;
    if (!(span > 0)) span = std::max(std::abs(min), std::abs(max)) * 1e-6;
    if (!(span > 0)) span = FLT_MIN;
    width_ = span / bins;
    return;
  }
  const double hi = lo_ + bins * width_;
  // Whole old bins to add below and above, then the smallest power-of-2 widening that fits them.
  const double below = min < lo_ ? std::ceil((lo_ - min) / width_) : 0;
  const double above = max > hi ? std::ceil((max - hi) / width_) : 0;
  if (below == 0 && above == 0) return;
  double factor = 1;
  while (bins * factor < below + bins + above) factor *= 2;
  // Old bin i covers [lo + i w, lo + (i + 1) w) = new-grid units [below + i, below + i + 1) of
  // the old width, inside new bin floor((below + i) / factor): an exact merge.
  std::vector<int64_t> merged(counts_.size(), 0);
  for (size_t i = 0; i < counts_.size(); ++i) {
    if (counts_[i] == 0) continue;
    const double k = std::floor((below + static_cast<double>(i)) / factor);
    merged[static_cast<size_t>(std::min(k, bins - 1))] += counts_[i];
  }
  counts_.swap(merged);
  lo_ -= below * width_;
  width_ *= factor;
}

void Histogram::add(const float* values, int64_t n, float min, float max) {
  if (n <= 0) return;
  if (of_absolute_values_) {
    const float top = std::max(std::abs(min), std::abs(max));
    // |x| lies in [0, top]; anchoring the grid at 0 keeps the bin edges thresholds of |x|.
    cover(0.0, top);
  } else {
    cover(min, max);
  }
  // Two steps per block: the bin indices (a loop that vectorises), then the increments (which
  // cannot: two values may share a bin). Values on the top edge, and rounding just past it,
  // belong to the last bin.
  const double lo = lo_, inv_width = 1.0 / width_;
  const auto last = static_cast<int32_t>(bins() - 1);
  const bool absolute = of_absolute_values_;
  int64_t* counts = counts_.data();
  constexpr int64_t kBlock = 1024;
  int32_t index[kBlock];
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t m = std::min(kBlock, n - start);
    const float* v = values + start;
    for (int64_t i = 0; i < m; ++i) {
      const double x = absolute ? std::abs(static_cast<double>(v[i])) : static_cast<double>(v[i]);
      const auto k = static_cast<int32_t>((x - lo) * inv_width);
      index[i] = k < 0 ? 0 : (k > last ? last : k);
    }
    for (int64_t i = 0; i < m; ++i) ++counts[index[i]];
  }
  total_ += n;
}

// ---- PercentileObserver ------------------------------------------------------------------------

PercentileObserver::PercentileObserver(ObserverOptions options, double percentile, int64_t bins)
    : Observer(options), percentile_(percentile), histogram_(std::max<int64_t>(bins, 2)) {
  LOOM_CHECK(percentile > 50 && percentile <= 100,
             "PercentileObserver: expected a percentile in (50, 100], got ", percentile);
  LOOM_CHECK(bins >= 2, "PercentileObserver: expected at least 2 bins, got ", bins);
  LOOM_CHECK(options.axis < 0, "PercentileObserver: per-channel observation (axis ", options.axis,
             ") is not supported; use minmax or moving_average for per-channel ranges");
}

void PercentileObserver::observe(const Tensor& x) {
  Tensor input = prepare(x, "PercentileObserver");
  if (input.numel() == 0) return;
  const float* p = input.data_ptr<float>();
  const auto [lo, hi] = extrema(p, input.numel(), "PercentileObserver", input);
  min_ = observed() ? std::min(min_, lo) : lo;
  max_ = observed() ? std::max(max_, hi) : hi;
  histogram_.add(p, input.numel(), lo, hi);
}

void PercentileObserver::reset() {
  histogram_.reset();
  min_ = max_ = 0;
}

std::pair<float, float> PercentileObserver::range() const {
  LOOM_CHECK(observed(), "PercentileObserver::range: the observer has observed no data");
  const std::vector<int64_t>& counts = histogram_.counts();
  const double total = static_cast<double>(histogram_.total());
  // The smallest v at which the CDF, linear inside each bin, reaches `target` values.
  auto value_at = [&](double target) {
    double below = 0;
    for (size_t b = 0; b < counts.size(); ++b) {
      const auto c = static_cast<double>(counts[b]);
      if (c > 0 && below + c >= target)
        return histogram_.lo() + (static_cast<double>(b) + (target - below) / c) * histogram_.width();
      below += c;
    }
    return histogram_.lo() + static_cast<double>(counts.size()) * histogram_.width();
  };
  const double fraction = percentile_ / 100.0;
  const double high =
      std::clamp(value_at(fraction * total), static_cast<double>(min_), static_cast<double>(max_));
  const double low = min_ >= 0 ? 0.0
                               : std::clamp(value_at((1 - fraction) * total), static_cast<double>(min_),
                                            static_cast<double>(max_));
  return {static_cast<float>(low), static_cast<float>(high)};
}

QParams PercentileObserver::qparams() const {
  LOOM_CHECK(observed(), "PercentileObserver::qparams: the observer has observed no data");
  const auto [low, high] = range();
  return qparams_for(low, high);
}

// ---- EntropyObserver ---------------------------------------------------------------------------

EntropyObserver::EntropyObserver(ObserverOptions options, int64_t bins)
    : Observer(options), histogram_(std::max<int64_t>(bins, 2), /*of_absolute_values=*/true) {
  LOOM_CHECK(bins >= 256, "EntropyObserver: expected at least 256 bins (the u8 levels), got ", bins);
  LOOM_CHECK(options.axis < 0, "EntropyObserver: per-channel observation (axis ", options.axis,
             ") is not supported; use minmax or moving_average for per-channel ranges");
}

void EntropyObserver::observe(const Tensor& x) {
  Tensor input = prepare(x, "EntropyObserver");
  if (input.numel() == 0) return;
  const float* p = input.data_ptr<float>();
  const auto [lo, hi] = extrema(p, input.numel(), "EntropyObserver", input);
  const float top = std::max(std::abs(lo), std::abs(hi));
  min_ = observed() ? std::min(min_, lo) : lo;
  max_abs_ = observed() ? std::max(max_abs_, top) : top;
  histogram_.add(p, input.numel(), lo, hi);
  cached_ = false;
}

void EntropyObserver::reset() {
  histogram_.reset();
  min_ = max_abs_ = 0;
  cached_ = false;
}

int64_t EntropyObserver::levels() const {
  // The integers the range [0, t] (data >= 0, affine) or [-t, t] / symmetric will use above zero.
  const auto [qmin, qmax] = quant_range();
  const int64_t count = qmax - qmin + 1;
  return observed() && min_ >= 0 && !options_.symmetric ? count : count / 2;
}

std::pair<float, float> EntropyObserver::range() const {
  LOOM_CHECK(observed(), "EntropyObserver::range: the observer has observed no data");
  if (!cached_) {
    const std::vector<int64_t>& counts = histogram_.counts();
    const std::vector<double> hist(counts.begin(), counts.end());
    const int64_t bin = entropy_threshold_bin(hist, levels());
    // bin 0: no counts outside bin 0 (all zeros), where the max is the only sensible threshold.
    const double t = bin == 0 ? max_abs_ : static_cast<double>(bin) * histogram_.width();
    threshold_ = static_cast<float>(std::min(t, static_cast<double>(max_abs_)));
    cached_ = true;
  }
  return {min_ >= 0 ? 0.0f : -threshold_, threshold_};
}

QParams EntropyObserver::qparams() const {
  LOOM_CHECK(observed(), "EntropyObserver::qparams: the observer has observed no data");
  const auto [low, high] = range();
  return qparams_for(low, high);
}

// ---- the KL search -------------------------------------------------------------------------------

int64_t entropy_threshold_bin(const std::vector<double>& histogram, int64_t levels) {
  const auto n = static_cast<int64_t>(histogram.size());
  LOOM_CHECK(n >= 2, "entropy_threshold_bin: expected a histogram of at least 2 bins, got ", n);
  LOOM_CHECK(levels >= 2, "entropy_threshold_bin: expected at least 2 levels, got ", levels);
  for (int64_t j = 0; j < n; ++j)
    LOOM_CHECK(std::isfinite(histogram[j]) && histogram[j] >= 0,
               "entropy_threshold_bin: expected finite counts >= 0, got ", histogram[j], " in bin ", j);
  std::vector<double> h = histogram;
  h[0] = h[1];
  int64_t last = n;
  while (last > 0 && h[last - 1] == 0) --last;
  if (last == 0) return 0;
  // Fewer occupied bins than levels: every bin gets its own level, nothing needs clipping.
  if (last <= levels) return last;

  // Prefix sums make each candidate O(levels): the divergence only needs, per group, the total
  // count T and the non-empty bin count z (Q is T / z on each of those bins), plus sum h log h.
  std::vector<double> count(n + 1, 0), nonzero(n + 1, 0), hlogh(n + 1, 0);
  for (int64_t j = 0; j < n; ++j) {
    count[j + 1] = count[j] + h[j];
    nonzero[j + 1] = nonzero[j] + (h[j] > 0 ? 1 : 0);
    hlogh[j + 1] = hlogh[j] + (h[j] > 0 ? h[j] * std::log(h[j]) : 0);
  }
  const double total = count[n];
  auto group_begin = [&](int64_t g, int64_t i) {
    return (g * i + levels - 1) / levels;
  };  // ceil(g i / levels)

  // KL(P || Q) with p = P / N and q = Q / S (N = all counts, S = counts below i):
  //   sum p log p - sum p log q = (sum P log P - sum P log Q) / N - log N + log S.
  double best = std::numeric_limits<double>::infinity();
  int64_t best_i = last;
  for (int64_t i = levels; i <= last; ++i) {
    const double inside = count[i], outliers = total - inside;
    // Outliers folded into an empty last bin, where Q is 0: infinite divergence.
    if (h[i - 1] == 0 && outliers > 0) continue;
    const double p_last = h[i - 1] + outliers;
    const double p_log_p = hlogh[i - 1] + (p_last > 0 ? p_last * std::log(p_last) : 0);
    double p_log_q = 0;
    for (int64_t g = 0; g < levels; ++g) {
      const int64_t a = group_begin(g, i), b = group_begin(g + 1, i);
      const double t = count[b] - count[a];
      if (t > 0) p_log_q += t * std::log(t / (nonzero[b] - nonzero[a]));
    }
    if (outliers > 0) {
      const int64_t g = ((i - 1) * levels) / i;
      const int64_t a = group_begin(g, i), b = group_begin(g + 1, i);
      const double t = count[b] - count[a];
      p_log_q += outliers * std::log(t / (nonzero[b] - nonzero[a]));
    }
    const double kl = (p_log_p - p_log_q) / total - std::log(total) + std::log(inside);
    if (kl <= best) {
      best = kl;
      best_i = i;
    }
  }
  return best_i;
}

}  // namespace loom::quant
