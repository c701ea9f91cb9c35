/* Activation checkpointing (see checkpoint.h). */
#include "autograd/checkpoint.h"

#include "autograd/autograd_meta.h"
#include "autograd/engine.h"
#include "autograd/recorder.h"
#include "autograd/saved_tensor.h"
#include "core/autocast.h"
#include "core/random.h"

namespace loom::autograd {

namespace {

// The autocast state of the forward, so that the recompute (which runs inside backward, where
// the engine turns autocast off) computes in the same dtypes as the first run did.
struct AutocastState {
  uint8_t mask = AutocastMode::enabled_mask();
  DType cpu = AutocastMode::dtype(DeviceType::CPU);
  DType cuda = AutocastMode::dtype(DeviceType::CUDA);

  void apply() const {
    AutocastMode::set_enabled_mask(mask);
    AutocastMode::set_dtype(DeviceType::CPU, cpu);
    AutocastMode::set_dtype(DeviceType::CUDA, cuda);
  }
};

class CheckpointNode final : public Node {
 public:
  CheckpointNode(CheckpointFn fn, const std::vector<Tensor>& inputs, uint64_t seed, uint64_t offset,
                 std::function<void()> after_backward)
      : fn_(std::move(fn)), after_backward_(std::move(after_backward)), rng_seed_(seed), rng_offset_(offset) {
    for (const Tensor& x : inputs) {
      add_input(gradient_edge(x), x);
      saved_.emplace_back(x, /*is_output=*/false);
      input_requires_grad_.push_back(x.defined() && x.requires_grad());
    }
  }
  std::string name() const override { return "CheckpointBackward"; }
  void release_saved() override {
    for (SavedTensor& s : saved_) s.release();
  }
  void move_saved_out(std::vector<Tensor>& out) override {
    for (SavedTensor& s : saved_) out.push_back(s.take());
    saved_.clear();
  }
  void collect_saved(std::vector<Tensor>& out) const override {
    for (const SavedTensor& s : saved_)
      if (s.data().defined()) out.push_back(s.data());
  }

  Grads apply(Grads&& grads) override {
    // Fresh leaves holding the saved inputs: the recomputed graph starts at them.
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < saved_.size(); ++i) {
      Tensor x = saved_[i].unpack(*this);
      if (x.defined()) {
        x = x.detach();
        if (input_requires_grad_[i]) x.requires_grad_(true);
      }
      inputs.push_back(x);
    }
    std::vector<Tensor> outputs;
    {
      // Replay the random numbers of the first run, then give the generator its state back so
      // that code after backward draws what it would have drawn without checkpointing.
      Generator& gen = default_generator();
      uint64_t seed = gen.seed(), offset = gen.offset();
      gen.set_state(rng_seed_, rng_offset_);
      const AutocastState outside;
      forward_autocast_.apply();
      AutoGradMode record(true);
      try {
        outputs = fn_(inputs);
      } catch (...) {
        gen.set_state(seed, offset);
        outside.apply();
        throw;
      }
      gen.set_state(seed, offset);
      outside.apply();
    }
    LOOM_CHECK(outputs.size() == grads.size(), "checkpoint: the function returned ", outputs.size(),
               " outputs when recomputed but ", grads.size(), " the first time");
    std::vector<Tensor> roots, root_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!outputs[i].requires_grad()) continue;
      roots.push_back(outputs[i]);
      root_grads.push_back(grads[i]);
    }
    if (!roots.empty()) backward(roots, root_grads, /*retain_graph=*/false, /*create_graph=*/GradMode::is_enabled());
    outputs.clear();  // the recomputed graph goes before the hook runs
    roots.clear();
    if (after_backward_) after_backward_();
    Grads input_grads;
    for (const Tensor& x : inputs) input_grads.push_back(x.defined() && x.requires_grad() ? x.grad() : Tensor());
    return input_grads;
  }

 private:
  CheckpointFn fn_;
  std::function<void()> after_backward_;
  AutocastState forward_autocast_;  // captured at construction, i.e. during the forward
  std::vector<SavedTensor> saved_;
  std::vector<bool> input_requires_grad_;
  uint64_t rng_seed_, rng_offset_;
};

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs) {
  return checkpoint(fn, inputs, nullptr);
}

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               std::function<void()> after_backward) {
  if (!GradMode::is_enabled()) return fn(inputs);
  install_autograd();
  Generator& gen = default_generator();
  const uint64_t seed = gen.seed(), offset = gen.offset();
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_record;  // no activations kept
    outputs = fn(inputs);
  }
  // Parameters inside fn may need gradients even when no input does, so the node is made
  // whenever grad mode is on.
  auto node = std::make_shared<CheckpointNode>(fn, inputs, seed, offset, std::move(after_backward));
  for (size_t i = 0; i < outputs.size(); ++i) {
    LOOM_CHECK(outputs[i].defined(), "checkpoint: output ", i, " of the function is undefined");
    for (const Tensor& x : inputs)
      LOOM_CHECK(!x.defined() || !outputs[i].shares_storage(x), "checkpoint: output ", i,
                 " shares memory with an input; return a computed tensor (e.g. clone() it)");
    node->add_output_meta(outputs[i]);
    if (is_floating(outputs[i].dtype())) set_history(outputs[i], node, static_cast<uint32_t>(i));
  }
  return outputs;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input) {
  return checkpoint([fn](const std::vector<Tensor>& x) { return std::vector<Tensor>{fn(x[0])}; }, {input})[0];
}

}  // namespace loom::autograd
