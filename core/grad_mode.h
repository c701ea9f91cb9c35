/*
 * Grad mode: whether ops record the autograd graph on this thread (torch's GradMode). It lives
 * in core because the ops layer reads it on every call, before autograd is involved at all;
 * the guards users take (NoGradGuard, InferenceMode, set_grad_enabled) are re-exported by
 * autograd/grad_mode.h.
 */
#pragma once

namespace loom {

struct GradMode {
  static bool is_enabled() { return enabled_; }
  static void set_enabled(bool enabled) { enabled_ = enabled; }
  // Inference mode records nothing either and, unlike no_grad, does not even track which
  // tensors are views of which (cheapest; tensors made in it cannot be modified in place later
  // under autograd and be differentiated correctly).
  static bool is_inference() { return inference_; }
  static void set_inference(bool inference) { inference_ = inference; }

 private:
  static thread_local bool enabled_;
  static thread_local bool inference_;
};

// Sets grad mode for a scope and restores the previous one (torch::AutoGradMode).
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : previous_(GradMode::is_enabled()) { GradMode::set_enabled(enabled); }
  ~AutoGradMode() { GradMode::set_enabled(previous_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool previous_;
};

// No recording inside the scope (torch::NoGradGuard): optimizer steps, evaluation.
class NoGradGuard : public AutoGradMode {
 public:
  NoGradGuard() : AutoGradMode(false) {}
};

// No recording and no view tracking inside the scope (torch::InferenceMode).
class InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true)
      : grad_(!enabled && GradMode::is_enabled()), previous_(GradMode::is_inference()) {
    GradMode::set_inference(enabled);
  }
  ~InferenceMode() { GradMode::set_inference(previous_); }
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;

 private:
  AutoGradMode grad_;
  bool previous_;
};

}  // namespace loom
