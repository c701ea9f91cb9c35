/*
 * BatchNorm1d and BatchNorm2d, as torch.nn: normalise each channel C of [N, C, *] by the
 * batch's mean and variance while training (updating the running statistics), and by the
 * running statistics in eval mode. Same arguments, parameter and buffer names, state-dict
 * order (weight, bias, running_mean, running_var, num_batches_tracked) and printing as torch.
 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "nn/module.h"

namespace loom::nn {

// The shared implementation (torch's _BatchNorm); the subclasses fix the input rank.
// Their constructors make weight [C] (ones) and bias [C] (zeros) when affine, and the buffers
// running_mean [C] (zeros), running_var [C] (ones) and num_batches_tracked (int64 scalar, 0)
// when track_running_stats. momentum: running = (1 - momentum) * running + momentum * batch
// (unbiased variance); with no momentum (std::nullopt, torch's None) the running statistics
// are the cumulative average over all batches seen. They throw if num_features < 1, eps < 0 or
// momentum is outside [0, 1].
class BatchNormBase : public Module {
 public:
  // Training (or without running statistics): normalises by the batch statistics and, when
  // tracking, updates the running ones and counts the batch. Eval: normalises by the running
  // statistics. Throws on the wrong rank (check_input_dim), a channel count other than
  // num_features, or one value per channel while training.
  Tensor forward(const Tensor& input) override;
  // running_mean = 0, running_var = 1, num_batches_tracked = 0.
  void reset_running_stats();
  // reset_running_stats(), weight = 1, bias = 0.
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t num_features() const { return num_features_; }
  double eps() const { return eps_; }
  std::optional<double> momentum() const { return momentum_; }
  bool affine() const { return affine_; }
  bool track_running_stats() const { return track_running_stats_; }

  Tensor weight;               // [C], undefined unless affine
  Tensor bias;                 // [C], undefined unless affine
  Tensor running_mean;         // [C], undefined unless track_running_stats
  Tensor running_var;          // [C], undefined unless track_running_stats
  Tensor num_batches_tracked;  // int64 [], undefined unless track_running_stats

 protected:
  // `layer` names the subclass in errors (type_name() is not yet the subclass's while the
  // base is being constructed).
  BatchNormBase(const char* layer, int64_t num_features, double eps, std::optional<double> momentum,
                bool affine, bool track_running_stats);
  // Throws unless `input` has a rank this layer accepts.
  virtual void check_input_dim(const Tensor& input) const = 0;

 private:
  int64_t num_features_;
  double eps_;
  std::optional<double> momentum_;
  bool affine_, track_running_stats_;
};

// [N, C] or [N, C, L], statistics per channel over N (and L).
class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNormBase("BatchNorm1d", num_features, eps, momentum, affine, track_running_stats) {}

 protected:
  void check_input_dim(const Tensor& input) const override;
};

// [N, C, H, W], statistics per channel over N, H and W.
class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNormBase("BatchNorm2d", num_features, eps, momentum, affine, track_running_stats) {}

 protected:
  void check_input_dim(const Tensor& input) const override;
};

}  // namespace loom::nn
