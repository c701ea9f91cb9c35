/*
 * Activation checkpointing: trade compute for memory. checkpoint(fn, inputs) runs fn without
 * recording, so none of its intermediate activations are kept; the graph gets one node that
 * holds only the inputs. In backward that node runs fn again — with the random-number state
 * it had the first time, so dropout draws the same mask — and backpropagates through the
 * recomputed graph. Parameters used inside fn receive their gradients during that inner
 * backward (so, as with PyTorch's reentrant checkpoint, use backward(), not autograd::grad,
 * for them).
 *
 *   for (auto& block : blocks) h = checkpoint([&](const auto& x) { return std::vector{block(x[0])}; }, {h})[0];
 */
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"

namespace loom::autograd {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs);

// The same, calling after_backward once the recomputed graph's backward has finished (the
// parameters used inside fn have their gradients then, and the recomputed activations are about
// to go). ZeRO stage 3 (distributed/zero3.h) reduces and frees a layer's gathered parameters there.
std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               std::function<void()> after_backward);

// One input, one output.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input);

}  // namespace loom::autograd
