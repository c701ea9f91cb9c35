/*
 * Scans and sorting along one dim, as torch.cumsum / sort / argsort / topk / kthvalue / median.
 *
 * cumsum and sort are primitive ops (kernels on every backend, gradient formulas); the others
 * are composed of sort, so they share its order and its gradient:
 *   - the order is stable: equal elements keep their order along the dim (torch's
 *     stable=True), on every backend, so ties resolve the same way on the CPU and on CUDA;
 *   - NaN is greater than every number (torch's rule): last in ascending order, first in
 *     descending, the largest for topk and kthvalue.
 * A 0-dim input is one line of one element (dim 0 or -1).
 *
 * Throws loom::Error naming the op for an undefined input, a dim out of range, k out of
 * [0, size] (topk) or [1, size] (kthvalue), and an empty line where a value must be picked.
 */
#pragma once

#include <optional>
#include <tuple>

#include "core/random.h"
#include "core/tensor.h"

namespace loom {

// Running sum along dim: [..., n, ...] -> [..., n, ...]. Integer and bool inputs give int64
// (as torch); with `dtype` the input is cast to it first. 16-bit floats accumulate in float32.
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = {});

// (values, int64 indices) of x sorted along dim; indices[..., i, ...] is where values[..., i,
// ...] was in x. Stable.
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);
// The indices of sort(x, dim, descending).
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);

// The k largest (or smallest) elements along dim and their indices: [..., n, ...] ->
// [..., k, ...], in sorted order (largest first for largest=true); ties keep the lower index
// first. `sorted` is accepted for torch's signature; the result is always sorted.
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                                bool sorted = true);

// The k-th smallest element along dim (k from 1) and its index: [..., n, ...] -> [...] (dim
// kept with size 1 when keepdim).
std::tuple<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim = -1, bool keepdim = false);

// The lower median (element (n - 1) / 2 in sorted order), or NaN where the line holds a NaN
// (torch's rule; the index is then that of its first NaN). Without a dim: over all elements,
// 0-dim, value only.
Tensor median(const Tensor& x);
std::tuple<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim = false);

// num_samples category indices per row of `probs` ([C] -> [num_samples], [B, C] -> [B,
// num_samples], int64), drawn with probability proportional to the row's weights (which need
// not sum to 1), as torch.multinomial. Without replacement each category is drawn at most once,
// by the exponential race: the categories with the smallest E_c / w_c, E_c ~ Exp(1), which is
// one topk. With replacement every draw is such a race over fresh clocks. Same generator state,
// same samples on every device. Throws for weights that are negative, infinite or NaN, a row
// that sums to 0, and more samples without replacement than the row has non-zero weights.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false,
                   Generator* generator = nullptr);

}  // namespace loom
