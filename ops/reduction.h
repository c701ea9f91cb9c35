/*
 * Reductions over any set of dims (empty = all), with keepdim. sum/prod of integer or bool
 * tensors give int64 (as PyTorch); mean/var/std/logsumexp/norm need floating inputs.
 * Floating sums accumulate in float32 for 16-bit inputs and pairwise/blocked for accuracy.
 */
#pragma once

#include <optional>
#include <tuple>

#include "core/tensor.h"

namespace loom {

Tensor sum(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false, std::optional<DType> dtype = {});
Tensor mean(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor max(const Tensor& x);  // 0-dim, over all elements
Tensor min(const Tensor& x);
// values and int64 indices along dim (first occurrence on ties, as PyTorch on CPU)
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
// no dim: index into the flattened tensor
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = {}, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = {}, bool keepdim = false);
// sum((x - mean)^2) / (n - correction)
Tensor var(const Tensor& x, IntArrayRef dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, IntArrayRef dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& x, IntArrayRef dims, bool keepdim = false);
// p-norm: p = 2 (default), 1, any positive p, or INFINITY (max |x|)
Tensor norm(const Tensor& x, double p = 2.0, IntArrayRef dims = {}, bool keepdim = false);

}  // namespace loom
