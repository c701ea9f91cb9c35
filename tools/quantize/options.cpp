/* Command-line parsing for `quantize` (CLI11); see options.h. */
#include "tools/quantize/options.h"

#include <CLI/CLI.hpp>

#include "core/error.h"

namespace loom::quantize {

ParseOutcome parse_options(int argc, const char* const* argv) {
  QuantizeOptions o;
  CLI::App app("Quantizes a trained model to INT8 (post-training quantization, optionally followed by "
               "quantization-aware training) and compares it with the float model (see docs/quantization.md).",
               "quantize");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->always_capture_default();
  app.get_formatter()->column_width(30);
  app.add_option("--model", o.model, "Float model: a run's model.safetensors (from train)")->required();
  app.add_option("--calib", o.calib, "Calibration images (HDF5 from make_dataset; also QAT's training set)")
      ->required();
  app.add_option("--test", o.test, "Test images for the accuracy table (default: the --val of the model's training)");
  app.add_option("--out", o.out, "Where to write the INT8 model (safetensors)")->required();
  app.add_option("--method", o.method, "Activation calibration: minmax, moving_average, percentile or entropy")
      ->check(CLI::IsMember({"minmax", "moving_average", "percentile", "entropy"}));
  app.add_option("--percentile", o.percentile, "percentile: the percentile kept (e.g. 99.99)")
      ->check(CLI::Range(50.0, 100.0));
  app.add_flag("--per-channel", o.per_channel, "One weight scale per output channel (else one per tensor)");
  app.add_option("--bits", o.bits, "Integer levels 2^bits (8: full INT8; fewer to study low precision)")
      ->check(CLI::Range(2, 8));
  app.add_option("--calib-batches", o.calib_batches, "Calibration batches")->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch, "Batch size for calibration, QAT and evaluation")->check(CLI::PositiveNumber);
  app.add_option("--qat-epochs", o.qat_epochs, "Quantization-aware training epochs over --calib after PTQ (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--qat-lr", o.qat_lr, "QAT learning rate (SGD, momentum 0.9, cosine decay)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--learnable-ranges", o.learnable_ranges, "QAT: learn activation ranges (LSQ) instead of observing");
  app.add_option("--teacher", o.teacher, "QAT: distil from this float model file (KD loss)");
  app.add_option("--temperature", o.temperature, "Distillation temperature T")->check(CLI::PositiveNumber);
  app.add_option("--alpha", o.alpha, "Distillation weight of the teacher term")->check(CLI::Range(0.0, 1.0));
  app.add_option("--threads", o.threads, "Compute threads (0: every core)")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", o.seed, "Seeds calibration sampling and QAT shuffling");
  app.add_flag("--force", o.force, "Replace an existing --out file");
  app.add_option("--json", o.json, "Also write the results table as JSON to this file");
  app.add_option("--device", o.device, "Measure accuracy and latency on cpu or cuda (calibration runs on the CPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));

  if (std::optional<std::string> help = tools::parse_command_line(app, argc, argv))
    return {std::nullopt, 0, *help};
  if (!o.teacher.empty() && o.qat_epochs == 0)
    throw Error("--teacher distils during quantization-aware training: give --qat-epochs N too");
  return {o, 0, {}};
}

}  // namespace loom::quantize
