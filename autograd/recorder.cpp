/*
 * Building the graph (see recorder.h and ops/autograd_hook.h).
 *
 * record(): one node per recorded op, edges to where its inputs' gradients go, output
 * tensors pointing back at it.
 * record_copy_(): an in-place op ends as "dst.copy_(result)". dst's old value gets no
 * gradient from the new one, so dst's history is simply replaced — unless dst is a view: then
 * its base changed too, and the base's history becomes CopySlices (the base's old gradient
 * everywhere outside the view's elements, the source's gradient inside them), and the view is
 * re-expressed as an as_strided view of the new base.
 */
#include "autograd/recorder.h"

#include <mutex>

#include "autograd/autograd_meta.h"
#include "autograd/formula.h"
#include "ops/autograd_hook.h"
#include "ops/ops.h"

namespace loom::autograd {

namespace {

// An op with no formula: recording it is fine, differentiating through it is an error.
class NotDifferentiable final : public OpNodeBase {
 public:
  using OpNodeBase::OpNodeBase;
  Grads apply(Grads&&) override {
    LOOM_FAIL("autograd: the derivative of ", op_name(op()), " is not implemented (it was reached in backward, "
              "e.g. by a second derivative through it or by a gradient flowing into its inputs)");
  }
};

bool records_history(const Tensor& t) { return t.defined() && is_floating(t.dtype()); }

void check_not_leaf_requiring_grad(const Tensor& t, std::string_view what) {
  AutogradMeta* meta = meta_of(t);
  LOOM_CHECK(!(meta && meta->requires_grad_ && !meta->grad_fn_), "autograd: ", what, " that requires grad (shape ",
             t.sizes(), ") is being used in an in-place operation; do it under NoGradGuard or on a clone()");
}

void record(Op op, std::span<const Tensor> inputs, std::span<const Tensor> outputs, const void* attrs) {
  bool any_output = false;
  for (const Tensor& out : outputs) {
    for (const Tensor& in : inputs)
      if (in.defined() && out.is_same(in)) return;  // an identity (e.g. to() of the same dtype): nothing to record
    any_output |= records_history(out);
  }
  if (!any_output) return;

  const FormulaEntry& entry = formula_entry(op);
  std::shared_ptr<OpNodeBase> node =
      entry.make_node ? entry.make_node(op, attrs, entry.formula) : std::make_shared<NotDifferentiable>(op);
  node->reserve(inputs.size(), outputs.size());
  for (const Tensor& in : inputs) node->add_input(gradient_edge(in), in);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const bool saved_only = (entry.save.saved_only_outputs >> i & 1) != 0;
    node->add_output_meta(outputs[i], !saved_only);
    if (!saved_only && records_history(outputs[i])) set_history(outputs[i], node, static_cast<uint32_t>(i));
  }
  if (entry.save.inputs || entry.save.outputs) node->save(inputs, outputs, entry.save);
}

// The view's history becomes as_strided(base) with its own geometry.
void rebuild_view_history(const Tensor& view, const Tensor& base) {
  AsStridedAttrs attrs{DimVector(view.sizes()), DimVector(view.strides()), view.storage_offset(),
                       DimVector(base.strides()), base.storage_offset()};
  Tensor inputs[] = {base};
  Tensor outputs[] = {view};
  record(Op::as_strided, inputs, outputs, &attrs);
}

// base.copy_ happened through a view: grad(base_old) = grad(base) outside the view's
// elements, 0 inside; grad(src) = grad(base) at the view's elements.
class CopySlices final : public Node {
 public:
  CopySlices(const Tensor& base, const Tensor& view)
      : base_sizes_(base.sizes()),
        base_strides_(base.strides()),
        base_offset_(base.storage_offset()),
        view_sizes_(view.sizes()),
        view_strides_(view.strides()),
        view_offset_(view.storage_offset()),
        storage_numel_(static_cast<int64_t>(base.storage()->nbytes() / base.element_size())) {}
  std::string name() const override { return "CopySlices"; }

  Grads apply(Grads&& grads) override {
    // The base's gradient laid out like the base in a buffer as large as its storage, so that
    // the view's geometry (storage offsets and strides) addresses the same elements in it.
    Tensor buffer = zeros({storage_numel_}, TensorOptions(grads[0].dtype()).device(grads[0].device()));
    Tensor grad_base = as_strided(buffer, base_sizes_, base_strides_, base_offset_);
    grad_base.copy_(grads[0]);
    Tensor grad_view = as_strided(buffer, view_sizes_, view_strides_, view_offset_);
    Tensor grad_src = needs_input_grad(1) ? grad_view.clone() : Tensor();
    grad_view.zero_();
    // Taken again after the write: under create_graph the earlier view's history predates it.
    if (needs_input_grad(0)) grad_base = as_strided(buffer, base_sizes_, base_strides_, base_offset_);
    return {needs_input_grad(0) ? grad_base : Tensor(), grad_src};
  }

 private:
  DimVector base_sizes_, base_strides_;
  int64_t base_offset_;
  DimVector view_sizes_, view_strides_;
  int64_t view_offset_;
  int64_t storage_numel_;
};

void record_copy_(const Tensor& dst, const Tensor& src) {
  if (!dst.is_view()) {
    check_not_leaf_requiring_grad(dst, "a leaf tensor");
    auto node = std::make_shared<OpNode<NoAttrs>>(Op::copy, NoAttrs{},
                                                  reinterpret_cast<Formula<NoAttrs>>(formula_entry(Op::copy).formula));
    node->add_input(Edge{}, dst);  // the old value is overwritten: no gradient reaches it
    node->add_input(gradient_edge(src), src);
    node->add_output_meta(dst);
    set_history(dst, node, 0);
    return;
  }
  Tensor base = dst.base();
  check_not_leaf_requiring_grad(base, "a view of a leaf tensor");
  auto node = std::make_shared<CopySlices>(base, dst);
  node->add_input(gradient_edge(base), base);
  node->add_input(gradient_edge(src), src);
  node->add_output_meta(base);
  set_history(base, node, 0);
  rebuild_view_history(dst, base);
}

bool saves_input(Op op, size_t index) { return formula_entry(op).save.inputs >> index & 1; }

const GradRecorder kRecorder{&record, &record_copy_, &saves_input};

}  // namespace

void refresh_view_history(const Tensor& view) {
  Tensor base = view.base();
  if (!base.requires_grad() || !GradMode::is_enabled()) return;
  rebuild_view_history(view, base);
  // Recorded against the current version: no further rebuild until the next write.
  meta_of(view)->version_at_history_ = view.version();
}

void install_autograd() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_formulas();
    set_grad_recorder(&kRecorder);
  });
}

}  // namespace loom::autograd
