/* A training step replayed from a CUDA graph (see graphed_step.h). */
#include "nn/graphed_step.h"

#include <utility>

#include "core/error.h"
#include "ops/ops.h"

namespace loom::nn {

namespace {

// An empty tensor on `device` with x's shape and dtype: where each replay reads its batch.
Tensor static_like(const Tensor& x, Device device) {
  return empty(x.sizes(), TensorOptions(x.dtype()).device(device));
}

}  // namespace

GraphedStep::GraphedStep(Device device, Step step, int64_t warm_up_steps)
    : device_(device), step_(std::move(step)), warm_up_steps_(warm_up_steps) {
  LOOM_CHECK(device.is_cuda(), "GraphedStep: CUDA graphs run on a CUDA device, got ", device);
  LOOM_CHECK(warm_up_steps >= 1,
             "GraphedStep: warm_up_steps must be >= 1 (the optimizer makes its state in an "
             "eager step), got ",
             warm_up_steps);
  LOOM_CHECK(static_cast<bool>(step_), "GraphedStep: the step function is empty");
}

GraphedStep::BatchShape GraphedStep::shape_of(const Tensor& input, const Tensor& target) {
  return {std::vector<int64_t>(input.sizes().begin(), input.sizes().end()),
          std::vector<int64_t>(target.sizes().begin(), target.sizes().end()), input.dtype(), target.dtype()};
}

Tensor GraphedStep::operator()(const Tensor& input, const Tensor& target) {
  const BatchShape shape = shape_of(input, target);
  if (graph_.captured() && shape == captured_shape_) {
    // Stream-ordered copies on the current stream, before the replay that reads them.
    static_input_.copy_(input);
    static_target_.copy_(target);
  } else if (!graph_.captured() && eager_steps_ >= warm_up_steps_ && shape == last_eager_shape_) {
    // Captured on a batch shaped like the one before, so that an epoch's short last batch, met
    // right after the warm-up, is not what every later batch must match.
    static_input_ = static_like(input, device_);
    static_target_ = static_like(target, device_);
    static_input_.copy_(input);
    static_target_.copy_(target);
    cuda::capture(graph_, [&] { static_loss_ = step_(static_input_, static_target_); });
    LOOM_CHECK(static_loss_.defined(), "GraphedStep: the captured step returned an undefined loss");
    captured_shape_ = shape;
  } else {
    ++eager_steps_;
    last_eager_shape_ = shape;
    return step_(input.to(device_), target.to(device_));
  }
  graph_.replay();
  ++replays_;
  return static_loss_;
}

}  // namespace loom::nn
