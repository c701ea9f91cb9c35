/*
 * Looking at a backward graph: its nodes and the bytes its saved tensors hold (how
 * activation checkpointing is measured).
 */
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace loom::autograd {

struct GraphStats {
  size_t nodes = 0;
  size_t saved_bytes = 0;  // each saved storage counted once, over the whole graph
};

// The graph reachable from the roots' grad_fns.
GraphStats graph_stats(const std::vector<Tensor>& roots);

// One line per node, roots first: "MulBackward <- [AccumulateGrad, ExpBackward]".
std::string graph_to_string(const std::vector<Tensor>& roots);

}  // namespace loom::autograd
