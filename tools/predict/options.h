/*
 * The options of `predict`, parsed from the command line with CLI11:
 *
 *   predict --model RUN/model.safetensors --data TEST.h5 --out PREDICTIONS.h5
 *           [--batch-size 256] [--logits] [--device cpu|cuda] [--workers 2] [--threads 0] [--force]
 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tools/common/command_line.h"

namespace loom::predict {

struct PredictOptions {
  std::string model;  // a model file from `train` (f32) or `quantize` (INT8)
  std::string data;   // an HDF5 dataset from make_dataset: images, or tokens for a GPT
  std::string out;    // the HDF5 file of predictions
  int64_t batch_size = 256;
  bool logits = false;  // also write every example's logits
  std::string device = "cpu";
  int workers = 2;       // data-loader threads
  int threads = 0;       // compute threads; 0: every core
  bool force = false;    // replace an existing --out
  bool progress = true;  // the progress bar (--no-progress: only the summary)
};

using ParseOutcome = tools::ParseOutcome<PredictOptions>;

// Throws loom::Error with a one-line message for an unknown flag, a bad value or a missing
// required option.
ParseOutcome parse_options(int argc, const char* const* argv);

}  // namespace loom::predict
