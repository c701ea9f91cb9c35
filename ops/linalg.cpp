/*
 * Matrix products (see linalg.h). Every product becomes one call of the matmul kernel on 3-D
 * operands [B, M, K] x [B, K, N] -> [B, M, N]:
 *  - 1-D operands get a unit dim (removed from the result), as torch.matmul;
 *  - batch dims broadcast; a broadcast operand keeps stride 0 over the batch (the kernel reads
 *    it once), and batch dims are merged into one without a copy whenever the strides allow;
 *  - [*, M, K] x [K, N] (and linear's [*, in] x W^T) folds the batch into the rows: one large
 *    GEMM instead of many small ones, with W^T read in place through its strides.
 * For autograd, matmul, mm and bmm all record one op, matmul of (a, b) (mm and bmm are
 * matmuls of restricted shapes); linear records matmul of (x, weight, bias) with linear = true.
 */
#include "ops/linalg.h"

#include <atomic>

#include "ops/autocast.h"
#include "ops/autograd_hook.h"
#include "ops/copy_ops.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/op_utils.h"
#include "ops/view_ops.h"

namespace loom {

namespace {

void check_operands(const Tensor& a, const Tensor& b, std::string_view op) {
  check_defined(a, op, "first operand");
  check_defined(b, op, "second operand");
  check_same_device(a, b, op);
  LOOM_CHECK(a.dtype() == b.dtype(), op, ": expected both operands to have the same dtype, got ", a.dtype(),
             " ", a.sizes(), " and ", b.dtype(), " ", b.sizes());
  LOOM_CHECK(a.dtype() != DType::Bool, op, ": not supported for bool tensors (shapes ", a.sizes(), " and ",
             b.sizes(), ")");
}

// Merges dims [begin, end) of (sizes, strides) into one (size, stride) when they are laid out as
// one strided run (size-1 dims are skipped; stride-0 dims merge with each other). False if not.
bool merge_dims(IntArrayRef sizes, IntArrayRef strides, size_t begin, size_t end, int64_t& size,
                int64_t& stride) {
  size = 1;
  stride = 1;
  bool first = true;
  for (size_t d = end; d-- > begin;) {
    if (sizes[d] == 1) continue;
    if (first) {
      size = sizes[d];
      stride = strides[d];
      first = false;
    } else if (strides[d] == stride * size) {
      size *= sizes[d];
    } else {
      return false;
    }
  }
  return true;
}

// x [*batch, R, C] as [B, R, C]: a view when the batch dims merge, else a contiguous copy.
Tensor as_3d(const Tensor& x) {
  const int64_t nd = x.dim();
  int64_t size = 1, stride = 1;
  if (!merge_dims(x.sizes(), x.strides(), 0, static_cast<size_t>(nd - 2), size, stride))
    return as_3d(contiguous(x));
  return make_view(x, {size, x.size(nd - 2), x.size(nd - 1)}, {stride, x.stride(nd - 2), x.stride(nd - 1)},
                   x.storage_offset());
}

// x [*lead, C] as [1, R, C] with R = prod(lead): a view when the leading dims merge, else a copy.
Tensor rows_3d(const Tensor& x) {
  const int64_t nd = x.dim();
  int64_t rows = 1, row_stride = 1;
  if (!merge_dims(x.sizes(), x.strides(), 0, static_cast<size_t>(nd - 1), rows, row_stride))
    return rows_3d(contiguous(x));
  return make_view(x, {1, rows, x.size(nd - 1)}, {rows * row_stride, row_stride, x.stride(nd - 1)},
                   x.storage_offset());
}

Tensor run_kernel(const Tensor& a3, const Tensor& b3, const Tensor& bias) {
  Tensor out = empty({std::max(a3.size(0), b3.size(0)), a3.size(1), b3.size(2)}, a3.options());
  if (out.numel() > 0) get_kernel<Op::matmul>(a3.device())(out, a3, b3, bias);
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  LOOM_AUTOCAST_LOWER(matmul, a, b);
  check_operands(a, b, "matmul");
  LOOM_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dim, got shapes ",
             a.sizes(), " and ", b.sizes());
  if (should_record(a, b))
    return recorded<Op::matmul>({a, b}, MatmulAttrs{false}, [&] { return matmul(a, b); });
  const int64_t da = a.dim(), db = b.dim();
  Tensor A = da == 1 ? unsqueeze(a, 0) : a;  // [*, M, K]
  Tensor B = db == 1 ? unsqueeze(b, 1) : b;  // [*, K, N]
  const int64_t m = A.size(-2), k = A.size(-1), n = B.size(-1);
  LOOM_CHECK(B.size(-2) == k, "matmul: inner dimensions differ: shapes ", a.sizes(), " and ", b.sizes(), " (",
             k, " vs ", B.size(-2), ")");
  IntArrayRef batch_a(A.sizes().data(), static_cast<size_t>(A.dim() - 2));
  IntArrayRef batch_b(B.sizes().data(), static_cast<size_t>(B.dim() - 2));
  const size_t nb = std::max(batch_a.size(), batch_b.size());
  DimVector batch(nb);
  for (size_t i = 0; i < nb; ++i) {
    int64_t x = i < nb - batch_a.size() ? 1 : batch_a[i - (nb - batch_a.size())];
    int64_t y = i < nb - batch_b.size() ? 1 : batch_b[i - (nb - batch_b.size())];
    LOOM_CHECK(x == y || x == 1 || y == 1, "matmul: batch dimensions of shapes ", a.sizes(), " and ",
               b.sizes(), " cannot be broadcast (", x, " vs ", y, ")");
    batch[i] = x == 1 ? y : x;
  }

  DimVector result_shape(batch);
  if (da > 1) result_shape.push_back(m);
  if (db > 1) result_shape.push_back(n);

  Tensor out3;
  int64_t rows = 1, row_stride = 1;
  if (B.dim() == 2 &&
      merge_dims(A.sizes(), A.strides(), 0, static_cast<size_t>(A.dim() - 1), rows, row_stride)) {
    // [*, M, K] x [K, N]: the batch folds into the rows, one GEMM.
    Tensor a3 = make_view(A, {1, rows, k}, {rows * row_stride, row_stride, A.stride(-1)}, A.storage_offset());
    out3 = run_kernel(a3, unsqueeze(B, 0), Tensor());
  } else {
    DimVector shape_a(batch), shape_b(batch);
    shape_a.push_back(m);
    shape_a.push_back(k);
    shape_b.push_back(k);
    shape_b.push_back(n);
    out3 = run_kernel(as_3d(expand(A, shape_a)), as_3d(expand(B, shape_b)), Tensor());
  }
  return out3.view(result_shape);
}

Tensor mm(const Tensor& a, const Tensor& b) {
  LOOM_AUTOCAST_LOWER(mm, a, b);
  check_operands(a, b, "mm");
  LOOM_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-D matrices, got shapes ", a.sizes(), " and ",
             b.sizes());
  LOOM_CHECK(a.size(1) == b.size(0), "mm: inner dimensions differ: shapes ", a.sizes(), " and ", b.sizes(),
             " (", a.size(1), " vs ", b.size(0), ")");
  if (should_record(a, b)) return recorded<Op::matmul>({a, b}, MatmulAttrs{false}, [&] { return mm(a, b); });
  return run_kernel(unsqueeze(a, 0), unsqueeze(b, 0), Tensor()).view({a.size(0), b.size(1)});
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  LOOM_AUTOCAST_LOWER(bmm, a, b);
  check_operands(a, b, "bmm");
  LOOM_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D batches of matrices, got shapes ", a.sizes(),
             " and ", b.sizes());
  LOOM_CHECK(a.size(0) == b.size(0), "bmm: batch sizes differ: shapes ", a.sizes(), " and ", b.sizes());
  LOOM_CHECK(a.size(2) == b.size(1), "bmm: inner dimensions differ: shapes ", a.sizes(), " and ", b.sizes(),
             " (", a.size(2), " vs ", b.size(1), ")");
  if (should_record(a, b)) return recorded<Op::matmul>({a, b}, MatmulAttrs{false}, [&] { return bmm(a, b); });
  if (a.size(0) == 0) return empty({0, a.size(1), b.size(2)}, a.options());
  return run_kernel(a, b, Tensor());
}

namespace {

void check_activation(Activation activation, std::string_view op) {
  LOOM_CHECK(
      activation == Activation::Relu || activation == Activation::Gelu || activation == Activation::GeluTanh,
      op, ": unknown activation ", static_cast<int64_t>(activation));
}

// A weight [out, in] and an optional bias [out] for inputs with x's dtype, device and in features.
void check_linear_parameters(const Tensor& x, int64_t in, const Tensor& weight, const Tensor& bias,
                             std::string_view op) {
  LOOM_CHECK(weight.dim() == 2, op, ": expected a 2-D weight [out, in], got shape ", weight.sizes());
  LOOM_CHECK(in == weight.size(1), op, ": input shape ", x.sizes(), " does not match weight shape ",
             weight.sizes(), " (", in, " input features vs ", weight.size(1), ")");
  if (bias.defined()) {
    check_same_device(x, bias, op);
    LOOM_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), op, ": expected a bias of shape [",
               weight.size(0), "] for weight shape ", weight.sizes(), ", got ", bias.sizes());
    LOOM_CHECK(bias.dtype() == x.dtype(), op, ": bias dtype ", bias.dtype(), " differs from input dtype ",
               x.dtype());
  }
}

void check_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, std::string_view op) {
  check_operands(x, weight, op);
  LOOM_CHECK(x.dim() >= 1, op, ": expected an input with at least 1 dim, got shape ", x.sizes());
  check_linear_parameters(x, x.size(-1), weight, bias, op);
}

// weight [out, in] as the [1, in, out] right operand W^T, read in place.
Tensor weight_t_3d(const Tensor& weight) {
  const int64_t in = weight.size(1), out_features = weight.size(0);
  return make_view(weight, {1, in, out_features}, {in * out_features, weight.stride(1), weight.stride(0)},
                   weight.storage_offset());
}

DimVector linear_shape(const Tensor& x, const Tensor& weight) {
  DimVector shape(x.sizes());
  shape.back() = weight.size(0);
  return shape;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  LOOM_AUTOCAST_LOWER(linear, x, weight, bias);
  check_linear(x, weight, bias, "linear");
  if (should_record(x, weight, bias))
    return recorded<Op::matmul>({x, weight, bias}, MatmulAttrs{true},
                                [&] { return linear(x, weight, bias); });
  return run_kernel(rows_3d(x), weight_t_3d(weight), bias).view(linear_shape(x, weight));
}

std::pair<Tensor, Tensor> linear_activation_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                                    Activation activation) {
  LOOM_AUTOCAST_LOWER(linear_activation_forward, x, weight, bias, activation);
  check_linear(x, weight, bias, "linear_activation");
  check_activation(activation, "linear_activation");
  if (should_record(x, weight, bias)) {
    std::pair<Tensor, Tensor> r;
    {
      AutoGradMode below_autograd(false);
      r = linear_activation_forward(x, weight, bias, activation);
    }
    if (r.second.defined())
      record<Op::linear_activation>({x, weight, bias}, {r.first, r.second}, LinearActivationAttrs{activation});
    else
      record<Op::linear_activation>({x, weight, bias}, {r.first}, LinearActivationAttrs{activation});
    return r;
  }
  Tensor a3 = rows_3d(x), b3 = weight_t_3d(weight);
  Tensor out = empty({1, a3.size(1), weight.size(0)}, x.options());
  // relu's gradient reads the output; the GELUs' read the pre-activation.
  Tensor pre = activation == Activation::Relu ? Tensor() : empty(out.sizes(), out.options());
  if (out.numel() > 0) get_kernel<Op::linear_activation>(x.device())(out, pre, a3, b3, bias, activation);
  const DimVector shape = linear_shape(x, weight);
  return {out.view(shape), pre.defined() ? pre.view(shape) : Tensor()};
}

Tensor linear_activation(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation activation) {
  return linear_activation_forward(x, weight, bias, activation).first;
}

std::pair<Tensor, Tensor> linear_weight_grad(const Tensor& grad, const Tensor& x, bool with_bias) {
  check_operands(grad, x, "linear_weight_grad");
  LOOM_CHECK(grad.dim() == 2 && x.dim() == 2 && grad.size(0) == x.size(0),
             "linear_weight_grad: expected grad [R, out] and x [R, in] with the same rows, got shapes ",
             grad.sizes(), " and ", x.sizes());
  if (should_record(grad, x)) {
    std::pair<Tensor, Tensor> r;
    {
      AutoGradMode below_autograd(false);
      r = linear_weight_grad(grad, x, with_bias);
    }
    // Without the bias there is one output (an undefined second one would get a zero gradient).
    if (with_bias) record<Op::linear_weight_grad>({grad, x}, {r.first, r.second}, NoAttrs{});
    else record<Op::linear_weight_grad>({grad, x}, {r.first}, NoAttrs{});
    return r;
  }
  Tensor grad_weight = empty({grad.size(1), x.size(1)}, x.options());
  Tensor grad_bias = with_bias ? empty({grad.size(1)}, x.options()) : Tensor();
  get_kernel<Op::linear_weight_grad>(x.device())(grad_weight, grad_bias, grad, x);
  return {grad_weight, grad_bias};
}

std::tuple<Tensor, Tensor, Tensor> linear_activation_linear_forward(const Tensor& x, const Tensor& weight1,
                                                                    const Tensor& bias1,
                                                                    const Tensor& weight2,
                                                                    const Tensor& bias2,
                                                                    Activation activation) {
  LOOM_AUTOCAST_LOWER(linear_activation_linear_forward, x, weight1, bias1, weight2, bias2, activation);
  // Everything is checked before the first product runs: the second linear's input is the
  // hidden layer, with x's dtype and device and weight1.size(0) features.
  check_linear(x, weight1, bias1, "linear_activation_linear (first linear)");
  check_defined(weight2, "linear_activation_linear", "second weight");
  check_operands(x, weight2, "linear_activation_linear (second linear)");
  LOOM_CHECK(weight2.dim() == 2 && weight2.size(1) == weight1.size(0),
             "linear_activation_linear: the second weight must be [out, ", weight1.size(0),
             "] to take the first linear's ", weight1.size(0), " features (first weight ", weight1.sizes(),
             "), got ", weight2.sizes());
  check_linear_parameters(x, weight1.size(0), weight2, bias2, "linear_activation_linear (second linear)");
  check_activation(activation, "linear_activation_linear");
  if (should_record(x, weight1, bias1, weight2, bias2)) {
    std::tuple<Tensor, Tensor, Tensor> r;
    {
      AutoGradMode below_autograd(false);
      r = linear_activation_linear_forward(x, weight1, bias1, weight2, bias2, activation);
    }
    const auto& [out, hidden, pre] = r;
    if (pre.defined())
      record<Op::linear_activation_linear>({x, weight1, bias1, weight2, bias2}, {out, hidden, pre},
                                           LinearActivationAttrs{activation});
    else
      record<Op::linear_activation_linear>({x, weight1, bias1, weight2, bias2}, {out, hidden},
                                           LinearActivationAttrs{activation});
    return r;
  }
  auto [hidden, pre] = linear_activation_forward(x, weight1, bias1, activation);
  return {linear(hidden, weight2, bias2), hidden, pre};
}

Tensor linear_activation_linear(const Tensor& x, const Tensor& weight1, const Tensor& bias1,
                                const Tensor& weight2, const Tensor& bias2, Activation activation) {
  return std::get<0>(linear_activation_linear_forward(x, weight1, bias1, weight2, bias2, activation));
}

Tensor activation_backward(const Tensor& grad, const Tensor& pre, const Tensor& output,
                           Activation activation) {
  if (activation == Activation::Relu) return threshold_backward(grad, output, 0.0);
  return gelu_backward(grad, pre, activation == Activation::GeluTanh ? "tanh" : "none");
}

std::pair<Tensor, Tensor> linear_input_grad_activation(const Tensor& grad, const Tensor& weight2,
                                                       const Tensor& pre, const Tensor& hidden,
                                                       Activation activation, bool with_bias) {
  constexpr std::string_view op = "linear_input_grad_activation";
  check_operands(grad, weight2, op);
  check_activation(activation, op);
  LOOM_CHECK(grad.dim() == 2 && weight2.dim() == 2 && grad.size(1) == weight2.size(0), op,
             ": expected grad [R, out] and weight [out, hidden], got shapes ", grad.sizes(), " and ",
             weight2.sizes());
  const DimVector want{grad.size(0), weight2.size(1)};
  const Tensor& saved = activation == Activation::Relu ? hidden : pre;
  check_defined(saved, op, activation == Activation::Relu ? "hidden (relu's output)" : "pre-activation");
  for (const Tensor* t : {&hidden, &pre}) {
    if (!t->defined()) continue;
    check_same_device(grad, *t, op);
    LOOM_CHECK(t->sizes() == IntArrayRef(want) && t->dtype() == grad.dtype(), op,
               ": expected the hidden layer as ", grad.dtype(), " ", IntArrayRef(want), " for grad ",
               grad.sizes(), " and weight ", weight2.sizes(), ", got ", t->dtype(), " ", t->sizes());
  }
  LOOM_CHECK(!should_record(grad, weight2, pre, hidden), op,
             ": not differentiable (a backward op); for a second derivative differentiate the unfused ops");
  Tensor grad_pre = empty(want, grad.options());
  Tensor grad_bias = with_bias ? empty({want[1]}, grad.options()) : Tensor();
  if (grad_pre.numel() == 0) {
    if (with_bias) fill_(grad_bias, 0);
    return {grad_pre, grad_bias};
  }
  get_kernel<Op::linear_input_grad_activation>(grad.device())(
      grad_pre, grad_bias, grad, weight2, pre.defined() ? contiguous(pre) : pre,
      hidden.defined() ? contiguous(hidden) : hidden, activation);
  return {grad_pre, grad_bias};
}

// ---- Tensor methods ------------------------------------------------------------------------
Tensor Tensor::matmul(const Tensor& other) const {
  return loom::matmul(*this, other);
}
Tensor Tensor::mm(const Tensor& other) const {
  return loom::mm(*this, other);
}
Tensor Tensor::bmm(const Tensor& other) const {
  return loom::bmm(*this, other);
}

namespace cuda {

namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }

}  // namespace cuda

}  // namespace loom
