/* Saved tensors with version checks (see saved_tensor.h). */
#include "autograd/saved_tensor.h"

#include "autograd/autograd_meta.h"

namespace loom::autograd {


SavedTensor::SavedTensor(const Tensor& t, bool is_output) : is_output_(is_output), was_defined_(t.defined()) {
  if (!was_defined_) return;
  saved_version_ = t.version();
  if (is_output) {
    data_ = alias(t);
    if (AutogradMeta* meta = meta_of(t)) {
      grad_fn_ = meta->grad_fn_;
      output_nr_ = meta->output_nr_;
    }
  } else {
    data_ = t;
  }
}

Tensor SavedTensor::unpack(const Node& owner) const {
  if (!was_defined_) return {};
  LOOM_CHECK(!released_, "autograd: trying to backward through the graph a second time (", owner.name(),
             " has already freed its saved tensors); pass retain_graph=true to the first backward if you need "
             "to backward twice");
  LOOM_CHECK(data_.version() == saved_version_, "autograd: one of the tensors needed for gradient computation has "
             "been modified by an inplace operation: a ", data_.dtype(), " tensor of shape ", data_.sizes(),
             " saved by ", owner.name(), " is at version ", data_.version(), ", expected version ",
             saved_version_, "; compute it out of place or clone() it before modifying it");
  if (!is_output_) return data_;
  std::shared_ptr<Node> grad_fn = grad_fn_.lock();
  if (!grad_fn || !GradMode::is_enabled()) return data_;
  // Under create_graph the output must be connected to its node again.
  Tensor restored = alias(data_);
  set_history(restored, std::move(grad_fn), output_nr_);
  return restored;
}

void SavedTensor::release() {
  data_ = Tensor();
  released_ = was_defined_;
}

}  // namespace loom::autograd
