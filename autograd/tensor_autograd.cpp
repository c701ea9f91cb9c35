/* The autograd methods of loom::Tensor (declared in core/tensor.h). */
#include "autograd/accumulate_grad.h"
#include "autograd/autograd_meta.h"
#include "autograd/engine.h"
#include "autograd/recorder.h"

namespace loom {

using autograd::AutogradMeta;
using autograd::materialize_meta;
using autograd::meta_of;

Tensor& Tensor::requires_grad_(bool requires_grad) {
  LOOM_CHECK(defined(), "requires_grad_: undefined tensor");
  AutogradMeta* meta = meta_of(*this);
  LOOM_CHECK(!(meta && meta->grad_fn_) || requires_grad, "requires_grad_(false): only leaves can stop requiring "
             "grad; this tensor is the result of ", meta ? meta->grad_fn_->name() : "", " (use detach())");
  if (requires_grad) {
    LOOM_CHECK(is_floating(dtype()), "requires_grad_: only floating-point tensors can require gradients, got ",
               dtype(), " with shape ", sizes());
    autograd::install_autograd();
  }
  if (meta && meta->grad_fn_) return *this;  // a non-leaf requires grad already
  if (requires_grad || meta) materialize_meta(*this).requires_grad_ = requires_grad;
  return *this;
}

const Tensor& Tensor::grad() const {
  static const Tensor undefined;
  AutogradMeta* meta = meta_of(*this);
  return meta ? meta->grad_ : undefined;
}

Tensor& Tensor::mutable_grad() { return materialize_meta(*this).grad_; }

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  AutogradMeta* meta = meta_of(*this);
  return meta ? meta->grad_fn_ : nullptr;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

uint32_t Tensor::output_nr() const {
  AutogradMeta* meta = meta_of(*this);
  return meta ? meta->output_nr_ : 0;
}

Tensor Tensor::detach() const {
  LOOM_CHECK(defined(), "detach: undefined tensor");
  return alias(*this);
}

Tensor& Tensor::detach_() {
  if (AutogradMeta* meta = meta_of(*this)) {
    LOOM_CHECK(!is_view() || !meta->grad_fn_, "detach_: cannot detach a view in place; use detach()");
    meta->grad_fn_.reset();
    meta->output_nr_ = 0;
    meta->requires_grad_ = false;
  }
  return *this;
}

void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph, bool create_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph, create_graph);
}

void Tensor::retain_grad() const {
  AutogradMeta* meta = meta_of(*this);
  LOOM_CHECK(meta && meta->requires_grad(), "retain_grad: the tensor (shape ", sizes(), ") does not require grad");
  if (!meta->grad_fn_ || meta->retains_grad_) return;  // leaves keep their gradient anyway
  // The hook holds the tensor weakly: the tensor owns (through grad_fn) the node holding the hook.
  std::weak_ptr<TensorImpl> weak = impl_ptr();
  meta->retain_grad_hook_ = meta->grad_fn_->add_pre_hook(meta->output_nr_, [weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      Tensor& grad = materialize_meta(Tensor(impl)).grad_;
      grad = grad.defined() ? grad + g : (GradMode::is_enabled() ? g : g.clone());
    }
    return Tensor();
  });
  meta->retains_grad_ = true;
}

bool Tensor::retains_grad() const {
  AutogradMeta* meta = meta_of(*this);
  return meta && meta->retains_grad_;
}

uint64_t Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  AutogradMeta* meta = meta_of(*this);
  LOOM_CHECK(meta && meta->requires_grad(), "register_hook: cannot register a hook on a tensor that does not "
             "require grad (shape ", sizes(), ")");
  if (meta->grad_fn_) return meta->grad_fn_->add_pre_hook(meta->output_nr_, std::move(hook));
  uint64_t handle = autograd::next_hook_handle();
  meta->leaf_hooks_.emplace_back(handle, std::move(hook));
  return handle;
}

void Tensor::remove_hook(uint64_t handle) const {
  AutogradMeta* meta = meta_of(*this);
  if (!meta) return;
  if (meta->grad_fn_ && meta->grad_fn_->remove_pre_hook(handle)) return;
  std::erase_if(meta->leaf_hooks_, [&](const auto& h) { return h.first == handle; });
  std::erase_if(meta->post_accumulate_hooks_, [&](const auto& h) { return h.first == handle; });
}

uint64_t Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  AutogradMeta* meta = meta_of(*this);
  LOOM_CHECK(meta && meta->requires_grad_ && !meta->grad_fn_, "register_post_accumulate_grad_hook: only leaves "
             "that require grad accumulate gradients (shape ", sizes(), ")");
  uint64_t handle = autograd::next_hook_handle();
  meta->post_accumulate_hooks_.emplace_back(handle, std::move(hook));
  return handle;
}

}  // namespace loom
