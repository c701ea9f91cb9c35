/*
 * Channels-last activations, shared by the ops that keep a network's format (conv_pool.cpp,
 * norm_ops.cpp): a 4-D tensor reaches their kernels either contiguous (NCHW) or channels_last
 * (NCHW sizes with NHWC strides, as PyTorch's memory_format=channels_last), and their outputs
 * follow the input's format, so a channels_last network stays channels_last without reorders.
 */
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"

namespace loom {

// NCHW sizes with NHWC strides (ignoring size-1 dims), and not plain contiguous.
bool is_channels_last(const Tensor& t);

// An uninitialised [N, C, H, W] tensor, laid out channels_last when asked.
Tensor empty_4d(IntArrayRef sizes, TensorOptions options, bool channels_last);

// t in the requested format: itself when it already is, else a copy.
Tensor in_format(const Tensor& t, bool channels_last);

// For a kernel that computes in NCHW order only: when `out` is not contiguous (channels_last),
// compute(out', inputs') runs on contiguous copies and out' is copied into out; otherwise
// compute(out, inputs) runs as given. A fallback: the copies cost more than the kernel, so a
// backend runs channels_last natively where it can (the CPU's NHWC batch norm, cuDNN's).
void in_nchw_order(const Tensor& out, const std::vector<Tensor>& inputs,
                   const std::function<void(const Tensor&, const std::vector<Tensor>&)>& compute);

}  // namespace loom
