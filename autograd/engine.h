/*
 * The backward pass: loom::autograd::backward (what Tensor::backward calls) and
 * loom::autograd::grad (gradients returned instead of accumulated).
 */
#pragma once

#include <optional>
#include <vector>

#include "core/tensor.h"

namespace loom::autograd {

// Accumulates d(sum_i <outputs[i], grad_outputs[i]>)/d(leaf) into every leaf's grad().
// grad_outputs[i] may be undefined for a one-element output (then 1). retain_graph defaults to
// create_graph.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              std::optional<bool> retain_graph = {}, bool create_graph = false);

// The gradients of the outputs with respect to `inputs` (one per input), leaving every grad()
// untouched. Only the part of the graph between them runs. An input the outputs do not
// depend on is an error unless allow_unused (then its gradient is undefined).
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, std::optional<bool> retain_graph = {},
                         bool create_graph = false, bool allow_unused = false);

}  // namespace loom::autograd
