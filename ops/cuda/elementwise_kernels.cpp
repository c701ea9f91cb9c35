/*
 * The C++ side of the CUDA elementwise kernels (ops/cuda/elementwise.cu): checks the dtypes
 * the CPU kernels check (same messages), coalesces the operands' dims into the plain layout of
 * elementwise_launchers.h, and registers every unary, binary, where, clamp, gelu, arange and
 * random-fill kernel for DeviceType::CUDA.
 *
 * Coalescing happens here, once per call, so that the kernels' per-element index arithmetic
 * runs over as few dims as possible: a contiguous or simply broadcast operand set of any rank
 * becomes one dim (and may take the vectorised kernel).
 *
 * Everything runs on the current stream (op_stream.h), ordered after the work queued there.
 */
#include <array>
#include <initializer_list>
#include <string_view>

#include "core/cuda/cuda_check.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/elementwise_launchers.h"
#include "ops/cuda/op_stream.h"
#include "ops/dispatch.h"

namespace loom::cuda {

namespace {

int code(DType t) { return static_cast<int>(t); }

// Same-shaped operands (operand 0 the output) as one layout: size-1 dims dropped, and dim d
// merged into the run inside it wherever every operand's stride at d equals its inner stride
// times the inner size.
ElementwiseLayout layout_of(std::string_view op, std::initializer_list<const Tensor*> operands) {
  const Tensor& ref = **operands.begin();
  const int n = static_cast<int>(operands.size());
  std::array<int64_t, kMaxDims> sizes{};
  std::array<std::array<int64_t, kMaxOperands>, kMaxDims> strides{};  // innermost first
  int nd = 0;
  for (int64_t d = ref.dim() - 1; d >= 0; --d) {
    const int64_t size = ref.sizes()[d];
    if (size == 1) continue;
    if (nd > 0) {
      bool merge = true;
      int k = 0;
      for (const Tensor* t : operands) merge = merge && t->strides()[d] == strides[nd - 1][k++] * sizes[nd - 1];
      if (merge) {
        sizes[nd - 1] *= size;
        continue;
      }
    }
    LOOM_CHECK(nd < kMaxDims, op, ": CUDA elementwise kernels support at most ", kMaxDims,
               " non-mergeable dims, got a tensor of shape ", ref.sizes());
    sizes[nd] = size;
    int k = 0;
    for (const Tensor* t : operands) strides[nd][k++] = t->strides()[d];
    ++nd;
  }
  ElementwiseLayout l;
  l.ndim = nd;
  l.noperands = n;
  for (int d = 0; d < nd; ++d) {
    l.sizes[d] = sizes[nd - 1 - d];
    for (int k = 0; k < n; ++k) l.strides[k][d] = strides[nd - 1 - d][k];
  }
  return l;
}

void check_floating(std::string_view op, DType t) {
  LOOM_CHECK(is_floating(t), op, ": expected a floating-point tensor (float32, float64, float16, bfloat16), got ", t);
}

void check_not_bool(std::string_view op, DType t) { LOOM_CHECK(t != DType::Bool, op, ": not supported for bool tensors"); }

bool all_strides_zero(const Tensor& t) {
  for (int64_t s : t.strides())
    if (s != 0) return false;
  return true;
}

// ---- unary ----
void run_unary(UnaryOp op, std::string_view name, const Tensor& out, const Tensor& in) {
  LOOM_CUDA_CHECK(launch_unary(op, code(in.dtype()), out.data_ptr(), in.data_ptr(),
                               layout_of(name, {&out, &in}), out.numel(), op_stream()));
}

template <UnaryOp kOp>
void floating_unary(const Tensor& out, const Tensor& in) {
  constexpr std::string_view kNames[] = {"neg", "exp",  "log",  "log1p",   "sqrt", "rsqrt", "abs",  "sign",       "sin",
                                         "cos", "tanh", "sigmoid", "relu", "silu", "gelu",  "gelu", "logical_not"};
  const std::string_view name = kNames[static_cast<int>(kOp)];
  check_floating(name, out.dtype());
  run_unary(kOp, name, out, in);
}

void neg_kernel(const Tensor& out, const Tensor& in) {
  check_not_bool("neg", out.dtype());
  run_unary(UnaryOp::kNeg, "neg", out, in);
}
void abs_kernel(const Tensor& out, const Tensor& in) {
  check_not_bool("abs", out.dtype());
  run_unary(UnaryOp::kAbs, "abs", out, in);
}
void relu_kernel(const Tensor& out, const Tensor& in) {
  check_not_bool("relu", out.dtype());
  run_unary(UnaryOp::kRelu, "relu", out, in);
}
void sign_kernel(const Tensor& out, const Tensor& in) { run_unary(UnaryOp::kSign, "sign", out, in); }
void logical_not_kernel(const Tensor& out, const Tensor& in) {
  run_unary(UnaryOp::kLogicalNot, "logical_not", out, in);
}

void gelu_kernel(const Tensor& out, const Tensor& in, bool tanh_approximation) {
  check_floating("gelu", out.dtype());
  run_unary(tanh_approximation ? UnaryOp::kGeluTanh : UnaryOp::kGelu, "gelu", out, in);
}

void gelu_backward_kernel(const Tensor& out, const Tensor& grad, const Tensor& x, bool tanh_approximation) {
  check_floating("gelu_backward", out.dtype());
  LOOM_CUDA_CHECK(launch_gelu_backward(code(out.dtype()), out.data_ptr(), grad.data_ptr(), x.data_ptr(),
                                       layout_of("gelu_backward", {&out, &grad, &x}), out.numel(),
                                       tanh_approximation, op_stream()));
}

void threshold_backward_kernel(const Tensor& out, const Tensor& grad, const Tensor& self, double threshold) {
  check_floating("threshold_backward", out.dtype());
  LOOM_CUDA_CHECK(launch_threshold_backward(
      code(out.dtype()), out.data_ptr(), grad.data_ptr(), self.data_ptr(),
      layout_of("threshold_backward", {&out, &grad, &self}), out.numel(), threshold, op_stream()));
}

void clamp_kernel(const Tensor& out, const Tensor& in, const Scalar* min, const Scalar* max) {
  check_not_bool("clamp", out.dtype());
  ClampBounds b;
  b.has_min = min != nullptr;
  b.has_max = max != nullptr;
  if (min) {
    b.min_float = min->to<double>();
    b.min_int = min->to<int64_t>();
  }
  if (max) {
    b.max_float = max->to<double>();
    b.max_int = max->to<int64_t>();
  }
  LOOM_CUDA_CHECK(launch_clamp(code(out.dtype()), out.data_ptr(), in.data_ptr(),
                               layout_of("clamp", {&out, &in}), out.numel(), b, op_stream()));
}

// ---- binary ----
void run_binary(BinaryOp op, std::string_view name, const Tensor& out, const Tensor& a, const Tensor& b) {
  const bool scalar_b = op == BinaryOp::kPow && all_strides_zero(b);
  LOOM_CUDA_CHECK(launch_binary(op, code(a.dtype()), out.data_ptr(), a.data_ptr(), b.data_ptr(),
                                layout_of(name, {&out, &a, &b}), out.numel(), scalar_b, op_stream()));
}

void add_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { run_binary(BinaryOp::kAdd, "add", out, a, b); }
void sub_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  LOOM_CHECK(out.dtype() != DType::Bool, "sub: not supported for bool tensors");
  run_binary(BinaryOp::kSub, "sub", out, a, b);
}
void mul_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { run_binary(BinaryOp::kMul, "mul", out, a, b); }
void div_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  check_floating("div", out.dtype());
  run_binary(BinaryOp::kDiv, "div", out, a, b);
}
void pow_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  check_not_bool("pow", out.dtype());
  run_binary(BinaryOp::kPow, "pow", out, a, b);
}
void maximum_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  run_binary(BinaryOp::kMaximum, "maximum", out, a, b);
}
void minimum_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  run_binary(BinaryOp::kMinimum, "minimum", out, a, b);
}
void eq_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { run_binary(BinaryOp::kEq, "eq", out, a, b); }
void ne_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { run_binary(BinaryOp::kNe, "ne", out, a, b); }
void lt_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { run_binary(BinaryOp::kLt, "lt", out, a, b); }
void le_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { run_binary(BinaryOp::kLe, "le", out, a, b); }
void gt_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { run_binary(BinaryOp::kGt, "gt", out, a, b); }
void ge_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { run_binary(BinaryOp::kGe, "ge", out, a, b); }
void logical_and_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  run_binary(BinaryOp::kLogicalAnd, "logical_and", out, a, b);
}
void logical_or_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  run_binary(BinaryOp::kLogicalOr, "logical_or", out, a, b);
}

void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  LOOM_CHECK(cond.dtype() == DType::Bool, "where: expected a bool condition, got ", cond.dtype());
  LOOM_CUDA_CHECK(launch_where(code(out.dtype()), out.data_ptr(), cond.data_ptr(), a.data_ptr(), b.data_ptr(),
                               layout_of("where", {&out, &cond, &a, &b}), out.numel(), op_stream()));
}

// ---- arange and random fills (out contiguous) ----
void arange_kernel(const Tensor& out, double start, double step) {
  check_not_bool("arange", out.dtype());
  LOOM_CUDA_CHECK(launch_arange(code(out.dtype()), out.data_ptr(), out.numel(), start, step, op_stream()));
}

template <RandomOp kOp>
void random_kernel(const Tensor& out, double a, double b, PhiloxArgs philox) {
  if constexpr (kOp == RandomOp::kUniform) check_floating("uniform_", out.dtype());
  if constexpr (kOp == RandomOp::kNormal) check_floating("normal_", out.dtype());
  if constexpr (kOp == RandomOp::kRandint) check_not_bool("randint", out.dtype());
  LOOM_CUDA_CHECK(
      launch_random(kOp, code(out.dtype()), out.data_ptr(), out.numel(), a, b, philox, op_stream()));
}

}  // namespace

void register_elementwise_cuda_kernels() {
  constexpr DeviceType cuda = DeviceType::CUDA;
  register_kernel<Op::neg>(cuda, neg_kernel);
  register_kernel<Op::exp>(cuda, floating_unary<UnaryOp::kExp>);
  register_kernel<Op::log>(cuda, floating_unary<UnaryOp::kLog>);
  register_kernel<Op::log1p>(cuda, floating_unary<UnaryOp::kLog1p>);
  register_kernel<Op::sqrt>(cuda, floating_unary<UnaryOp::kSqrt>);
  register_kernel<Op::rsqrt>(cuda, floating_unary<UnaryOp::kRsqrt>);
  register_kernel<Op::abs>(cuda, abs_kernel);
  register_kernel<Op::sign>(cuda, sign_kernel);
  register_kernel<Op::sin>(cuda, floating_unary<UnaryOp::kSin>);
  register_kernel<Op::cos>(cuda, floating_unary<UnaryOp::kCos>);
  register_kernel<Op::tanh>(cuda, floating_unary<UnaryOp::kTanh>);
  register_kernel<Op::sigmoid>(cuda, floating_unary<UnaryOp::kSigmoid>);
  register_kernel<Op::relu>(cuda, relu_kernel);
  register_kernel<Op::silu>(cuda, floating_unary<UnaryOp::kSilu>);
  register_kernel<Op::logical_not>(cuda, logical_not_kernel);
  register_kernel<Op::gelu>(cuda, gelu_kernel);
  register_kernel<Op::gelu_backward>(cuda, gelu_backward_kernel);
  register_kernel<Op::threshold_backward>(cuda, threshold_backward_kernel);
  register_kernel<Op::clamp>(cuda, clamp_kernel);
  register_kernel<Op::add>(cuda, add_kernel);
  register_kernel<Op::sub>(cuda, sub_kernel);
  register_kernel<Op::mul>(cuda, mul_kernel);
  register_kernel<Op::div>(cuda, div_kernel);
  register_kernel<Op::pow>(cuda, pow_kernel);
  register_kernel<Op::maximum>(cuda, maximum_kernel);
  register_kernel<Op::minimum>(cuda, minimum_kernel);
  register_kernel<Op::eq>(cuda, eq_kernel);
  register_kernel<Op::ne>(cuda, ne_kernel);
  register_kernel<Op::lt>(cuda, lt_kernel);
  register_kernel<Op::le>(cuda, le_kernel);
  register_kernel<Op::gt>(cuda, gt_kernel);
  register_kernel<Op::ge>(cuda, ge_kernel);
  register_kernel<Op::logical_and>(cuda, logical_and_kernel);
  register_kernel<Op::logical_or>(cuda, logical_or_kernel);
  register_kernel<Op::where>(cuda, where_kernel);
  register_kernel<Op::arange>(cuda, arange_kernel);
  register_kernel<Op::uniform>(cuda, random_kernel<RandomOp::kUniform>);
  register_kernel<Op::normal>(cuda, random_kernel<RandomOp::kNormal>);
  register_kernel<Op::randint>(cuda, random_kernel<RandomOp::kRandint>);
  register_kernel<Op::bernoulli>(cuda, random_kernel<RandomOp::kBernoulli>);
}

}  // namespace loom::cuda
