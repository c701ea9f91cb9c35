/*
 * The second half of both quantization flows: a calibrated (PTQ) or trained (QAT)
 * PreparedModel becomes a QuantizedModel. Each weighted stage's weight is quantized to s8 with
 * the config's weight observer (per output channel by default); its input and output
 * activations take the qparams their FakeQuantize modules settled on; the last stage returns
 * dequantized float logits.
 */
#pragma once

#include <memory>

#include "quant/prepare.h"
#include "quant/quantized_model.h"

namespace loom::quant {

// Throws loom::Error when an activation observer has seen no data (calibrate first).
std::shared_ptr<QuantizedModel> convert(const PreparedModel& prepared);

}  // namespace loom::quant
