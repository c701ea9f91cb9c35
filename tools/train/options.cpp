/*
 * Command-line parsing for `train` (CLI11). A --config FILE.json is merged by turning its keys
 * into flags placed before the real command line, with every option taking the last value it
 * is given: so the file supplies values and the command line overrides them, with one parser
 * and one set of checks for both.
 */
#include "tools/train/options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/cuda.h"
#include "core/error.h"

namespace loom::train {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& message) {
  throw Error(message);
}

// The words each option takes, in the order of its enum's values.
constexpr std::array<std::string_view, 4> kModelWords{"mlp", "cnn", "resnet", "gpt"};
constexpr std::array<std::string_view, 3> kOptimizerWords{"sgd", "adam", "adamw"};
constexpr std::array<std::string_view, 5> kLrScheduleWords{"none", "cosine", "step", "linear", "onecycle"};
constexpr std::array<std::string_view, 3> kAmpWords{"none", "bf16", "fp16"};
constexpr std::array<std::string_view, 2> kDeviceWords{"cpu", "cuda"};
constexpr std::array<std::string_view, 2> kCheckpointErrorWords{"stop", "continue"};
constexpr std::array<std::string_view, 4> kPipelineScheduleWords{"gpipe", "1f1b", "interleaved", "zb-h1"};
constexpr std::array<std::string_view, 2> kTextWindowsWords{"blocks", "random"};
constexpr std::array<std::string_view, 2> kGeluWords{"none", "tanh"};

template <size_t N>
CLI::IsMember one_of(const std::array<std::string_view, N>& words) {
  return CLI::IsMember(std::vector<std::string>(words.begin(), words.end()));
}

// `word` has passed one_of(words): CLI11 lets no other word through.
template <typename Kind, size_t N>
Kind kind_of(const std::string& word, const std::array<std::string_view, N>& words) {
  return static_cast<Kind>(std::find(words.begin(), words.end(), word) - words.begin());
}

std::string str(std::string_view word) { return std::string(word); }

std::string flag_of(const std::string& key) {
  std::string flag = "--" + key;
  for (char& c : flag)
    if (c == '_') c = '-';
  return flag;
}

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read config file '" + path + "': check the path");
  try {
    json j = json::parse(in);
    if (!j.is_object()) fail("config file '" + path + "' must hold one JSON object of option: value pairs");
    return j;
  } catch (const json::exception& e) {
    fail("config file '" + path + "' is not valid JSON (" + e.what() + ")");
  }
}

// The value after `name` in argv ("--name VALUE" or "--name=VALUE"), if given.
std::optional<std::string> prescan(int argc, const char* const* argv, const std::string& name) {
  std::optional<std::string> value;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == name && i + 1 < argc)
      value = argv[++i];
    else if (arg.rfind(name + "=", 0) == 0)
      value = arg.substr(name.size() + 1);
  }
  return value;
}

// A config file's entries as flags, checked against the parser's options.
std::vector<std::string> config_args(const json& config, const std::string& path, CLI::App& app) {
  std::vector<std::string> args;
  for (const auto& [key, value] : config.items()) {
    // Where a run is and how it was started are not settings to repeat.
    if (key == "config" || key == "resume" || key == "out" || key == "force" || key == "max-steps") continue;
    std::string flag = flag_of(key);
    CLI::Option* option = app.get_option_no_throw(flag);
    if (option == nullptr)
      fail("config file '" + path + "': unknown option '" + key + "' (see train --help)");
    if (value.is_boolean()) {
      if (value.get<bool>()) args.push_back(flag);
    } else if (value.is_string()) {
      // An empty string is every such option's "not set"; "--trace=" would take the next flag.
      if (!value.get<std::string>().empty()) args.push_back(flag + "=" + value.get<std::string>());
    } else if (value.is_number()) {
      args.push_back(flag + "=" + value.dump());
    } else {
      fail("config file '" + path + "': option '" + key + "' must be a string, number or boolean");
    }
  }
  return args;
}

}  // namespace

std::string_view to_string(ModelKind model) { return kModelWords[static_cast<size_t>(model)]; }
std::string_view to_string(OptimizerKind optimizer) {
  return kOptimizerWords[static_cast<size_t>(optimizer)];
}
std::string_view to_string(LrSchedule schedule) { return kLrScheduleWords[static_cast<size_t>(schedule)]; }
std::string_view to_string(AmpMode amp) { return kAmpWords[static_cast<size_t>(amp)]; }
std::string_view to_string(DeviceKind device) { return kDeviceWords[static_cast<size_t>(device)]; }
std::string_view to_string(TextWindows windows) { return kTextWindowsWords[static_cast<size_t>(windows)]; }
std::string_view to_string(PipelineSchedule schedule) {
  return kPipelineScheduleWords[static_cast<size_t>(schedule)];
}

int64_t pipeline_chunks(const TrainOptions& o) {
  if (o.pipeline_chunks != 0) return o.pipeline_chunks;
  return o.pipeline_schedule == PipelineSchedule::kInterleaved ? 2 : 1;
}

std::vector<int64_t> parse_hidden(const std::string& hidden) {
  std::vector<int64_t> sizes;
  std::stringstream in(hidden);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t size = 0;
    try {
      size = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || item.empty() || size <= 0)
      fail("--hidden: expected positive layer sizes separated by commas (e.g. 512,512), got '" + hidden +
           "'");
    sizes.push_back(size);
  }
  return sizes;
}

ParseOutcome parse_options(int argc, const char* const* argv) {
  TrainOptions o;
  CLI::App app("Trains a model from the Loom zoo on an HDF5 dataset (see docs/train.md).", "train");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->always_capture_default();
  app.get_formatter()->column_width(34);
  // CLI11 reads the one-word options into strings, checked against their enums' words, which
  // become the enums once parsing is done: --help and the bad-value errors read as for any text.
  std::string model = str(to_string(o.model)), optimizer = str(to_string(o.optimizer)),
              schedule = str(to_string(o.schedule)), amp = str(to_string(o.amp)),
              device = str(to_string(o.device)), pipeline_schedule = str(to_string(o.pipeline_schedule)),
              windows = str(to_string(o.windows));
  std::string on_checkpoint_error = "stop";

  app.add_option("--model", model, "Model: mlp, cnn (SmallCNN), resnet (CIFAR ResNet) or gpt")
      ->check(one_of(kModelWords));
  app.add_option("--hidden", o.hidden, "mlp: hidden layer sizes, comma-separated");
  app.add_option("--blocks", o.blocks, "resnet: blocks per stage (1: ResNet-8, 3: ResNet-20)")
      ->check(CLI::PositiveNumber);
  app.add_option("--layers", o.layers, "gpt: transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--heads", o.heads, "gpt: attention heads (must divide --d-model)")
      ->check(CLI::PositiveNumber);
  app.add_option("--d-model", o.d_model, "gpt: embedding width")->check(CLI::PositiveNumber);
  app.add_option("--context", o.context, "gpt: tokens per training window")->check(CLI::PositiveNumber);
  app.add_option("--dropout", o.dropout, "gpt: dropout probability after the embeddings and in every block")
      ->check(CLI::Range(0.0, 0.95));
  app.add_option("--gelu", o.gelu,
                 "gpt: the MLPs' GELU, none (erf, as nanoGPT) or tanh (GPT-2's; on CUDA its backward runs in "
                 "cuBLASLt's DGELU_BGRAD epilogue)")
      ->check(one_of(kGeluWords));
  app.add_option("--windows", windows,
                 "gpt: blocks (an epoch is every context-long block once, each window at a random offset in "
                 "its block and the next) or random (nanoGPT's: every window starts anywhere in the text)")
      ->check(one_of(kTextWindowsWords));
  app.add_option("--windows-per-epoch", o.windows_per_epoch,
                 "gpt, --windows random: windows per epoch (0: as many as blocks, tokens / context)")
      ->check(CLI::NonNegativeNumber);

  app.add_option("--data", o.data,
                 "Training set, an HDF5 file from make_dataset (required unless --generate)");
  app.add_option("--val", o.val, "Validation set (HDF5), evaluated after every epoch");
  app.add_option("--train-examples", o.train_examples,
                 "Train on the first N examples of --data only (0: all): learning from less labelled data")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--workers", o.workers, "Data-loader worker threads (0: load on the training thread)")
      ->check(CLI::NonNegativeNumber);

  app.add_option("--epochs", o.epochs, "Passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch,
                 "Examples per micro-batch, per rank with --dp (global batch = dp x batch x grad-accum)")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", o.lr, "Peak learning rate")->check(CLI::PositiveNumber);
  app.add_option("--optimizer", optimizer, "sgd, adam or adamw")->check(one_of(kOptimizerWords));
  app.add_option("--momentum", o.momentum, "sgd: momentum")->check(CLI::Range(0.0, 1.0));
  app.add_option("--weight-decay", o.weight_decay, "L2 penalty (sgd, adam) or decoupled decay (adamw)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--schedule", schedule,
                 "LR schedule over the whole run: none, cosine (with --warmup), step (x0.1 at 1/3 and 2/3), "
                 "linear (decay to 0) or onecycle")
      ->check(one_of(kLrScheduleWords));
  app.add_option("--warmup", o.warmup, "cosine: linear warm-up steps")->check(CLI::NonNegativeNumber);
  app.add_option("--amp", amp,
                 "Mixed precision: none, bf16 (autocast), or fp16 (autocast + dynamic loss scaling; "
                 "the CPU kernels run float16 too)")
      ->check(one_of(kAmpWords));
  app.add_option("--grad-accum", o.grad_accum, "Micro-batches per optimizer step (loss divided by it)")
      ->check(CLI::PositiveNumber);
  app.add_option("--clip", o.clip, "Clip the gradient norm to this (0: no clipping)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", o.seed, "Seeds initialisation, shuffling and dropout");
  app.add_option("--max-steps", o.max_steps, "Stop after this many optimizer steps in all (0: no limit)")
      ->check(CLI::NonNegativeNumber);

  app.add_option("--out", o.out, "Run directory: config.json, metrics.jsonl, checkpoints, report.html");
  app.add_option("--config", o.config, "JSON file of option values; flags on the command line override them");
  app.add_option("--resume", o.resume,
                 "Continue the run in this directory from its latest checkpoint (its config.json gives the "
                 "options; flags override, e.g. --epochs)");
  app.add_flag("--force", o.force,
               "Train into a run directory that holds another run (replaces Loom's files)");
  app.add_option("--log-every", o.log_every, "Steps between metrics lines")->check(CLI::PositiveNumber);
  app.add_flag("--checkpoint-async", o.checkpoint_async,
               "Write checkpoints on a background thread: training pauses only to copy the state to memory, "
               "and the checkpoint becomes the latest at the first step after it is on disk");
  app.add_option("--checkpoint-every", o.checkpoint_every, "Steps between checkpoints (0: only at the end)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--on-checkpoint-error", on_checkpoint_error,
                 "stop: a checkpoint that cannot be written (full disk, I/O error) ends the run; continue: "
                 "warn, keep the last good checkpoint and try again at the next one")
      ->check(one_of(kCheckpointErrorWords));
  app.add_option("--loader-timeout", o.loader_timeout,
                 "Seconds a batch may take to load before the run fails naming the stuck worker, sample and "
                 "file (0: no limit; needs --workers >= 1)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--threads", o.threads, "Compute threads (0: every core)")->check(CLI::NonNegativeNumber);
  app.add_option("--device", device, "cpu, or cuda: train on GPU 0 (needs a build with the CUDA backend)")
      ->check(one_of(kDeviceWords));
  app.add_flag(
      "--cuda-graph", o.cuda_graph,
      "--device cuda: capture the training step (forward, backward, clipping, optimizer) into a CUDA "
      "graph after 2 eager steps and replay it, one launch per step; an epoch's short last batch runs "
      "eagerly; dropout draws fresh masks at every replay; with --amp fp16 each replay skips an inf/NaN step "
      "and backs the loss scale off on the GPU. One process, --grad-accum 1");
  app.add_option("--trace", o.trace,
                 "Write a Chrome trace (chrome://tracing, Perfetto) of the run to this file; with --pp, "
                 "also the pipeline's micro-batches on every rank to FILE's name + .pipeline.json");

  app.add_flag("--generate", o.generate,
               "Sample text from the GPT checkpoint in --out (or --resume) instead");
  app.add_option("--prompt", o.prompt, "--generate: the text to continue")->default_str("\\n");
  app.add_option("--tokens", o.tokens, "--generate: tokens to sample")->check(CLI::PositiveNumber);
  app.add_option("--temperature", o.temperature, "--generate: softmax temperature")
      ->check(CLI::PositiveNumber);

  app.add_option("--teacher", o.teacher,
                 "Distil from this trained model (a run's model.safetensors): loss = (1 - alpha) CE + "
                 "alpha T^2 KL(teacher || student) at temperature T");
  app.add_option("--kd-temperature", o.kd_temperature, "--teacher: softmax temperature T")
      ->check(CLI::PositiveNumber);
  app.add_option("--kd-alpha", o.kd_alpha, "--teacher: weight of the distillation term")
      ->check(CLI::Range(0.0, 1.0));

  // The job's mesh: mpirun -np (dp x tp x pp) ranks (parallelism.h, docs/parallelism.md).
  auto parallel = app.add_option_group("Parallelism (run as mpirun -np DP*TP*PP train ...)");
  parallel
      ->add_option("--dp", o.dp,
                   "Data-parallel replicas: each trains on its share of every batch (global batch = "
                   "dp x batch x grad-accum); rank 0 writes the run directory")
      ->check(CLI::PositiveNumber);
  parallel
      ->add_option("--tp", o.tp,
                   "Tensor-parallel ranks per replica: each linear layer's weight split over them "
                   "(--model mlp or gpt)")
      ->check(CLI::PositiveNumber);
  parallel
      ->add_option("--pp", o.pp,
                   "Pipeline stages per replica: the layers cut into pp stages (--model mlp or gpt)")
      ->check(CLI::PositiveNumber);
  parallel
      ->add_option("--microbatches", o.microbatches,
                   "--pp: micro-batches each batch is cut into (must divide --batch)")
      ->check(CLI::PositiveNumber);
  parallel
      ->add_option("--pipeline-schedule", pipeline_schedule,
                   "--pp: gpipe, 1f1b, interleaved (1F1B over --pipeline-chunks model chunks per rank) or zb-h1 "
                   "(zero-bubble: each backward split into its input and weight gradients) (named so because "
                   "--schedule is the LR schedule)")
      ->check(one_of(kPipelineScheduleWords));
  parallel
      ->add_option("--pipeline-chunks", o.pipeline_chunks,
                   "--pipeline-schedule interleaved: model chunks per pipeline rank (default 2); the layers are cut "
                   "into pp x chunks stages")
      ->check(CLI::PositiveNumber);
  parallel
      ->add_option("--zero", o.zero,
                   "ZeRO stage over the data-parallel ranks: 1 shards the optimizer state, 2 also the "
                   "gradients, 3 also the parameters (FSDP: each layer gathered while it computes; 0: off)")
      ->check(CLI::Range(0, 3));
  parallel->add_flag("--no-prefetch", o.no_prefetch,
                     "--zero 3: gather each layer's parameters only when it starts, instead of while the layer "
                     "before it computes (to measure what the prefetch saves)");
  parallel
      ->add_option("--collective-timeout", o.collective_timeout,
                   "Seconds a collective may wait for the other ranks before the job fails")
      ->check(CLI::PositiveNumber);

  // The config file's values go first so that the command line's come last and win.
  std::vector<std::string> args;
  std::optional<std::string> config_path = prescan(argc, argv, "--config");
  std::optional<std::string> resume_dir = prescan(argc, argv, "--resume");
  if (!config_path && resume_dir) {
    std::string run_config = (std::filesystem::path(*resume_dir) / "config.json").string();
    if (!std::filesystem::exists(run_config))
      fail("--resume " + *resume_dir + ": no config.json there; is it a run directory written by train?");
    config_path = run_config;
  }
  if (config_path) args = config_args(read_json_file(*config_path), *config_path, app);
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);

  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return {std::nullopt, 0, app.help()};
  } catch (const CLI::ParseError& e) {
    fail(std::string(e.what()) + " (see train --help)");
  }
  o.model = kind_of<ModelKind>(model, kModelWords);
  o.optimizer = kind_of<OptimizerKind>(optimizer, kOptimizerWords);
  o.schedule = kind_of<LrSchedule>(schedule, kLrScheduleWords);
  o.amp = kind_of<AmpMode>(amp, kAmpWords);
  o.device = kind_of<DeviceKind>(device, kDeviceWords);
  o.continue_on_checkpoint_error = on_checkpoint_error == "continue";
  o.pipeline_schedule = kind_of<PipelineSchedule>(pipeline_schedule, kPipelineScheduleWords);
  o.windows = kind_of<TextWindows>(windows, kTextWindowsWords);
  if (resume_dir && o.out.empty()) o.out = *resume_dir;
  if (resume_dir && o.out != *resume_dir)
    fail("--resume " + *resume_dir + " with --out " + o.out +
         ": a resumed run continues in its own directory");
  validate(o);
  return {o, 0, {}};
}

void validate(const TrainOptions& o) {
  if (o.generate) {
    if (o.out.empty() && o.resume.empty())
      fail("--generate needs the run directory of a GPT run: --out RUN_DIR");
    return;
  }
  if (o.data.empty())
    fail("--data TRAIN.h5 is required (make one with: make_dataset fashion-mnist --out data/)");
  if (o.out.empty()) fail("--out RUN_DIR is required: where config.json, metrics and checkpoints go");
  if (o.model == ModelKind::kMlp) parse_hidden(o.hidden);
  if (o.model == ModelKind::kGpt && o.d_model % o.heads != 0)
    fail("--d-model " + std::to_string(o.d_model) + " is not divisible by --heads " +
         std::to_string(o.heads));
  if (o.schedule == LrSchedule::kCosine && o.warmup < 0) fail("--warmup must be >= 0");
  if (o.model != ModelKind::kGpt && o.windows != TextWindows::kBlocks)
    fail("--windows " + std::string(to_string(o.windows)) + " cuts text windows: it needs --model gpt");
  if (o.windows_per_epoch != 0 && o.windows != TextWindows::kRandom)
    fail("--windows-per-epoch " + std::to_string(o.windows_per_epoch) + " needs --windows random");
  if (o.loader_timeout > 0 && o.workers == 0)
    fail("--loader-timeout needs --workers >= 1: with --workers 0 batches load on the training thread, which "
         "cannot time itself out");
  validate_parallelism(o);
  validate_device(o);
  validate_cuda_graph(o);
}

void validate_device(const TrainOptions& o) {
  if (o.device != DeviceKind::kCuda) return;
  if (!LOOM_WITH_CUDA)
    fail("--device cuda: this Loom was built without the CUDA backend (configure with -DLOOM_WITH_CUDA=ON, "
         "or EMULATED to run the CUDA kernels on the CPU)");
  if (!cuda::is_available())
    fail("--device cuda: no usable GPU (no CUDA driver or device on this machine); use --device cpu");
#if !LOOM_WITH_NCCL
  if (o.dp * o.tp * o.pp > 1)
    fail("--device cuda: --dp/--tp/--pp need the NCCL backend, which this Loom was built without (install NCCL "
         "and reconfigure); use --device cpu");
#endif
  if (!o.teacher.empty()) fail("--device cuda: --teacher is not available on the GPU yet; use --device cpu");
}

// Work across processes and a host decision per step (accumulation's micro-batch count) cannot
// be captured. Dropout can (each replay draws its own masks), and so can fp16's overflow check
// (each replay skips its own step on the device).
void validate_cuda_graph(const TrainOptions& o) {
  if (!o.cuda_graph) return;
  if (o.device != DeviceKind::kCuda) fail("--cuda-graph needs --device cuda");
  if (o.dp * o.tp * o.pp > 1 || o.zero != 0)
    fail(
        "--cuda-graph: the step of a distributed run (--dp/--tp/--pp/--zero) is not captured; run one "
        "process");
  if (o.grad_accum != 1)
    fail("--cuda-graph with --grad-accum " + std::to_string(o.grad_accum) +
         ": a captured step is one batch; use --grad-accum 1 and a larger --batch");
}

void validate_parallelism(const TrainOptions& o) {
  const std::string tp = std::to_string(o.tp), pp = std::to_string(o.pp), model = str(to_string(o.model));
  const bool mlp = o.model == ModelKind::kMlp, gpt = o.model == ModelKind::kGpt;
  if (o.dp < 1 || o.tp < 1 || o.pp < 1 || o.microbatches < 1)
    fail("--dp, --tp, --pp and --microbatches must be at least 1");
  if (o.zero < 0 || o.zero > 3) fail("--zero " + std::to_string(o.zero) + ": the ZeRO stages are 0, 1, 2 and 3");
  if (o.collective_timeout <= 0) fail("--collective-timeout must be a positive number of seconds");
  if (o.tp > 1 && !mlp && !gpt)
    fail("--tp " + tp + ": --model " + model +
         " has no tensor-parallel form (--tp works with --model mlp and gpt); use --dp to spread it");
  if (o.pp > 1 && !mlp && !gpt)
    fail("--pp " + pp + ": --model " + model +
         " has no pipeline form (--pp works with --model mlp and gpt); use --dp to spread it");
  if (gpt && o.pp > o.layers + 2)
    fail("--pp " + pp + ": the gpt has " + std::to_string(o.layers + 2) +
         " pipeline layers (the embedding, --layers " + std::to_string(o.layers) +
         " blocks, the head), so at most --pp " + std::to_string(o.layers + 2) +
         "; add --layers or lower --pp");
  if (o.microbatches > 1 && o.pp == 1)
    fail("--microbatches " + std::to_string(o.microbatches) +
         " needs --pp 2 or more (it feeds the pipeline stages); to accumulate gradients use --grad-accum");
  if (o.pipeline_chunks != 0 && o.pipeline_schedule != PipelineSchedule::kInterleaved)
    fail("--pipeline-chunks " + std::to_string(o.pipeline_chunks) + ": only --pipeline-schedule interleaved cuts "
         "a rank's layers into chunks (this run's is " + str(to_string(o.pipeline_schedule)) + ")");
  const int64_t chunks = pipeline_chunks(o), pipeline_stages = o.pp * chunks;
  if (o.pipeline_schedule == PipelineSchedule::kInterleaved) {
    const std::string interleaved = "--pipeline-schedule interleaved";
    if (o.pp < 2) fail(interleaved + " needs --pp 2 or more: its chunks go round the pipeline ranks");
    if (chunks < 2)
      fail(interleaved + " with --pipeline-chunks " + std::to_string(chunks) +
           ": one chunk per rank is --pipeline-schedule 1f1b; use 2 or more");
    if (o.microbatches % o.pp != 0)
      fail(interleaved + ": --microbatches " + std::to_string(o.microbatches) + " is not a multiple of --pp " + pp +
           " (the micro-batches go through the chunks in groups of one per rank)");
  }
  if (gpt && pipeline_stages > o.layers + 2 && chunks > 1)
    fail("--pp " + pp + " x --pipeline-chunks " + std::to_string(chunks) + " = " + std::to_string(pipeline_stages) +
         " pipeline stages, but the gpt has only " + std::to_string(o.layers + 2) +
         " pipeline layers (the embedding, --layers " + std::to_string(o.layers) +
         " blocks, the head); add --layers or lower --pp or --pipeline-chunks");
  if (o.batch % o.microbatches != 0)
    fail("--microbatches " + std::to_string(o.microbatches) + " does not divide --batch " +
         std::to_string(o.batch) + ": every micro-batch must be as large; pick a divisor of " +
         std::to_string(o.batch));
  if (mlp && (o.tp > 1 || o.pp > 1)) {
    const std::vector<int64_t> hidden = parse_hidden(o.hidden);
    const auto linears = static_cast<int64_t>(hidden.size()) + 1;
    if (o.pp > linears)
      fail("--pp " + pp + ": the mlp has " + std::to_string(linears) + " linear layers (--hidden " +
           o.hidden + "), so at most --pp " + std::to_string(linears) + "; add hidden layers or lower --pp");
    if (pipeline_stages > linears)
      fail("--pp " + pp + " x --pipeline-chunks " + std::to_string(chunks) + " = " +
           std::to_string(pipeline_stages) + " pipeline stages, but the mlp has only " + std::to_string(linears) +
           " linear layers (--hidden " + o.hidden + "); add hidden layers or lower --pp or --pipeline-chunks");
    for (int64_t h : hidden)
      if (h % o.tp != 0)
        fail("--tp " + tp + " does not divide the hidden layer size " + std::to_string(h) + " (--hidden " +
             o.hidden + "): each tensor-parallel rank holds an equal share of every layer's units");
  }
  if (gpt && o.tp > 1) {
    if (o.heads % o.tp != 0)
      fail("--tp " + tp + " does not divide --heads " + std::to_string(o.heads) +
           ": each tensor-parallel rank computes whole heads; pick a --tp that divides it");
    if (4 * o.d_model % o.tp != 0)
      fail("--tp " + tp + " does not divide the MLP width 4 x --d-model = " + std::to_string(4 * o.d_model));
  }
  if (o.dropout > 0 && !gpt)
    fail("--dropout: only --model gpt has dropout layers (the " + model + " has none)");
  if (o.gelu != "none" && !gpt) fail("--gelu: only --model gpt has GELU layers (the " + model + " has none)");
  if (o.tp > 1 || o.pp > 1) {
    const std::string flags = o.pp > 1 ? (o.tp > 1 ? "--tp/--pp" : "--pp") : "--tp";
    if (o.dropout > 0)
      fail("--dropout with " + flags +
           ": the tensor- and pipeline-parallel GPTs have no dropout layers; use --dp only, or --dropout 0");
    if (o.amp != AmpMode::kOff)
      fail("--amp " + str(to_string(o.amp)) + " with " + flags +
           ": mixed precision is supported with --dp only (pipeline stages exchange float32, and fp16's "
           "overflow check would have to span the model's shards); use --amp none");
    if (!o.teacher.empty())
      fail("--teacher with " + flags + ": distillation is supported with --dp only; drop --teacher or " +
           flags);
  }
  if (o.no_prefetch && o.zero != 3)
    fail("--no-prefetch turns off the parameter prefetch of --zero 3; it does nothing without it");
  if (o.zero > 0) {
    const std::string zero = "--zero " + std::to_string(o.zero);
    if (o.zero == 3) {
      if (o.tp > 1 || o.pp > 1)
        fail("--zero 3 with --tp/--pp: FSDP shards whole layers over the data-parallel ranks; with tensor or "
             "pipeline parallelism use --zero 1 or 2");
      if (!mlp && !gpt)
        fail("--zero 3: --model " + model +
             " has no layer-by-layer form to shard (--zero 3 works with --model mlp and gpt); use --zero 2");
      if (gpt && o.dropout > 0)
        fail("--zero 3 with --dropout: the sharded GPT's layers have no dropout; use --dropout 0");
    }
    if (o.dp < 2) fail(zero + " shards the optimizer over the data-parallel ranks: it needs --dp 2 or more");
    if (o.clip > 0 && o.zero < 3)
      fail(zero +
           " with --clip: ZeRO averages the gradients inside its step, after clipping would need "
           "them; drop --clip or use --zero 0");
    if (o.amp == AmpMode::kFp16)
      fail(zero + " with --amp fp16: loss scaling needs the whole optimizer; use --amp bf16 or --zero 0");
  }
}

nlohmann::json to_json(const TrainOptions& o) {
  json j;
  j["model"] = to_string(o.model);
  j["hidden"] = o.hidden;
  j["blocks"] = o.blocks;
  j["layers"] = o.layers;
  j["heads"] = o.heads;
  j["d-model"] = o.d_model;
  j["context"] = o.context;
  j["data"] = o.data;
  j["val"] = o.val;
  j["workers"] = o.workers;
  j["epochs"] = o.epochs;
  j["batch"] = o.batch;
  j["lr"] = o.lr;
  j["optimizer"] = to_string(o.optimizer);
  j["momentum"] = o.momentum;
  j["weight-decay"] = o.weight_decay;
  j["schedule"] = to_string(o.schedule);
  j["warmup"] = o.warmup;
  j["amp"] = to_string(o.amp);
  j["grad-accum"] = o.grad_accum;
  j["clip"] = o.clip;
  j["seed"] = o.seed;
  j["out"] = o.out;
  j["log-every"] = o.log_every;
  j["checkpoint-every"] = o.checkpoint_every;
  if (o.checkpoint_async) j["checkpoint-async"] = true;
  if (o.continue_on_checkpoint_error) j["on-checkpoint-error"] = "continue";
  if (o.loader_timeout != 0) j["loader-timeout"] = o.loader_timeout;
  if (o.dropout != 0) j["dropout"] = o.dropout;
  if (o.gelu != "none") j["gelu"] = o.gelu;  // only when set, as dropout: older run directories match
  j["threads"] = o.threads;
  j["trace"] = o.trace;
  // Written only when set, so that the config.json of a single-process run keeps the keys it had
  // before --dp existed (a run directory from then still counts as "a run of the same config").
  if (o.dp != 1) j["dp"] = o.dp;
  if (o.tp != 1) j["tp"] = o.tp;
  if (o.pp != 1) {
    j["pp"] = o.pp;
    j["microbatches"] = o.microbatches;
    j["pipeline-schedule"] = to_string(o.pipeline_schedule);
    if (o.pipeline_schedule == PipelineSchedule::kInterleaved) j["pipeline-chunks"] = pipeline_chunks(o);
  }
  if (o.zero != 0) j["zero"] = o.zero;
  if (o.no_prefetch) j["no-prefetch"] = true;
  if (o.collective_timeout != 300) j["collective-timeout"] = o.collective_timeout;
  if (o.train_examples != 0) j["train-examples"] = o.train_examples;
  if (o.windows != TextWindows::kBlocks) {
    j["windows"] = to_string(o.windows);
    j["windows-per-epoch"] = o.windows_per_epoch;
  }
  if (o.device != DeviceKind::kCpu) j["device"] = to_string(o.device);
  if (o.cuda_graph) j["cuda-graph"] = true;
  if (!o.teacher.empty()) {
    j["teacher"] = o.teacher;
    j["kd-temperature"] = o.kd_temperature;
    j["kd-alpha"] = o.kd_alpha;
  }
  return j;
}

}  // namespace loom::train
