/*
 * View ops: new sizes/strides/offset over the same storage; no data moves. Each throws
 * loom::Error naming the op and the shapes when the request is impossible.
 * The Tensor methods of the same names forward here.
 */
#pragma once

#include <optional>
#include <vector>

#include "core/tensor.h"

namespace loom {

Tensor as_strided(const Tensor& x, IntArrayRef sizes, IntArrayRef strides,
                  std::optional<int64_t> storage_offset = {});
// One size may be -1 (inferred). Throws when x's strides cannot express the new shape
// without a copy (use reshape).
Tensor view(const Tensor& x, IntArrayRef sizes);
// view when possible, else contiguous copy.
Tensor reshape(const Tensor& x, IntArrayRef sizes);
Tensor permute(const Tensor& x, IntArrayRef dims);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor t(const Tensor& x);
Tensor slice(const Tensor& x, int64_t dim, std::optional<int64_t> start = {}, std::optional<int64_t> end = {},
             int64_t step = 1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
// sizes may have more leading dims than x; -1 keeps x's size; only size-1 dims can grow.
Tensor expand(const Tensor& x, IntArrayRef sizes);
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor unflatten(const Tensor& x, int64_t dim, IntArrayRef sizes);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split_with_sizes(const Tensor& x, IntArrayRef split_sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
// The shapes of x and y broadcast together, as expand views.
std::vector<Tensor> broadcast_tensors(const std::vector<Tensor>& tensors);

}  // namespace loom
