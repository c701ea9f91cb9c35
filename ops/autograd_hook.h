/*
 * The seam between the ops layer and autograd. Every differentiable primitive op starts with
 *
 *   if (should_record(x, w)) return recorded<Op::name>({x, w}, attrs, [&] { return name(x, w); });
 *
 * should_record is the cheap test (grad mode on and an input requires grad). recorded runs the
 * op again with grad mode off — so the ops it calls internally (conversions, expands,
 * contiguous copies) are not recorded — and hands inputs, outputs and attributes to the
 * recorder that the autograd layer installs (autograd/recorder.cpp), which builds the graph
 * node. Tensors that require grad exist only once autograd is in the program (requires_grad_
 * lives there), so without it should_record is always false.
 *
 * In-place ops record as "compute out of place, then copy_ into self": record_copy_ rebases
 * self's history (and its base's, for a view) onto the copy. When the op's formula needs
 * self's old value, it computes from inplace_source(op, self), a recorded clone.
 */
#pragma once

#include <initializer_list>
#include <span>

#include "core/grad_mode.h"
#include "core/tensor.h"
#include "ops/copy_ops.h"
#include "ops/dispatch.h"

namespace loom {

// Installed by the autograd layer.
struct GradRecorder {
  // outputs = op(inputs) (undefined inputs stand for absent optional ones); attrs points to
  // an OpTraits<op>::Attrs.
  void (*record)(Op op, std::span<const Tensor> inputs, std::span<const Tensor> outputs, const void* attrs);
  // dst (already overwritten with src) now holds a copy of src: dst's gradient history is
  // replaced, as is its base's when dst is a view.
  void (*record_copy_)(const Tensor& dst, const Tensor& src);
  // Whether op's gradient formula keeps input `index` (an in-place op must then compute from a
  // copy of self: self itself is about to be overwritten).
  bool (*saves_input)(Op op, size_t index);
};

void set_grad_recorder(const GradRecorder* recorder);
const GradRecorder* grad_recorder();

template <class... Tensors>
bool should_record(const Tensors&... inputs) {
  return GradMode::is_enabled() && (inputs.requires_grad() || ...);
}

template <Op op>
void record(std::initializer_list<Tensor> inputs, std::initializer_list<Tensor> outputs,
            const typename OpTraits<op>::Attrs& attrs) {
  grad_recorder()->record(op, std::span<const Tensor>(inputs.begin(), inputs.size()),
                          std::span<const Tensor>(outputs.begin(), outputs.size()), &attrs);
}

// Computes `compute()` (one output) with grad mode off and records it as `op` of `inputs`.
template <Op op, class Compute>
Tensor recorded(std::initializer_list<Tensor> inputs, const typename OpTraits<op>::Attrs& attrs,
                const Compute& compute) {
  Tensor out;
  {
    AutoGradMode below_autograd(false);
    out = compute();
  }
  record<op>(inputs, {out}, attrs);
  return out;
}

// What an in-place op on self computes from when recording: self, or a clone of it when the
// formula saves self (which copy_ will overwrite).
inline Tensor inplace_source(Op op, const Tensor& self, size_t index = 0) {
  return grad_recorder()->saves_input(op, index) ? clone(self) : self;
}

// dst.copy_(src) has just been done with grad mode on and dst or src requiring grad.
inline void record_copy_(const Tensor& dst, const Tensor& src) { grad_recorder()->record_copy_(dst, src); }

}  // namespace loom
