/*
 * The options of `quantize`, parsed from the command line with CLI11:
 *
 *   quantize --model M.safetensors --calib DATA.h5 --method minmax|moving_average|percentile|entropy
 *            [--per-channel] [--qat-epochs N] [--teacher T.safetensors] [--device cpu|cuda]
 *            --out M.int8.safetensors
 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tools/common/command_line.h"

namespace loom::quantize {

struct QuantizeOptions {
  std::string model;  // a model file from `train` (RUN/model.safetensors) or nn::save_model
  std::string calib;  // HDF5 images: calibration batches, and the QAT training set
  std::string test;   // HDF5 images to measure accuracy on; default: the --val the model was trained with
  std::string out;    // the INT8 model file
  std::string method = "minmax";
  double percentile = 99.99;
  bool per_channel = false;
  int64_t bits = 8;
  int64_t calib_batches = 32;
  int64_t batch = 128;
  // Quantization-aware training after PTQ: epochs over --calib with fake-quantization.
  int64_t qat_epochs = 0;
  double qat_lr = 1e-3;
  bool learnable_ranges = false;
  // Distillation during QAT from this float model (e.g. the --model itself, or a bigger one).
  std::string teacher;
  double temperature = 4.0;
  double alpha = 0.9;
  int threads = 0;       // 0: every core
  uint64_t seed = 0;
  bool force = false;    // replace an existing --out
  std::string json;      // also write the results as JSON to this file
  // Where the accuracy and latency of both models are measured: "cpu" (oneDNN's int8 kernels) or
  // "cuda" (cuBLASLt's INT8 GEMM). Calibration, QAT and the file are the same on both.
  std::string device = "cpu";
};

using ParseOutcome = tools::ParseOutcome<QuantizeOptions>;

// Throws loom::Error with a one-line message for an unknown flag, a bad value or a missing
// required option.
ParseOutcome parse_options(int argc, const char* const* argv);

}  // namespace loom::quantize
