/*
 * The node at the end of every path: adds the incoming gradient into a leaf's grad(). It
 * runs the leaf's tensor hooks first and its post-accumulate hooks after — the latter is
 * where DDP learns that a parameter's gradient is final and may be all-reduced.
 */
#pragma once

#include "autograd/node.h"

namespace loom::autograd {

class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf);
  std::string name() const override { return "AccumulateGrad"; }
  Grads apply(Grads&& grads) override;
  const Tensor& leaf() const { return leaf_; }

  // The gradient after the leaf's hooks (what autograd::grad returns for a leaf input).
  Tensor run_leaf_hooks(Tensor grad) const;

 private:
  Tensor leaf_;
};

}  // namespace loom::autograd
