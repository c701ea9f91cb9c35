/*
 * One training run of `train`: builds the model, optimizer, schedule and data loaders from the
 * options, trains with gradient accumulation, clipping and autocast, evaluates after every
 * epoch, and writes the run directory:
 *
 *   RUN_DIR/config.json      the resolved options (train --config RUN_DIR/config.json repeats it)
 *   RUN_DIR/metrics.jsonl    {"kind":"train",...} every --log-every steps, {"kind":"val",...} per epoch
 *   RUN_DIR/step-XXXXXXXX/   checkpoints (nn::CheckpointManager): model, optimizer, schedule, rng,
 *                            loader (and scaler with fp16), meta.json {step, epoch, time_s, mesh,
 *                            options}; under mpirun one rank-R/ directory per rank, each with
 *                            that rank's piece of the model and of the optimizer (parallelism.h)
 *   RUN_DIR/model.safetensors  the whole trained model (assembled from the ranks' pieces)
 *   RUN_DIR/report.html      written at the end (report.h)
 *
 * `--resume RUN_DIR` restores every piece of state from the latest checkpoint, so the resumed
 * run ends bit-identical to one that was never stopped (as tests/nn/test_training_resume.cpp).
 */
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <ostream>

#include "core/error.h"
#include "tools/train/options.h"

namespace loom::train {

// Bad input found before the first step (missing or malformed data, a model that does not fit
// the data, a run directory holding another run): nothing was trained. `train` exits 2 for it
// and 1 for other errors.
class InputError : public Error {
 public:
  using Error::Error;
};

struct TrainSummary {
  int64_t steps = 0;   // optimizer steps done in all (resumed ones included)
  int64_t epochs = 0;  // epochs completed
  double seconds = 0;  // training time in all
  std::optional<double> val_loss, val_accuracy;
  std::filesystem::path checkpoint;  // the last checkpoint written
};

// Trains as `options` say, printing progress to `out` (an updating line when `interactive`,
// plain lines every --log-every steps otherwise). Under mpirun every rank calls it (collective);
// it returns on every rank once the run directory is complete. SIGTERM or SIGINT stops the run
// at the next step boundary with a checkpoint, and it returns normally. Throws InputError for bad input,
// found before anything is trained, and loom::Error for failures while training.
TrainSummary run_training(const TrainOptions& options, std::ostream& out, bool interactive);

// Samples --tokens tokens continuing --prompt from the latest checkpoint of the GPT run in
// --out (or --resume), and prints the text to `out`. Throws InputError.
void run_generation(const TrainOptions& options, std::ostream& out);

}  // namespace loom::train
