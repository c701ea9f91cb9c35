/*
 * The gradient steps of a model split over a DeviceMesh that DDP and nn::clip_grad_norm_ do not
 * cover: when each rank holds a piece of the model (tensor or pipeline parallel), its gradients
 * are averaged over the data group after the step's backwards, and the gradient norm that
 * clipping needs is that of the whole model, summed from the pieces over the tensor and pipeline
 * groups. docs/parallelism.md shows where each one sits in a training step.
 *
 *   step:  backward(s) → sum_tied_gradient → average_gradients (data) → clip_grad_norm_across
 *          (tensor, pipeline) → optimizer.step()
 */
#pragma once

#include <vector>

#include "core/tensor.h"
#include "distributed/process_group.h"

namespace loom::distributed {

// Replaces the gradient of every parameter in `params` by its mean over `group` (the data
// group: every rank of it holds the same pieces). One flat all-reduce for all of them; a
// parameter without a gradient adds zeros and is left without one. Collective over `group`.
void average_gradients(const std::vector<Tensor>& params, ProcessGroup& group);

// clip_grad_norm_ over a model split over ranks. The norm is sqrt(Σ g²) over the gradients of
// `counted` (this rank's share: a parameter that several ranks hold whole, such as a replicated
// bias or a tied copy, is counted by one of them only), summed over each of `groups` in turn
// (e.g. the tensor group, then the pipeline group). When it exceeds `max_norm`, every gradient in
// `params` is scaled by max_norm / (norm + 1e-6), as nn::clip_grad_norm_ does. Returns the norm,
// the same on every rank. Collective over every group in `groups`.
double clip_grad_norm_across(const std::vector<Tensor>& params, const std::vector<Tensor>& counted,
                             double max_norm, const std::vector<ProcessGroup*>& groups);

// A weight that two pipeline stages share (e.g. a GPT's token embedding, used as the output head
// on the last stage): the gradient of each copy becomes the sum of both copies' gradients, so that
// the copies stay equal after the step. `holds_copy`: whether this rank's stage uses `weight`;
// the other stages add zeros. Collective over `pipeline_group`.
void sum_tied_gradient(const Tensor& weight, bool holds_copy, ProcessGroup& pipeline_group);

}  // namespace loom::distributed
