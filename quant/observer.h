/*
 * Observers (calibrators): they watch the tensors a model computes on calibration batches and
 * then choose the range that its quantization parameters cover. The choice of range is most of
 * what post-training quantization gets right or wrong:
 *
 *   minmax          the running min and max: nothing is clipped, but one outlier stretches the
 *                   scale for every other value (torch's MinMaxObserver; per tensor or channel)
 *   moving_average  an exponential moving average of each batch's min and max: an outlier
 *                   batch moves the range by 1% only (torch's MovingAverageMinMaxObserver)
 *   percentile      a histogram of the values; the range is the [100 - p, p] percentiles
 *   entropy         TensorRT's calibrator: a histogram of |x| and the threshold whose clipped,
 *                   quantized distribution loses the least information (KL divergence)
 *
 * Observers run outside autograd and keep only what later batches need (running extrema or a
 * histogram), so calibration over many batches costs one pass over each.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "quant/qparams.h"

namespace loom::quant {

struct ObserverOptions {
  DType dtype = DType::UInt8;  // activations u8 by default; weights use Int8 + symmetric + per channel
  bool symmetric = false;
  bool reduce_range = false;
  int64_t axis = -1;  // >= 0: per-channel (only MinMax/MovingAverage support it; others throw)
  // 8: the full 8-bit range. Fewer (2..7) keeps 8-bit storage but clamps to 2^bits levels
  // (quant_range(dtype, reduce_range, bits)), to study low precision.
  int64_t bits = 8;
};

class Observer {
 public:
  virtual ~Observer() = default;
  // "minmax", "moving_average", "percentile", "entropy"
  virtual std::string name() const = 0;
  // x: any floating tensor (f32/f64/f16/bf16, any shape and layout; converted to float32 on the
  // CPU), never recorded by autograd. An empty tensor is ignored. Throws loom::Error for a
  // non-floating tensor, NaN or infinite values, and (per channel) an axis out of range or a
  // channel count that differs from earlier batches.
  virtual void observe(const Tensor& x) = 0;
  // The quantization parameters of the range observed so far. Throws loom::Error if nothing
  // was observed yet ("... has observed no data").
  virtual QParams qparams() const = 0;
  virtual bool observed() const = 0;
  // Forgets everything observed (the options stay).
  virtual void reset() = 0;
  // The clipping range it chose (after calibration): what qparams() is computed from.
  // Per tensor; per-channel observers throw, as does an observer with no data.
  virtual std::pair<float, float> range() const = 0;
  const ObserverOptions& options() const { return options_; }
  // The integer range of options(): quant_range(dtype, reduce_range, bits).
  std::pair<int64_t, int64_t> quant_range() const;

 protected:
  // Throws loom::Error for a dtype other than UInt8/Int8, bits outside [2, 8] or axis < -1.
  explicit Observer(ObserverOptions options);
  // choose_qparams over quant_range() for a per-tensor range.
  QParams qparams_for(float min, float max) const;
  // The observed tensor as contiguous float32 on the CPU, out of autograd; `who` names the
  // observer in errors.
  static Tensor prepare(const Tensor& x, const std::string& who);

  ObserverOptions options_;
};

// Running min and max, per tensor or per channel along options.axis (the other dims are
// reduced). qparams() = choose_qparams(min, max) per tensor or per channel.
class MinMaxObserver : public Observer {
 public:
  explicit MinMaxObserver(ObserverOptions options = {});
  std::string name() const override { return "minmax"; }
  void observe(const Tensor& x) override;
  QParams qparams() const override;
  bool observed() const override { return !min_.empty(); }
  void reset() override;
  std::pair<float, float> range() const override;
  // The running mins and maxs, Float32 [C] ([1] per tensor). Throws if nothing was observed.
  std::pair<Tensor, Tensor> channel_ranges() const;

 protected:
  // Merges one batch's extrema (one per channel) into the running ones; the first batch sets them.
  virtual void update(const std::vector<float>& batch_min, const std::vector<float>& batch_max);
  void check_observed(const char* what) const;

  std::vector<float> min_, max_;  // one per channel (one per tensor); empty until observed
};

// min += c * (batch_min - min), max += c * (batch_max - max) with c = averaging_constant; the
// first batch sets them. Per tensor or per channel, like MinMaxObserver.
class MovingAverageMinMaxObserver : public MinMaxObserver {
 public:
  // Throws loom::Error unless 0 < averaging_constant <= 1.
  explicit MovingAverageMinMaxObserver(ObserverOptions options = {}, double averaging_constant = 0.01);
  std::string name() const override { return "moving_average"; }
  double averaging_constant() const { return averaging_constant_; }

 protected:
  void update(const std::vector<float>& batch_min, const std::vector<float>& batch_max) override;

 private:
  double averaging_constant_;
};

// Counts of values (or of |values|) in `bins` equal bins over [lo, lo + bins * width], kept
// across batches; a value on the top edge counts in the last bin.
// A batch outside the current range widens it by whole bins on the side(s) it exceeds and
// multiplies the width by 2^k, so that every old bin falls inside one new bin: the old
// counts are merged exactly (torch's HistogramObserver upsamples and interpolates instead).
// The bin count stays fixed, so memory and the cost of choosing a range do not grow with the
// number of batches; the price is up to half the bins left empty after a widening.
class Histogram {
 public:
  // of_absolute_values: counts |x| over a grid whose low edge stays at 0 (so that bin edges
  // are thresholds of |x|). Throws for bins < 2.
  explicit Histogram(int64_t bins, bool of_absolute_values = false);
  // Adds n values whose min and max (of the values themselves, not of |x|) the caller already
  // has from its check pass.
  void add(const float* values, int64_t n, float min, float max);
  void reset();
  bool empty() const { return total_ == 0; }
  int64_t bins() const { return static_cast<int64_t>(counts_.size()); }
  const std::vector<int64_t>& counts() const { return counts_; }
  int64_t total() const { return total_; }
  double lo() const { return lo_; }
  double width() const { return width_; }

 private:
  // Makes [lo, lo + bins * width] cover [min, max], merging the counts (see above).
  void cover(double min, double max);

  std::vector<int64_t> counts_;
  bool of_absolute_values_;
  double lo_ = 0, width_ = 0;
  int64_t total_ = 0;
};

// A histogram of the values (2048 bins by default); the range is [the (100 - p)th, the p-th
// percentile] (e.g. 99.99 -> 0.01% of the values clipped at each end), linearly interpolated
// inside a bin and clamped to the observed [min, max]. For data with min >= 0 the low end is 0.
// Per tensor only.
class PercentileObserver : public Observer {
 public:
  // Throws loom::Error for percentile outside (50, 100], bins < 2, or options.axis >= 0.
  explicit PercentileObserver(ObserverOptions options = {}, double percentile = 99.99, int64_t bins = 2048);
  std::string name() const override { return "percentile"; }
  void observe(const Tensor& x) override;
  QParams qparams() const override;
  bool observed() const override { return !histogram_.empty(); }
  void reset() override;
  std::pair<float, float> range() const override;
  double percentile() const { return percentile_; }
  const Histogram& histogram() const { return histogram_; }

 private:
  double percentile_;
  Histogram histogram_;
  float min_ = 0, max_ = 0;  // exact extrema of everything observed
};

// TensorRT's entropy calibrator: a histogram of |x| (2048 bins by default), and the threshold t
// (a bin edge) minimising KL(P || Q), where P is the histogram clipped at t (the counts above t
// folded into its last bin) and Q is P quantized to the number of levels the range will have
// above zero (128 for signed data, 256 for u8-affine data >= 0; see entropy_threshold_bin), then
// expanded back. Range = [-t, t] for signed data, [0, t] for data >= 0; t never exceeds the
// largest |x| observed. Per tensor only. The threshold (about 2 ms for 2048 bins) is computed on
// the first qparams() or range() after a batch and cached, so those const calls write the cache:
// do not call them from two threads at once.
class EntropyObserver : public Observer {
 public:
  // Throws loom::Error for bins < 256 (fewer than the u8 levels) or options.axis >= 0.
  explicit EntropyObserver(ObserverOptions options = {}, int64_t bins = 2048);
  std::string name() const override { return "entropy"; }
  void observe(const Tensor& x) override;
  QParams qparams() const override;
  bool observed() const override { return !histogram_.empty(); }
  void reset() override;
  std::pair<float, float> range() const override;
  const Histogram& histogram() const { return histogram_; }
  // The number of quantization levels between 0 and the threshold for the data seen so far.
  int64_t levels() const;

 private:
  Histogram histogram_;
  float min_ = 0, max_abs_ = 0;
  mutable bool cached_ = false;
  mutable float threshold_ = 0;
};

// The KL-optimal clipping point of a histogram of |x| (pytorch-quantization's
// _compute_amax_entropy, after NVIDIA's "8-bit Inference with TensorRT"): returns the bin count
// i in [min(levels, n), n] (n = the last non-empty bin + 1) that minimises KL(P_i || Q_i) (the
// largest such i on ties); the threshold is i * bin width. P_i: bins [0, i) with the counts of
// bins >= i added to bin i - 1; Q_i: bins [0, i) split into `levels` groups (bin j in group
// floor(j * levels / i)), each group's count spread evenly over its non-empty bins. As in
// pytorch-quantization, bin 0 is given bin 1's count first, so that a spike of exact zeros
// (ReLU outputs, padding) does not dominate the divergence. Throws for levels < 2 or a histogram
// with fewer than 2 bins or negative counts; an empty histogram returns 0.
int64_t entropy_threshold_bin(const std::vector<double>& histogram, int64_t levels);

// method: "minmax" | "moving_average" | "percentile" | "entropy" (with their default settings).
// Throws loom::Error naming the method and the valid ones, and the constructors' errors (e.g.
// per-channel options for "percentile").
std::unique_ptr<Observer> make_observer(const std::string& method, ObserverOptions options = {});

}  // namespace loom::quant
