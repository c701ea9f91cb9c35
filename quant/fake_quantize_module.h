/*
 * FakeQuantize: the module that QAT and calibration place wherever a tensor will be an INT8
 * tensor in the converted model (a layer's input and output, its weight). It owns the
 * observer that decides the tensor's qparams and, when fake-quantization is on, passes the
 * tensor through quantize-dequantize (straight-through gradient), so that training sees the
 * rounding the INT8 model will do. Calibration for PTQ is the same module with fake-quant off.
 *
 * With learnable ranges (LSQ), the scale and zero point are parameters initialised from the
 * observer on the first batch and then trained with the model.
 */
#pragma once

#include <memory>
#include <string>

#include "nn/module.h"
#include "quant/observer.h"
#include "quant/qparams.h"

namespace loom::quant {

class FakeQuantize : public nn::Module {
 public:
  // learnable: per-tensor observers only (the scale and zero point become parameters).
  // Throws loom::Error for a null observer or a learnable per-channel one.
  explicit FakeQuantize(std::unique_ptr<Observer> observer, bool learnable = false);

  // x (float, any shape): observed (when the observer is on, without gradient), then
  // quantize-dequantized (when fake-quant is on) with the current qparams. Returns x itself
  // when both are off.
  Tensor forward(const Tensor& x) override;

  void enable_observer(bool on = true) { observer_on_ = on; }
  void enable_fake_quant(bool on = true) { fake_quant_on_ = on; }
  bool observer_enabled() const { return observer_on_; }
  bool fake_quant_enabled() const { return fake_quant_on_; }
  bool learnable() const { return learnable_; }

  // The qparams the INT8 model will use: the learned ones, else the observer's.
  // Throws loom::Error when nothing has been observed yet.
  QParams qparams() const;
  bool calibrated() const;
  const Observer& observer() const { return *observer_; }
  std::string extra_repr() const override;

  Tensor scale;       // learnable only: Float32 [1]
  Tensor zero_point;  // learnable only: Float32 [1] (rounded when used)

 private:
  std::unique_ptr<Observer> observer_;
  bool learnable_;
  bool observer_on_ = true;
  bool fake_quant_on_ = false;
  bool initialised_ = false;  // learnable: scale/zero_point set from the observer
};

}  // namespace loom::quant
