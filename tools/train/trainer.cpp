/*
 * The training loop of `train` (see trainer.h). Everything that a resumed run needs to
 * continue bit-exactly is either rebuilt from the options in the same order (model, optimizer,
 * schedule, loaders) or restored from the checkpoint (their states, the random generator, the
 * loader's position, the loss scaler).
 */
#include "tools/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/grad_mode.h"
#include "core/parallel.h"
#include "data/data.h"
#include "nn/nn.h"
#include "nn/training_state.h"
#include "ops/ops.h"
#include "quant/distill.h"
#include "tools/train/parallelism.h"
#include "tools/train/fault_injection.h"
#include "tools/train/report.h"
#include "tools/train/stop_signal.h"
#include "tools/train/trace.h"

namespace loom::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& message) {
  throw Error(message);
}

// ---------------------------------------------------------------------------------------------
// Validation shards

// Rank r of N evaluates examples r, r + N, r + 2N, ...: each example exactly once over the job
// (DistributedSampler pads the shards to equal length, which would count some examples twice).
class ShardSampler : public data::Sampler {
 public:
  ShardSampler(int64_t n, int64_t ranks, int64_t rank) : n_(n), ranks_(ranks), rank_(rank) {}
  int64_t size() const override { return rank_ < n_ ? (n_ - rank_ + ranks_ - 1) / ranks_ : 0; }
  std::vector<int64_t> indices(int64_t) const override {
    std::vector<int64_t> mine;
    for (int64_t i = rank_; i < n_; i += ranks_) mine.push_back(i);
    return mine;
  }

 private:
  int64_t n_, ranks_, rank_;
};

// ---------------------------------------------------------------------------------------------
// Data

struct Data {
  bool tokens = false;  // a token stream (GPT) rather than labelled images
  std::shared_ptr<data::Dataset> train, val;
  data::TransformPtr train_transform, val_transform;
  int64_t channels = 0, height = 0, width = 0, classes = 0;  // images
  int64_t vocab = 0;                                         // tokens
  std::vector<float> mean, std;  // images: the per-channel normalisation of the inputs
};

bool is_token_file(const std::string& path, const char* flag) {
  if (!fs::exists(path)) fail(std::string(flag) + " " + path + ": no such file (make one with make_dataset)");
  auto file = data::Hdf5File::open(path);
  if (file->has_dataset("tokens")) return true;
  if (file->has_dataset("images")) return false;
  fail(std::string(flag) + " " + path +
       ": neither /images nor /tokens in it; is it a file from make_dataset?");
}

// Per-channel mean and std of (up to) the first 10,000 training images in [0, 1], so that the
// model sees inputs of mean 0 and std 1 whatever the dataset (Fashion-MNIST: 0.286, 0.353).
std::pair<std::vector<float>, std::vector<float>> channel_stats(const data::Hdf5ImageDataset& set) {
  int64_t n = std::min<int64_t>(set.size(), 10000);
  Tensor x = set.images(0, n).to(DType::Float32).div(255.0);
  x = x.reshape({n, set.channels(), set.height() * set.width()});
  Tensor mean = x.mean({0, 2}), std = x.std({0, 2});
  std::vector<float> m, s;
  for (int64_t c = 0; c < set.channels(); ++c) {
    m.push_back(static_cast<float>(mean.select(0, c).item<double>()));
    s.push_back(std::max(1e-3f, static_cast<float>(std.select(0, c).item<double>())));
  }
  return {m, s};
}

Data load_data(const TrainOptions& o) {
  Data d;
  d.tokens = is_token_file(o.data, "--data");
  if (!o.val.empty() && is_token_file(o.val, "--val") != d.tokens)
    fail("--val " + o.val + " holds " + (d.tokens ? "images" : "tokens") + " but --data holds " +
         (d.tokens ? "tokens" : "images"));
  if (d.tokens != (o.model == "gpt"))
    fail("--model " + o.model + " needs " + (o.model == "gpt" ? "a token" : "an image") + " dataset, but " +
         o.data + " holds " +
         (d.tokens ? "tokens (use --model gpt)" : "images (use --model mlp, cnn or resnet)"));
  if (d.tokens) {
    // Training examples are 2T-token blocks every T tokens, cut by RandomTokenWindow into a
    // random T-token input and its next-token target; validation blocks are exactly T + 1 tokens,
    // so their windows are fixed.
    const int64_t t = o.context;
    auto train = std::make_shared<data::Hdf5TokenDataset>(
        o.data, data::Hdf5TokenOptions{.block_size = 2 * t, .stride = t});
    d.vocab = train->vocab_size();
    d.train = train;
    d.train_transform = std::make_shared<data::RandomTokenWindow>(t);
    if (!o.val.empty()) {
      auto val = std::make_shared<data::Hdf5TokenDataset>(
          o.val, data::Hdf5TokenOptions{.block_size = t + 1, .stride = t});
      if (val->vocab_size() != d.vocab)
        fail("--val " + o.val + " has a vocabulary of " + std::to_string(val->vocab_size()) +
             " tokens, --data " + std::to_string(d.vocab));
      d.val = val;
      d.val_transform = std::make_shared<data::RandomTokenWindow>(t);
    }
    return d;
  }
  auto train = std::make_shared<data::Hdf5ImageDataset>(o.data);
  d.channels = train->channels();
  d.height = train->height();
  d.width = train->width();
  d.classes = train->num_classes();
  std::tie(d.mean, d.std) = channel_stats(*train);
  d.train_transform = d.val_transform = std::make_shared<data::Normalize>(d.mean, d.std);
  d.train = train;
  if (!o.val.empty()) {
    auto val = std::make_shared<data::Hdf5ImageDataset>(o.val);
    if (val->channels() != d.channels || val->height() != d.height || val->width() != d.width)
      fail("--val " + o.val + " holds images of another shape than --data " + o.data);
    d.val = val;
  }
  return d;
}

// ---------------------------------------------------------------------------------------------
// Model, optimizer, schedule

std::shared_ptr<nn::Module> make_model(const TrainOptions& o, const Data& d) {
  if (o.model == "gpt") {
    return std::make_shared<nn::GPT>(nn::GPTConfig{.vocab_size = d.vocab,
                                                   .context = o.context,
                                                   .n_layers = o.layers,
                                                   .n_heads = o.heads,
                                                   .d_model = o.d_model,
                                                   .dropout = o.dropout});
  }
  if (o.model == "mlp") {
    std::vector<int64_t> sizes{d.channels * d.height * d.width};
    for (int64_t h : parse_hidden(o.hidden)) sizes.push_back(h);
    sizes.push_back(d.classes);
    return std::make_shared<nn::MLP>(sizes);
  }
  if (o.model == "cnn") {
    if (d.height != d.width || d.height % 4 != 0)
      fail("--model cnn needs square images with a side divisible by 4; " + o.data + " has " +
           std::to_string(d.height) + "x" + std::to_string(d.width) + " (use --model mlp or resnet)");
    return std::make_shared<nn::SmallCNN>(d.channels, d.classes, d.height);
  }
  return std::make_shared<nn::ResNet>(
      nn::ResNetConfig{.in_channels = d.channels, .num_classes = d.classes, .blocks_per_stage = o.blocks});
}

// The --teacher model file (model.safetensors of an earlier run), checked against the data: it
// must predict the same classes (or tokens) as the student, from the same inputs.
std::shared_ptr<nn::Module> load_teacher(const TrainOptions& o, const Data& d) {
  if (!fs::exists(o.teacher))
    fail("--teacher " + o.teacher + ": no such file (give a run's model.safetensors)");
  nn::LoadedModel teacher;
  try {
    teacher = nn::load_model(o.teacher);
  } catch (const Error& e) {
    fail(std::string("--teacher: ") + e.what());
  }
  auto it = teacher.metadata.find(nn::kInputNormalizationKey);
  if (!d.tokens && it != teacher.metadata.end() &&
      it->second != nlohmann::json{{"mean", d.mean}, {"std", d.std}}.dump())
    fail("--teacher " + o.teacher + " was trained on inputs normalised differently (" + it->second +
         "): train it on the same --data");
  // One example through the teacher: it must take this data's input and predict as many classes
  // (or tokens) as the student does.
  data::Example example = d.train->get(0);
  data::SampleRng rng(0, 0, 0);
  if (d.train_transform) example = d.train_transform->apply(example, rng);
  NoGradGuard no_grad;
  Tensor out;
  try {
    teacher.model->eval();
    out = (*teacher.model)(example.data.unsqueeze(0));
  } catch (const Error& e) {
    fail("--teacher " + o.teacher + " does not take this data's examples: " + e.what());
  }
  const int64_t classes = d.tokens ? d.vocab : d.classes;
  if (out.size(-1) != classes) {
    std::ostringstream message;
    message << "--teacher " << o.teacher << " outputs " << out.sizes() << " for one example, but the "
            << o.model << " student predicts " << classes << (d.tokens ? " tokens" : " classes");
    fail(message.str());
  }
  return teacher.model;
}

// Every optimizer here acts element by element, so one over a ZeRO shard's slices of the
// parameters computes what one over the whole parameters would.
std::unique_ptr<nn::Optimizer> make_optimizer(const TrainOptions& o, std::vector<Tensor> params) {
  if (o.optimizer == "sgd")
    return std::make_unique<nn::SGD>(
        std::move(params),
        nn::SGDOptions{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay});
  if (o.optimizer == "adam")
    return std::make_unique<nn::Adam>(std::move(params),
                                      nn::AdamOptions{.lr = o.lr, .weight_decay = o.weight_decay});
  return std::make_unique<nn::AdamW>(std::move(params),
                                     nn::AdamWOptions{.lr = o.lr, .weight_decay = o.weight_decay});
}

std::unique_ptr<nn::LRScheduler> make_schedule(const TrainOptions& o, nn::Optimizer& optimizer,
                                               int64_t total_steps) {
  if (o.schedule == "cosine") return std::make_unique<nn::CosineWithWarmup>(optimizer, o.warmup, total_steps);
  if (o.schedule == "step")
    return std::make_unique<nn::StepLR>(optimizer, std::max<int64_t>(1, total_steps / 3), 0.1);
  if (o.schedule == "linear") return std::make_unique<nn::LinearLR>(optimizer, 1.0, 0.0, total_steps);
  if (o.schedule == "onecycle") return std::make_unique<nn::OneCycleLR>(optimizer, o.lr, total_steps);
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Run directory

const char* const kConfigFile = "config.json";
const char* const kModelFile = "model.safetensors";
const char* const kMetricsFile = "metrics.jsonl";

// Options that do not change what is trained: a directory holding a run that differs only in
// these is "a run of the same config".
json comparable(json config) {
  for (const char* key : {"out", "workers", "log-every", "checkpoint-every", "checkpoint-async", "threads", "trace",
                          "epochs", "collective-timeout"})
    config.erase(key);
  return config;
}

// Removes what Loom writes into a run directory, and nothing else.
void clear_run_files(const fs::path& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    if (name == kConfigFile || name == kMetricsFile || name == "report.html" || name == "latest" ||
        name.rfind("step-", 0) == 0 || name.rfind(".tmp-step-", 0) == 0)
      fs::remove_all(entry.path());
  }
}

void prepare_fresh_dir(const TrainOptions& o) {
  fs::path dir = o.out;
  if (fs::exists(dir) && !fs::is_directory(dir)) fail("--out " + o.out + " is a file, not a directory");
  if (!fs::exists(dir) || fs::is_empty(dir)) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
      fail("--out " + o.out + ": cannot create the run directory (" + ec.message() +
           "); check the path and its permissions");
    return;
  }
  if (!o.force) {
    fs::path config = dir / kConfigFile;
    if (!fs::exists(config))
      fail("--out " + o.out +
           " is not empty and holds no train run; choose an empty directory or pass --force");
    std::ifstream in(config);
    json old = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (old.is_discarded() || comparable(old) != comparable(to_json(o)))
      fail("--out " + o.out + " holds a run with other options; use another directory, --resume " + o.out +
           " to continue it, or --force to replace it");
  }
  clear_run_files(dir);
}

// "1.5 MiB"
std::string format_bytes(int64_t bytes) {
  char buf[32];
  if (bytes >= int64_t{1} << 20)
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / (1 << 10));
  return buf;
}

// --pp's per-rank pipeline trace goes next to the --trace file (whose events are rank 0's).
fs::path pipeline_trace_path(const std::string& trace) {
  return trace + ".pipeline.json";
}

void write_text_atomically(const fs::path& path, const std::string& text) {
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) fail("cannot write " + path.string() + ": check the disk and permissions");
  }
  fs::rename(tmp, path);
}

// Drops the metrics lines of steps after `step`: a resumed run writes them again.
void truncate_metrics(const fs::path& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("step", int64_t{0}) <= step) kept += line + "\n";
  }
  write_text_atomically(path, kept);
}

// ---------------------------------------------------------------------------------------------
// Progress

std::string format_duration(double seconds) {
  auto s = static_cast<int64_t>(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  return buf;
}

std::string format_rate(double rate) {
  char buf[32];
  if (rate >= 1e6)
    std::snprintf(buf, sizeof buf, "%.1fM", rate / 1e6);
  else if (rate >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", rate / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", rate);
  return buf;
}

// ---------------------------------------------------------------------------------------------
// Evaluation

// --teacher: the knowledge-distillation loss (quant/distill.h) between the student's output and
// the teacher's, over every prediction ([N, C], or [B, T, V] flattened to [B*T, V]).
Tensor distillation_loss_of(const Tensor& output, const Tensor& teacher_output, const Tensor& target,
                            const TrainOptions& o) {
  const int64_t classes = output.size(-1);
  return quant::distillation_loss(
      output.reshape({-1, classes}), teacher_output.reshape({-1, classes}), target.reshape({-1}),
      quant::DistillationOptions{.temperature = o.kd_temperature, .alpha = o.kd_alpha});
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TrainSummary run_training(const TrainOptions& o, std::ostream& user_out, bool user_interactive) {
  // Any error before the first step is the input's: reported as InputError.
  bool in_setup = true;
  try {
    validate(o);
    Parallelism job(o);
    StopSignals stop_signals;
    // Ranks other than 0 print nothing (their errors still reach main).
    std::ostream silent(nullptr);
    std::ostream& out = job.main() ? user_out : silent;
    const bool interactive = job.main() && user_interactive;
    const bool resuming = !o.resume.empty();
    std::unique_ptr<Trace> trace =
        o.trace.empty() || !job.main() ? std::make_unique<Trace>() : std::make_unique<Trace>(o.trace);
    if (o.threads > 0) set_num_threads(o.threads);

    trace->begin("setup");
    Data d = load_data(o);
    if (o.train_examples > 0) {
      if (o.train_examples > d.train->size())
        fail("--train-examples " + std::to_string(o.train_examples) + ": " + o.data + " holds only " +
             std::to_string(d.train->size()) + " training examples");
      d.train = std::make_shared<data::Subset>(d.train, o.train_examples);
    }
    // With --dp N, replica r reads every N-th example of the epoch's permutation (the same on
    // every rank: same seed), from r on. Batch k of all replicas together is then positions
    // [k·N·b, (k+1)·N·b) of that permutation: the batch of one process with --batch N·b. The
    // tensor and pipeline ranks of a replica read the same batch.
    std::shared_ptr<const data::Sampler> sampler;
    if (job.data_size() > 1)
      sampler = std::make_shared<data::DistributedSampler>(
          d.train->size(), job.data_size(), job.data_rank(),
          data::DistributedSamplerOptions{.shuffle = true, .seed = o.seed});
    if (o.pp > 1) {
      // The pipeline cuts every batch into --microbatches equal parts, the epoch's last too.
      const int64_t per_replica = sampler ? sampler->size() : d.train->size(), tail = per_replica % o.batch;
      if (tail % o.microbatches != 0)
        fail("--microbatches " + std::to_string(o.microbatches) +
             " does not divide the epoch's last batch of " + std::to_string(tail) + " examples (" +
             std::to_string(per_replica) + " per replica, --batch " + std::to_string(o.batch) +
             "); choose --train-examples or --batch so that it does");
    }
    // --device cuda: batches arrive on the GPU, copied asynchronously from pinned memory.
    const Device device = o.device == "cuda" ? Device::cuda() : Device(kCPU);
    data::DataLoader loader(d.train,
                            data::DataLoaderOptions()
                                .batch_size(o.batch)
                                .shuffle(sampler == nullptr)
                                .seed(o.seed)
                                .workers(o.workers)
                                .device(device)
                                .pin_memory(device.is_cuda()),
                            d.train_transform, sampler);
    std::unique_ptr<data::DataLoader> val_loader;
    if (d.val)
      val_loader = std::make_unique<data::DataLoader>(
          d.val,
          data::DataLoaderOptions()
              .batch_size(std::max<int64_t>(o.batch, 256))
              .workers(o.workers)
              .device(device)
              .pin_memory(device.is_cuda()),
          d.val_transform,
          job.data_size() > 1
              ? std::make_shared<ShardSampler>(d.val->size(), job.data_size(), job.data_rank())
              : nullptr);

    manual_seed(o.seed);
    // The whole model on every rank (the same draw everywhere), of which this rank keeps its piece:
    // all of it without --tp/--pp. Checkpoints hold the piece; model.safetensors the whole.
    std::shared_ptr<nn::Module> model = make_model(o, d);
    if (device.is_cuda()) model->to(device);  // drawn on the CPU: the same initial weights on both devices
    job.build(model);
    // What the plain path's forward runs through: the model, or its DDP wrapper.
    nn::Module* trained = &job.trained();
    job.make_optimizer([&o](std::vector<Tensor> params) { return make_optimizer(o, std::move(params)); });
    nn::Optimizer* optimizer = &job.optimizer();
    std::optional<quant::Teacher> teacher;
    if (!o.teacher.empty()) teacher.emplace(load_teacher(o, d));
    // An optimizer step takes --grad-accum batches; an epoch's last step may take fewer.
    const int64_t batches_per_epoch = loader.num_batches();
    const int64_t steps_per_epoch = (batches_per_epoch + o.grad_accum - 1) / o.grad_accum;
    const int64_t total_steps = steps_per_epoch * o.epochs;
    std::unique_ptr<nn::LRScheduler> schedule = make_schedule(o, *optimizer, total_steps);
    std::optional<DType> amp;
    if (o.amp == "bf16") amp = DType::BFloat16;
    if (o.amp == "fp16") amp = DType::Float16;
    // float16's 5 exponent bits underflow small gradients; bfloat16 has float32's range.
    nn::GradScaler scaler(nn::GradScalerOptions{.enabled = o.amp == "fp16"});

    nn::CheckpointManager checkpoints(o.out, 3, job.checkpoint_group());
    // --checkpoint-async: the same checkpoints, written by a background thread (committed at a
    // later step boundary, see nn/serialize/async_checkpoint.h).
    std::optional<nn::AsyncCheckpointer> async_checkpoints;
    if (o.checkpoint_async) async_checkpoints.emplace(checkpoints);
    // LOOM_FAULT_INJECT (tests/tools/kill_resume_test.sh): a rank that kills itself on cue.
    const std::optional<InjectedFault> fault = injected_fault_from_env();
    const json mesh{{"dp", o.dp}, {"tp", o.tp}, {"pp", o.pp}, {"zero", o.zero}};
    int64_t step = 0;
    double time_offset = 0;  // training seconds of the run before it was resumed
    if (resuming) {
      std::optional<nn::Checkpoint> latest = checkpoints.load_latest();
      if (!latest) fail("--resume " + o.resume + ": no checkpoint there to resume from");
      if (!latest->note.empty()) out << "train: " << latest->note << "\n";
      const auto& s = latest->sections;
      json meta = json::parse(latest->metadata, nullptr, false);
      // A checkpoint holds each rank's piece: it fits only the same cut of the model.
      if (!meta.is_discarded() && meta.contains("mesh") && meta["mesh"] != mesh)
        fail("--resume " + o.resume + ": the checkpoint was written by a job of " + meta["mesh"].dump() +
             ", this one is " + mesh.dump() + "; resume with the same --dp, --tp, --pp and --zero");
      job.local().load_state_dict(s.at("model"));
      optimizer->load_state_dict(s.at("optimizer"));
      if (schedule) schedule->load_state_dict(s.at("schedule"));
      if (s.count("scaler")) scaler.load_state_dict(s.at("scaler"));
      nn::load_rng_state_dict(s.at("rng"));
      loader.load_state(data::LoaderState::from_map(nn::counters_from_state_dict(s.at("loader"))));
      step = latest->step;
      if (!meta.is_discarded()) time_offset = meta.value("time_s", 0.0);
      // Every rank loaded its part of the same checkpoint, so every rank's loader is at the same
      // batch (each shard has the same number of batches). Checked, since ranks that disagreed
      // would wait for each other in different steps.
      std::vector<double> position{
          static_cast<double>(loader.state().epoch), static_cast<double>(loader.state().batch),
          -static_cast<double>(loader.state().epoch), -static_cast<double>(loader.state().batch)};
      std::vector<double> highest = position;
      job.max(highest);
      if (highest != position)
        fail("--resume " + o.resume + ": the ranks loaded checkpoints at different positions; is " + o.out +
             " on a file system every rank sees?");
      if (job.main()) truncate_metrics(fs::path(o.out) / kMetricsFile, step);
      out << "train: resuming " << o.out << " at step " << step << " (epoch " << loader.state().epoch + 1
          << ")\n";
    }
    // Rank 0 alone writes the run directory; the others learn whether it could.
    std::ofstream metrics;  // stays closed on the other ranks
    std::string setup_error;
    if (job.main()) {
      try {
        if (!resuming) prepare_fresh_dir(o);
        write_text_atomically(fs::path(o.out) / kConfigFile, to_json(o).dump(2) + "\n");
        metrics.open(fs::path(o.out) / kMetricsFile, std::ios::app);
        if (!metrics) fail("cannot write " + (fs::path(o.out) / kMetricsFile).string());
      } catch (const Error& e) {
        setup_error = e.what();
      }
    }
    if (!job.all_ok(setup_error.empty()))
      fail(job.main() ? setup_error : "rank 0 could not prepare the run directory " + o.out);
    trace->end();

    const auto start = Clock::now();
    auto elapsed = [&] { return time_offset + std::chrono::duration<double>(Clock::now() - start).count(); };
    auto current_lr = [&] { return optimizer->param_groups().front().lr(); };
    TrainSummary summary;

    int64_t saved_step = -1;  // the step of the checkpoint this session saved last
    // Every rank saves its own state (its piece of the model, its optimizer or ZeRO shard, its
    // generator and loader position) into one checkpoint, committed by rank 0 once all are on
    // disk: save() returns on every rank only then, so no rank trains on (or exits, or is
    // killed) while it is written, and --resume restarts all of them from the same step.
    auto save = [&] {
      saved_step = step;
      trace->begin("checkpoint");
      std::map<std::string, nn::StateDict> sections{
          {"model", job.local().state_dict()},
          {"optimizer", optimizer->state_dict()},
          {"rng", nn::rng_state_dict()},
          {"loader", nn::counters_to_state_dict(loader.state().to_map())}};
      if (schedule) sections.emplace("schedule", schedule->state_dict());
      if (o.amp == "fp16") sections.emplace("scaler", scaler.state_dict());
      json meta{{"step", step},
                {"epoch", loader.state().epoch},
                {"time_s", elapsed()},
                {"mesh", mesh},
                {"options", to_json(o)}};
      if (async_checkpoints)
        async_checkpoints->save(step, sections, meta.dump());  // the snapshot; the files follow
      else
        summary.checkpoint = checkpoints.save(step, sections, meta.dump());
      trace->end();
    };
    // A background save is committed at the first step boundary after every rank wrote its part
    // (one agreement per step while it is pending), and finished before the run ends.
    auto commit_finished_checkpoint = [&](bool wait) {
      if (!async_checkpoints) return;
      if (auto committed = wait ? async_checkpoints->wait() : async_checkpoints->poll())
        summary.checkpoint = *committed;
    };

    const std::string unit = d.tokens ? "tokens/s" : "samples/s";
    const int64_t items_per_example = d.tokens ? o.context : 1;
    out << "train: " << o.model << ", " << model->num_parameters() << " parameters, " << d.train->size()
        << " training examples, " << steps_per_epoch << " steps per epoch";
    if (job.size() > 1)
      out << ", " << job.describe() << " (global batch " << job.data_size() * o.batch * o.grad_accum << ")";
    out << "\n";
    out.flush();

    // Throughput and loss over the steps since the last metrics line.
    int64_t items_since = 0, steps_since = 0;
    double loss_since = 0;
    auto last_log = Clock::now(), last_redraw = Clock::now() - std::chrono::seconds(1);
    bool stopped = false, signalled = false;
    in_setup = false;
    while (loader.state().epoch < o.epochs && !stopped) {
      const int64_t epoch = loader.state().epoch;
      int64_t in_group = 0;  // micro-batches accumulated towards the current step
      double group_loss = 0;
      const int64_t first_batch = loader.state().batch;  // > 0 in an epoch resumed mid-way
      const auto epoch_start = Clock::now();
      trace->begin("epoch " + std::to_string(epoch + 1));
      for (data::Batch& batch : loader) {
        const int64_t group_start = batch.index - in_group;
        const int64_t group_size = std::min(o.grad_accum, batches_per_epoch - group_start);
        // The mean over the step's examples: each batch's mean loss weighs 1 / group_size.
        const double weight = 1.0 / static_cast<double>(group_size);
        double batch_loss = 0;
        if (job.sharded()) {
          // Tensor or pipeline parallel: forward and backward run through the job's pieces.
          Trace::Scope scope(*trace, "forward+backward");
          batch_loss = job.forward_backward(batch.data, batch.target, weight);
        } else {
          Tensor loss;
          {
            Trace::Scope scope(*trace, "forward");
            AutocastGuard autocast(DeviceType::CPU, amp, amp.has_value());
            Tensor output = (*trained)(batch.data);
            loss = teacher ? distillation_loss_of(output, (*teacher)(batch.data), batch.target, o)
                           : loss_of(output, batch.target, d.tokens);
          }
          {
            Trace::Scope scope(*trace, "backward");
            job.backward(scaler.scale(loss / static_cast<double>(group_size)), in_group + 1 == group_size);
          }
          batch_loss = loss.item<double>();
        }
        group_loss += batch_loss * weight;
        items_since +=
            batch.size() * items_per_example * job.data_size();  // every replica's batch is as large
        if (++in_group < group_size) continue;

        {
          Trace::Scope scope(*trace, "optimizer");
          job.step(scaler, o.clip);
          if (schedule) schedule->step();
        }
        ++step;
        maybe_inject_fault(fault, job.rank(), step);
        commit_finished_checkpoint(false);
        ++steps_since;
        loss_since += group_loss;
        in_group = 0;
        group_loss = 0;
        if (!std::isfinite(loss_since))
          throw Error("the loss is " + std::to_string(loss_since) + " at step " + std::to_string(step) +
                      ": lower --lr, add --clip 1, or use --amp none");

        const bool last_in_epoch = batch.index + 1 == batches_per_epoch;
        // The terminal's line is redrawn at most ten times a second: printing is not free.
        const bool redraw =
            interactive && (Clock::now() - last_redraw > std::chrono::milliseconds(100) || last_in_epoch);
        if (step % o.log_every == 0 || last_in_epoch || redraw) {
          double now_s = elapsed();
          double dt = std::chrono::duration<double>(Clock::now() - last_log).count();
          double rate = dt > 0 ? static_cast<double>(items_since) / dt : 0.0;
          double progress = static_cast<double>(batch.index + 1) / static_cast<double>(batches_per_epoch);
          double mean_loss = loss_since / static_cast<double>(steps_since);
          if (step % o.log_every == 0 || last_in_epoch) {
            // The job's loss: the mean of the replicas' (same-sized) batches; the ranks of a replica
            // hold the same loss, so it is the mean over all ranks. Every rank gets here at the
            // same steps (the redraw above is rank 0's alone, and uses its own loss).
            std::vector<double> total{mean_loss};
            job.sum(total);
            mean_loss = total[0] / job.size();
            metrics << json{{"kind", "train"},
                            {"step", step},
                            {"epoch", static_cast<double>(epoch) + progress},
                            {"loss", mean_loss},
                            {"lr", current_lr()},
                            {"throughput", rate},
                            {"throughput_unit", unit},
                            {"time_s", now_s}}
                           .dump()
                    << "\n";
            metrics.flush();
            trace->counter("loss", mean_loss);
            trace->counter("throughput", rate);
          }
          char line[256];
          if (redraw) {
            last_redraw = Clock::now();
            // One line redrawn in place: where the epoch is, how long it has left, how it goes.
            const int width = 20;
            int filled = static_cast<int>(progress * width);
            std::string bar(static_cast<size_t>(filled), '=');
            if (filled < width) bar += '>' + std::string(static_cast<size_t>(width - filled - 1), ' ');
            // This epoch's remaining batches at the pace of its batches so far.
            double epoch_s = std::chrono::duration<double>(Clock::now() - epoch_start).count();
            double done = static_cast<double>(batch.index + 1 - first_batch);
            double eta = epoch_s / done * static_cast<double>(batches_per_epoch - batch.index - 1);
            std::snprintf(line, sizeof line,
                          "\repoch %lld/%lld [%s] %3.0f%% ETA %s loss %.3f %s %s lr %.1e\033[K",
                          static_cast<long long>(epoch + 1), static_cast<long long>(o.epochs), bar.c_str(),
                          100 * progress, format_duration(eta).c_str(), mean_loss, format_rate(rate).c_str(),
                          unit.c_str(), current_lr());
            out << line << std::flush;
          } else if (!interactive) {
            std::snprintf(line, sizeof line,
                          "epoch %lld/%lld step %lld (%3.0f%%) loss %.4f %s %s lr %.2e %s\n",
                          static_cast<long long>(epoch + 1), static_cast<long long>(o.epochs),
                          static_cast<long long>(step), 100 * progress, mean_loss, format_rate(rate).c_str(),
                          unit.c_str(), current_lr(), format_duration(now_s).c_str());
            out << line << std::flush;
          }
          if (step % o.log_every == 0 || last_in_epoch) {
            items_since = steps_since = 0;
            loss_since = 0;
            last_log = Clock::now();
          }
        }
        if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0) save();
        if (o.max_steps > 0 && step >= o.max_steps) {
          stopped = true;
          break;
        }
        // A signal reaches the ranks at different moments: they agree at this step boundary
        // (one all-reduce), so all of them stop after the same step.
        if (job.any(stop_signals.requested())) {
          signalled = stopped = true;
          break;
        }
      }
      trace->end();
      if (interactive) out << "\n";
      if (stopped) break;
      if (!stopped && loader.state().epoch > epoch) {
        summary.epochs = epoch + 1;
        if (val_loader) {
          Trace::Scope scope(*trace, "validation");
          Eval local = job.evaluate(*val_loader, d.tokens, amp);
          // Each rank evaluated its shard: the sums over the ranks are those of the whole set.
          std::vector<double> sums{local.loss_sum, local.correct, local.count};
          job.sum(sums);
          const Eval e{sums[0], sums[1], sums[2]};
          summary.val_loss = e.loss();
          summary.val_accuracy = e.accuracy();
          metrics << json{{"kind", "val"},
                          {"step", step},
                          {"epoch", epoch + 1},
                          {"val_loss", e.loss()},
                          {"val_accuracy", e.accuracy()}}
                         .dump()
                  << "\n";
          metrics.flush();
          char line[160];
          std::snprintf(line, sizeof line, "epoch %lld/%lld: val loss %.4f, val accuracy %.2f%%\n",
                        static_cast<long long>(epoch + 1), static_cast<long long>(o.epochs), e.loss(),
                        100 * e.accuracy());
          out << line << std::flush;
          last_log = Clock::now();  // the next throughput leaves the validation's time out
        }
      }
    }
    summary.epochs = std::min<int64_t>(loader.state().epoch, o.epochs);
    summary.steps = step;
    // Decided from what every rank knows alike (rank 0's directory listing could race a slow
    // file system): all ranks call save() together, or none does.
    if (saved_step != step) save();
    commit_finished_checkpoint(true);
    summary.seconds = elapsed();
    // With --tp/--pp the model file holds the whole model under the single-process names (for
    // tools/quantize and --teacher): every rank's pieces, assembled (collective).
    if (job.sharded()) {
      nn::StateDict whole = job.full_state_dict();
      if (job.main()) model->load_state_dict(whole);
    }
    std::optional<PipelineReport> pipeline = job.pipeline_report();
    if (job.main()) {
      // The trained model on its own, for tools/quantize, a distillation teacher or inference:
      // architecture and input normalisation in the metadata, so the file is all they need.
      std::map<std::string, std::string> model_meta{{nn::kTrainOptionsKey, to_json(o).dump()}};
      if (!d.tokens) model_meta[nn::kInputNormalizationKey] = json{{"mean", d.mean}, {"std", d.std}}.dump();
      nn::save_model(fs::path(o.out) / kModelFile, *model, model_meta);
      if (pipeline) {
        const bool measured = pipeline->traced_steps > 0;
        metrics << json{{"kind", "pipeline"},
                        {"stages", pipeline->stages},
                        {"microbatches", pipeline->microbatches},
                        {"schedule", o.pipeline_schedule},
                        {"traced_steps", pipeline->traced_steps},
                        {"measured_bubble", measured ? json(pipeline->measured_bubble) : json(nullptr)},
                        {"ideal_bubble", pipeline->ideal_bubble},
                        {"peak_live_microbatches", pipeline->peak_live_microbatches},
                        {"peak_activation_bytes", pipeline->peak_activation_bytes}}
                       .dump()
                << "\n";
        if (measured) write_text_atomically(pipeline_trace_path(o.trace), job.pipeline_trace_json());
      }
      metrics.close();
      write_report(o.out);
      if (trace->enabled()) trace->write();
    }
    // Returns on every rank once rank 0 wrote the run directory's last files: a program that
    // runs the job (or a test) may read them on any rank.
    job.barrier();

    char line[256], val[96];
    if (summary.val_accuracy)
      std::snprintf(val, sizeof val, ", val loss %.4f, val accuracy %.2f%%", *summary.val_loss,
                    100 * *summary.val_accuracy);
    else
      std::snprintf(val, sizeof val, "%s",
                    o.val.empty() ? ", no --val set" : ", stopped before the first validation");
    if (pipeline) {
      char bubble[256];
      if (pipeline->traced_steps > 0)
        std::snprintf(bubble, sizeof bubble, "%.1f%% measured over %lld steps (trace %s), ",
                      100 * pipeline->measured_bubble, static_cast<long long>(pipeline->traced_steps),
                      pipeline_trace_path(o.trace).string().c_str());
      else
        std::snprintf(bubble, sizeof bubble, "not measured (add --trace FILE), ");
      out << "train: pipeline bubble " << bubble << std::fixed << std::setprecision(1)
          << 100 * pipeline->ideal_bubble << std::defaultfloat << "% ideal ((p-1)/(m+p-1), p "
          << pipeline->stages << ", m " << pipeline->microbatches << ")\n";
      for (int64_t s = 0; s < pipeline->stages; ++s)
        out << "train: stage " << s << ": peak " << pipeline->peak_live_microbatches[s]
            << " live micro-batches, " << format_bytes(pipeline->peak_activation_bytes[s])
            << " of activations\n";
    }
    if (signalled) {
      out << "train: stopped by a signal after step " << step << "; checkpoint "
          << summary.checkpoint.filename().string() << " saved; continue with: train --resume " << o.out
          << "\n";
      return summary;
    }
    std::snprintf(line, sizeof line, "train: done: %lld steps, %lld/%lld epochs in %s%s\n",
                  static_cast<long long>(step), static_cast<long long>(summary.epochs),
                  static_cast<long long>(o.epochs), format_duration(summary.seconds).c_str(), val);
    out << line << "train: run directory " << o.out
        << " (model.safetensors, report.html, metrics.jsonl, checkpoint "
        << summary.checkpoint.filename().string() << ")\n";
    return summary;
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    if (in_setup) throw InputError(e.what());
    throw;
  }
}

void run_generation(const TrainOptions& options, std::ostream& out) {
  try {
    const std::string dir = options.resume.empty() ? options.out : options.resume;
    fs::path config_path = fs::path(dir) / kConfigFile;
    std::ifstream in(config_path);
    if (!in) fail("--generate: no " + config_path.string() + "; pass the directory of a GPT run with --out");
    json config = json::parse(in, nullptr, false);
    if (config.is_discarded() || config.value("model", "") != "gpt")
      fail("--generate: " + dir + " is not the run directory of a --model gpt run");
    TrainOptions o = options;
    o.data = config.value("data", "");
    o.context = config.value("context", o.context);
    o.layers = config.value("layers", o.layers);
    o.heads = config.value("heads", o.heads);
    o.d_model = config.value("d-model", o.d_model);

    data::Hdf5TokenDataset corpus(o.data,
                                  data::Hdf5TokenOptions{.block_size = 2});  // only its vocabulary is used
    const std::vector<std::string>& vocab = corpus.vocab();
    if (vocab.empty()) fail("--generate: " + o.data + " has no vocab attribute, so text cannot be encoded");
    nn::GPT model(nn::GPTConfig{.vocab_size = corpus.vocab_size(),
                                .context = o.context,
                                .n_layers = o.layers,
                                .n_heads = o.heads,
                                .d_model = o.d_model});
    if (config.value("dp", 1) * config.value("tp", 1) * config.value("pp", 1) > 1) {
      // The checkpoints of a job of several ranks hold one piece per rank; the whole model is in
      // model.safetensors, written when the run ended.
      fs::path file = fs::path(dir) / kModelFile;
      if (!fs::exists(file))
        fail("--generate: " + dir + " holds no " + kModelFile + " yet (the run has not ended)");
      model.load_state_dict(nn::load_safetensors(file).tensors);
    } else {
      nn::CheckpointManager checkpoints(dir);
      std::optional<nn::Checkpoint> latest = checkpoints.load_latest();
      if (!latest) fail("--generate: " + dir + " holds no checkpoint yet");
      model.load_state_dict(latest->sections.at("model"));
    }
    model.eval();

    // Encode the prompt by the longest vocabulary entry at each position (characters for a
    // character-level corpus).
    std::vector<int64_t> ids;
    for (size_t pos = 0; pos < options.prompt.size();) {
      size_t best_len = 0;
      int64_t best = -1;
      for (size_t v = 0; v < vocab.size(); ++v)
        if (vocab[v].size() > best_len && options.prompt.compare(pos, vocab[v].size(), vocab[v]) == 0) {
          best_len = vocab[v].size();
          best = static_cast<int64_t>(v);
        }
      if (best < 0)
        fail("--prompt: '" + options.prompt.substr(pos, 1) + "' is not in the corpus's vocabulary");
      ids.push_back(best);
      pos += best_len;
    }
    if (ids.empty()) fail("--prompt must not be empty");
    manual_seed(options.seed);
    NoGradGuard no_grad;
    Tensor idx = tensor(ids, {1, static_cast<int64_t>(ids.size())});
    Tensor result = model.generate(idx, options.tokens, options.temperature);
    out << corpus.decode(result.select(0, 0)) << "\n";
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw InputError(e.what());
  }
}

}  // namespace loom::train
