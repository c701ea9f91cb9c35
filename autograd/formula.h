/*
 * How gradient formulas are written and registered. A formula is a plain function of the
 * op's recorded context (attributes, saved tensors, input metadata) and the gradients of the
 * op's outputs; it returns one gradient per input (undefined where none is needed), written
 * with forward ops so that create_graph can differentiate it again:
 *
 *   define_formula<Op::mul>(Save{.inputs = 0b11}, [](const GradContext<NoAttrs>& c, const Grads& g) {
 *     return Grads{c.needs_grad(0) ? g[0] * c.input(1) : Tensor(),
 *                  c.needs_grad(1) ? g[0] * c.input(0) : Tensor()};
 *   });
 *
 * A returned gradient may have a broadcast shape or the compute dtype: the engine sums it
 * down to the input's shape and converts it to the input's dtype (engine.cpp).
 * The formulas themselves are in autograd/formulas/, one file per op family.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "autograd/saved_tensor.h"
#include "autograd/split_backward.h"
#include "core/object_pool.h"
#include "ops/dispatch.h"

namespace loom::autograd {

// Which inputs and outputs a formula reads (bit i = input/output i); nothing else is kept
// alive by the graph.
struct Save {
  uint32_t inputs = 0;
  uint32_t outputs = 0;
  // Outputs the op returns only so that backward can read them (a pre-activation, a hidden
  // layer): they get no history, so no gradient flows into them and none is made for them.
  uint32_t saved_only_outputs = 0;
};

// The node of one recorded op, without its attribute type.
class OpNodeBase : public Node {
 public:
  explicit OpNodeBase(Op op) : op_(op) {}
  std::string name() const override;
  Op op() const { return op_; }
  void save(std::span<const Tensor> inputs, std::span<const Tensor> outputs, Save spec);
  void release_saved() override;
  void collect_saved(std::vector<Tensor>& out) const override;
  void move_saved_out(std::vector<Tensor>& out) override;

  Tensor saved_input(size_t i) const;
  Tensor saved_output(size_t i) const;

 private:
  Op op_;
  Save spec_;
  PoolVector<SavedTensor> saved_inputs_, saved_outputs_;
};

template <class Attrs>
class OpNode;

// What a formula sees of its node.
template <class Attrs>
class GradContext {
 public:
  explicit GradContext(const OpNode<Attrs>& node) : node_(node) {}
  const Attrs& attrs() const;
  Tensor input(size_t i) const { return node_base().saved_input(i); }    // needs Save::inputs bit i
  Tensor output(size_t i) const { return node_base().saved_output(i); }  // needs Save::outputs bit i
  const TensorMeta& input_meta(size_t i) const { return node_base().input_meta()[i]; }
  IntArrayRef input_sizes(size_t i) const { return input_meta(i).sizes; }
  // False also for the gradients that the other pass of a split backward computes.
  bool needs_grad(size_t i) const {
    return node_base().needs_input_grad(i) && !input_grad_skipped(node_base(), i);
  }
  size_t num_inputs() const { return node_base().num_inputs(); }

 private:
  const OpNodeBase& node_base() const;
  const OpNode<Attrs>& node_;
};

template <class Attrs>
using Formula = Grads (*)(const GradContext<Attrs>&, const Grads&);

template <class Attrs>
class OpNode final : public OpNodeBase {
 public:
  OpNode(Op op, const Attrs& attrs, Formula<Attrs> formula) : OpNodeBase(op), attrs_(attrs), formula_(formula) {}
  Grads apply(Grads&& grads) override { return formula_(GradContext<Attrs>(*this), grads); }
  const Attrs& attrs() const { return attrs_; }

 private:
  Attrs attrs_;
  Formula<Attrs> formula_;
};

template <class Attrs>
const Attrs& GradContext<Attrs>::attrs() const {
  return node_.attrs();
}
template <class Attrs>
const OpNodeBase& GradContext<Attrs>::node_base() const {
  return node_;
}

// ---- the formula table ------------------------------------------------------------------------

using RawFormula = void (*)();

struct FormulaEntry {
  std::shared_ptr<OpNodeBase> (*make_node)(Op op, const void* attrs, RawFormula formula) = nullptr;
  RawFormula formula = nullptr;
  Save save;
};

const FormulaEntry& formula_entry(Op op);
void set_formula_entry(Op op, FormulaEntry entry);

template <class Attrs>
std::shared_ptr<OpNodeBase> make_op_node(Op op, const void* attrs, RawFormula formula) {
  return std::allocate_shared<OpNode<Attrs>>(PoolAllocator<OpNode<Attrs>>(), op, *static_cast<const Attrs*>(attrs),
                                             reinterpret_cast<Formula<Attrs>>(formula));
}

template <Op op>
void define_formula(Save save, Formula<typename OpTraits<op>::Attrs> formula) {
  using Attrs = typename OpTraits<op>::Attrs;
  set_formula_entry(op, {&make_op_node<Attrs>, reinterpret_cast<RawFormula>(formula), save});
}

// The name of op's node: max_pool2d -> "MaxPool2dBackward".
std::string backward_name(Op op);

// Every formula, registered once (autograd/formulas/formulas.cpp calls each family's).
void register_formulas();
bool has_formula(Op op);

}  // namespace loom::autograd
