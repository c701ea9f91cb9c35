/* The measurements of a pipeline step (see step_recorder.h). */
#include "distributed/pipeline/step_recorder.h"

#include <algorithm>
#include <string>

namespace loom::distributed::pipeline {

StepRecorder::StepRecorder(std::vector<Tensor> params, int64_t ranks, bool interleaved, bool tracing,
                           std::vector<TraceEvent>& events)
    : params_(std::move(params)), ranks_(ranks), interleaved_(interleaved), tracing_(tracing), events_(events) {
  events_.clear();
  step_start_ = Clock::now();
  stats_.started = step_start_;
  // Activation memory: live bytes of the stage's allocator above the step's starting point.
  allocator_ = get_allocator(params_.empty() ? DeviceType::CPU : params_.front().device().type());
  baseline_bytes_ = static_cast<int64_t>(allocator_->stats().allocated_bytes) - gradient_bytes();
}

// Parameter gradients that the step's first backward allocates (after zero_grad set them to
// none) are not activations: their bytes are taken out again.
int64_t StepRecorder::gradient_bytes() const {
  int64_t total = 0;
  for (const Tensor& p : params_)
    if (p.grad().defined()) total += static_cast<int64_t>(p.grad().nbytes());
  return total;
}

void StepRecorder::sample_memory() {
  const int64_t held =
      static_cast<int64_t>(allocator_->stats().allocated_bytes) - gradient_bytes() - baseline_bytes_;
  stats_.peak_activation_bytes = std::max(stats_.peak_activation_bytes, held);
}

void StepRecorder::forward_done() {
  stats_.peak_live_microbatches = std::max(stats_.peak_live_microbatches, ++live_microbatches_);
  sample_memory();
}

void StepRecorder::action_started() { action_start_ = Clock::now(); }

void StepRecorder::step_finished() {
  stats_.step_seconds = std::chrono::duration<double>(Clock::now() - step_start_).count();
}

void StepRecorder::action_finished(const Action& a, int64_t bytes) {
  const double seconds = std::chrono::duration<double>(Clock::now() - action_start_).count();
  (a.is_compute() ? stats_.compute_seconds : stats_.wait_seconds) += seconds;
  if (!tracing_) return;
  const std::string name = a.is_compute() ? compute_label(a, ranks_, interleaved_) : a.to_string();
  events_.push_back(TraceEvent{name, a.is_compute(), a.microbatch,
                               std::chrono::duration<double, std::micro>(action_start_ - step_start_).count(),
                               seconds * 1e6, bytes});
}

}  // namespace loom::distributed::pipeline
