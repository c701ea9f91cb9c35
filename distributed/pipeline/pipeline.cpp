/* Pipeline-parallel training of a sequential model (see pipeline.h). */
#include "distributed/pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "autograd/autograd.h"
#include "core/allocator.h"
#include "core/error.h"
#include "ops/ops.h"

namespace loom::distributed::pipeline {
namespace {

constexpr int64_t kMaxRank = 8;  // the shape header: [rank, d0, ..., d7]

// A tensor whose shape the receiver does not know yet goes as two messages: its shape, then its
// data. Both halves are blocking and in the same order on both sides (schedule.h's guarantee).
// Posts the shape header and the payload of `t` to `peer` without waiting; the returned works
// (and `t`, which the caller keeps) must live until they complete.
std::vector<WorkPtr> send_tensor(ProcessGroup& group, const Tensor& t, int peer, int tag) {
  LOOM_CHECK(t.dim() <= kMaxRank, "pipeline: cannot send a tensor of rank ", t.dim());
  // The receiver allocates float32 (the header carries the shape only).
  LOOM_CHECK(t.dtype() == kFloat32, "pipeline: stages exchange float32 activations and gradients, got ", t.dtype());
  Tensor header = zeros({kMaxRank + 1}, TensorOptions(kInt64));
  auto* h = header.data_ptr<int64_t>();
  h[0] = t.dim();
  for (int64_t i = 0; i < t.dim(); ++i) h[i + 1] = t.size(i);
  return {group.send_async(header, peer, tag), group.send_async(t, peer, tag)};
}

Tensor recv_tensor(ProcessGroup& group, int peer, int tag) {
  Tensor header = zeros({kMaxRank + 1}, TensorOptions(kInt64));
  group.recv(header, peer, tag);
  const auto* h = header.data_ptr<int64_t>();
  LOOM_CHECK(h[0] >= 0 && h[0] <= kMaxRank, "pipeline: received a bad shape header from rank ", peer);
  DimVector sizes;
  for (int64_t i = 0; i < h[0]; ++i) sizes.push_back(h[i + 1]);
  Tensor t = empty(sizes);
  group.recv(t, peer, tag);
  return t;
}

// The tag of a message: the model-stage boundary it crosses (activations of stage g and the
// gradients coming back to it cross boundary g).
int tag_of(const Action& a) {
  const bool downstream = a.type == ActionType::SendActivation || a.type == ActionType::RecvGrad;
  return static_cast<int>(downstream ? a.stage : a.stage - 1);
}

}  // namespace

std::vector<int64_t> partition_balanced(const std::vector<double>& costs, int64_t stages) {
  const auto layers = static_cast<int64_t>(costs.size());
  LOOM_CHECK(stages >= 1 && stages <= layers, "partition_balanced: cannot cut ", layers, " layers into ", stages,
             " non-empty stages");
  for (double c : costs) LOOM_CHECK(c >= 0, "partition_balanced: negative layer cost ", c);
  // best[k][i]: the smallest possible largest-stage cost for the first i layers in k stages.
  std::vector<double> prefix(layers + 1, 0.0);
  for (int64_t i = 0; i < layers; ++i) prefix[i + 1] = prefix[i] + costs[i];
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(layers + 1, inf));
  std::vector<std::vector<int64_t>> cut(stages + 1, std::vector<int64_t>(layers + 1, 0));
  best[0][0] = 0;
  for (int64_t k = 1; k <= stages; ++k)
    for (int64_t i = k; i <= layers; ++i)
      for (int64_t j = k - 1; j < i; ++j) {
        const double worst = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (worst < best[k][i]) {
          best[k][i] = worst;
          cut[k][i] = j;
        }
      }
  std::vector<int64_t> bounds(stages + 1);
  bounds[stages] = layers;
  for (int64_t k = stages, i = layers; k > 0; --k) i = bounds[k - 1] = cut[k][i];
  return bounds;
}

std::vector<double> layer_counts(const nn::Sequential& model) { return std::vector<double>(model.size(), 1.0); }

std::vector<double> parameter_counts(const nn::Sequential& model) {
  std::vector<double> counts;
  for (const auto& layer : model) counts.push_back(static_cast<double>(layer->num_parameters()));
  return counts;
}

std::vector<double> measured_times(nn::Sequential& model, const Tensor& sample, int repeats) {
  using Clock = std::chrono::steady_clock;
  LOOM_CHECK(repeats >= 1, "measured_times: repeats must be >= 1, got ", repeats);
  std::vector<double> seconds;
  Tensor x = sample;
  for (int64_t i = 0; i < static_cast<int64_t>(model.size()); ++i) {
    nn::Module& layer = model[i];
    std::vector<double> runs;
    Tensor output;
    for (int run = 0; run <= repeats; ++run) {  // run 0 warms up (first-touch allocations, caches)
      // A fresh leaf, so that the backward stops at this layer's input.
      Tensor input = is_floating(x.dtype()) ? x.detach().requires_grad_(true) : x;
      const auto start = Clock::now();
      output = layer(input);
      if (output.requires_grad()) output.backward(ones_like(output));
      if (run > 0) runs.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    std::sort(runs.begin(), runs.end());
    seconds.push_back(runs[runs.size() / 2]);
    x = output.detach();
  }
  model.zero_grad();
  return seconds;
}

std::shared_ptr<nn::Sequential> stage_of(const nn::Sequential& model, int64_t begin, int64_t end) {
  LOOM_CHECK(0 <= begin && begin < end && end <= static_cast<int64_t>(model.size()), "pipeline: stage [", begin, ", ",
             end, ") is not a non-empty range of the model's ", model.size(), " layers");
  auto stage = std::make_shared<nn::Sequential>();
  for (int64_t i = begin; i < end; ++i) stage->push_back(model.ptr(i));
  return stage;
}

PipelineStageRunner::PipelineStageRunner(std::shared_ptr<nn::Sequential> stage, std::shared_ptr<ProcessGroup> group,
                                         ScheduleKind kind, int64_t microbatches)
    : chunks_{std::move(stage)}, group_(std::move(group)), microbatches_(microbatches) {
  LOOM_CHECK(chunks_.front() != nullptr && group_ != nullptr, "PipelineStageRunner: null stage or group");
  schedule_ = make_schedule(kind == ScheduleKind::Interleaved1F1B ? ScheduleKind::OneFOneB : kind, group_->size(),
                            microbatches);
}

PipelineStageRunner::PipelineStageRunner(std::vector<std::shared_ptr<nn::Sequential>> chunks,
                                         std::shared_ptr<ProcessGroup> group, int64_t microbatches)
    : chunks_(std::move(chunks)), group_(std::move(group)), microbatches_(microbatches) {
  LOOM_CHECK(!chunks_.empty() && group_ != nullptr, "PipelineStageRunner: no chunks or a null group");
  for (const auto& chunk : chunks_) LOOM_CHECK(chunk != nullptr, "PipelineStageRunner: a null chunk");
  schedule_ = make_schedule(ScheduleKind::Interleaved1F1B, group_->size(), microbatches,
                            static_cast<int64_t>(chunks_.size()));
}

std::vector<Tensor> PipelineStageRunner::parameters() const {
  std::vector<Tensor> all;
  for (const auto& chunk : chunks_)
    for (const Tensor& p : chunk->parameters()) all.push_back(p);
  return all;
}

StepStats PipelineStageRunner::train_step(const Tensor& input, const Tensor& target, const LossFn& loss_fn) {
  using Clock = std::chrono::steady_clock;
  const int p = group_->size();
  const int64_t m = microbatches_, v = static_cast<int64_t>(chunks_.size());
  const int64_t model_stages = p * v;
  auto micro = [m](const Tensor& batch, int64_t i, const char* what) {
    LOOM_CHECK(batch.defined() && batch.size(0) % m == 0, "pipeline: the ", what, " batch (", batch.size(0),
               " examples) must split into ", m, " equal micro-batches");
    const int64_t n = batch.size(0) / m;
    return batch.slice(0, i * n, (i + 1) * n);
  };
  // Per (chunk, micro-batch): slot c·m + i.
  std::vector<Tensor> inputs(v * m), outputs(v * m), grads(v * m), losses(v * m);
  // Sends still in flight, with the tensors they read from (released when the step ends).
  std::vector<std::pair<WorkPtr, Tensor>> in_flight;
  StepStats stats;
  events_.clear();
  // The step starts together on every rank, so that the trace's tracks share a time origin.
  if (tracing_) group_->barrier();
  const auto step_start = Clock::now();
  int64_t live = 0;
  double loss_sum = 0;
  // Activation memory: live bytes of the stage's allocator above the step's starting point.
  const std::vector<Tensor> params = parameters();
  Allocator* allocator = get_allocator(params.empty() ? DeviceType::CPU : params.front().device().type());
  // Parameter gradients that the step's first backward allocates (after zero_grad set them to
  // none) are not activations: their bytes are taken out again.
  auto gradient_bytes = [&] {
    int64_t total = 0;
    for (const Tensor& p : params)
      if (p.grad().defined()) total += static_cast<int64_t>(p.grad().nbytes());
    return total;
  };
  const int64_t baseline = static_cast<int64_t>(allocator->stats().allocated_bytes) - gradient_bytes();
  auto sample_memory = [&] {
    const int64_t held = static_cast<int64_t>(allocator->stats().allocated_bytes) - gradient_bytes() - baseline;
    stats.peak_activation_bytes = std::max(stats.peak_activation_bytes, held);
  };
  auto post = [&](const Tensor& t, const Action& a) {
    for (WorkPtr& work : send_tensor(*group_, t, a.peer, tag_of(a))) in_flight.emplace_back(std::move(work), t);
  };
  // Drops the sends that completed, and with them the last reference to a sent gradient, which
  // would otherwise stay allocated until the step ends.
  auto release_completed = [&] {
    std::erase_if(in_flight, [](const std::pair<WorkPtr, Tensor>& send) { return send.first->is_completed(); });
  };
  for (const Action& a : schedule_[group_->rank()]) {
    const auto start = Clock::now();
    const int64_t i = a.microbatch;
    const int64_t slot = (a.stage / p) * m + i;
    const bool first = a.stage == 0, last = a.stage == model_stages - 1;
    int64_t bytes = 0;  // a message's payload, for the trace
    switch (a.type) {
      case ActionType::RecvActivation:
        inputs[slot] = recv_tensor(*group_, a.peer, tag_of(a)).requires_grad_(true);
        bytes = static_cast<int64_t>(inputs[slot].nbytes());
        sample_memory();
        break;
      case ActionType::Forward: {
        if (first) inputs[slot] = micro(input, i, "input");
        outputs[slot] = (*chunks_[a.stage / p])(inputs[slot]);
        if (last) losses[slot] = loss_fn(outputs[slot], micro(target, i, "target")) / static_cast<double>(m);
        stats.peak_live_microbatches = std::max(stats.peak_live_microbatches, ++live);
        sample_memory();
        break;
      }
      case ActionType::SendActivation:
        post(outputs[slot].detach().contiguous(), a);
        bytes = static_cast<int64_t>(outputs[slot].nbytes());
        break;
      case ActionType::RecvGrad:
        grads[slot] = recv_tensor(*group_, a.peer, tag_of(a));
        bytes = static_cast<int64_t>(grads[slot].nbytes());
        break;
      case ActionType::Backward:
        if (last) {
          losses[slot].backward();
          loss_sum += losses[slot].item<double>();
        } else {
          outputs[slot].backward(grads[slot]);
        }
        outputs[slot] = grads[slot] = losses[slot] = Tensor();  // this micro-batch's graph and activations go
        --live;
        break;
      case ActionType::SendGrad:
        post(inputs[slot].grad().contiguous(), a);
        bytes = static_cast<int64_t>(inputs[slot].grad().nbytes());
        inputs[slot] = Tensor();
        break;
    }
    if (a.is_recv()) release_completed();  // a receive waited anyway: the cheapest moment to look
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    (a.is_compute() ? stats.compute_seconds : stats.wait_seconds) += seconds;
    if (tracing_) {
      const std::string name = v == 1 ? a.to_string() : (a.is_compute() ? compute_label(a, p, true) : a.to_string());
      events_.push_back(TraceEvent{name, a.is_compute(), i,
                                   std::chrono::duration<double, std::micro>(start - step_start).count(),
                                   seconds * 1e6, bytes});
    }
  }
  // Every posted send has been received by now or will be (its receiver is in this step too):
  // wait for them, so that the buffers they read stay alive until then.
  for (auto& [work, buffer] : in_flight) work->wait();
  // The last stage knows the loss; every rank reports it (waits for the last stage).
  // The last model stage is on rank p - 1 (chunk v - 1 of that rank).
  Tensor loss = full({1}, group_->rank() == p - 1 ? loss_sum : 0.0, TensorOptions(kFloat64));
  group_->broadcast(loss, p - 1);
  stats.loss = loss.item<double>();
  return stats;
}

}  // namespace loom::distributed::pipeline
