/*
 * Reductions (see reduction.h). sum, prod, amax, amin, var and max/min along a dim are
 * primitive ops with kernels (ops/cpu/reduction_kernels.cpp); mean, std, logsumexp, norm,
 * argmax/argmin and max()/min() over everything are composites of those and of elementwise
 * ops, so that autograd differentiates them without formulas of their own.
 *
 * Every reduction computes into a contiguous keepdim-shaped output and views it without the
 * reduced dims when keepdim is false.
 */
#include "ops/reduction.h"

#include <cmath>
#include <limits>

#include "ops/autograd_hook.h"
#include "ops/copy_ops.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/op_utils.h"
#include "ops/view_ops.h"

namespace loom {

namespace {

// The validated dims (sorted, unique, non-negative) and the output shapes of a reduction.
struct ReducePlan {
  DimVector dims;
  DimVector keep_shape;  // reduced dims of size 1
  DimVector shape;       // what the caller gets
};

ReducePlan plan_reduction(const Tensor& x, IntArrayRef dims, bool keepdim, std::string_view op) {
  check_defined(x, op);
  ReducePlan r;
  r.dims = normalize_dims(dims, x.dim(), op);
  r.keep_shape = reduced_shape(x.sizes(), r.dims, true);
  r.shape = keepdim ? r.keep_shape : reduced_shape(x.sizes(), r.dims, false);
  return r;
}

Tensor finish(const Tensor& keep_out, const ReducePlan& r) {
  return keep_out.sizes() == IntArrayRef(r.shape) ? keep_out : view(keep_out, r.shape);
}

// Number of elements folded into each output.
int64_t reduced_count(const Tensor& x, const ReducePlan& r) {
  int64_t n = 1;
  for (int64_t d : r.dims) n *= x.sizes()[d];
  return n;
}

// max/min have no identity: every reduced dim must be non-empty.
void check_nonempty(const Tensor& x, const ReducePlan& r, std::string_view op) {
  for (int64_t d : r.dims)
    LOOM_CHECK(x.sizes()[d] != 0, op, ": expected a non-empty reduction, but dim ", d,
               " has size 0 in input of shape ", x.sizes());
}

template <Op op>
Tensor run_reduce(const Tensor& x, const ReducePlan& r, DType out_dtype) {
  Tensor out = empty(r.keep_shape, x.options().dtype(out_dtype));
  if (out.numel() > 0) get_kernel<op>(x.device())(out, x, r.dims);
  return finish(out, r);
}

bool is_half_precision(DType t) {
  return t == kFloat16 || t == kBFloat16;
}

// max/min along one dim (kernel op max_dim or min_dim).
template <Op op>
std::tuple<Tensor, Tensor> arg_reduce(const Tensor& x, int64_t dim, bool keepdim, std::string_view name) {
  check_defined(x, name);
  const int64_t d = wrap_dim(dim, x.dim(), name);
  ReducePlan r;
  if (x.dim() > 0) {
    r.dims.push_back(d);
    LOOM_CHECK(x.sizes()[d] != 0, name, ": expected a non-empty reduction, but dim ", d,
               " has size 0 in input of shape ", x.sizes());
  }
  r.keep_shape = reduced_shape(x.sizes(), r.dims, true);
  r.shape = keepdim ? r.keep_shape : reduced_shape(x.sizes(), r.dims, false);
  Tensor values = empty(r.keep_shape, x.options());
  Tensor indices = empty(r.keep_shape, x.options().dtype(kInt64));
  if (values.numel() > 0) get_kernel<op>(x.device())(values, indices, x, d);
  return {finish(values, r), finish(indices, r)};
}

// max/min along dim as the public functions give them: recorded for autograd (the values get
// the history; the indices, being integers, none). argmax/argmin call arg_reduce directly: an
// index has no gradient, so there is nothing to record.
template <Op op>
std::tuple<Tensor, Tensor> recorded_arg_reduce(const Tensor& x, int64_t dim, bool keepdim,
                                               std::string_view name) {
  if (!should_record(x)) return arg_reduce<op>(x, dim, keepdim, name);
  std::tuple<Tensor, Tensor> out;
  {
    AutoGradMode below_autograd(false);
    out = arg_reduce<op>(x, dim, keepdim, name);
  }
  const int64_t d = x.dim() > 0 ? wrap_dim(dim, x.dim(), name) : 0;
  record<op>({x}, {std::get<0>(out), std::get<1>(out)}, ArgReduceAttrs{d, keepdim});
  return out;
}

// sqrt(s) for s >= 0, with gradient 0 (not sqrt'(0) * 0 = NaN) where s = 0: norm and std of an
// all-zero (or constant) slice then have gradient 0, as PyTorch. The double where keeps the
// infinite derivative of sqrt out of the graph. Only used while recording: without autograd a
// plain sqrt gives the same values.
Tensor masked_sqrt(const Tensor& s) {
  Tensor zero = eq(s, 0);
  return where(zero, 0.0, sqrt(where(zero, 1.0, s)));
}

// The same for s^(1/p) (general p-norm).
Tensor masked_root(const Tensor& s, double p) {
  Tensor zero = eq(s, 0);
  return where(zero, 0.0, pow(where(zero, 1.0, s), 1.0 / p));
}

// argmax/argmin: along dim, or over the flattened tensor (keepdim then gives all-ones dims).
template <Op op>
Tensor arg_index(const Tensor& x, std::optional<int64_t> dim, bool keepdim, std::string_view name) {
  check_defined(x, name);
  if (dim) return std::get<1>(arg_reduce<op>(x, *dim, keepdim, name));
  LOOM_CHECK(x.numel() != 0, name, ": expected a non-empty tensor when no dim is given, got shape ",
             x.sizes());
  Tensor index = std::get<1>(arg_reduce<op>(reshape(x, {-1}), 0, false, name));
  return keepdim ? view(index, DimVector(static_cast<size_t>(x.dim()), 1)) : index;
}

}  // namespace

Tensor sum(const Tensor& x, IntArrayRef dims, bool keepdim, std::optional<DType> dtype) {
  ReducePlan r = plan_reduction(x, dims, keepdim, "sum");
  if (should_record(x))
    return recorded<Op::sum>({x}, ReduceAttrs{r.dims, keepdim}, [&] { return sum(x, dims, keepdim, dtype); });
  // As PyTorch: with a dtype the input is cast to it first; integers and bool sum in int64.
  // The kernel reads integers into an int64 sum and floating inputs into a sum of their own
  // dtype, float32 or float64 without that cast.
  const DType result = dtype.value_or(is_integral(x.dtype(), true) ? kInt64 : x.dtype());
  const bool direct = is_floating(x.dtype())
                          ? (result == x.dtype() || result == kFloat32 || result == kFloat64)
                          : is_integral(result, true);
  Tensor src = direct ? x : to(x, result);
  const DType kernel_out = is_integral(src.dtype(), true) ? kInt64 : result;
  Tensor out = run_reduce<Op::sum>(src, r, kernel_out);
  return out.dtype() == result ? out : to(out, result);
}

Tensor prod(const Tensor& x, IntArrayRef dims, bool keepdim) {
  ReducePlan r = plan_reduction(x, dims, keepdim, "prod");
  const DType out_dtype = is_integral(x.dtype(), true) ? kInt64 : x.dtype();
  if (should_record(x))
    return recorded<Op::prod>({x}, ReduceAttrs{r.dims, keepdim},
                              [&] { return run_reduce<Op::prod>(x, r, out_dtype); });
  return run_reduce<Op::prod>(x, r, out_dtype);
}

Tensor amax(const Tensor& x, IntArrayRef dims, bool keepdim) {
  ReducePlan r = plan_reduction(x, dims, keepdim, "amax");
  check_nonempty(x, r, "amax");
  if (should_record(x))
    return recorded<Op::amax>({x}, ReduceAttrs{r.dims, keepdim},
                              [&] { return run_reduce<Op::amax>(x, r, x.dtype()); });
  return run_reduce<Op::amax>(x, r, x.dtype());
}

Tensor amin(const Tensor& x, IntArrayRef dims, bool keepdim) {
  ReducePlan r = plan_reduction(x, dims, keepdim, "amin");
  check_nonempty(x, r, "amin");
  if (should_record(x))
    return recorded<Op::amin>({x}, ReduceAttrs{r.dims, keepdim},
                              [&] { return run_reduce<Op::amin>(x, r, x.dtype()); });
  return run_reduce<Op::amin>(x, r, x.dtype());
}

Tensor max(const Tensor& x) {
  check_defined(x, "max");
  LOOM_CHECK(x.numel() != 0, "max: expected a non-empty tensor (or give a dim), got shape ", x.sizes());
  return amax(x, {}, false);
}

Tensor min(const Tensor& x) {
  check_defined(x, "min");
  LOOM_CHECK(x.numel() != 0, "min: expected a non-empty tensor (or give a dim), got shape ", x.sizes());
  return amin(x, {}, false);
}

std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return recorded_arg_reduce<Op::max_dim>(x, dim, keepdim, "max");
}

std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return recorded_arg_reduce<Op::min_dim>(x, dim, keepdim, "min");
}

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_index<Op::max_dim>(x, dim, keepdim, "argmax");
}

Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_index<Op::min_dim>(x, dim, keepdim, "argmin");
}

Tensor mean(const Tensor& x, IntArrayRef dims, bool keepdim) {
  ReducePlan r = plan_reduction(x, dims, keepdim, "mean");
  check_floating(x, "mean");
  // 16-bit inputs: sum and divide in float32, round once at the end (as PyTorch).
  const DType acc = is_half_precision(x.dtype()) ? kFloat32 : x.dtype();
  Tensor total = sum(x, r.dims, keepdim, acc);
  return to(div(total, static_cast<double>(reduced_count(x, r))), x.dtype());  // n = 0 gives NaN
}

Tensor var(const Tensor& x, IntArrayRef dims, int64_t correction, bool keepdim) {
  ReducePlan r = plan_reduction(x, dims, keepdim, "var");
  check_floating(x, "var");
  auto compute = [&] {
    Tensor out = empty(r.keep_shape, x.options());
    if (out.numel() > 0) get_kernel<Op::var>(x.device())(out, x, r.dims, correction);
    return finish(out, r);
  };
  if (should_record(x)) return recorded<Op::var>({x}, VarAttrs{r.dims, correction, keepdim}, compute);
  return compute();
}

Tensor std(const Tensor& x, IntArrayRef dims, int64_t correction, bool keepdim) {
  check_defined(x, "std");
  check_floating(x, "std");
  Tensor v = var(x, dims, correction, keepdim);
  return should_record(x) ? masked_sqrt(v) : sqrt(v);
}

Tensor logsumexp(const Tensor& x, IntArrayRef dims, bool keepdim) {
  ReducePlan r = plan_reduction(x, dims, keepdim, "logsumexp");
  check_floating(x, "logsumexp");
  if (x.numel() == 0) return log(sum(exp(x), r.dims, keepdim));
  // log(sum(exp(x - m))) + m with m the max, taken as 0 where it is infinite so that rows of
  // -inf give -inf (not NaN) and rows holding +inf give +inf, as PyTorch.
  // m is a constant shift (the result does not depend on it), so it is computed without
  // history: the gradient is then exactly g * exp(x - result), with no rounding residue from
  // amax's gradient (which cancels mathematically).
  Tensor m;
  {
    AutoGradMode constant_shift(false);
    m = amax(x, r.dims, true);
    m = masked_fill(m, eq(abs(m), std::numeric_limits<double>::infinity()), 0);
  }
  Tensor total = sum(exp(sub(x, m)), r.dims, keepdim);
  return add(log(total), keepdim ? m : view(m, r.shape));
}

Tensor norm(const Tensor& x, double p, IntArrayRef dims, bool keepdim) {
  ReducePlan r = plan_reduction(x, dims, keepdim, "norm");
  check_floating(x, "norm");
  // 16-bit inputs are computed in float32: their squares overflow float16 above 256.
  if (is_half_precision(x.dtype())) return to(norm(to(x, kFloat32), p, r.dims, keepdim), x.dtype());
  if (std::isinf(p)) check_nonempty(x, r, "norm");
  const bool recording = should_record(x);
  if (p == 2) {
    Tensor squares = sum(mul(x, x), r.dims, keepdim);
    return recording ? masked_sqrt(squares) : sqrt(squares);
  }
  if (p == 1) return sum(abs(x), r.dims, keepdim);
  if (p == std::numeric_limits<double>::infinity()) return amax(abs(x), r.dims, keepdim);
  if (p == -std::numeric_limits<double>::infinity()) return amin(abs(x), r.dims, keepdim);
  if (p == 0) return sum(ne(x, 0), r.dims, keepdim, x.dtype());  // number of non-zeros
  Tensor powers = sum(pow(abs(x), p), r.dims, keepdim);
  return recording ? masked_root(powers, p) : pow(powers, 1.0 / p);
}

// ---- Tensor methods ------------------------------------------------------------------------
Tensor Tensor::sum(IntArrayRef dims, bool keepdim) const {
  return loom::sum(*this, dims, keepdim);
}
Tensor Tensor::mean(IntArrayRef dims, bool keepdim) const {
  return loom::mean(*this, dims, keepdim);
}
Tensor Tensor::prod(IntArrayRef dims, bool keepdim) const {
  return loom::prod(*this, dims, keepdim);
}
Tensor Tensor::amax(IntArrayRef dims, bool keepdim) const {
  return loom::amax(*this, dims, keepdim);
}
Tensor Tensor::amin(IntArrayRef dims, bool keepdim) const {
  return loom::amin(*this, dims, keepdim);
}
Tensor Tensor::max() const {
  return loom::max(*this);
}
Tensor Tensor::min() const {
  return loom::min(*this);
}
std::tuple<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const {
  return loom::max(*this, dim, keepdim);
}
std::tuple<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const {
  return loom::min(*this, dim, keepdim);
}
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim) const {
  return loom::argmax(*this, dim, keepdim);
}
Tensor Tensor::argmin(std::optional<int64_t> dim, bool keepdim) const {
  return loom::argmin(*this, dim, keepdim);
}
Tensor Tensor::var(IntArrayRef dims, int64_t correction, bool keepdim) const {
  return loom::var(*this, dims, correction, keepdim);
}
Tensor Tensor::std(IntArrayRef dims, int64_t correction, bool keepdim) const {
  return loom::std(*this, dims, correction, keepdim);
}
Tensor Tensor::logsumexp(IntArrayRef dims, bool keepdim) const {
  return loom::logsumexp(*this, dims, keepdim);
}
Tensor Tensor::norm(double p, IntArrayRef dims, bool keepdim) const {
  return loom::norm(*this, p, dims, keepdim);
}

}  // namespace loom
