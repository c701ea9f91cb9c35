/* Per-tensor autograd state (see autograd_meta.h) and the leaf accumulator (accumulate_grad.h). */
#include "autograd/autograd_meta.h"

#include <limits>

#include "autograd/accumulate_grad.h"
#include "autograd/recorder.h"
#include "ops/ops.h"

namespace loom::autograd {

AutogradMeta& materialize_meta(const Tensor& t) {
  LOOM_CHECK(t.defined(), "autograd: operation on an undefined tensor");
  if (!t.impl()->autograd_meta()) t.impl()->set_autograd_meta(std::make_unique<AutogradMeta>());
  return *static_cast<AutogradMeta*>(t.impl()->autograd_meta());
}

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  AutogradMeta& meta = materialize_meta(leaf);
  std::shared_ptr<Node> acc = meta.grad_accumulator_.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(leaf);
    meta.grad_accumulator_ = acc;
  }
  return acc;
}

Edge gradient_edge(const Tensor& t) {
  AutogradMeta* meta = meta_of(t);
  if (!meta) return {};
  if (meta->grad_fn_ && t.is_view() && meta->version_at_history_ != t.version()) refresh_view_history(t);
  if (meta->grad_fn_) return {meta->grad_fn_, meta->output_nr_};
  if (meta->requires_grad_) return {grad_accumulator(t), 0};
  return {};
}

void set_history(const Tensor& output, std::shared_ptr<Node> node, uint32_t output_nr) {
  AutogradMeta& meta = materialize_meta(output);
  meta.grad_fn_ = std::move(node);
  meta.output_nr_ = output_nr;
  meta.version_at_history_ = output.version();
  meta.requires_grad_ = false;
}

// ---- AccumulateGrad ---------------------------------------------------------------------------

AccumulateGrad::AccumulateGrad(Tensor leaf) : leaf_(std::move(leaf)) {
  add_output_meta(leaf_);
  // Accumulators run as soon as they are ready, before any other ready node: the gradient is
  // final the moment the last contribution arrives, and DDP wants to hear of it then.
  set_sequence_nr(std::numeric_limits<uint64_t>::max());
}

Tensor AccumulateGrad::run_leaf_hooks(Tensor grad) const {
  if (AutogradMeta* meta = meta_of(leaf_)) {
    for (const auto& [handle, hook] : meta->leaf_hooks_) {
      Tensor replaced = hook(grad);
      if (replaced.defined()) grad = std::move(replaced);
    }
  }
  return grad;
}

Grads AccumulateGrad::apply(Grads&& grads) {
  Tensor grad = run_leaf_hooks(std::move(grads[0]));
  AutogradMeta& meta = materialize_meta(leaf_);
  if (!meta.grad_.defined()) {
    // The engine's gradient may alias another tensor (a hook's input, a broadcast view):
    // a leaf must own its .grad, so it is copied unless it is a fresh contiguous result
    // nobody else holds. Under create_graph the gradient keeps its history.
    if (GradMode::is_enabled())
      meta.grad_ = grad;
    else
      meta.grad_ = grad.is_view() || !grad.is_contiguous() || grad.impl_ptr().use_count() > 1 ? grad.clone() : grad;
  } else if (GradMode::is_enabled()) {
    meta.grad_ = meta.grad_ + grad;  // differentiable accumulation (create_graph)
  } else {
    meta.grad_.add_(grad);
  }
  for (const auto& [handle, hook] : meta.post_accumulate_hooks_) hook(leaf_);
  return {};
}

}  // namespace loom::autograd
