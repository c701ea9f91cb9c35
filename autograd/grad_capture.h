/*
 * What autograd::grad adds to a backward pass: the gradients arriving at the inputs' nodes are
 * captured and returned instead of flowing on (every leaf's grad() stays untouched), and only the
 * nodes on a path from the outputs to an input run; the rest of the graph is pruned.
 */
#pragma once

#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "autograd/node.h"

namespace loom::autograd {

class GradCapture {
 public:
  explicit GradCapture(size_t num_inputs) : captured_(num_inputs) {}

  // The gradient arriving at (edge.node, edge.input_nr) becomes result()[index].
  void capture(const Edge& edge, size_t index) { captures_[edge.node.get()].push_back({edge.input_nr, index}); }

  // Marks the nodes with a path from `roots` to a captured node; once, before the pass runs.
  void mark_needed(const std::vector<Edge>& roots);

  // Keeps what `grads` (a node's incoming gradients, after its pre-hooks) holds for the inputs
  // captured at `node`, and says whether the node must still run its formula: only if it leads to
  // a captured node and is not a leaf's accumulator (which would write the leaf's grad()).
  bool take(Node& node, const Grads& grads);

  // Whether `node` leads to a captured node (after mark_needed).
  bool needed(Node* node) const { return needed_.count(node) > 0; }

  // One gradient per input, undefined where none arrived.
  std::vector<Tensor> result() { return std::move(captured_); }

 private:
  std::unordered_map<Node*, std::vector<std::pair<uint32_t, size_t>>> captures_;
  std::unordered_set<Node*> needed_;
  std::vector<Tensor> captured_;
};

}  // namespace loom::autograd
