/*
 * The four communication operators of Megatron-LM's tensor parallelism (Shoeybi et al. 2019,
 * section 3), each an autograd function whose backward is the conjugate of its forward:
 *
 *   copy_to_tensor_parallel_region       f:  forward identity      backward all-reduce (sum)
 *   reduce_from_tensor_parallel_region   g:  forward all-reduce    backward identity
 *   gather_from_tensor_parallel_region       forward all-gather    backward split (keep my part)
 *   scatter_to_tensor_parallel_region        forward split         backward all-gather
 *
 * (along the last dimension). Why f's backward is an all-reduce: every rank uses the same input X
 * in its own column shard of the next layer, Y_i = X A_i, so dL/dX = Σ_i dL/dY_i A_i^T is a sum of
 * one term per rank. g is the mirror image: the forward sums the ranks' partial products, and each
 * partial's gradient is the sum's gradient itself.
 *
 * Each collective runs in the tensor-parallel group and waits for it: every rank of the group
 * must call the same operators in the same order (the layers in tensor_parallel/layers.h do).
 */
#pragma once

#include <memory>

#include "core/tensor.h"
#include "distributed/process_group.h"

namespace loom::distributed {

// x: any shape. Throws loom::Error for a null group.
Tensor copy_to_tensor_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group);
Tensor reduce_from_tensor_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group);
// x: [..., n] -> [..., n * size] (rank r's part at columns [r n, (r + 1) n)).
Tensor gather_from_tensor_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group);
// x: [..., n * size] -> [..., n], this rank's columns. Throws unless size divides the last dim.
Tensor scatter_to_tensor_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group);

}  // namespace loom::distributed
