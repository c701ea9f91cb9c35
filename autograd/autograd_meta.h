/*
 * The autograd state of one tensor, kept in TensorImpl's opaque slot: requires_grad for
 * leaves, grad, grad_fn/output_nr for results of recorded ops, a weak link to the leaf's
 * gradient accumulator, and the hooks that belong to the tensor rather than to a node.
 */
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "autograd/node.h"
#include "core/grad_mode.h"
#include "core/object_pool.h"
#include "core/tensor.h"

namespace loom::autograd {

using PostAccumulateHook = std::function<void(const Tensor&)>;

struct AutogradMeta final : AutogradMetaInterface {
  LOOM_POOL_ALLOCATED
  bool requires_grad_ = false;  // set on leaves by requires_grad_()
  Tensor grad_;
  std::shared_ptr<Node> grad_fn_;
  uint32_t output_nr_ = 0;
  // Storage version when grad_fn_ was set. For a view, a later version means its base was
  // written since (perhaps through another view): its history is then rebuilt from the base's.
  uint64_t version_at_history_ = 0;
  // The accumulator is owned by the graph nodes that feed it; the leaf only refers to it, so a
  // leaf does not keep a dead graph alive (and a new graph reuses a live accumulator).
  std::weak_ptr<Node> grad_accumulator_;
  bool retains_grad_ = false;
  uint64_t retain_grad_hook_ = 0;
  // Leaf hooks (a non-leaf's hooks live on its grad_fn, see Node::add_pre_hook).
  std::vector<std::pair<uint64_t, GradHook>> leaf_hooks_;
  std::vector<std::pair<uint64_t, PostAccumulateHook>> post_accumulate_hooks_;

  bool requires_grad() const override { return requires_grad_ || grad_fn_ != nullptr; }
};

// The tensor's autograd state, or null when it never took part in autograd.
inline AutogradMeta* meta_of(const Tensor& t) {
  return t.defined() ? static_cast<AutogradMeta*>(t.impl()->autograd_meta()) : nullptr;
}
AutogradMeta& materialize_meta(const Tensor& t);

// Where the gradient of `t` must go: its grad_fn (and output index), its leaf accumulator
// (created on first use), or nowhere (invalid edge) when it does not require grad.
Edge gradient_edge(const Tensor& t);

// The leaf's accumulator, created if it has none alive.
std::shared_ptr<Node> grad_accumulator(const Tensor& leaf);

// Gives a fresh output tensor its history (used by the recorder and custom nodes).
void set_history(const Tensor& output, std::shared_ptr<Node> node, uint32_t output_nr);

}  // namespace loom::autograd
