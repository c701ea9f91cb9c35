/*
 * Joining, indexing and rearranging: cat, stack, index_select, gather, scatter_add,
 * index_add, masked ops, tril/triu, repeat, flip, roll, pad. (split and chunk are views:
 * ops/view_ops.h.) Out-of-range indices throw loom::Error naming the op, the index and the size.
 */
#pragma once

#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "ops/kernel_types.h"

namespace loom {

// Tensors must match in all dims but `dim`; dtypes are promoted.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// x with src added at index along dim (out-of-place; see scatter_add_ for in place)
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
Tensor repeat(const Tensor& x, IntArrayRef repeats);
Tensor flip(const Tensor& x, IntArrayRef dims);
// Elements shifted by shifts[i] along dims[i], wrapping around (torch.roll); without dims, over
// the flattened tensor (one shift). Throws if shifts and dims differ in length.
Tensor roll(const Tensor& x, IntArrayRef shifts, IntArrayRef dims = {});
// pads: (left, right) pairs starting from the last dim, negative ones crop (F.pad); mode
// "constant" (fills with value), "reflect", "replicate" or "circular" (ops/pad_source.h)
Tensor pad(const Tensor& x, IntArrayRef pads, std::string_view mode = "constant", double value = 0.0);
Tensor pad_backward(const Tensor& grad_out, IntArrayRef input_sizes, IntArrayRef pads,
                    std::string_view mode = "constant");

}  // namespace loom
