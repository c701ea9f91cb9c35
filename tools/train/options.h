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
#include <string_view>
#include <vector>

namespace loom::train {

// The options that take one word from a fixed set, parsed once into these. to_string gives the
// word back: config.json, log lines and error messages spell an option as its flag does.
enum class ModelKind { kMlp, kCnn, kResnet, kGpt };                   // --model
enum class OptimizerKind { kSgd, kAdam, kAdamW };                     // --optimizer
enum class LrSchedule { kNone, kCosine, kStep, kLinear, kOneCycle };  // --schedule
enum class AmpMode { kOff, kBf16, kFp16 };                            // --amp ("none" is kOff)
enum class DeviceKind { kCpu, kCuda };                                // --device
enum class PipelineSchedule { kGPipe, kOneFOneB, kInterleaved, kZeroBubbleH1 };  // --pipeline-schedule
enum class TextWindows { kBlocks, kRandom };                         // --windows

std::string_view to_string(ModelKind model);
std::string_view to_string(OptimizerKind optimizer);
std::string_view to_string(LrSchedule schedule);
std::string_view to_string(AmpMode amp);
std::string_view to_string(DeviceKind device);
std::string_view to_string(TextWindows windows);
std::string_view to_string(PipelineSchedule schedule);

struct TrainOptions {
  // Model.
  ModelKind model = ModelKind::kMlp;
  std::string hidden = "512,512";  // mlp: hidden layer sizes
  int64_t blocks = 1;              // resnet: blocks per stage (1: ResNet-8, 3: ResNet-20)
  int64_t layers = 4;              // gpt
  int64_t heads = 4;               // gpt
  int64_t d_model = 128;           // gpt
  int64_t context = 64;            // gpt: tokens per training window
  double dropout = 0.0;            // gpt: after the embeddings and inside every block
  std::string gelu = "none";       // gpt: the MLPs' GELU, "none" (erf, nanoGPT) or "tanh" (GPT-2)
  TextWindows windows = TextWindows::kBlocks;  // gpt: how training windows are cut from the text
  int64_t windows_per_epoch = 0;   // gpt, --windows random: 0 is the blocks' count (tokens / context)
  // Data.
  std::string data;            // TRAIN.h5
  std::string val;             // VAL.h5 (optional)
  int64_t train_examples = 0;  // train on the first N examples of --data only; 0: all
  int workers = 2;
  // Optimisation.
  int64_t epochs = 1;
  int64_t batch = 64;
  double lr = 0.05;
  OptimizerKind optimizer = OptimizerKind::kSgd;
  double momentum = 0.9;
  double weight_decay = 5e-4;
  LrSchedule schedule = LrSchedule::kCosine;
  int64_t warmup = 0;  // steps
  AmpMode amp = AmpMode::kOff;
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
  bool checkpoint_async = false;  // write checkpoints on a background thread (nn::AsyncCheckpointer)
  bool continue_on_checkpoint_error = false;  // --on-checkpoint-error continue: warn, retry at the next one
  double loader_timeout = 0;  // --loader-timeout: seconds a batch may take; 0: no limit
  int threads = 0;               // 0: every core
  DeviceKind device = DeviceKind::kCpu;  // cuda: GPU 0
  bool cuda_graph = false;  // --cuda-graph: replay the training step from a CUDA graph (nn::GraphedStep)
  std::string trace;
  // Sampling from a GPT checkpoint.
  bool generate = false;
  std::string prompt = "\n";
  int64_t tokens = 200;
  double temperature = 1.0;
  // Parallelism (parallelism.h): the `mpirun -np N` job is a dp x tp x pp mesh of N ranks.
  int64_t dp = 1;                          // data-parallel replicas
  int64_t tp = 1;                          // tensor-parallel ranks per replica (mlp, gpt)
  int64_t pp = 1;                          // pipeline stages per replica (mlp, gpt)
  int64_t microbatches = 1;                // --pp: micro-batches each loader batch is cut into
  PipelineSchedule pipeline_schedule = PipelineSchedule::kOneFOneB;  // --pp
  int64_t pipeline_chunks = 0;  // --pipeline-chunks: model chunks per rank; 0: 2 when interleaved, else 1
  int64_t zero = 0;                        // ZeRO stage over the data-parallel ranks: 0, 1, 2, 3 (FSDP)
  bool no_prefetch = false;                // --zero 3: no all-gather posted ahead
  double collective_timeout = 300;         // seconds before a stuck collective fails the job
  // Knowledge distillation from a trained model file (quant/distill.h).
  std::string teacher;
  double kd_temperature = 4.0;
  double kd_alpha = 0.9;
};

// What parse_options decided.
struct ParseOutcome {
  std::optional<TrainOptions> options;  // empty when the program should exit with `exit_code`
  int exit_code = 0;
  std::string message;  // --help text (exit 0)
};

// Parses argv (argv[0] is the program name). Throws loom::Error with a one-line message for an
// unknown flag, a bad value, a missing required option, or an unreadable or malformed --config
// file.
ParseOutcome parse_options(int argc, const char* const* argv);

// Checks values that depend on each other (e.g. --data is required unless --generate, --tp
// must divide --heads) and throws loom::Error naming the problem and the fix. What depends on
// the data (classes, vocabulary) or the job (world size) is checked when the run starts.
void validate(const TrainOptions& options);
// The part of validate() about --dp, --tp, --pp, --microbatches and --zero.
void validate_parallelism(const TrainOptions& options);
// The part of validate() about --device: cuda needs the CUDA backend and a GPU.
void validate_device(const TrainOptions& options);
// The part of validate() about --cuda-graph: what a captured step cannot hold.
void validate_cuda_graph(const TrainOptions& options);

// The resolved options as config.json holds them, and back (unknown keys throw).
nlohmann::json to_json(const TrainOptions& options);

// The mlp's hidden sizes from "512,512"; throws loom::Error on anything but positive integers.
std::vector<int64_t> parse_hidden(const std::string& hidden);

// The model chunks per pipeline rank: --pipeline-chunks, or its default (2 for the interleaved
// schedule, 1 for the others).
int64_t pipeline_chunks(const TrainOptions& options);

}  // namespace loom::train
