/*
 * 2-D convolution and pooling on NCHW tensors, through oneDNN where it is faster, with the
 * backward functions that autograd uses. Output size per spatial dim:
 *   floor((in + 2*padding - dilation*(k-1) - 1) / stride) + 1   (ceil with ceil_mode)
 * Throws loom::Error naming the op and the shapes on a channel/group mismatch or an output
 * size below 1.
 */
#pragma once

#include <array>
#include <tuple>

#include "core/tensor.h"
#include "ops/kernel_types.h"

namespace loom {

// x [N, Cin, H, W], weight [Cout, Cin/groups, kh, kw], bias undefined or [Cout] -> [N, Cout, Ho, Wo]
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
              std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);
Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, IntArrayRef input_sizes,
                             const Conv2dParams& params);
// grad_weight, and grad_bias when with_bias (else undefined)
std::tuple<Tensor, Tensor> conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, IntArrayRef weight_sizes,
                                                  bool with_bias, const Conv2dParams& params);

// 1-D convolution (torch.nn.functional.conv1d), as conv2d over [N, C, 1, L]: x [N, Cin, L] (or
// unbatched [Cin, L]), weight [Cout, Cin/groups, k], bias undefined or [Cout] -> [N, Cout, Lo].
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, int64_t stride = 1, int64_t padding = 0,
              int64_t dilation = 1, int64_t groups = 1);

// Transposed convolution (torch.nn.functional.conv_transpose2d), the adjoint of conv2d with the
// same parameters, computed by conv2d's input-gradient kernel: x [N, Cin, H, W] (or unbatched
// [Cin, H, W]), weight [Cin, Cout/groups, kh, kw], bias undefined or [Cout] -> [N, Cout, Ho, Wo],
// Ho = (H - 1) stride - 2 padding + dilation (kh - 1) + output_padding + 1. Throws if an
// output_padding is not smaller than its stride (torch also allows one below the dilation), or
// for conv2d's reasons.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
                        std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
                        std::array<int64_t, 2> output_padding = {0, 0}, int64_t groups = 1,
                        std::array<int64_t, 2> dilation = {1, 1});
// The same in 1-D: x [N, Cin, L] (or [Cin, L]), weight [Cin, Cout/groups, k] -> [N, Cout, Lo].
Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, int64_t stride = 1,
                        int64_t padding = 0, int64_t output_padding = 0, int64_t groups = 1, int64_t dilation = 1);

// stride defaults to kernel_size (as torch) when left empty ({0, 0})
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride = {0, 0},
                  std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> dilation = {1, 1},
                  bool ceil_mode = false);
// values and int64 indices (flat index within each H*W plane)
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dParams& params);
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, IntArrayRef input_sizes,
                           const Pool2dParams& params);
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride = {0, 0},
                  std::array<int64_t, 2> padding = {0, 0}, bool ceil_mode = false, bool count_include_pad = true);
Tensor avg_pool2d_backward(const Tensor& grad_out, IntArrayRef input_sizes, const Pool2dParams& params);
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, IntArrayRef input_sizes);

// The Pool2dParams that max_pool2d/avg_pool2d build from their arguments (stride {0,0} -> kernel).
Pool2dParams make_pool2d_params(std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride,
                                std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation, bool ceil_mode,
                                bool count_include_pad);

}  // namespace loom
