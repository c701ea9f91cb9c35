/*
 * The options of `train`: one struct with every setting a run needs, parsed from the command
 * line with CLI11, optionally on top of a JSON config file (`--config run.json`; flags given on
 * the command line win). A run directory's config.json holds the resolved options in the same
 * shape (keys are the long flag names without "--"), so a run can be repeated with
 * `train --config RUN_DIR/config.json --out OTHER_DIR`.
 */
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace loom::train {

struct TrainOptions {
  // Model.
  std::string model = "mlp";       // mlp | cnn | resnet | gpt
  std::string hidden = "512,512";  // mlp: hidden layer sizes
  int64_t blocks = 1;              // resnet: blocks per stage (1: ResNet-8, 3: ResNet-20)
  int64_t layers = 4;              // gpt
  int64_t heads = 4;               // gpt
  int64_t d_model = 128;           // gpt
  int64_t context = 64;            // gpt: tokens per training window
  // Data.
  std::string data;  // TRAIN.h5
  std::string val;   // VAL.h5 (optional)
  int64_t train_examples = 0;  // train on the first N examples of --data only; 0: all
  int workers = 2;
  // Optimisation.
  int64_t epochs = 1;
  int64_t batch = 64;
  double lr = 0.05;
  std::string optimizer = "sgd";  // sgd | adam | adamw
  double momentum = 0.9;
  double weight_decay = 5e-4;
  std::string schedule = "cosine";  // none | cosine | step | linear | onecycle
  int64_t warmup = 0;               // steps
  std::string amp = "none";         // none | bf16 | fp16
  int64_t grad_accum = 1;
  double clip = 0.0;  // max gradient norm; 0: no clipping
  uint64_t seed = 0;
  int64_t max_steps = 0;  // stop after this many optimizer steps in total; 0: no limit
  // Run directory, logging, checkpoints.
  std::string out;
  std::string config;
  std::string resume;
  bool force = false;
  int64_t log_every = 50;
  int64_t checkpoint_every = 0;  // steps; 0: only at the end
  int threads = 0;               // 0: every core
  std::string trace;
  // Sampling from a GPT checkpoint.
  bool generate = false;
  std::string prompt = "\n";
  int64_t tokens = 200;
  double temperature = 1.0;
  // Data parallelism: ranks of the `mpirun -np N` job (trainer.h).
  int64_t dp = 1;
  // Knowledge distillation from a trained model file (quant/distill.h).
  std::string teacher;
  double kd_temperature = 4.0;
  double kd_alpha = 0.9;
  // Not available yet (each comes with a later issue).
  int64_t tp = 1, pp = 1, microbatches = 1, zero = 0;
  std::string pipeline_schedule;
};

// What parse_options decided.
struct ParseOutcome {
  std::optional<TrainOptions> options;  // empty when the program should exit with `exit_code`
  int exit_code = 0;
  std::string message;  // --help text (exit 0)
};

// Parses argv (argv[0] is the program name). Throws loom::Error with a one-line message for an
// unknown flag, a bad value, a missing required option, an unreadable or malformed --config
// file, or a flag that is not available yet.
ParseOutcome parse_options(int argc, const char* const* argv);

// Checks values that depend on each other (e.g. --data is required unless --generate) and
// throws loom::Error naming the problem.
void validate(const TrainOptions& options);

// The resolved options as config.json holds them, and back (unknown keys throw).
nlohmann::json to_json(const TrainOptions& options);

// The mlp's hidden sizes from "512,512"; throws loom::Error on anything but positive integers.
std::vector<int64_t> parse_hidden(const std::string& hidden);

}  // namespace loom::train
