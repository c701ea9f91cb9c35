/*
 * The job (see parallelism.h): joining it, its collectives, the training step through the
 * pieces (gradient averaging, the tied embedding, global-norm clipping), evaluation through the
 * pieces, and the pipeline's trace and report. Building the pieces: parallelism_model.cpp.
 */
#include "tools/train/parallelism.h"

#if LOOM_TRAIN_WITH_MPI
#include "distributed/comm_trace.h"
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "core/autocast.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "ops/ops.h"
#include "tools/train/fail.h"

#if LOOM_TRAIN_WITH_MPI
#include "distributed/gradient_sync.h"
#include "distributed/pipeline/tensor_messages.h"
#include "distributed/process_group.h"
#if LOOM_WITH_NCCL
#include "distributed/nccl/process_group_nccl.h"
#endif
#include "distributed/tensor_parallel/vocab_parallel.h"
#endif

namespace loom::train {

Tensor loss_of(const Tensor& output, const Tensor& target, bool tokens) {
  if (!tokens) return nn::functional::cross_entropy(output, target);
  int64_t vocab = output.size(-1);
  return nn::functional::cross_entropy(output.reshape({-1, vocab}), target.reshape({-1}));
}

namespace {

// Steps whose pipeline schedule --trace records: after two warm-up steps (first-touch allocation
// and thread-pool start-up would dominate them), three steps, so the trace stays small.
constexpr int64_t kTraceWarmup = 2, kTracedSteps = 3;

// "--dp 2 --tp 2": the flags that shape the job, for messages.
std::string mesh_flags(const TrainOptions& o) {
  std::string flags;
  auto add = [&flags](const char* flag, int64_t value) {
    if (!flags.empty()) flags += ' ';
    flags.append(flag).append(" ").append(std::to_string(value));
  };
  if (o.dp > 1 || (o.tp == 1 && o.pp == 1)) add("--dp", o.dp);
  if (o.tp > 1) add("--tp", o.tp);
  if (o.pp > 1) add("--pp", o.pp);
  return flags;
}

// This rank's predictions of one batch against the targets: (loss sum, correct, count).
Eval score(const Tensor& output, const Tensor& target, bool tokens) {
  const auto n = static_cast<double>(target.numel());  // predictions (tokens for a language model)
  return {loss_of(output.to(DType::Float32), target, tokens).item<double>() * n,
          static_cast<double>(output.argmax(-1).eq(target).sum().item<int64_t>()), n};
}

void add(Eval& total, const Eval& e) {
  total.loss_sum += e.loss_sum;
  total.correct += e.correct;
  total.count += e.count;
}

#if LOOM_TRAIN_WITH_MPI
// Evaluation through the stages: one batch's activation at a time, blocking, in the same order
// on both sides (the stages run the batches in the same order); the pipeline's tensor messages.
void send_activation(distributed::ProcessGroup& group, const Tensor& t, int peer) {
  const Tensor data = t.contiguous();
  // Waits until the next stage has the shape and the data.
  for (const distributed::WorkPtr& work : distributed::pipeline::send_tensor(group, data, peer, 0)) work->wait();
}

Tensor recv_activation(distributed::ProcessGroup& group, int peer) {
  return distributed::pipeline::recv_tensor(group, peer, 0);  // waits for the previous stage's forward
}
#endif

}  // namespace

// ---------------------------------------------------------------------------------------------
// The job

Parallelism::Parallelism(const TrainOptions& options) : options_(options) {
  const int64_t ranks = options.dp * options.tp * options.pp;
  if (ranks == 1) return;
#if LOOM_TRAIN_WITH_MPI
  world_ = distributed::init_process_group(distributed::Backend::Mpi);
  if (world_->size() != ranks)
    fail(mesh_flags(options) + " needs mpirun -np " + std::to_string(ranks) + "; this job has " +
         std::to_string(world_->size()) + (world_->size() == 1 ? " rank" : " ranks"));
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(options.collective_timeout * 1000));
  world_->set_timeout(timeout);
  tensor_world_ = world_;
#if LOOM_WITH_NCCL
  // Collective over world_: every rank joins the NCCL group (one GPU per rank).
  if (options.device == DeviceKind::kCuda) tensor_world_ = distributed::make_nccl_group(*world_);
#endif
  tensor_world_->set_timeout(timeout);
  mesh_ = std::make_unique<distributed::DeviceMesh>(
      tensor_world_, distributed::MeshShape{.dp = static_cast<int>(options.dp),
                                     .tp = static_cast<int>(options.tp),
                                     .pp = static_cast<int>(options.pp)});
  for (auto* group : {&mesh_->data_group(), &mesh_->tensor_group(), &mesh_->pipeline_group()})
    group->set_timeout(timeout);
  rank_ = world_->rank();
  size_ = world_->size();
  coord_dp_ = mesh_->coord().dp;
  coord_tp_ = mesh_->coord().tp;
  coord_pp_ = mesh_->coord().pp;
#else
  fail(mesh_flags(options) + ": this train was built without MPI (install Open MPI and reconfigure)");
#endif
}

Parallelism::~Parallelism() = default;

std::string Parallelism::describe() const {
  std::vector<std::string> parts;
  if (options_.dp > 1) parts.push_back("data parallel over " + std::to_string(options_.dp) + " ranks");
  if (options_.tp > 1) parts.push_back("tensor parallel over " + std::to_string(options_.tp) + " ranks");
  if (options_.pp > 1)
    parts.push_back(std::to_string(options_.pp) + " pipeline stages (" +
                    std::string(to_string(options_.pipeline_schedule)) + ", " +
                    std::to_string(options_.microbatches) + " micro-batches)");
  if (options_.zero > 0) parts.push_back("ZeRO stage " + std::to_string(options_.zero));
  std::string text;
  for (const auto& part : parts) text += (text.empty() ? "" : ", ") + part;
  return text;
}

void Parallelism::barrier() {
#if LOOM_TRAIN_WITH_MPI
  if (world_) world_->barrier();
#endif
}

void Parallelism::sum(std::vector<double>& values) {
#if LOOM_TRAIN_WITH_MPI
  if (!world_ || values.empty()) return;
  Tensor t = tensor(values, {static_cast<int64_t>(values.size())});
  world_->all_reduce(t, distributed::ReduceOp::Sum);  // waits for every rank's values
  const double* p = t.data_ptr<double>();
  values.assign(p, p + values.size());
#else
  (void)values;
#endif
}

void Parallelism::max(std::vector<double>& values) {
#if LOOM_TRAIN_WITH_MPI
  if (!world_ || values.empty()) return;
  Tensor t = tensor(values, {static_cast<int64_t>(values.size())});
  world_->all_reduce(t, distributed::ReduceOp::Max);  // waits for every rank's values
  const double* p = t.data_ptr<double>();
  values.assign(p, p + values.size());
#else
  (void)values;
#endif
}

void Parallelism::trace_communication(Trace* trace) {
  run_trace_ = trace != nullptr && trace->enabled() ? trace : nullptr;
#if LOOM_TRAIN_WITH_MPI
  if (run_trace_ == nullptr) {
    distributed::set_comm_sink({});
    return;
  }
  distributed::set_comm_sink([trace](const distributed::CommEvent& e) {
    const std::string name = e.operation + " " + e.group;
    const auto bytes = static_cast<double>(e.bytes);
    trace->span(name, "communication", e.wait_begin, e.done, "bytes", bytes);
    trace->async_span(name, "in flight", e.posted, e.done, "bytes", bytes);
  });
#else
  (void)trace;
#endif
}

std::string Parallelism::rank_name() const {
  return "rank " + std::to_string(rank_) + " (dp " + std::to_string(coord_dp_) + ", tp " + std::to_string(coord_tp_) +
         ", pp " + std::to_string(coord_pp_) + ")";
}

std::vector<std::string> Parallelism::gather_text(const std::string& text) {
#if LOOM_TRAIN_WITH_MPI
  if (!world_) return {text};
  Tensor size = loom::full({1}, static_cast<double>(text.size()), DType::Int64);
  Tensor sizes = empty({size_}, DType::Int64);
  world_->all_gather(size, sizes);  // every rank's length, so that rank 0 can size its buffers
  std::vector<std::string> out;
  if (rank_ != 0) {
    Tensor bytes = empty({static_cast<int64_t>(text.size())}, DType::UInt8);
    std::copy(text.begin(), text.end(), bytes.data_ptr<uint8_t>());
    world_->send(bytes, 0);  // waits until rank 0 received it
    return out;
  }
  out.push_back(text);
  for (int r = 1; r < size_; ++r) {
    Tensor bytes = empty({sizes.data_ptr<int64_t>()[r]}, DType::UInt8);
    world_->recv(bytes, r);  // waits for rank r's text
    out.emplace_back(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(bytes.numel()));
  }
  return out;
#else
  return {text};
#endif
}

bool Parallelism::all_ok(bool ok) {
  std::vector<double> failed{ok ? 0.0 : 1.0};
  max(failed);
  return failed[0] == 0.0;
}

bool Parallelism::any(bool mine) {
  std::vector<double> flag{mine ? 1.0 : 0.0};
  max(flag);
  return flag[0] != 0.0;
}

nn::CheckpointGroup Parallelism::checkpoint_group() {
  if (size_ == 1) return {};
  // The checkpoint's agreements run on the training thread, between steps: the MPI backend
  // serves every group's operations from one queue, so nothing else is in flight then.
  return nn::CheckpointGroup{.rank = rank_, .size = size_, .all_ok = [this](bool ok) { return all_ok(ok); }};
}

// ---------------------------------------------------------------------------------------------
// Training

void Parallelism::make_optimizer(const OptimizerFactory& make) {
  std::vector<Tensor> params = local_->parameters();
#if LOOM_TRAIN_WITH_MPI
  if (options_.zero == 1 || options_.zero == 2) {
    zero_ = std::make_unique<distributed::ZeroOptimizer>(
        params, mesh_->data_group_ptr(), static_cast<int>(options_.zero),
        [make](std::vector<Tensor> shard) { return make(std::move(shard)); });
    return;
  }
#endif
  optimizer_ = make(std::move(params));
}

nn::Optimizer& Parallelism::optimizer() {
#if LOOM_TRAIN_WITH_MPI
  if (zero_) return zero_->inner();
#endif
  return *optimizer_;
}

double Parallelism::forward_backward(const Tensor& data, const Tensor& target, double weight) {
  ++steps_run_;
#if LOOM_TRAIN_WITH_MPI
  if (runner_) {
    const bool traced =
        !options_.trace.empty() && steps_run_ > kTraceWarmup && steps_run_ <= kTraceWarmup + kTracedSteps;
    runner_->set_tracing(traced);
    const bool tokens = options_.model == ModelKind::kGpt;
    auto loss = [this, weight, tokens](const Tensor& output, const Tensor& y) {
      if (vocabulary_parallel())  // this rank's vocabulary slice: the loss over the tensor group's
        return distributed::vocab_parallel_cross_entropy(output.reshape({-1, output.size(-1)}), y.reshape({-1}),
                                                         mesh_->tensor_group_ptr()) *
               weight;
      return loss_of(output, y, tokens) * weight;
    };
    distributed::pipeline::StepStats stats = runner_->train_step(data, target, loss);
    peak_live_ = std::max(peak_live_, stats.peak_live_microbatches);
    peak_bytes_ = std::max(peak_bytes_, stats.peak_activation_bytes);
    if (traced && run_trace_ != nullptr)  // this rank's compute per micro-batch, on its own timeline
      for (const auto& e : runner_->last_events())
        if (e.compute) {
          const auto begin = stats.started + std::chrono::microseconds(static_cast<int64_t>(e.start_us));
          run_trace_->span(e.name, "pipeline", begin,
                       begin + std::chrono::microseconds(static_cast<int64_t>(e.duration_us)));
        }
    if (traced) {
      namespace pipe = distributed::pipeline;
      // Collective over the pipeline group: every stage's events to the group's first stage.
      auto per_rank = pipe::gather_trace(mesh_->pipeline_group(), runner_->last_events(), 0);
      if (mesh_->pipeline_group().rank() == 0) {
        const std::vector<double> idle = pipe::measured_bubble(per_rank);
        double mean = 0;
        for (double b : idle) mean += b / static_cast<double>(idle.size());
        bubble_sum_ += mean;
        ++traced_steps_;
        // The steps one after another on the trace's time axis.
        double end = 0;
        for (const auto& events : trace_)
          for (const auto& e : events) end = std::max(end, e.start_us + e.duration_us);
        trace_.resize(per_rank.size());
        for (size_t s = 0; s < per_rank.size(); ++s)
          for (auto e : per_rank[s]) {
            e.start_us += end;
            trace_[s].push_back(e);
          }
      }
    }
    return stats.loss / weight;
  }
  if (tp_gpt_) {
    Tensor loss = tp_gpt_->loss(data, target);
    (loss * weight).backward();
    return loss.item<double>();
  }
#endif
  Tensor loss = loss_of((*local_)(data), target, false);
  (loss * weight).backward();
  return loss.item<double>();
}

void Parallelism::backward(const Tensor& loss, bool sync) {
#if LOOM_TRAIN_WITH_MPI
  if (ddp_ && !sync) {
    auto guard = ddp_->no_sync();
    loss.backward();
    return;
  }
#endif
  (void)sync;
  loss.backward();
}

// clip_grad_norm_ over the whole model when it is split over ranks: a replicated parameter's
// gradient counted on tensor rank 0 only, the tied embedding's on the first stage only, summed
// over the tensor group and then over the pipeline group (every replica holds the same averaged
// gradients).
double Parallelism::clip_global_norm(double max_norm) {
#if LOOM_TRAIN_WITH_MPI
  std::vector<Tensor> counted;
  for (const auto& [name, p] : local_->named_parameters())
    if ((coord_tp_ == 0 || !placement_.replicated.count(name)) && !tied_copies_.count(name)) counted.push_back(p);
  return distributed::clip_grad_norm_across(local_->parameters(), counted, max_norm,
                                            {&mesh_->tensor_group(), &mesh_->pipeline_group()});
#else
  (void)max_norm;
  return 0;
#endif
}

void Parallelism::step(nn::GradScaler& scaler, double clip) {
#if LOOM_TRAIN_WITH_MPI
  tie_gradients();  // before the averaging and clipping: they see the tied weight's whole gradient
  if (zero_) {
    zero_->step();  // averages over the data group, steps the shard, all-gathers the parameters
    zero_->zero_grad();
    return;
  }
  if (sharded() && options_.dp > 1) distributed::average_gradients(local_->parameters(), mesh_->data_group());
#endif
  if (clip > 0) {
    scaler.unscale_(*optimizer_);  // clip the true gradients, not the scaled ones
    if (sharded())
      clip_global_norm(clip);
#if LOOM_TRAIN_WITH_MPI
    else if (fsdp_)  // each rank holds a shard of the averaged gradient: the norm sums them all
      distributed::clip_grad_norm_across(local_->parameters(), local_->parameters(), clip, {&mesh_->data_group()});
#endif
    else  // the norm is not needed here, so it is not read back: on CUDA the step does not wait
      nn::clip_grad_norm_on_device_(local_->parameters(), clip);
  }
  scaler.step(*optimizer_);
  scaler.update();
  optimizer_->zero_grad();
}

// ---------------------------------------------------------------------------------------------
// Evaluation

bool Parallelism::counts_evaluation() const {
  return coord_tp_ == 0 && coord_pp_ == options_.pp - 1;
}

Eval Parallelism::evaluate(data::DataLoader& loader, bool tokens, std::optional<DType> amp) {
  local_->eval();
  Eval total;
  {
    NoGradGuard no_grad;
#if LOOM_TRAIN_WITH_MPI
    if (runner_)
      total = evaluate_pipeline(loader, tokens);
    else if (sharded())
      total = evaluate_tensor_parallel(loader, tokens);
    else
#endif
    {
      // --zero 3: the whole model for the evaluation, so that no batch needs a collective (the
      // ranks' shards of the data may have different numbers of batches).
      std::shared_ptr<void> whole = whole_model();
      for (data::Batch& batch : loader) {
        Tensor output;
        {
          AutocastGuard autocast(batch.data.device().type(), amp, amp.has_value());
          output = (*local_)(batch.data);
        }
        add(total, score(output, batch.target, tokens));
      }
    }
  }
  local_->train();
  return counts_evaluation() ? total : Eval{};
}

Eval Parallelism::evaluate_pipeline(data::DataLoader& loader, bool tokens) {
  Eval total;
#if LOOM_TRAIN_WITH_MPI
  distributed::ProcessGroup& group = mesh_->pipeline_group();
  const int s = group.rank(), p = group.size();
  // Forward only, one batch at a time through the stages: no backward to schedule. Interleaved,
  // the batch goes round the ranks once per chunk (stage c·p + s is chunk c of rank s).
  const auto& chunks = runner_->chunks();
  const auto v = static_cast<int64_t>(chunks.size());
  for (data::Batch& batch : loader) {
    Tensor y;
    for (int64_t c = 0; c < v; ++c) {
      Tensor x = s == 0 && c == 0 ? batch.data : recv_activation(group, (s + p - 1) % p);
      y = (*chunks[c])(x);
      if (s + 1 < p || c + 1 < v) send_activation(group, y, (s + 1) % p);
    }
    if (s + 1 == p)
      add(total, vocabulary_parallel() ? score_vocabulary_slice(y, batch.target) : score(y, batch.target, tokens));
  }
#else
  (void)loader;
  (void)tokens;
#endif
  return total;
}

Eval Parallelism::evaluate_tensor_parallel(data::DataLoader& loader, bool tokens) {
  Eval total;
#if LOOM_TRAIN_WITH_MPI
  for (data::Batch& batch : loader) {
    if (!tp_gpt_) {  // the mlp's last layer gathers the logits: every tensor rank has them all
      add(total, score((*local_)(batch.data), batch.target, tokens));
      continue;
    }
    // This rank's vocabulary slice [B, T, V/t]; each block all-reduces over the tensor group.
    add(total, score_vocabulary_slice((*tp_gpt_)(batch.data), batch.target));
  }
#else
  (void)loader;
  (void)tokens;
#endif
  return total;
}

Eval Parallelism::score_vocabulary_slice(const Tensor& logits, const Tensor& target_tokens) {
#if LOOM_TRAIN_WITH_MPI
  distributed::ProcessGroup& group = mesh_->tensor_group();
  const Tensor flat = logits.reshape({-1, logits.size(-1)}), target = target_tokens.reshape({-1});
  const int64_t n = target.numel(), t = group.size();
  // All-reduces over the tensor group: waits for the other vocabulary slices' logits.
  const double loss =
      distributed::vocab_parallel_cross_entropy(flat, target, mesh_->tensor_group_ptr()).item<double>();
  // The prediction over the whole vocabulary: each rank's best token and its logit, gathered;
  // the best of the bests (the lowest rank on a tie, as argmax over the full logits).
  Tensor best = flat.argmax(-1).contiguous();
  Tensor value = flat.to(kFloat64).gather(1, best.unsqueeze(1)).reshape({n}).contiguous();
  Tensor ids = best.add(vocab_begin_).to(kFloat64).contiguous();
  const TensorOptions on_group = TensorOptions(kFloat64).device(group.device());
  Tensor gathered_values = empty({t * n}, on_group), gathered_ids = empty({t * n}, on_group);
  group.all_gather(value, gathered_values);  // waits for every shard's best logits
  group.all_gather(ids, gathered_ids);
  const Tensor all_values = gathered_values.to(kCPU), all_ids = gathered_ids.to(kCPU);
  const double* v = all_values.data_ptr<double>();
  const double* id = all_ids.data_ptr<double>();
  const Tensor target64 = target.to(kCPU).to(kInt64).contiguous();
  const int64_t* y = target64.data_ptr<int64_t>();
  double correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t winner = 0;
    for (int64_t k = 1; k < t; ++k)
      if (v[k * n + i] > v[winner * n + i]) winner = k;
    correct += static_cast<int64_t>(id[winner * n + i]) == y[i];
  }
  return Eval{loss * static_cast<double>(n), correct, static_cast<double>(n)};
#else
  (void)logits;
  (void)target_tokens;
  return {};
#endif
}

// ---------------------------------------------------------------------------------------------
// The pipeline's trace

std::string Parallelism::pipeline_trace_json() const {
#if LOOM_TRAIN_WITH_MPI
  if (main() && !trace_.empty()) return distributed::pipeline::chrome_trace_json(trace_);
#endif
  return {};
}

std::optional<PipelineReport> Parallelism::pipeline_report() {
#if LOOM_TRAIN_WITH_MPI
  if (!runner_) return std::nullopt;
  PipelineReport report;
  report.stages = options_.pp;
  report.microbatches = options_.microbatches;
  report.traced_steps = traced_steps_;
  report.measured_bubble = traced_steps_ > 0 ? bubble_sum_ / static_cast<double>(traced_steps_) : 0.0;
  const auto p = static_cast<double>(options_.pp), m = static_cast<double>(options_.microbatches);
  // ZB-H1 with its forward, B and W alike (schedule.h); interleaved with v chunks.
  const double units = options_.pipeline_schedule == PipelineSchedule::kZeroBubbleH1 ? 3 * m
                       : static_cast<double>(pipeline_chunks(options_)) * m;
  report.ideal_bubble = (p - 1) / (units + p - 1);
  distributed::ProcessGroup& group = mesh_->pipeline_group();
  Tensor mine = tensor(std::vector<int64_t>{peak_live_, peak_bytes_}, {2}).to(group.device());
  Tensor gathered = empty({2 * options_.pp}, TensorOptions(kInt64).device(group.device()));
  group.all_gather(mine, gathered);  // waits for every stage's peaks
  const Tensor all = gathered.to(kCPU);
  const int64_t* peaks = all.data_ptr<int64_t>();
  for (int64_t s = 0; s < options_.pp; ++s) {
    report.peak_live_microbatches.push_back(peaks[2 * s]);
    report.peak_activation_bytes.push_back(peaks[2 * s + 1]);
  }
  return report;
#else
  return std::nullopt;
#endif
}

}  // namespace loom::train
