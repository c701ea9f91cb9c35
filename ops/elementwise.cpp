/*
 * Elementwise ops (see elementwise.h): PyTorch's type promotion and NumPy broadcasting
 * (elementwise_operands.h) and the in-place rules, then dispatch to the kernels (ops/cpu/
 * elementwise_kernels.cpp). Kernels see operands already expanded to the output's shape
 * (stride 0 where broadcast) and converted to the compute dtype; a conversion copy is made
 * only when an input's dtype differs from it, and in-place ops whose self already has the
 * compute dtype write straight into self.
 */
#include "ops/elementwise.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "ops/copy_ops.h"
#include "ops/autograd_hook.h"
#include "ops/dispatch.h"
#include "ops/elementwise_operands.h"
#include "ops/op_utils.h"
#include "ops/view_ops.h"

namespace loom {

namespace {

using elementwise::broadcast_shape;
using elementwise::check_can_cast;
using elementwise::check_operand;
using elementwise::device_of;
using elementwise::kernel_input;
using elementwise::Operand;
using elementwise::result_type;
using elementwise::ResultType;
using elementwise::scalar_tensor_of;

// ---- out-of-place binary ----------------------------------------------------------------------

// out = op(a, b) with both operands in `compute` and the result in `out_dtype`.
bool requires_grad(const Operand& o) { return o.tensor && o.tensor->requires_grad(); }

// A number operand as the 0-dim tensor autograd records (formulas read its value).
Tensor recordable(const Operand& o, DType compute, Device device) {
  return o.tensor ? *o.tensor : scalar_tensor_of(o.scalar, compute, device);
}

template <Op op>
Tensor binary_out(const Operand& a, const Operand& b, DType compute, DType out_dtype) {
  constexpr std::string_view name = op_name(op);
  if (GradMode::is_enabled() && (requires_grad(a) || requires_grad(b)) && is_floating(out_dtype)) {
    Device device = device_of(a, b, name);
    Tensor ta = recordable(a, compute, device), tb = recordable(b, compute, device);
    return recorded<op>({ta, tb}, NoAttrs{}, [&] { return binary_out<op>(Operand(ta), Operand(tb), compute, out_dtype); });
  }
  Device device = device_of(a, b, name);
  DimVector shape = broadcast_shape(a, b, name);
  Tensor out = empty(shape, TensorOptions(out_dtype).device(device));
  if (out.numel() == 0) return out;
  get_kernel<op>(device)(out, kernel_input(a, compute, shape, device), kernel_input(b, compute, shape, device));
  return out;
}

enum class BinaryKind {
  Arithmetic,  // result in the common dtype
  TrueDivide,  // like Arithmetic, but integral/bool results become float32
  Predicate,   // comparisons and logical ops: compute in the common dtype, bool result
};

// The compute dtype of op(a, b), with the op-specific errors of PyTorch.
template <Op op>
DType compute_dtype(const Operand& a, const Operand& b, BinaryKind kind) {
  constexpr std::string_view name = op_name(op);
  check_operand(a, name);
  check_operand(b, name);
  DType common = result_type(a, b);
  if constexpr (op == Op::sub) {
    LOOM_CHECK(common != DType::Bool, "sub: subtraction of bool tensors is not supported; use logical_xor or ne");
  }
  if constexpr (op == Op::pow) {
    LOOM_CHECK(common != DType::Bool, "pow: not supported for bool tensors");
    LOOM_CHECK(!(is_integral(common) && !b.tensor && b.scalar.is_integral() && b.scalar.to_int() < 0),
               "pow: Integers to negative integer powers are not allowed (got exponent ", b.scalar, ")");
  }
  if (kind == BinaryKind::TrueDivide && !is_floating(common)) return DType::Float32;
  return common;
}

template <Op op>
Tensor binary(const Operand& a, const Operand& b, BinaryKind kind) {
  DType compute = compute_dtype<op>(a, b, kind);
  return binary_out<op>(a, b, compute, kind == BinaryKind::Predicate ? DType::Bool : compute);
}

// ---- in-place -----------------------------------------------------------------------------------

// Runs the kernel call `run(out, self_as_input)` for an in-place op on self: straight into
// self when it has the compute dtype, else through a temporary converted back.
template <class Run>
void run_inplace(const Tensor& self, DType compute, const Run& run) {
  if (self.numel() > 0) {
    if (self.dtype() == compute) {
      run(self, self);
    } else {
      Tensor tmp = empty(self.sizes(), TensorOptions(compute).device(self.device()));
      run(tmp, to(self, compute));
      get_kernel<Op::copy>(self.device())(self, tmp);
    }
  }
  self.storage()->bump_version();
}

template <Op op>
Tensor& binary_inplace(Tensor& self, const Operand& b, DType compute) {
  constexpr std::string_view name = op_name(op);
  check_can_cast(compute, self.dtype(), std::string(name) + "_");
  Device device = device_of(Operand(self), b, name);
  LOOM_CHECK(device == self.device(), name, "_: cannot write a result on ", device, " into a tensor on ",
             self.device());
  if (b.tensor && b.tensor->sizes() != self.sizes()) {
    DimVector shape = broadcast_shapes(self.sizes(), b.tensor->sizes(), std::string(name) + "_");
    LOOM_CHECK(IntArrayRef(shape) == self.sizes(), name, "_: output with shape ", self.sizes(),
               " doesn't match the broadcast shape ", shape);
  }
  check_writable(self, std::string(name) + "_");
  if (GradMode::is_enabled() && (self.requires_grad() || requires_grad(b))) {  // out of place, then copy_
    copy_(self, binary_out<op>(Operand(inplace_source(op, self)), b, compute, compute));
    return self;
  }
  if (self.numel() == 0) {
    self.storage()->bump_version();
    return self;
  }
  Tensor y = unaliased(kernel_input(b, compute, self.sizes(), device), self);
  run_inplace(self, compute, [&](const Tensor& out, const Tensor& x) { get_kernel<op>(device)(out, x, y); });
  return self;
}

template <Op op>
Tensor& binary_inplace(Tensor& self, const Operand& b, BinaryKind kind) {
  return binary_inplace<op>(self, b, compute_dtype<op>(Operand(self), b, kind));
}

// ---- add / sub with alpha -------------------------------------------------------------------

void check_alpha(DType common, Scalar alpha, std::string_view op) {
  LOOM_CHECK(!(is_integral(common, true) && alpha.is_floating()), op,
             ": for integral input tensors, argument alpha must not be a floating point number, got ", alpha);
  LOOM_CHECK(common == DType::Bool || !alpha.is_bool(), op, ": boolean alpha is only supported for bool results");
}

bool is_one(Scalar s) { return s.is_floating() ? s.to_double() == 1.0 : s.to_int() == 1; }
bool is_minus_one(Scalar s) { return s.is_floating() ? s.to_double() == -1.0 : s.to_int() == -1; }

// a + alpha * b (op = add) or a - alpha * b (op = sub): one kernel call when alpha is +-1,
// else alpha * b first (in the common dtype).
template <Op op>
Tensor add_sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  constexpr Op flipped = op == Op::add ? Op::sub : Op::add;
  Operand x(a), y(b);
  DType common = compute_dtype<op>(x, y, BinaryKind::Arithmetic);
  check_alpha(common, alpha, op_name(op));
  if (is_one(alpha)) return binary_out<op>(x, y, common, common);
  if (is_minus_one(alpha) && common != DType::Bool) return binary_out<flipped>(x, y, common, common);
  Tensor scaled = binary_out<Op::mul>(y, Operand(alpha), common, common);
  return binary_out<op>(x, Operand(scaled), common, common);
}

template <Op op>
Tensor& add_sub_(Tensor& self, const Tensor& b, Scalar alpha) {
  constexpr Op flipped = op == Op::add ? Op::sub : Op::add;
  const std::string name = std::string(op_name(op)) + "_";
  check_defined(self, name);
  Operand y(b);
  DType common = compute_dtype<op>(Operand(self), y, BinaryKind::Arithmetic);
  check_alpha(common, alpha, name);
  if (is_one(alpha)) return binary_inplace<op>(self, y, common);
  if (is_minus_one(alpha) && common != DType::Bool) return binary_inplace<flipped>(self, y, common);
  Tensor scaled = binary_out<Op::mul>(y, Operand(alpha), common, common);
  return binary_inplace<op>(self, Operand(scaled), common);
}

// ---- unary ------------------------------------------------------------------------------------

enum class UnaryKind {
  Numeric,         // keeps the dtype; bool is an error (neg, abs, relu)
  Any,             // keeps the dtype, bool included (sign)
  FloatPromoting,  // integral and bool inputs compute in float32 (exp, log, sin, tanh, ...)
  FloatOnly,       // floating inputs only (silu, gelu)
};

DType unary_compute_dtype(const Tensor& x, UnaryKind kind, std::string_view op) {
  check_defined(x, op);
  DType t = x.dtype();
  switch (kind) {
    case UnaryKind::Numeric:
      LOOM_CHECK(t != DType::Bool, op, ": not supported for bool tensors",
                 op.starts_with("neg") ? " (use logical_not to invert a mask)" : "");
      return t;
    case UnaryKind::Any:
      return t;
    case UnaryKind::FloatPromoting:
      return is_floating(t) ? t : DType::Float32;
    case UnaryKind::FloatOnly:
      LOOM_CHECK(is_floating(t), op, ": expected a floating-point tensor, got ", t, " with shape ", x.sizes());
      return t;
  }
  return t;
}

// out = op(x) in the compute dtype; `run(out, input)` calls the kernel.
template <class Run>
Tensor unary_out(const Tensor& x, DType compute, DType out_dtype, const Run& run) {
  Tensor out = empty(x.sizes(), TensorOptions(out_dtype).device(x.device()));
  if (out.numel() > 0) run(out, x.dtype() == compute ? x : to(x, compute));
  return out;
}

template <Op op>
Tensor unary(const Tensor& x, UnaryKind kind) {
  if (should_record(x)) return recorded<op>({x}, NoAttrs{}, [&] { return unary<op>(x, kind); });
  DType compute = unary_compute_dtype(x, kind, op_name(op));
  auto kernel = get_kernel<op>(x.device());
  return unary_out(x, compute, compute, [&](const Tensor& out, const Tensor& in) { kernel(out, in); });
}

template <Op op>
Tensor& unary_(Tensor& x, UnaryKind kind) {
  const std::string name = std::string(op_name(op)) + "_";
  DType compute = unary_compute_dtype(x, kind, name);
  check_can_cast(compute, x.dtype(), name);
  check_writable(x, name);
  if (should_record(x)) {  // out of place, then copy_
    copy_(x, unary<op>(inplace_source(op, x), kind));
    return x;
  }
  auto kernel = get_kernel<op>(x.device());
  run_inplace(x, compute, [&](const Tensor& out, const Tensor& in) { kernel(out, in); });
  return x;
}

DType clamp_compute_dtype(const Tensor& x, const std::optional<Scalar>& min, const std::optional<Scalar>& max,
                          std::string_view op) {
  check_defined(x, op);
  LOOM_CHECK(min || max, op, ": at least one of min and max must be given");
  ResultType r;
  r.add(x);
  if (min) r.add(*min);
  if (max) r.add(*max);
  DType compute = r.get();
  LOOM_CHECK(compute != DType::Bool, op, ": not supported for bool tensors");
  return compute;
}

bool gelu_uses_tanh(std::string_view approximate) {
  LOOM_CHECK(approximate == "none" || approximate == "tanh", "gelu: approximate must be \"none\" or \"tanh\", got \"",
             approximate, "\"");
  return approximate == "tanh";
}

// ---- where / masked_fill ------------------------------------------------------------------------

void check_bool_mask(const Tensor& mask, std::string_view op, std::string_view what) {
  check_defined(mask, op, what);
  LOOM_CHECK(mask.dtype() == DType::Bool, op, ": expected a bool ", what, ", got ", mask.dtype(), " with shape ",
             mask.sizes());
}

// The operands of a fused backward (gelu_backward, threshold_backward): defined, of one shape,
// on one device.
void check_grad_and_input(const Tensor& grad, const Tensor& x, std::string_view op) {
  LOOM_CHECK(grad.defined() && x.defined(), op, ": undefined grad or input");
  LOOM_CHECK(grad.sizes() == x.sizes(), op, ": expected grad and input of the same shape, got ", grad.sizes(),
             " and ", x.sizes());
  LOOM_CHECK(grad.device() == x.device(), op, ": grad on ", grad.device(), " but input on ", x.device());
}

Tensor where_impl(const Tensor& cond, const Operand& a, const Operand& b) {
  check_bool_mask(cond, "where", "condition");
  check_operand(a, "where");
  check_operand(b, "where");
  Device device = elementwise::common_device({&cond, a.tensor, b.tensor}, "where");
  DType dtype = result_type(a, b);
  if (GradMode::is_enabled() && (requires_grad(a) || requires_grad(b))) {
    Tensor ta = recordable(a, dtype, device), tb = recordable(b, dtype, device);
    return recorded<Op::where>({cond, ta, tb}, NoAttrs{}, [&] { return where_impl(cond, Operand(ta), Operand(tb)); });
  }
  DimVector shape = broadcast_shapes(cond.sizes(), broadcast_shape(a, b, "where"), "where");
  Tensor out = empty(shape, TensorOptions(dtype).device(device));
  if (out.numel() == 0) return out;
  Tensor c = kernel_input(Operand(cond), DType::Bool, shape, device);  // a CPU scalar condition too
  get_kernel<Op::where>(device)(out, c, kernel_input(a, dtype, shape, device), kernel_input(b, dtype, shape, device));
  return out;
}

// ---- allclose / equal -------------------------------------------------------------------------

bool all_true(const Tensor& t) {
  Tensor host = contiguous(to(t, kCPU));
  const bool* p = host.data_ptr<bool>();
  return std::all_of(p, p + host.numel(), [](bool v) { return v; });
}

}  // namespace

// ---- public functions ---------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) { return add_sub<Op::add>(a, b, alpha); }
Tensor add(const Tensor& a, Scalar b) { return binary<Op::add>(Operand(a), Operand(b), BinaryKind::Arithmetic); }
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) { return add_sub<Op::sub>(a, b, alpha); }
Tensor sub(const Tensor& a, Scalar b) { return binary<Op::sub>(Operand(a), Operand(b), BinaryKind::Arithmetic); }
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary<Op::mul>(Operand(a), Operand(b), BinaryKind::Arithmetic);
}
Tensor mul(const Tensor& a, Scalar b) { return binary<Op::mul>(Operand(a), Operand(b), BinaryKind::Arithmetic); }
Tensor div(const Tensor& a, const Tensor& b) {
  return binary<Op::div>(Operand(a), Operand(b), BinaryKind::TrueDivide);
}
Tensor div(const Tensor& a, Scalar b) { return binary<Op::div>(Operand(a), Operand(b), BinaryKind::TrueDivide); }
Tensor pow(const Tensor& a, const Tensor& exponent) {
  return binary<Op::pow>(Operand(a), Operand(exponent), BinaryKind::Arithmetic);
}
Tensor pow(const Tensor& a, Scalar exponent) {
  return binary<Op::pow>(Operand(a), Operand(exponent), BinaryKind::Arithmetic);
}
Tensor pow(Scalar base, const Tensor& exponent) {
  return binary<Op::pow>(Operand(base), Operand(exponent), BinaryKind::Arithmetic);
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary<Op::maximum>(Operand(a), Operand(b), BinaryKind::Arithmetic);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary<Op::minimum>(Operand(a), Operand(b), BinaryKind::Arithmetic);
}

Tensor neg(const Tensor& x) { return unary<Op::neg>(x, UnaryKind::Numeric); }
Tensor exp(const Tensor& x) { return unary<Op::exp>(x, UnaryKind::FloatPromoting); }
Tensor log(const Tensor& x) { return unary<Op::log>(x, UnaryKind::FloatPromoting); }
Tensor log1p(const Tensor& x) { return unary<Op::log1p>(x, UnaryKind::FloatPromoting); }
Tensor sqrt(const Tensor& x) { return unary<Op::sqrt>(x, UnaryKind::FloatPromoting); }
Tensor rsqrt(const Tensor& x) { return unary<Op::rsqrt>(x, UnaryKind::FloatPromoting); }
Tensor abs(const Tensor& x) { return unary<Op::abs>(x, UnaryKind::Numeric); }
Tensor sign(const Tensor& x) { return unary<Op::sign>(x, UnaryKind::Any); }
Tensor sin(const Tensor& x) { return unary<Op::sin>(x, UnaryKind::FloatPromoting); }
Tensor cos(const Tensor& x) { return unary<Op::cos>(x, UnaryKind::FloatPromoting); }
Tensor tanh(const Tensor& x) { return unary<Op::tanh>(x, UnaryKind::FloatPromoting); }
Tensor sigmoid(const Tensor& x) { return unary<Op::sigmoid>(x, UnaryKind::FloatPromoting); }
Tensor relu(const Tensor& x) { return unary<Op::relu>(x, UnaryKind::Numeric); }
Tensor silu(const Tensor& x) { return unary<Op::silu>(x, UnaryKind::FloatOnly); }

Tensor gelu(const Tensor& x, std::string_view approximate) {
  bool use_tanh = gelu_uses_tanh(approximate);
  if (should_record(x)) return recorded<Op::gelu>({x}, GeluAttrs{use_tanh}, [&] { return gelu(x, approximate); });
  DType compute = unary_compute_dtype(x, UnaryKind::FloatOnly, "gelu");
  auto kernel = get_kernel<Op::gelu>(x.device());
  return unary_out(x, compute, compute, [&](const Tensor& out, const Tensor& in) { kernel(out, in, use_tanh); });
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x, std::string_view approximate) {
  bool use_tanh = gelu_uses_tanh(approximate);
  check_grad_and_input(grad, x, "gelu_backward");
  if (should_record(grad, x)) {
    return recorded<Op::gelu_backward>({grad, x}, GeluAttrs{use_tanh},
                                       [&] { return gelu_backward(grad, x, approximate); });
  }
  DType compute = unary_compute_dtype(x, UnaryKind::FloatOnly, "gelu_backward");
  LOOM_CHECK(is_floating(grad.dtype()), "gelu_backward: expected a floating-point grad, got ", grad.dtype());
  Tensor g = grad.dtype() == compute ? grad : to(grad, compute);
  auto kernel = get_kernel<Op::gelu_backward>(x.device());
  return unary_out(x, compute, compute, [&](const Tensor& out, const Tensor& in) { kernel(out, g, in, use_tanh); });
}

Tensor threshold_backward(const Tensor& grad, const Tensor& self, double threshold) {
  check_grad_and_input(grad, self, "threshold_backward");
  const DType compute = promote_types(grad.dtype(), self.dtype());
  LOOM_CHECK(is_floating(compute), "threshold_backward: expected floating-point grad and input, got ",
             grad.dtype(), " and ", self.dtype());
  if (should_record(grad, self)) {
    return recorded<Op::threshold_backward>({grad, self}, ThresholdAttrs{threshold},
                                            [&] { return threshold_backward(grad, self, threshold); });
  }
  Tensor g = grad.dtype() == compute ? grad : to(grad, compute);
  auto kernel = get_kernel<Op::threshold_backward>(self.device());
  return unary_out(self, compute, compute,
                   [&](const Tensor& out, const Tensor& in) { kernel(out, g, in, threshold); });
}

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  if (should_record(x)) return recorded<Op::clamp>({x}, ClampAttrs{min, max}, [&] { return clamp(x, min, max); });
  DType compute = clamp_compute_dtype(x, min, max, "clamp");
  auto kernel = get_kernel<Op::clamp>(x.device());
  const Scalar* lo = min ? &*min : nullptr;
  const Scalar* hi = max ? &*max : nullptr;
  return unary_out(x, compute, compute, [&](const Tensor& out, const Tensor& in) { kernel(out, in, lo, hi); });
}

Tensor logical_not(const Tensor& x) {
  check_defined(x, "logical_not");
  auto kernel = get_kernel<Op::logical_not>(x.device());
  return unary_out(x, x.dtype(), DType::Bool, [&](const Tensor& out, const Tensor& in) { kernel(out, in); });
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) { return where_impl(cond, Operand(a), Operand(b)); }
Tensor where(const Tensor& cond, const Tensor& a, Scalar b) { return where_impl(cond, Operand(a), Operand(b)); }
Tensor where(const Tensor& cond, Scalar a, const Tensor& b) { return where_impl(cond, Operand(a), Operand(b)); }

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  check_defined(x, "masked_fill");
  check_bool_mask(mask, "masked_fill", "mask");
  check_same_device(x, mask, "masked_fill");
  if (should_record(x)) {  // where(mask, value, x)
    Tensor v = scalar_tensor_of(value, x.dtype(), x.device());
    return recorded<Op::where>({mask, v, x}, NoAttrs{}, [&] { return masked_fill(x, mask, value); });
  }
  DimVector shape = x.sizes() == mask.sizes() ? DimVector(x.sizes()) : broadcast_shapes(x.sizes(), mask.sizes(), "masked_fill");
  Tensor out = empty(shape, x.options());
  if (out.numel() == 0) return out;
  Tensor m = mask.sizes() == IntArrayRef(shape) ? mask : expand(mask, shape);
  Tensor self = x.sizes() == IntArrayRef(shape) ? x : expand(x, shape);
  get_kernel<Op::where>(x.device())(out, m, expand(scalar_tensor_of(value, x.dtype(), x.device()), shape), self);
  return out;
}

Tensor eq(const Tensor& a, const Tensor& b) { return binary<Op::eq>(Operand(a), Operand(b), BinaryKind::Predicate); }
Tensor eq(const Tensor& a, Scalar b) { return binary<Op::eq>(Operand(a), Operand(b), BinaryKind::Predicate); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary<Op::ne>(Operand(a), Operand(b), BinaryKind::Predicate); }
Tensor ne(const Tensor& a, Scalar b) { return binary<Op::ne>(Operand(a), Operand(b), BinaryKind::Predicate); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary<Op::lt>(Operand(a), Operand(b), BinaryKind::Predicate); }
Tensor lt(const Tensor& a, Scalar b) { return binary<Op::lt>(Operand(a), Operand(b), BinaryKind::Predicate); }
Tensor le(const Tensor& a, const Tensor& b) { return binary<Op::le>(Operand(a), Operand(b), BinaryKind::Predicate); }
Tensor le(const Tensor& a, Scalar b) { return binary<Op::le>(Operand(a), Operand(b), BinaryKind::Predicate); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary<Op::gt>(Operand(a), Operand(b), BinaryKind::Predicate); }
Tensor gt(const Tensor& a, Scalar b) { return binary<Op::gt>(Operand(a), Operand(b), BinaryKind::Predicate); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary<Op::ge>(Operand(a), Operand(b), BinaryKind::Predicate); }
Tensor ge(const Tensor& a, Scalar b) { return binary<Op::ge>(Operand(a), Operand(b), BinaryKind::Predicate); }
Tensor logical_and(const Tensor& a, const Tensor& b) {
  return binary<Op::logical_and>(Operand(a), Operand(b), BinaryKind::Predicate);
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return binary<Op::logical_or>(Operand(a), Operand(b), BinaryKind::Predicate);
}

// |a - b| <= atol + rtol * |b| elementwise in float64 (a == b also counts, for infinities),
// then all of it. Unlike torch.allclose, a and b may have different dtypes.
bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  check_defined(a, "allclose");
  check_defined(b, "allclose");
  check_same_device(a, b, "allclose");
  LOOM_CHECK(rtol >= 0 && atol >= 0, "allclose: rtol and atol must be non-negative, got ", rtol, " and ", atol);
  broadcast_shapes(a.sizes(), b.sizes(), "allclose");
  Tensor x = to(a, kFloat64), y = to(b, kFloat64);
  Tensor diff = abs(sub(x, y));
  Tensor tolerance = add(mul(abs(y), rtol), atol);
  Tensor close = logical_and(le(diff, tolerance), lt(diff, std::numeric_limits<double>::infinity()));
  close = logical_or(close, eq(x, y));
  if (equal_nan) close = logical_or(close, logical_and(ne(x, x), ne(y, y)));
  return all_true(close);
}

bool equal(const Tensor& a, const Tensor& b) {
  check_defined(a, "equal");
  check_defined(b, "equal");
  check_same_device(a, b, "equal");
  if (a.sizes() != b.sizes()) return false;
  return a.numel() == 0 || all_true(eq(a, b));
}

// ---- Tensor methods ------------------------------------------------------------------------------
Tensor Tensor::add(const Tensor& other, Scalar alpha) const { return loom::add(*this, other, alpha); }
Tensor Tensor::add(Scalar other) const { return loom::add(*this, other); }
Tensor Tensor::sub(const Tensor& other, Scalar alpha) const { return loom::sub(*this, other, alpha); }
Tensor Tensor::sub(Scalar other) const { return loom::sub(*this, other); }
Tensor Tensor::mul(const Tensor& other) const { return loom::mul(*this, other); }
Tensor Tensor::mul(Scalar other) const { return loom::mul(*this, other); }
Tensor Tensor::div(const Tensor& other) const { return loom::div(*this, other); }
Tensor Tensor::div(Scalar other) const { return loom::div(*this, other); }
Tensor Tensor::pow(const Tensor& exponent) const { return loom::pow(*this, exponent); }
Tensor Tensor::pow(Scalar exponent) const { return loom::pow(*this, exponent); }
Tensor Tensor::maximum(const Tensor& other) const { return loom::maximum(*this, other); }
Tensor Tensor::minimum(const Tensor& other) const { return loom::minimum(*this, other); }
Tensor Tensor::neg() const { return loom::neg(*this); }
Tensor Tensor::exp() const { return loom::exp(*this); }
Tensor Tensor::log() const { return loom::log(*this); }
Tensor Tensor::log1p() const { return loom::log1p(*this); }
Tensor Tensor::sqrt() const { return loom::sqrt(*this); }
Tensor Tensor::rsqrt() const { return loom::rsqrt(*this); }
Tensor Tensor::abs() const { return loom::abs(*this); }
Tensor Tensor::sign() const { return loom::sign(*this); }
Tensor Tensor::sin() const { return loom::sin(*this); }
Tensor Tensor::cos() const { return loom::cos(*this); }
Tensor Tensor::tanh() const { return loom::tanh(*this); }
Tensor Tensor::sigmoid() const { return loom::sigmoid(*this); }
Tensor Tensor::relu() const { return loom::relu(*this); }
Tensor Tensor::gelu(std::string_view approximate) const { return loom::gelu(*this, approximate); }
Tensor Tensor::silu() const { return loom::silu(*this); }
Tensor Tensor::clamp(std::optional<Scalar> min, std::optional<Scalar> max) const {
  return loom::clamp(*this, min, max);
}
Tensor Tensor::eq(const Tensor& other) const { return loom::eq(*this, other); }
Tensor Tensor::eq(Scalar other) const { return loom::eq(*this, other); }
Tensor Tensor::ne(const Tensor& other) const { return loom::ne(*this, other); }
Tensor Tensor::ne(Scalar other) const { return loom::ne(*this, other); }
Tensor Tensor::lt(const Tensor& other) const { return loom::lt(*this, other); }
Tensor Tensor::lt(Scalar other) const { return loom::lt(*this, other); }
Tensor Tensor::le(const Tensor& other) const { return loom::le(*this, other); }
Tensor Tensor::le(Scalar other) const { return loom::le(*this, other); }
Tensor Tensor::gt(const Tensor& other) const { return loom::gt(*this, other); }
Tensor Tensor::gt(Scalar other) const { return loom::gt(*this, other); }
Tensor Tensor::ge(const Tensor& other) const { return loom::ge(*this, other); }
Tensor Tensor::ge(Scalar other) const { return loom::ge(*this, other); }
Tensor Tensor::logical_and(const Tensor& other) const { return loom::logical_and(*this, other); }
Tensor Tensor::logical_or(const Tensor& other) const { return loom::logical_or(*this, other); }
Tensor Tensor::logical_not() const { return loom::logical_not(*this); }
Tensor Tensor::masked_fill(const Tensor& mask, Scalar value) const { return loom::masked_fill(*this, mask, value); }

Tensor& Tensor::add_(const Tensor& other, Scalar alpha) { return add_sub_<Op::add>(*this, other, alpha); }
Tensor& Tensor::add_(Scalar other) { return binary_inplace<Op::add>(*this, Operand(other), BinaryKind::Arithmetic); }
Tensor& Tensor::sub_(const Tensor& other, Scalar alpha) { return add_sub_<Op::sub>(*this, other, alpha); }
Tensor& Tensor::sub_(Scalar other) { return binary_inplace<Op::sub>(*this, Operand(other), BinaryKind::Arithmetic); }
Tensor& Tensor::mul_(const Tensor& other) {
  return binary_inplace<Op::mul>(*this, Operand(other), BinaryKind::Arithmetic);
}
Tensor& Tensor::mul_(Scalar other) { return binary_inplace<Op::mul>(*this, Operand(other), BinaryKind::Arithmetic); }
Tensor& Tensor::div_(const Tensor& other) {
  return binary_inplace<Op::div>(*this, Operand(other), BinaryKind::TrueDivide);
}
Tensor& Tensor::div_(Scalar other) { return binary_inplace<Op::div>(*this, Operand(other), BinaryKind::TrueDivide); }
Tensor& Tensor::pow_(Scalar exponent) {
  return binary_inplace<Op::pow>(*this, Operand(exponent), BinaryKind::Arithmetic);
}
Tensor& Tensor::neg_() { return unary_<Op::neg>(*this, UnaryKind::Numeric); }
Tensor& Tensor::exp_() { return unary_<Op::exp>(*this, UnaryKind::FloatPromoting); }
Tensor& Tensor::log_() { return unary_<Op::log>(*this, UnaryKind::FloatPromoting); }
Tensor& Tensor::sqrt_() { return unary_<Op::sqrt>(*this, UnaryKind::FloatPromoting); }
Tensor& Tensor::abs_() { return unary_<Op::abs>(*this, UnaryKind::Numeric); }
Tensor& Tensor::tanh_() { return unary_<Op::tanh>(*this, UnaryKind::FloatPromoting); }
Tensor& Tensor::sigmoid_() { return unary_<Op::sigmoid>(*this, UnaryKind::FloatPromoting); }
Tensor& Tensor::relu_() { return unary_<Op::relu>(*this, UnaryKind::Numeric); }

Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max) {
  DType compute = clamp_compute_dtype(*this, min, max, "clamp_");
  check_can_cast(compute, dtype(), "clamp_");
  check_writable(*this, "clamp_");
  if (should_record(*this)) return copy_(loom::clamp(inplace_source(Op::clamp, *this), min, max));
  auto kernel = get_kernel<Op::clamp>(device());
  const Scalar* lo = min ? &*min : nullptr;
  const Scalar* hi = max ? &*max : nullptr;
  run_inplace(*this, compute, [&](const Tensor& out, const Tensor& in) { kernel(out, in, lo, hi); });
  return *this;
}

Tensor& Tensor::masked_fill_(const Tensor& mask, Scalar value) {
  check_defined(*this, "masked_fill_");
  check_bool_mask(mask, "masked_fill_", "mask");
  check_same_device(*this, mask, "masked_fill_");
  if (mask.sizes() != sizes()) {
    DimVector shape = broadcast_shapes(sizes(), mask.sizes(), "masked_fill_");
    LOOM_CHECK(IntArrayRef(shape) == sizes(), "masked_fill_: mask of shape ", mask.sizes(),
               " cannot be broadcast to the tensor's shape ", sizes());
  }
  check_writable(*this, "masked_fill_");
  if (should_record(*this)) return copy_(loom::masked_fill(*this, mask, value));
  if (numel() > 0) {
    Tensor m = unaliased(mask.sizes() == sizes() ? mask : loom::expand(mask, sizes()), *this);
    Tensor v = loom::expand(scalar_tensor_of(value, dtype(), device()), sizes());
    get_kernel<Op::where>(device())(*this, m, v, *this);
  }
  storage()->bump_version();
  return *this;
}

// ---- operators ------------------------------------------------------------------------------------
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator-(Scalar a, const Tensor& b) {
  return binary<Op::sub>(Operand(a), Operand(b), BinaryKind::Arithmetic);
}
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
Tensor operator/(Scalar a, const Tensor& b) {
  return binary<Op::div>(Operand(a), Operand(b), BinaryKind::TrueDivide);
}
Tensor operator-(const Tensor& a) { return neg(a); }

}  // namespace loom
