/* Command-line parsing for `predict` (CLI11); see options.h. */
#include "tools/predict/options.h"

#include <CLI/CLI.hpp>

#include "core/error.h"

namespace loom::predict {

ParseOutcome parse_options(int argc, const char* const* argv) {
  PredictOptions o;
  CLI::App app(
      "Runs a trained (f32) or quantized (INT8) model over an HDF5 dataset in batches and writes its "
      "predictions to an HDF5 file; reports accuracy (labelled images) or perplexity (text) "
      "(see docs/predict.md).",
      "predict");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->always_capture_default();
  app.get_formatter()->column_width(30);
  app.add_option("--model", o.model,
                 "Model file: a run's model.safetensors (train) or an INT8 file (quantize)")
      ->required();
  app.add_option("--data", o.data, "HDF5 dataset from make_dataset: images, or tokens for a GPT")->required();
  app.add_option("--out", o.out, "Where to write the predictions (HDF5)")->required();
  app.add_option("--batch-size", o.batch_size, "Examples per batch")->check(CLI::PositiveNumber);
  app.add_flag("--logits", o.logits, "Also write every example's logits");
  app.add_option("--device", o.device, "Run the model on cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--workers", o.workers, "Data-loader threads reading and decoding batches")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--threads", o.threads, "Compute threads (0: every core)")->check(CLI::NonNegativeNumber);
  app.add_flag("--force", o.force, "Replace an existing --out file");
  app.add_flag("!--no-progress", o.progress, "No progress bar, only the summary");

  if (std::optional<std::string> help = tools::parse_command_line(app, argc, argv))
    return {std::nullopt, 0, *help};
  return {o, 0, {}};
}

}  // namespace loom::predict
