/*
 * The work of `quantize` (main.cpp is only the entry point): load a float model file, calibrate
 * and convert it to INT8 (quant/), optionally fine-tune with quantization-aware training (and
 * distillation), write the INT8 file, and compare float and INT8 models on accuracy, size and
 * latency.
 */
#pragma once

#include <optional>
#include <ostream>

#include "core/error.h"
#include "tools/quantize/options.h"

namespace loom::quantize {

// Bad input found before any work: exit status 2 (other loom::Errors: 1).
class InputError : public Error {
 public:
  using Error::Error;
};

// Accuracy (fraction), file size and latency of one model.
struct ModelReport {
  double accuracy = 0;
  int64_t file_bytes = 0;
  double latency_b1_ms = 0;
  double latency_batch_ms = 0;  // at --batch (128 by default)
};

struct QuantizeSummary {
  ModelReport f32, ptq;
  std::optional<ModelReport> qat;  // with --qat-epochs
  double calibration_seconds = 0;
  double qat_seconds = 0;
  int64_t test_examples = 0;
};

// Runs everything `options` asks for, printing progress and the results table to `out`.
// Throws InputError for bad input (files, shapes, an architecture mismatch) and loom::Error for
// other failures.
QuantizeSummary run_quantize(const QuantizeOptions& options, std::ostream& out);

}  // namespace loom::quantize
