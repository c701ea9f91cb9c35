/*
 * Gradient clipping (torch.nn.utils.clip_grad_norm_ / clip_grad_value_): keeps one bad batch
 * from throwing the parameters far away. Call it after backward() — after the last
 * micro-batch when accumulating gradients — and before the optimizer's step().
 *
 *   loss.backward();
 *   double norm = nn::clip_grad_norm_(model.parameters(), 1.0);
 *   opt.step();
 */
#pragma once

#include <vector>

#include "core/tensor.h"

namespace loom::nn {

// The norm of all the parameters' gradients taken together, as if they were concatenated into
// one vector: (sum over every element x of every grad of |x|^norm_type)^(1 / norm_type), or
// max |x| for norm_type = infinity. When it exceeds max_norm, every gradient is multiplied by
// max_norm / (norm + 1e-6) in place (torch's formula; a NaN norm scales them to NaN, as in
// torch). Parameters without a gradient are skipped; with none, returns 0. Returns the norm
// before clipping.
//
// Contiguous gradients are read by foreach_norm_reduce and scaled by foreach_mul_
// (ops/optim_ops.h), one call per device: on the CPU one parallel pass each, summed in float64
// per fixed block and then over blocks in order, so the norm does not depend on the thread
// count; on CUDA a few launches, and when every gradient is on one GPU the clip factor stays on
// the device and the returned norm is the only value read back. Other gradients go through
// tensor ops.
// Throws loom::Error for max_norm < 0, norm_type not > 0 (infinity allowed), a gradient whose
// dtype is not float32/float64, or — with error_if_nonfinite — a NaN or infinite norm (the
// gradients are then left unchanged).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// The same clipping, returning the norm as a float64 0-dim tensor on the gradients' device
// without reading it back, so that it can run inside a CUDA-graph capture (core/cuda_graph.h)
// and each replay clips with the norm of its own gradients, and so that an eager step need not
// wait for the GPU (torch's clip_grad_norm_ returns a tensor too). Every gradient must be on one
// device (non-contiguous ones go through tensor ops there); throws loom::Error naming the
// parameter otherwise, and for the arguments clip_grad_norm_ refuses. With no gradient, returns
// undefined.
Tensor clip_grad_norm_on_device_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

// Clamps every element of every parameter's gradient to [-clip_value, clip_value] in place
// (NaN stays NaN). Parameters without a gradient are skipped. Throws loom::Error for
// clip_value < 0 or a gradient whose dtype is not float32/float64.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace loom::nn
