/*
 * A training step replayed from a CUDA graph (core/cuda_graph.h): the step is a function of a
 * batch (input, target) that runs forward, backward and the optimizer and returns the loss.
 * GraphedStep runs it eagerly for a few warm-up batches (the optimizer makes its state, the
 * allocator and libraries their workspaces), captures it once on the next batch shaped like the
 * one before, and from then on copies each batch of that shape into the graph's static input and
 * target and replays the whole step with one launch. A batch of another shape (an epoch's last,
 * short batch) runs eagerly.
 *
 *   nn::AdamW opt(model.parameters(), {.lr = 3e-4, .capturable = true});
 *   nn::CosineWithWarmup schedule(opt, 100, 10000);
 *   nn::GraphedStep step(Device::cuda(), [&](const Tensor& x, const Tensor& y) {
 *     opt.zero_grad();
 *     Tensor loss = nn::functional::cross_entropy(model.forward(x), y);
 *     loss.backward();
 *     opt.step();
 *     return loss;
 *   });
 *   for (data::Batch& batch : loader) {
 *     double loss = step(batch.data, batch.target).item<double>();
 *     schedule.step();  // between replays; the capturable optimizer reads the new lr on the GPU
 *   }
 *
 * What the step may do is what a capture allows: no reads back to the host (.item(), printing),
 * an optimizer built with capturable = true (a plain SGD keeps the capture's lr), clipping by
 * clip_grad_norm_on_device_. Dropout draws at each replay the masks the eager step would draw;
 * a GradScaler's float16 step (scale, unscale_, step, update) skips an inf/NaN step and rescales
 * on the device at each replay, as the eager step would (nn/amp/grad_scaler.h).
 * A step that breaks a rule throws at the capture, naming the call.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/cuda_graph.h"
#include "core/tensor.h"

namespace loom::nn {

class GraphedStep {
 public:
  using Step = std::function<Tensor(const Tensor& input, const Tensor& target)>;

  // `step` runs on `device` (a CUDA device) and returns its loss; warm_up_steps >= 1 eager calls
  // precede the capture. Throws for a device that is not CUDA or warm_up_steps < 1.
  GraphedStep(Device device, Step step, int64_t warm_up_steps = 2);

  // One training step on this batch (moved to the device if it is elsewhere): eager, the capture
  // and its first replay, or a replay. Returns the step's loss; for a replay, the graph's static
  // loss tensor, which the next replay overwrites.
  Tensor operator()(const Tensor& input, const Tensor& target);

  bool captured() const { return graph_.captured(); }
  int64_t replays() const { return replays_; }
  int64_t eager_steps() const { return eager_steps_; }
  // The captured graph's nodes (kernels, copies, library calls); 0 before the capture.
  size_t num_nodes() const { return graph_.captured() ? graph_.num_nodes() : 0; }

 private:
  struct BatchShape {
    std::vector<int64_t> input, target;
    DType input_dtype = kFloat32, target_dtype = kFloat32;
    bool operator==(const BatchShape&) const = default;
  };
  static BatchShape shape_of(const Tensor& input, const Tensor& target);

  Device device_;
  Step step_;
  int64_t warm_up_steps_;
  int64_t replays_ = 0, eager_steps_ = 0;
  cuda::CudaGraph graph_;
  Tensor static_input_, static_target_, static_loss_;
  BatchShape last_eager_shape_, captured_shape_;
};

}  // namespace loom::nn
