/*
 * The training loop of `train` (see trainer.h), as a Trainer: setup() builds everything in the
 * order a resumed run repeats (loaders, model, optimizer, schedule), then restores their states
 * from the checkpoint (and the random generator, the loader's position, the loss scaler), so
 * that a resumed run continues bit-exactly; train() runs the epochs, and finish() writes the
 * run directory's last files.
 */
#include "tools/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/cuda.h"
#include "core/parallel.h"
#include "data/data.h"
#include "nn/nn.h"
#include "nn/training_state.h"
#include "ops/ops.h"
#include "quant/distill.h"
#include "tools/common/format.h"
#include "tools/train/fail.h"
#include "tools/train/fault_injection.h"
#include "tools/train/model_setup.h"
#include "tools/train/parallelism.h"
#include "tools/train/progress.h"
#include "tools/train/report.h"
#include "tools/train/resharded_resume.h"
#include "tools/train/run_data.h"
#include "tools/train/run_dir.h"
#include "tools/train/stop_signal.h"
#include "tools/train/trace.h"

namespace loom::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// --teacher: the knowledge-distillation loss (quant/distill.h) between the student's output and
// the teacher's, over every prediction ([N, C], or [B, T, V] flattened to [B*T, V]).
Tensor distillation_loss_of(const Tensor& output, const Tensor& teacher_output, const Tensor& target,
                            const TrainOptions& o) {
  const int64_t classes = output.size(-1);
  return quant::distillation_loss(
      output.reshape({-1, classes}), teacher_output.reshape({-1, classes}), target.reshape({-1}),
      quant::DistillationOptions{.temperature = o.kd_temperature, .alpha = o.kd_alpha});
}

const TrainOptions& validated(const TrainOptions& o) {
  validate(o);
  return o;
}

class Trainer {
 public:
  Trainer(const TrainOptions& o, std::ostream& user_out, bool user_interactive)
      : o_(validated(o)),
        job_(o),
        out_(job_.main() ? user_out : silent_),  // ranks other than 0 print nothing
        interactive_(job_.main() && user_interactive),
        trace_(o.trace.empty() ? std::make_unique<Trace>() : std::make_unique<Trace>(o.trace)) {}

  // Everything before the first step; any error here is the input's.
  void setup();
  TrainSummary train();

 private:
  void make_loaders();
  void make_model();
  void resume();
  void open_run_dir();
  void print_header();
  bool train_epoch();  // false when the run stops
  double forward_backward(const data::Batch& batch, double weight, int64_t group_size, bool last_in_group);
  void make_graphed_step();
  Tensor whole_step(const Tensor& input, const Tensor& target);  // --cuda-graph: what is captured
  bool after_step(const data::Batch& batch, double step_loss);  // true when the run stops
  void log(const data::Batch& batch);
  void validate_epoch(int64_t epoch);
  void save();
  void commit_finished_checkpoint(bool wait);
  void checkpoint_failed(const Error& error, int64_t step);
  std::optional<PipelineReport> finish();
  void write_pipeline_metrics(const PipelineReport& pipeline);
  TrainSummary print_summary(const std::optional<PipelineReport>& pipeline);
  double elapsed() const {
    return time_offset_ + std::chrono::duration<double>(Clock::now() - start_).count();
  }
  double current_lr() const { return optimizer_->param_groups().front().lr(); }

  const TrainOptions& o_;
  Parallelism job_;
  StopSignals stop_signals_;
  std::ostream silent_{nullptr};
  std::ostream& out_;
  const bool interactive_;
  std::unique_ptr<Trace> trace_;
  Data d_;
  Device device_{kCPU};
  std::unique_ptr<data::DataLoader> loader_, val_loader_;
  std::shared_ptr<nn::Module> model_;
  nn::Module* trained_ = nullptr;  // what the plain path's forward runs through: the model, or its DDP wrapper
  nn::Optimizer* optimizer_ = nullptr;
  std::optional<quant::Teacher> teacher_;
  int64_t batches_per_epoch_ = 0, steps_per_epoch_ = 0;
  std::unique_ptr<nn::LRScheduler> schedule_;
  std::optional<DType> amp_;
  std::optional<nn::GradScaler> scaler_;
  std::optional<nn::GraphedStep> graphed_;  // --cuda-graph
  std::optional<nn::CheckpointManager> checkpoints_;
  std::optional<nn::AsyncCheckpointer> async_checkpoints_;
  std::optional<InjectedFault> fault_;
  json mesh_;
  int64_t step_ = 0;
  double time_offset_ = 0;  // training seconds of the run before it was resumed
  std::ofstream metrics_;   // stays closed on ranks other than 0
  Clock::time_point start_;
  TrainSummary summary_;
  int64_t saved_step_ = -1;  // the step of the checkpoint this session saved last
  int64_t parameters_ = 0;   // the whole model's (--zero 3 frees model_'s between uses)
  Progress progress_;
  int64_t epoch_ = 0;  // the epoch being trained (from 0)
  bool signalled_ = false;
};

void Trainer::setup() {
  if (o_.threads > 0) set_num_threads(o_.threads);
  trace_->begin("setup");
  d_ = load_data(o_);
  // LOOM_FAULT_INJECT (tests/tools/kill_resume_test.sh, train_faults_test.sh): a rank that kills
  // itself on cue, a checkpoint that meets a full disk, a training example that fails or hangs.
  fault_ = injected_fault_from_env();
  d_.train = with_loader_fault(fault_, d_.train);
  make_loaders();
  make_model();
  if (trace_->enabled() && job_.size() > 1) {
    // Every rank traces; rank 0 merges them in finish(), aligned where all left this barrier.
    job_.barrier();
    trace_->mark_sync();
    job_.trace_communication(trace_.get());
  }
  // An optimizer step takes --grad-accum batches; an epoch's last step may take fewer.
  batches_per_epoch_ = loader_->num_batches();
  steps_per_epoch_ = (batches_per_epoch_ + o_.grad_accum - 1) / o_.grad_accum;
  schedule_ = make_schedule(o_, *optimizer_, steps_per_epoch_ * o_.epochs);
  if (o_.amp == AmpMode::kBf16) amp_ = DType::BFloat16;
  if (o_.amp == AmpMode::kFp16) amp_ = DType::Float16;
  // float16's 5 exponent bits underflow small gradients; bfloat16 has float32's range.
  scaler_.emplace(nn::GradScalerOptions{.enabled = o_.amp == AmpMode::kFp16});
  checkpoints_.emplace(o_.out, 3, job_.checkpoint_group());
  // --checkpoint-async: the same checkpoints, written by a background thread (committed at a
  // later step boundary, see nn/serialize/async_checkpoint.h).
  if (o_.checkpoint_async) async_checkpoints_.emplace(*checkpoints_);
  mesh_ = json{{"dp", o_.dp}, {"tp", o_.tp}, {"pp", o_.pp}, {"zero", o_.zero}};
  if (!o_.resume.empty()) resume();
  open_run_dir();
  trace_->end();
}

void Trainer::make_loaders() {
  // With --dp N, replica r reads every N-th example of the epoch's permutation (the same on
  // every rank: same seed), from r on. Batch k of all replicas together is then positions
  // [k·N·b, (k+1)·N·b) of that permutation: the batch of one process with --batch N·b. The
  // tensor and pipeline ranks of a replica read the same batch.
  std::shared_ptr<const data::Sampler> sampler;
  if (d_.random_windows > 0)  // --windows random: the epoch's windows drawn alike on every rank, split as above
    sampler = std::make_shared<data::RandomWithReplacementSampler>(d_.train->size(), d_.random_windows, o_.seed,
                                                                   job_.data_size(), job_.data_rank());
  else if (job_.data_size() > 1)
    sampler = std::make_shared<data::DistributedSampler>(
        d_.train->size(), job_.data_size(), job_.data_rank(),
        data::DistributedSamplerOptions{.shuffle = true, .seed = o_.seed});
  if (o_.pp > 1) {
    // The pipeline cuts every batch into --microbatches equal parts, the epoch's last too.
    const int64_t per_replica = sampler ? sampler->size() : d_.train->size(), tail = per_replica % o_.batch;
    if (tail % o_.microbatches != 0)
      fail("--microbatches " + std::to_string(o_.microbatches) + " does not divide the epoch's last batch of " +
           std::to_string(tail) + " examples (" + std::to_string(per_replica) + " per replica, --batch " +
           std::to_string(o_.batch) + "); choose --train-examples or --batch so that it does");
  }
  // --device cuda: batches arrive on the GPU, copied asynchronously from pinned memory.
  device_ = o_.device == DeviceKind::kCuda ? Device::cuda() : Device(kCPU);
  auto options = [&](int64_t batch) {
    return data::DataLoaderOptions()
        .batch_size(batch)
        .workers(o_.workers)
        .device(device_)
        .pin_memory(device_.is_cuda())
        .timeout(o_.loader_timeout);
  };
  loader_ = std::make_unique<data::DataLoader>(d_.train, options(o_.batch).shuffle(sampler == nullptr).seed(o_.seed),
                                               d_.train_transform, sampler);
  if (d_.val)
    val_loader_ = std::make_unique<data::DataLoader>(
        d_.val, options(std::max<int64_t>(o_.batch, 256)), d_.val_transform,
        job_.data_size() > 1 ? std::make_shared<ShardSampler>(d_.val->size(), job_.data_size(), job_.data_rank())
                             : nullptr);
}

void Trainer::make_model() {
  manual_seed(o_.seed);
  // The whole model on every rank (the same draw everywhere), of which this rank keeps its piece:
  // all of it without --tp/--pp. Checkpoints hold the piece; model.safetensors the whole.
  model_ = train::make_model(o_, d_);
  parameters_ = model_->num_parameters();
  if (device_.is_cuda()) model_->to(device_);  // drawn on the CPU: the same initial weights on both devices
  job_.build(model_);
  trained_ = &job_.trained();
  job_.make_optimizer([this](std::vector<Tensor> params) { return make_optimizer(o_, std::move(params)); });
  optimizer_ = &job_.optimizer();
  if (!o_.teacher.empty()) teacher_.emplace(load_teacher(o_, d_));
  if (o_.cuda_graph) make_graphed_step();
}

// --cuda-graph (validated: one process, one batch a step): the whole step as one function of
// the batch, which nn::GraphedStep runs eagerly twice, then captures and replays. The optimizer
// is capturable (model_setup.cpp), so the schedule, stepped between replays in after_step,
// reaches the replayed steps, and with --amp fp16 the loss scaler's skip of an inf/NaN step is
// decided on the device at each replay.
void Trainer::make_graphed_step() {
  graphed_.emplace(device_,
                   [this](const Tensor& input, const Tensor& target) { return whole_step(input, target); });
}

Tensor Trainer::whole_step(const Tensor& input, const Tensor& target) {
  optimizer_->zero_grad();  // set to none: the captured backward makes the gradients in the graph's pool
  Tensor loss;
  {
    AutocastGuard autocast(device_.type(), amp_, amp_.has_value());
    loss = loss_of((*trained_)(input), target, d_.tokens);
  }
  scaler_->scale(loss).backward();  // a disabled scaler (no --amp fp16) returns the loss itself
  if (o_.clip > 0) {
    scaler_->unscale_(*optimizer_);  // clip the true gradients, not the scaled ones
    nn::clip_grad_norm_on_device_(job_.local().parameters(), o_.clip);
  }
  scaler_->step(*optimizer_);
  scaler_->update();
  return loss;
}

void Trainer::resume() {
  std::optional<nn::Checkpoint> latest;
  bool resharded = false;
  try {
    latest = checkpoints_->load_latest();
  } catch (const nn::WorldSizeMismatch&) {
    latest = resharded_checkpoint(o_, *checkpoints_, job_, mesh_, out_);  // another number of ranks
    resharded = true;
  }
  if (!latest) fail("--resume " + o_.resume + ": no checkpoint there to resume from");
  json meta = json::parse(latest->metadata, nullptr, false);
  // A checkpoint holds each rank's piece: another layout's pieces are cut anew.
  if (!resharded && !meta.is_discarded() && meta.contains("mesh") && meta["mesh"] != mesh_)
    latest = resharded_checkpoint(o_, *checkpoints_, job_, mesh_, out_);
  if (!latest->note.empty()) out_ << "train: " << latest->note << "\n";
  const auto& s = latest->sections;
  job_.local().load_state_dict(s.at("model"));
  optimizer_->load_state_dict(s.at("optimizer"));
  if (schedule_) schedule_->load_state_dict(s.at("schedule"));
  if (s.count("scaler")) scaler_->load_state_dict(s.at("scaler"));
  nn::load_rng_state_dict(s.at("rng"));
  loader_->load_state(data::LoaderState::from_map(nn::counters_from_state_dict(s.at("loader"))));
  step_ = latest->step;
  if (!meta.is_discarded()) time_offset_ = meta.value("time_s", 0.0);
  // Every rank loaded its part of the same checkpoint, so every rank's loader is at the same
  // batch (each shard has the same number of batches). Checked, since ranks that disagreed
  // would wait for each other in different steps.
  const data::LoaderState at = loader_->state();
  std::vector<double> position{static_cast<double>(at.epoch), static_cast<double>(at.batch),
                               -static_cast<double>(at.epoch), -static_cast<double>(at.batch)};
  std::vector<double> highest = position;
  job_.max(highest);
  if (highest != position)
    fail("--resume " + o_.resume + ": the ranks loaded checkpoints at different positions; is " + o_.out +
         " on a file system every rank sees?");
  if (job_.main()) truncate_metrics(fs::path(o_.out) / kMetricsFile, step_);
  out_ << "train: resuming " << o_.out << " at step " << step_ << " (epoch " << at.epoch + 1 << ")\n";
}

// Rank 0 alone writes the run directory; the others learn whether it could.
void Trainer::open_run_dir() {
  std::string setup_error;
  if (job_.main()) {
    try {
      if (o_.resume.empty()) prepare_fresh_dir(o_);
      write_text_atomically(fs::path(o_.out) / kConfigFile, to_json(o_).dump(2) + "\n");
      metrics_.open(fs::path(o_.out) / kMetricsFile, std::ios::app);
      if (!metrics_) fail("cannot write " + (fs::path(o_.out) / kMetricsFile).string());
    } catch (const Error& e) {
      setup_error = e.what();
    }
  }
  if (!job_.all_ok(setup_error.empty()))
    fail(job_.main() ? setup_error : "rank 0 could not prepare the run directory " + o_.out);
}

void Trainer::print_header() {
  out_ << "train: " << to_string(o_.model) << ", " << parameters_ << " parameters, " << d_.train->size()
       << " training examples, " << steps_per_epoch_ << " steps per epoch";
  if (job_.size() > 1)
    out_ << ", " << job_.describe() << " (global batch " << job_.data_size() * o_.batch * o_.grad_accum << ")";
  out_ << "\n";
  out_.flush();
}

TrainSummary Trainer::train() {
  start_ = Clock::now();
  print_header();
  progress_.restart(Clock::now());
  bool stopped = false;
  while (loader_->state().epoch < o_.epochs && !stopped) {
    const int64_t epoch = loader_->state().epoch;
    stopped = !train_epoch();
    if (!stopped && loader_->state().epoch > epoch) {
      summary_.epochs = epoch + 1;
      if (val_loader_) validate_epoch(epoch);
    }
  }
  summary_.epochs = std::min<int64_t>(loader_->state().epoch, o_.epochs);
  summary_.steps = step_;
  return print_summary(finish());
}

bool Trainer::train_epoch() {
  const int64_t epoch = epoch_ = loader_->state().epoch;
  int64_t in_group = 0;  // micro-batches accumulated towards the current step
  double group_loss = 0;
  progress_.start_epoch(Clock::now(), loader_->state().batch);  // batch > 0 in an epoch resumed mid-way
  trace_->begin("epoch " + std::to_string(epoch + 1));
  bool stopped = false;
  for (data::Batch& batch : *loader_) {
    if (graphed_) {
      double loss = 0;
      {
        Trace::Scope scope(*trace_, "step (--cuda-graph: replayed, or eager before the capture)");
        loss = (*graphed_)(batch.data, batch.target).item<double>();
      }
      progress_.items_since += batch.size() * (d_.tokens ? o_.context : 1);
      if (after_step(batch, loss)) {
        stopped = true;
        break;
      }
      continue;
    }
    const int64_t group_start = batch.index - in_group;
    const int64_t group_size = std::min(o_.grad_accum, batches_per_epoch_ - group_start);
    // The mean over the step's examples: each batch's mean loss weighs 1 / group_size.
    const double weight = 1.0 / static_cast<double>(group_size);
    group_loss += forward_backward(batch, weight, group_size, in_group + 1 == group_size) * weight;
    // Every replica's batch is as large.
    progress_.items_since += batch.size() * (d_.tokens ? o_.context : 1) * job_.data_size();
    if (++in_group < group_size) continue;
    in_group = 0;
    if (after_step(batch, std::exchange(group_loss, 0.0))) {
      stopped = true;
      break;
    }
  }
  trace_->end();
  if (interactive_) out_ << "\n";
  return !stopped;
}

// One batch's forward and backward; returns its mean loss.
double Trainer::forward_backward(const data::Batch& batch, double weight, int64_t group_size, bool last_in_group) {
  if (job_.sharded()) {
    // Tensor or pipeline parallel: forward and backward run through the job's pieces.
    Trace::Scope scope(*trace_, "forward+backward");
    return job_.forward_backward(batch.data, batch.target, weight);
  }
  Tensor loss;
  {
    Trace::Scope scope(*trace_, "forward");
    AutocastGuard autocast(device_.type(), amp_, amp_.has_value());
    Tensor output = (*trained_)(batch.data);
    loss = teacher_ ? distillation_loss_of(output, (*teacher_)(batch.data), batch.target, o_)
                    : loss_of(output, batch.target, d_.tokens);
  }
  {
    Trace::Scope scope(*trace_, "backward");
    job_.backward(scaler_->scale(loss / static_cast<double>(group_size)), last_in_group);
  }
  return loss.item<double>();
}

bool Trainer::after_step(const data::Batch& batch, double step_loss) {
  {
    Trace::Scope scope(*trace_, "optimizer");
    if (!graphed_) job_.step(*scaler_, o_.clip);  // a graphed step stepped the optimizer itself
    if (schedule_) schedule_->step();
  }
  ++step_;
  maybe_inject_fault(fault_, job_.rank(), step_, o_.data);
  commit_finished_checkpoint(false);
  ++progress_.steps_since;
  progress_.loss_since += step_loss;
  if (!std::isfinite(progress_.loss_since))
    throw Error("the loss is " + std::to_string(progress_.loss_since) + " at step " + std::to_string(step_) +
                ": lower --lr, add --clip 1, or use --amp none");
  log(batch);
  if (o_.checkpoint_every > 0 && step_ % o_.checkpoint_every == 0) save();
  if (o_.max_steps > 0 && step_ >= o_.max_steps) return true;
  // A signal reaches the ranks at different moments: they agree at this step boundary (one
  // all-reduce), so all of them stop after the same step.
  if (job_.any(stop_signals_.requested())) return signalled_ = true;
  return false;
}

// A metrics line every --log-every steps and at the epoch's end; the progress line on the
// terminal (at most ten times a second: printing is not free) or as plain lines.
void Trainer::log(const data::Batch& batch) {
  const bool last_in_epoch = batch.index + 1 == batches_per_epoch_;
  const bool logged = step_ % o_.log_every == 0 || last_in_epoch;
  const bool redraw = interactive_ && (progress_.redraw_due(Clock::now()) || last_in_epoch);
  if (!logged && !redraw) return;
  ProgressLine line{.epoch = epoch_, .epochs = o_.epochs, .step = step_, .lr = current_lr(),
                    .unit = d_.tokens ? "tokens/s" : "samples/s"};
  line.progress = static_cast<double>(batch.index + 1) / static_cast<double>(batches_per_epoch_);
  line.rate = progress_.rate(Clock::now());
  line.loss = progress_.loss_since / static_cast<double>(progress_.steps_since);
  if (logged) {
    // The job's loss: the mean of the replicas' (same-sized) batches; the ranks of a replica hold
    // the same loss, so it is the mean over all ranks. Every rank gets here at the same steps
    // (the redraw above is rank 0's alone, and uses its own loss).
    std::vector<double> total{line.loss};
    job_.sum(total);
    line.loss = total[0] / job_.size();
    metrics_ << json{{"kind", "train"},       {"step", step_},     {"epoch", static_cast<double>(line.epoch) + line.progress},
                     {"loss", line.loss},     {"lr", line.lr},     {"throughput", line.rate},
                     {"throughput_unit", line.unit}, {"time_s", elapsed()}}
                    .dump()
             << "\n";
    metrics_.flush();
    trace_->counter("loss", line.loss);
    trace_->counter("throughput", line.rate);
  }
  if (redraw) {
    line.eta = progress_.epoch_eta(Clock::now(), batch.index, batches_per_epoch_);
    out_ << redrawn_progress_line(line) << std::flush;
    progress_.redrawn(Clock::now());
  } else if (!interactive_) {
    out_ << plain_progress_line(line, elapsed()) << std::flush;
  }
  if (logged) progress_.logged(Clock::now());
}

void Trainer::validate_epoch(int64_t epoch) {
  Trace::Scope scope(*trace_, "validation");
  Eval local = job_.evaluate(*val_loader_, d_.tokens, amp_);
  // Each rank evaluated its shard: the sums over the ranks are those of the whole set.
  std::vector<double> sums{local.loss_sum, local.correct, local.count};
  job_.sum(sums);
  const Eval e{sums[0], sums[1], sums[2]};
  summary_.val_loss = e.loss();
  summary_.val_accuracy = e.accuracy();
  metrics_ << json{{"kind", "val"}, {"step", step_}, {"epoch", epoch + 1}, {"val_loss", e.loss()},
                   {"val_accuracy", e.accuracy()}}
                  .dump()
           << "\n";
  metrics_.flush();
  char line[160];
  std::snprintf(line, sizeof line, "epoch %lld/%lld: val loss %.4f, val accuracy %.2f%%\n",
                static_cast<long long>(epoch + 1), static_cast<long long>(o_.epochs), e.loss(), 100 * e.accuracy());
  out_ << line << std::flush;
  progress_.pause_ended(Clock::now());  // the next throughput leaves the validation's time out
}

// Every rank saves its own state (its piece of the model, its optimizer or ZeRO shard, its
// generator and loader position) into one checkpoint, committed by rank 0 once all are on disk:
// save() returns on every rank only then, so no rank trains on (or exits, or is killed) while it
// is written, and --resume restarts all of them from the same step.
void Trainer::save() {
  // The GPU's input checks (a class index out of range) are reported at the host's next wait for
  // it: that wait is here, so that such an error stops the run as itself, not as the checkpoint's.
  cuda::synchronize();
  // A background save still pending is finished first (as AsyncCheckpointer::save would), here,
  // so that its failure is reported as its own step's.
  commit_finished_checkpoint(true);
  const int64_t saved_before = saved_step_;
  saved_step_ = step_;
  trace_->begin("checkpoint");
  std::map<std::string, nn::StateDict> sections{{"model", job_.local().state_dict()},
                                                {"optimizer", optimizer_->state_dict()},
                                                {"rng", nn::rng_state_dict()},
                                                {"loader", nn::counters_to_state_dict(loader_->state().to_map())}};
  if (schedule_) sections.emplace("schedule", schedule_->state_dict());
  if (o_.amp == AmpMode::kFp16) sections.emplace("scaler", scaler_->state_dict());
  json meta{{"step", step_}, {"epoch", loader_->state().epoch}, {"time_s", elapsed()}, {"mesh", mesh_},
            {"options", to_json(o_)}};
#if LOOM_TRAIN_WITH_MPI
  meta[distributed::kLayoutMetadataKey] = json::parse(distributed::rank_layout_to_json(job_.layout()));
#endif
  maybe_arm_io_fault(fault_, step_);
  try {
    if (async_checkpoints_)
      async_checkpoints_->save(step_, sections, meta.dump());  // the snapshot; the files follow
    else
      summary_.checkpoint = checkpoints_->save(step_, sections, meta.dump());
  } catch (const Error& e) {
    trace_->end();
    saved_step_ = saved_before;  // with --on-checkpoint-error continue, the end of the run tries again
    checkpoint_failed(e, step_);
    return;
  }
  if (!checkpoints_->last_save_warning().empty() && job_.main())
    std::cerr << "train: warning: " << checkpoints_->last_save_warning() << "\n";
  trace_->end();
}

// A checkpoint that could not be written (full disk, I/O error) left the previous one as the
// latest (nn/serialize/checkpoint.h). Every rank gets here alike: a group's save fails on all.
void Trainer::checkpoint_failed(const Error& error, int64_t step) {
  const std::string what = "the checkpoint of step " + std::to_string(step) + " could not be written: " +
                           error.what() + "; 'latest' in " + o_.out + " still names the last good checkpoint";
  if (!o_.continue_on_checkpoint_error)
    throw Error(what + ". Free space or fix the disk, then continue with: train --resume " + o_.out +
                " (--on-checkpoint-error continue trains on through such errors)");
  if (job_.main())
    std::cerr << (interactive_ ? "\n" : "") << "train: warning: " << what
              << "; training goes on (--on-checkpoint-error continue) and the next checkpoint tries again\n";
}

// A background save is committed at the first step boundary after every rank wrote its part
// (one agreement per step while it is pending), and finished before the run ends.
void Trainer::commit_finished_checkpoint(bool wait) {
  if (!async_checkpoints_) return;
  const int64_t step = saved_step_;  // the pending save's: the last save() started it
  try {
    if (auto committed = wait ? async_checkpoints_->wait() : async_checkpoints_->poll())
      summary_.checkpoint = *committed;
  } catch (const Error& e) {
    checkpoint_failed(e, step);
  }
}

// The last checkpoint, model.safetensors, the pipeline's metrics, the report and the trace.
std::optional<PipelineReport> Trainer::finish() {
  // Decided from what every rank knows alike (rank 0's directory listing could race a slow file
  // system): all ranks call save() together, or none does.
  if (saved_step_ != step_) save();
  commit_finished_checkpoint(true);
  summary_.seconds = elapsed();
  // With --tp/--pp the model file holds the whole model under the single-process names (for
  // tools/quantize and --teacher): every rank's pieces, assembled (collective).
  if (job_.sharded()) {
    nn::StateDict whole = job_.full_state_dict();
    if (job_.main()) model_->load_state_dict(whole);
  }
  std::optional<PipelineReport> pipeline = job_.pipeline_report();
  // --zero 3: the parameters gathered on every rank (collective) while the file is written.
  std::shared_ptr<void> whole = job_.whole_model();
  if (const auto t = job_.sharded_timings(); t && job_.main()) {
    std::ostringstream line;
    line << std::fixed << std::setprecision(3) << "train: FSDP waited " << t->gather_wait_seconds
         << " s for all-gathers (" << t->prefetched << " of " << t->gathers << " posted ahead) and "
         << t->reduce_seconds << " s in reduce-scatters (rank 0)\n";
    out_ << line.str();
  }
  if (job_.main()) {
    // The trained model on its own, for tools/quantize, a distillation teacher or inference:
    // architecture and input normalisation in the metadata, so the file is all they need.
    std::map<std::string, std::string> model_meta{{nn::kTrainOptionsKey, to_json(o_).dump()}};
    if (!d_.tokens) model_meta[nn::kInputNormalizationKey] = json{{"mean", d_.mean}, {"std", d_.std}}.dump();
    nn::save_model(fs::path(o_.out) / kModelFile, *model_, model_meta);
    if (pipeline) write_pipeline_metrics(*pipeline);
    metrics_.close();
    write_report(o_.out);
    if (trace_->enabled() && job_.size() == 1) trace_->write();
  }
  if (trace_->enabled() && job_.size() > 1) {
    job_.trace_communication(nullptr);  // the gather below is not part of the run
    std::vector<std::string> ranks = job_.gather_text(trace_->export_events(job_.rank(), job_.rank_name()));
    if (job_.main()) trace_->write_merged(ranks);
  }
  // Returns on every rank once rank 0 wrote the run directory's last files: a program that runs
  // the job (or a test) may read them on any rank.
  job_.barrier();
  return pipeline;
}

void Trainer::write_pipeline_metrics(const PipelineReport& pipeline) {
  const bool measured = pipeline.traced_steps > 0;
  metrics_ << json{{"kind", "pipeline"},
                   {"stages", pipeline.stages},
                   {"microbatches", pipeline.microbatches},
                   {"schedule", to_string(o_.pipeline_schedule)},
                   {"traced_steps", pipeline.traced_steps},
                   {"measured_bubble", measured ? json(pipeline.measured_bubble) : json(nullptr)},
                   {"ideal_bubble", pipeline.ideal_bubble},
                   {"peak_live_microbatches", pipeline.peak_live_microbatches},
                   {"peak_activation_bytes", pipeline.peak_activation_bytes}}
                  .dump()
           << "\n";
  if (measured) write_text_atomically(pipeline_trace_path(o_.trace), job_.pipeline_trace_json());
}

void print_pipeline(std::ostream& out, const PipelineReport& pipeline, const std::string& trace) {
  char bubble[256];
  if (pipeline.traced_steps > 0)
    std::snprintf(bubble, sizeof bubble, "%.1f%% measured over %lld steps (trace %s), ",
                  100 * pipeline.measured_bubble, static_cast<long long>(pipeline.traced_steps),
                  pipeline_trace_path(trace).string().c_str());
  else
    std::snprintf(bubble, sizeof bubble, "not measured (add --trace FILE), ");
  out << "train: pipeline bubble " << bubble << std::fixed << std::setprecision(1) << 100 * pipeline.ideal_bubble
      << std::defaultfloat << "% ideal ((p-1)/(m+p-1), p " << pipeline.stages << ", m " << pipeline.microbatches
      << ")\n";
  for (int64_t s = 0; s < pipeline.stages; ++s)
    out << "train: stage " << s << ": peak " << pipeline.peak_live_microbatches[s] << " live micro-batches, "
        << tools::format_bytes(pipeline.peak_activation_bytes[s]) << " of activations\n";
}

TrainSummary Trainer::print_summary(const std::optional<PipelineReport>& pipeline) {
  if (pipeline) print_pipeline(out_, *pipeline, o_.trace);
  if (signalled_) {
    out_ << "train: stopped by a signal after step " << step_ << "; checkpoint "
         << summary_.checkpoint.filename().string() << " saved; continue with: train --resume " << o_.out << "\n";
    return summary_;
  }
  char line[256], val[96];
  if (summary_.val_accuracy)
    std::snprintf(val, sizeof val, ", val loss %.4f, val accuracy %.2f%%", *summary_.val_loss,
                  100 * *summary_.val_accuracy);
  else
    std::snprintf(val, sizeof val, "%s", o_.val.empty() ? ", no --val set" : ", stopped before the first validation");
  std::snprintf(line, sizeof line, "train: done: %lld steps, %lld/%lld epochs in %s%s\n",
                static_cast<long long>(step_), static_cast<long long>(summary_.epochs),
                static_cast<long long>(o_.epochs), tools::format_duration(summary_.seconds).c_str(), val);
  out_ << line << "train: run directory " << o_.out << " (model.safetensors, report.html, metrics.jsonl, checkpoint "
       << summary_.checkpoint.filename().string() << ")\n";
  return summary_;
}

}  // namespace

TrainSummary run_training(const TrainOptions& o, std::ostream& out, bool interactive) {
  std::unique_ptr<Trainer> trainer;
  try {
    trainer = std::make_unique<Trainer>(o, out, interactive);
    trainer->setup();
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    // Any error before the first step is the input's.
    throw InputError(e.what());
  }
  return trainer->train();
}

}  // namespace loom::train
