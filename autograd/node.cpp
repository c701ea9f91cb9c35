/* Node bookkeeping (see node.h): sequence numbers, hooks, and a destructor that frees long
 * chains without recursing once per node. */
#include "autograd/node.h"

#include <atomic>

#include "autograd/autograd_meta.h"

namespace loom::autograd {

namespace {
std::atomic<uint64_t> sequence_counter{0};
std::atomic<uint64_t> hook_counter{0};
}  // namespace

uint64_t next_hook_handle() { return ++hook_counter; }

Node::Node() : sequence_nr_(sequence_counter.fetch_add(1, std::memory_order_relaxed)) {}

void Node::release_graph(std::vector<std::shared_ptr<Node>>& stack) {
  for (Edge& e : next_edges_)
    if (e.node && e.node.use_count() == 1) stack.push_back(std::move(e.node));
  next_edges_.clear();
  // A saved input holds its producer through its grad_fn: hand that over too.
  std::vector<Tensor> saved;
  move_saved_out(saved);
  for (Tensor& t : saved) {
    AutogradMeta* meta = t.defined() && t.impl_ptr().use_count() == 1 ? meta_of(t) : nullptr;
    if (meta && meta->grad_fn_ && meta->grad_fn_.use_count() == 1) stack.push_back(std::move(meta->grad_fn_));
  }
}

// A graph of 100k ops is a chain of 100k nodes: freeing it by recursion (each node releasing
// its predecessor in its destructor, directly or through a saved tensor) would overflow the
// stack, so the nodes this one owns alone are freed here, one at a time.
Node::~Node() {
  std::vector<std::shared_ptr<Node>> stack;
  release_graph(stack);  // (derived members are gone already; their predecessors wait on our edges)
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    n->release_graph(stack);
  }
}

void Node::add_input(Edge edge, const Tensor& input) {
  next_edges_.push_back(std::move(edge));
  input_meta_.push_back(input.defined() ? TensorMeta(input) : TensorMeta());
}

uint64_t Node::add_pre_hook(uint32_t output_nr, GradHook hook) {
  uint64_t handle = next_hook_handle();
  pre_hooks_.push_back({handle, output_nr, std::move(hook)});
  return handle;
}

bool Node::remove_pre_hook(uint64_t handle) {
  for (auto it = pre_hooks_.begin(); it != pre_hooks_.end(); ++it)
    if (it->handle == handle) {
      pre_hooks_.erase(it);
      return true;
    }
  return false;
}

Tensor Node::run_pre_hooks(uint32_t output_nr, Tensor grad) const {
  for (const PreHook& h : pre_hooks_) {
    if (h.output_nr != output_nr) continue;
    Tensor replaced = h.fn(grad);
    if (replaced.defined()) grad = std::move(replaced);
  }
  return grad;
}

}  // namespace loom::autograd
