/*
 * cumsum and sort (primitive ops) and what is composed of sort: argsort, topk, kthvalue and
 * median. See ops/sort_ops.h for the order they share.
 *
 * The composites pick their elements out of sort's result with slice, select and gather, so
 * autograd differentiates them through sort's formula (the gradient scattered back to where
 * each element came from) and the views': nothing here needs a formula of its own. Sorting a
 * whole line to pick k elements costs O(n log n) where a selection would cost O(n); lines are
 * sorted in one kernel per tensor on every backend, which keeps ties and NaN the same
 * everywhere.
 */
#include "ops/sort_ops.h"

#include <algorithm>

#include "ops/autograd_hook.h"
#include "ops/copy_ops.h"
#include "ops/elementwise.h"
#include "ops/factories.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "ops/shape_ops.h"
#include "ops/view_ops.h"

namespace loom {

namespace {

// The size of the line along d (normalised); a 0-dim tensor is one line of one element.
int64_t line_size(const Tensor& x, int64_t d) {
  return x.dim() == 0 ? 1 : x.sizes()[static_cast<size_t>(d)];
}

Tensor cumsum_of(const Tensor& x, int64_t d) {
  if (should_record(x)) return recorded<Op::cumsum>({x}, DimAttrs{d}, [&] { return cumsum_of(x, d); });
  Tensor in = contiguous(x);
  Tensor out = empty(x.sizes(), x.options());
  if (out.numel() > 0) get_kernel<Op::cumsum>(x.device())(out, in, d);
  return out;
}

std::tuple<Tensor, Tensor> sort_of(const Tensor& x, int64_t d, bool descending) {
  Tensor in = contiguous(x);
  Tensor values = empty(x.sizes(), x.options());
  Tensor indices = empty(x.sizes(), x.options().dtype(kInt64));
  if (values.numel() > 0) get_kernel<Op::sort>(x.device())(values, indices, in, d, descending);
  return {values, indices};
}

// The element at position `at` (int64, x's shape with dim d of size 1) of each line of the
// ascending sort, and its index: kthvalue's and median's pick.
std::tuple<Tensor, Tensor> pick_sorted(const Tensor& x, int64_t d, const Tensor& at, bool keepdim) {
  auto [values, indices] = sort(x, d, false);
  Tensor value = gather(values, d, at), index = gather(indices, d, at);
  if (keepdim) return {value, index};
  return {squeeze(value, d), squeeze(index, d)};
}

// pick_sorted at the same position p in every line.
std::tuple<Tensor, Tensor> pick_sorted(const Tensor& x, int64_t d, int64_t p, bool keepdim) {
  DimVector shape(x.sizes());
  shape[static_cast<size_t>(d)] = 1;
  return pick_sorted(x, d, full(shape, p, x.options().dtype(kInt64)), keepdim);
}

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  check_defined(x, "cumsum");
  const int64_t d = wrap_dim(dim, x.dim(), "cumsum");
  const DType result = dtype.value_or(is_integral(x.dtype(), true) ? kInt64 : x.dtype());
  LOOM_CHECK(result != kBool, "cumsum: a bool result is not supported (cumsum of bool counts in int64)");
  return cumsum_of(x.dtype() == result ? x : to(x, result), d);
}

std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  check_defined(x, "sort");
  const int64_t d = wrap_dim(dim, x.dim(), "sort");
  if (!should_record(x)) return sort_of(x, d, descending);
  std::tuple<Tensor, Tensor> out;
  {
    AutoGradMode below_autograd(false);
    out = sort_of(x, d, descending);
  }
  // The values get the history; the indices, being integers, none.
  record<Op::sort>({x}, {std::get<0>(out), std::get<1>(out)}, SortAttrs{d, descending});
  return out;
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  check_defined(x, "argsort");
  return std::get<1>(sort_of(x, wrap_dim(dim, x.dim(), "argsort"), descending));
}

std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool /*sorted*/) {
  check_defined(x, "topk");
  const int64_t d = wrap_dim(dim, x.dim(), "topk");
  const int64_t n = line_size(x, d);
  LOOM_CHECK(k >= 0 && k <= n, "topk: k (", k, ") out of range [0, ", n, "] for dim ", d,
             " of input of shape ", x.sizes());
  if (x.dim() == 0) {  // one element: itself (k = 1) or nothing
    auto [values, indices] = topk(reshape(x, {1}), k, 0, largest);
    return k == 1 ? std::tuple<Tensor, Tensor>{reshape(values, {}), reshape(indices, {})}
                  : std::tuple<Tensor, Tensor>{values, indices};
  }
  auto [values, indices] = sort(x, d, largest);
  if (k == n) return {values, indices};
  // Copies, not views: the sorted lines are n long and k is often much smaller.
  return {contiguous(slice(values, d, 0, k)), contiguous(slice(indices, d, 0, k))};
}

std::tuple<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim, bool keepdim) {
  check_defined(x, "kthvalue");
  const int64_t d = wrap_dim(dim, x.dim(), "kthvalue");
  const int64_t n = line_size(x, d);
  LOOM_CHECK(k >= 1 && k <= n, "kthvalue: k (", k, ") out of range [1, ", n, "] for dim ", d,
             " of input of shape ", x.sizes());
  if (x.dim() == 0) return sort(x, d, false);
  return pick_sorted(x, d, k - 1, keepdim);
}

std::tuple<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim) {
  check_defined(x, "median");
  const int64_t d = wrap_dim(dim, x.dim(), "median");
  const int64_t n = line_size(x, d);
  LOOM_CHECK(n > 0, "median: expected a non-empty dim, but dim ", d, " has size 0 in input of shape ",
             x.sizes());
  if (x.dim() == 0) return sort(x, d, false);
  const int64_t lower = (n - 1) / 2;
  if (!x.is_floating_point()) return pick_sorted(x, d, lower, keepdim);
  // NaNs sort last, in their order along the line: the first of them is at n - (their count).
  Tensor nans = sum(ne(x, x), {d}, /*keepdim=*/true);
  return pick_sorted(x, d, where(gt(nans, 0), add(neg(nans), n), Scalar(lower)), keepdim);
}

Tensor median(const Tensor& x) {
  check_defined(x, "median");
  LOOM_CHECK(x.numel() > 0, "median: expected a non-empty tensor (or give a dim), got shape ", x.sizes());
  return std::get<0>(median(reshape(x, {-1}), 0, false));
}

Tensor Tensor::cumsum(int64_t dim, std::optional<DType> dtype) const {
  return loom::cumsum(*this, dim, dtype);
}
std::tuple<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending) const {
  return loom::sort(*this, dim, descending);
}
Tensor Tensor::argsort(int64_t dim, bool descending) const {
  return loom::argsort(*this, dim, descending);
}
std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return loom::topk(*this, k, dim, largest, sorted);
}
std::tuple<Tensor, Tensor> Tensor::kthvalue(int64_t k, int64_t dim, bool keepdim) const {
  return loom::kthvalue(*this, k, dim, keepdim);
}
Tensor Tensor::median() const {
  return loom::median(*this);
}
std::tuple<Tensor, Tensor> Tensor::median(int64_t dim, bool keepdim) const {
  return loom::median(*this, dim, keepdim);
}

}  // namespace loom
