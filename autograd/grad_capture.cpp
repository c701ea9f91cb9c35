/* The capture and pruning of autograd::grad (see grad_capture.h). */
#include "autograd/grad_capture.h"

#include "autograd/accumulate_grad.h"

namespace loom::autograd {

// needed = a captured node, or a node with an edge to a needed one (post-order, iterative).
void GradCapture::mark_needed(const std::vector<Edge>& roots) {
  std::unordered_map<Node*, bool> done;
  std::vector<std::pair<Node*, size_t>> stack;
  for (const Edge& r : roots) {
    if (done.count(r.node.get())) continue;
    stack.push_back({r.node.get(), 0});
    done[r.node.get()] = false;
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      if (next < n->num_inputs()) {
        const Edge& e = n->next_edge(next++);
        if (e.valid() && !done.count(e.node.get())) {
          done[e.node.get()] = false;
          stack.push_back({e.node.get(), 0});
        }
        continue;
      }
      bool needed = captures_.count(n) > 0;
      for (const Edge& e : n->next_edges()) needed = needed || (e.valid() && needed_.count(e.node.get()));
      if (needed) needed_.insert(n);
      done[n] = true;
      stack.pop_back();
    }
  }
}

bool GradCapture::take(Node& node, const Grads& grads) {
  if (auto it = captures_.find(&node); it != captures_.end()) {
    auto* acc = dynamic_cast<AccumulateGrad*>(&node);
    for (auto [input_nr, index] : it->second)
      captured_[index] = acc && grads[input_nr].defined() ? acc->run_leaf_hooks(grads[input_nr]) : grads[input_nr];
  }
  return needed_.count(&node) && !dynamic_cast<AccumulateGrad*>(&node);
}

}  // namespace loom::autograd
