/*
 * How a model is quantized: which observer picks the activation ranges, whether weights get a
 * scale per output channel, and how many bits the integers keep. One QConfig applies to the
 * whole model (as torch's global qconfig): activations u8 affine, weights s8 symmetric.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "quant/observer.h"

namespace loom::quant {

struct QConfig {
  // Observer of the activations: "minmax", "moving_average", "percentile" or "entropy".
  std::string activation_method = "minmax";
  double percentile = 99.99;  // for "percentile"
  // Weights: one scale per output channel (as torch's per_channel_symmetric) or one per tensor.
  bool per_channel = true;
  // 8: the full u8/s8 ranges. Fewer (2..7) keeps the same INT8 storage and kernels but clamps
  // to 2^bits levels, to study what low precision costs and what QAT recovers.
  int64_t bits = 8;
  // QAT: learn the activation ranges (LSQ) instead of observing them.
  bool learnable_ranges = false;

  // Throws loom::Error naming the field for an unknown method, bits outside [2, 8] or a
  // percentile outside (50, 100].
  void validate() const;
  // A fresh observer for activations (u8 affine) and for the weights of a layer (s8 symmetric,
  // per channel along axis 0 or per tensor), with this config's bit width.
  std::unique_ptr<Observer> activation_observer() const;
  std::unique_ptr<Observer> weight_observer() const;
  // "minmax, per-channel weights, 8 bits" for printing.
  std::string to_string() const;
};

}  // namespace loom::quant
