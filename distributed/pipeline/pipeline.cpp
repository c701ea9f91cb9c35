/* Pipeline-parallel training of a sequential model (see pipeline.h). */
#include "distributed/pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "autograd/autograd.h"
#include "autograd/split_backward.h"
#include "core/error.h"
#include "distributed/pipeline/step_recorder.h"
#include "distributed/pipeline/tensor_messages.h"
#include "ops/ops.h"

namespace loom::distributed::pipeline {
namespace {

// Sends posted and not known to be complete yet, each with the tensor it reads from.
class PostedSends {
 public:
  void post(ProcessGroup& group, const Tensor& t, int peer, int tag) {
    for (WorkPtr& work : send_tensor(group, t, peer, tag)) sends_.emplace_back(std::move(work), t);
  }
  // Drops the sends that completed, and with them the last reference to a sent gradient, which
  // would otherwise stay allocated until the step ends.
  void release_completed() {
    std::erase_if(sends_, [](const std::pair<WorkPtr, Tensor>& send) { return send.first->is_completed(); });
  }
  // Waits for the receivers of every send (each is in this step too, so it comes), so that the
  // buffers the sends read stay alive until then.
  void wait_all() {
    for (auto& [work, buffer] : sends_) work->wait();
  }

 private:
  std::vector<std::pair<WorkPtr, Tensor>> sends_;
};

// Micro-batch i of m of a batch [N, ...]: rows [i·N/m, (i+1)·N/m).
Tensor microbatch(const Tensor& batch, int64_t i, int64_t m, const char* what) {
  LOOM_CHECK(batch.defined() && batch.size(0) % m == 0, "pipeline: the ", what, " batch (", batch.size(0),
             " examples) must split into ", m, " equal micro-batches");
  const int64_t n = batch.size(0) / m;
  return batch.slice(0, i * n, (i + 1) * n);
}

int64_t nbytes(const Tensor& t) { return static_cast<int64_t>(t.nbytes()); }

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

// The loop of schedule.h: every action of this rank, in order. Receives wait (for the neighbour
// stage's forward or backward of that micro-batch, which this action needs); sends are posted
// and do not wait (see pipeline.h: interleaved chunks would deadlock on blocking sends).
StepStats PipelineStageRunner::train_step(const Tensor& input, const Tensor& target, const LossFn& loss_fn) {
  const int p = group_->size();
  const int64_t m = microbatches_, v = static_cast<int64_t>(chunks_.size());
  const int64_t model_stages = p * v;
  // What a (chunk c, micro-batch i) holds between its actions, at slot c·m + i.
  std::vector<Tensor> inputs(v * m), outputs(v * m), grads(v * m), losses(v * m), input_grads(v * m);
  std::vector<autograd::DeferredWeightGrads> weight_work(v * m);  // ZB-H1: what B leaves for W
  PostedSends sends;
  double loss_sum = 0;
  // The step starts together on every rank, so that the trace's tracks share a time origin.
  if (tracing_) group_->barrier();
  StepRecorder record(parameters(), p, v > 1, tracing_, events_);
  for (const Action& a : schedule_[group_->rank()]) {
    record.action_started();
    const int64_t i = a.microbatch, slot = (a.stage / p) * m + i;
    const bool first = a.stage == 0, last = a.stage == model_stages - 1;
    int64_t bytes = 0;  // a message's payload, for the trace
    switch (a.type) {
      case ActionType::RecvActivation:  // waits for stage g-1's forward of micro-batch i
        inputs[slot] = recv_tensor(*group_, a.peer, tag_of(a)).requires_grad_(true);
        bytes = nbytes(inputs[slot]);
        record.activation_received();
        break;
      case ActionType::Forward:
        if (first) inputs[slot] = microbatch(input, i, m, "input");
        outputs[slot] = (*chunks_[a.stage / p])(inputs[slot]);
        if (last)
          losses[slot] = loss_fn(outputs[slot], microbatch(target, i, m, "target")) / static_cast<double>(m);
        record.forward_done();
        break;
      case ActionType::SendActivation:
        sends.post(*group_, outputs[slot].detach().contiguous(), a.peer, tag_of(a));
        bytes = nbytes(outputs[slot]);
        break;
      case ActionType::RecvGrad:  // waits for stage g+1's backward of micro-batch i
        grads[slot] = recv_tensor(*group_, a.peer, tag_of(a));
        bytes = nbytes(grads[slot]);
        break;
      case ActionType::Backward:
        if (last) {
          losses[slot].backward();
          loss_sum += losses[slot].item<double>();
        } else {
          outputs[slot].backward(grads[slot]);
        }
        if (!first) input_grads[slot] = inputs[slot].grad();
        outputs[slot] = grads[slot] = losses[slot] = Tensor();  // this micro-batch's graph and activations go
        record.backward_done();
        break;
      case ActionType::BackwardInput:
        // Zero-bubble's B: only the gradient that stage g-1 waits for; each node's parameter
        // gradients are left in weight_work[slot] (autograd/split_backward.h), with the graph.
        // The first model stage sends no gradient: its B is empty and its W the whole backward.
        if (last) loss_sum += losses[slot].item<double>();
        if (!first) {
          const Tensor root = last ? losses[slot] : outputs[slot], root_grad = last ? Tensor() : grads[slot];
          input_grads[slot] =
              autograd::grad_deferring_weights({root}, {inputs[slot]}, {root_grad}, weight_work[slot])[0];
        }
        break;
      case ActionType::BackwardWeight:
        // Zero-bubble's W: the parameters' gradients, accumulated (and their hooks run) as by an
        // unsplit backward.
        if (first)
          autograd::backward({last ? losses[slot] : outputs[slot]}, {last ? Tensor() : grads[slot]});
        else
          autograd::run_deferred_weight_grads(weight_work[slot]);
        outputs[slot] = grads[slot] = losses[slot] = Tensor();  // this micro-batch's graph and activations go
        record.backward_done();
        break;
      case ActionType::SendGrad:
        sends.post(*group_, input_grads[slot].contiguous(), a.peer, tag_of(a));
        bytes = nbytes(input_grads[slot]);
        inputs[slot] = input_grads[slot] = Tensor();
        break;
    }
    if (a.is_recv()) sends.release_completed();  // a receive waited anyway: the cheapest moment to look
    record.action_finished(a, bytes);
  }
  sends.wait_all();  // for every receiver of this step's sends: their buffers live until then
  record.step_finished();
  // The last model stage, on rank p - 1 (its chunk v - 1), alone knows the loss; every rank
  // reports it, so the broadcast waits for rank p - 1's last backward.
  Tensor loss = full({1}, group_->rank() == p - 1 ? loss_sum : 0.0, TensorOptions(kFloat64).device(group_->device()));
  group_->broadcast(loss, p - 1);
  StepStats stats = record.stats();
  stats.loss = loss.item<double>();
  return stats;
}

}  // namespace loom::distributed::pipeline
