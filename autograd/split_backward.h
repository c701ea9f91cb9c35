/*
 * A backward split in two, for zero-bubble pipeline schedules (Qi et al., "Zero Bubble Pipeline
 * Parallelism", ICLR 2024; distributed/pipeline/schedule.h). A pipeline stage's backward owes
 * two things: the gradient of the stage's input, which the stage before it waits for, and the
 * gradients of its parameters, which nobody needs until the optimizer step. The first pass (B)
 * computes only the former, and keeps for each node that also owes a parameter's gradient the
 * gradients it received; the second (W), run any time later, computes the rest from them:
 *
 *   out = W2·relu(W1·x)        B: g_out ─► Linear2 ─► ReLU ─► Linear1 ─► g_x   (dx halves only;
 *                                          │ keeps g_out       │ keeps g_h        kept: 2 nodes)
 *                              W: Linear2(g_out) ─► dW2, db2    Linear1(g_h) ─► dW1, db1
 *
 * For a matmul each half is one matmul, so B + W cost what the unsplit backward does.
 */
#pragma once

#include <memory>
#include <vector>

#include "autograd/node.h"

namespace loom::autograd {

// The weight halves that a split backward's first pass left for later: per node, the gradients
// it received and which of its inputs' gradients are still owed.
struct DeferredWeightGrads {
  struct Entry {
    std::shared_ptr<Node> node;
    Grads grads;
    std::vector<bool> owed;  // by input
  };
  std::vector<Entry> entries;
};

// B: the gradients of the outputs with respect to `inputs`, as grad() does, but each node
// computes only its inputs' gradients that lead to `inputs`; the others (the parameters') go to
// `deferred`. The nodes that owe nothing free their saved tensors; the deferred ones keep theirs
// for W (the paper's point: W needs less memory than the whole graph). Throws as grad() does.
std::vector<Tensor> grad_deferring_weights(const std::vector<Tensor>& outputs,
                                           const std::vector<Tensor>& inputs,
                                           const std::vector<Tensor>& grad_outputs,
                                           DeferredWeightGrads& deferred);

// W: the owed gradients of every deferred node, then the rest of the graph from them to the
// leaves, accumulated into grad() as backward() does (leaf hooks included). Empties `deferred`
// and frees the saved tensors of the nodes it ran.
void run_deferred_weight_grads(DeferredWeightGrads& deferred);

// While a node of a split backward runs: whether its formula must skip input i's gradient (the
// other pass computes it). Read by GradContext::needs_grad (formula.h).
bool input_grad_skipped(const Node& node, size_t i);

}  // namespace loom::autograd
