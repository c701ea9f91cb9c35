/*
 * CUDA matmul: out[b] = a[b] @ b[b] (+ bias) for a [B, M, K], b [B, K, N], out [B, M, N], through
 * one cuBLAS strided batched GEMM (ops/cuda/blas.h). f32, f64, f16 and bf16; integer matmul has
 * no cuBLAS GEMM and is refused (as PyTorch's CUDA backend does).
 *
 * Row-major to column-major: a row-major R x C matrix with strides (sr, sc) is, read column-major,
 * its transpose (C x R). So out = a b becomes out^T = b^T a^T in cuBLAS's terms: m = N, n = M,
 * k = K, cuBLAS's A is our b and its B our a. Each operand is passed in place whenever one of its
 * strides is 1 and the other a valid leading dimension: strides (sr, 1) give op N with ld = sr,
 * strides (1, sc) (a transposed view such as W^T in linear) give op T with ld = sc. Anything else
 * is copied to a contiguous matrix first. A batch of stride 0 (one matrix broadcast over the
 * batch) stays stride 0, which strided batched GEMM allows. out is written in place when it is
 * row-major with unit column stride and distinct batches; otherwise into a temporary, then copied.
 *
 * Bias: cuBLASLt's BIAS epilogue (ops/cuda/blas_lt.h) adds it inside the GEMM, before the one
 * rounding to the output type, as the CPU kernel's fused bias does. Where cuBLASLt has no
 * algorithm, the bias is copied (broadcast) into the output and the GEMM adds to it (beta = 1).
 *
 * linear_activation: the same GEMM with cuBLASLt's GELU_AUX_BIAS epilogue for the tanh GELU (the
 * GELU input kept as the pre-activation for backward). ReLU and the erf GELU run the GEMM (bias in
 * its epilogue) and then the activation kernel in place: cuBLASLt's GELU is the tanh form only,
 * and its RELU epilogue turns a NaN into 0, where relu keeps it (see linear_activation_kernel).
 * linear_weight_grad: grad^T x with the BGRADB epilogue summing grad for the bias.
 * linear_input_grad_activation: grad @ weight with the DGELU_BGRAD epilogue for the tanh GELU
 * (the GELU's derivative at the saved pre-activation and the bias gradient, in the GEMM).
 */
#include <algorithm>
#include <optional>

#include "ops/copy_ops.h"
#include "ops/cuda/blas.h"
#include "ops/cuda/blas_lt.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/op_stream.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/reduction.h"

namespace loom::cuda {

namespace {

// A row-major rows x cols matrix as cuBLAS sees its transpose (cols x rows, column-major):
// op(stored) = matrix^T with the leading dimension ld.
struct ColumnMajor {
  BlasOp op;
  int64_t ld;
};

// The in-place description, or nothing if the strides need a copy. A size-1 dim's stride is
// never used, so it does not disqualify a layout.
std::optional<ColumnMajor> column_major(int64_t rows, int64_t cols, int64_t sr, int64_t sc) {
  // A matrix of no elements is never read, and its strides may be anything (an expanded empty
  // gradient has stride 0 everywhere, and contiguous() keeps it): the smallest legal ld.
  if (rows == 0 || cols == 0) return ColumnMajor{BlasOp::kN, std::max<int64_t>(1, cols)};
  // Stored as the cols x rows column-major matrix itself (op N): unit column stride, ld = sr >= cols.
  if ((sc == 1 || cols <= 1) && (rows <= 1 || sr >= std::max<int64_t>(1, cols)))
    return ColumnMajor{BlasOp::kN, rows <= 1 ? std::max<int64_t>(1, cols) : sr};
  // Stored as the rows x cols column-major matrix (op T): unit row stride, ld = sc >= rows.
  if ((sr == 1 || rows <= 1) && (cols <= 1 || sc >= std::max<int64_t>(1, rows)))
    return ColumnMajor{BlasOp::kT, cols <= 1 ? std::max<int64_t>(1, rows) : sc};
  return std::nullopt;
}

struct Operand {
  Tensor t;  // the tensor whose data cuBLAS reads (the input or a contiguous copy)
  ColumnMajor layout;
  int64_t batch_stride;
};

// A [B, R, C] operand ready for cuBLAS: itself when its matrix strides fit, else a contiguous
// copy (of one matrix only when the batch is broadcast).
Operand prepare(const Tensor& x) {
  const int64_t rows = x.size(1), cols = x.size(2);
  const bool broadcast = x.size(0) <= 1 || x.stride(0) == 0;
  Tensor t = x;
  auto layout = column_major(rows, cols, x.stride(1), x.stride(2));
  if (!layout) {
    t = broadcast ? contiguous(x.narrow(0, 0, 1)) : contiguous(x);
    layout = column_major(rows, cols, t.stride(1), t.stride(2));
    LOOM_CHECK(layout.has_value(), "matmul: internal error: contiguous ", t.sizes(), " has no BLAS layout");
  }
  return Operand{t, *layout, broadcast ? 0 : t.stride(0)};
}

void check_gemm_dtype(std::string_view op, const Tensor& out, const Tensor& a, const Tensor& b) {
  LOOM_CHECK(is_floating(out.dtype()), op,
             ": CUDA supports float32, float64, float16 and bfloat16 (cuBLAS has no ", out.dtype(),
             " GEMM), got operands ", a.sizes(), " and ", b.sizes(), " of dtype ", out.dtype());
}

// out [B, M, N] = a [B, M, K] @ b [B, K, N] in cuBLAS's terms: out^T = b^T a^T, m = N, n = M.
struct RowMajorGemm {
  Tensor c;  // where the GEMM writes: out, or a row-major temporary when out's strides do not fit
  bool direct = true;
  LtGemm lt;

  RowMajorGemm(const Tensor& out, const Tensor& a, const Tensor& b) {
    const int64_t batch = out.size(0), m = out.size(1), n = out.size(2);
    // out^T (N x M column-major) must be writable directly: unit column stride, ld = row stride.
    direct = (out.stride(2) == 1 || n <= 1) && (m <= 1 || out.stride(1) >= std::max<int64_t>(1, n)) &&
             (batch <= 1 || out.stride(0) != 0);
    c = direct ? out : empty(out.sizes(), out.options());
    const Operand A = prepare(b);  // cuBLAS's A: op(A) = b^T, N x K
    const Operand B = prepare(a);  // cuBLAS's B: op(B) = a^T, K x M
    keep_a_ = A.t;
    keep_b_ = B.t;
    lt.transa = A.layout.op;
    lt.transb = B.layout.op;
    lt.m = n;
    lt.n = m;
    lt.k = a.size(2);
    lt.a = A.t.data_ptr();
    lt.lda = A.layout.ld;
    lt.stride_a = A.batch_stride;
    lt.b = B.t.data_ptr();
    lt.ldb = B.layout.ld;
    lt.stride_b = B.batch_stride;
    lt.d = c.data_ptr();
    lt.ldd = m <= 1 ? std::max<int64_t>(1, n) : c.stride(1);
    lt.stride_d = batch <= 1 ? 0 : c.stride(0);
    lt.batch = batch;
    lt.dtype = out.dtype();
  }

  // cuBLAS's GEMM, C = op(A) op(B) + beta C.
  void gemm(double beta) const {
    gemm_strided_batched(lt.transa, lt.transb, lt.m, lt.n, lt.k, 1.0, lt.a, lt.lda, lt.stride_a, lt.b, lt.ldb,
                         lt.stride_b, beta, lt.d, lt.ldd, lt.stride_d, lt.batch, lt.dtype, op_stream());
  }

  void finish(const Tensor& out) const {
    if (!direct) copy_(out, c);
  }

 private:
  Tensor keep_a_, keep_b_;  // the operands (or their copies) that lt points into
};

// out = a @ b + bias, through cuBLASLt's BIAS epilogue when it has an algorithm, else cuBLAS.
void gemm_bias(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) {
  RowMajorGemm g(out, a, b);
  if (g.lt.k == 0) {  // an empty sum: the bias alone, or zeros
    if (bias.defined()) copy_(g.c, bias);
    else fill_(g.c, 0);
  } else if (bias.defined()) {
    Tensor packed = contiguous(bias);  // cuBLASLt reads the bias vector with unit stride
    g.lt.epilogue = LtEpilogue::kBias;
    g.lt.bias = packed.data_ptr();
    if (!lt_matmul(g.lt)) {
      copy_(g.c, bias);  // broadcast over batches and rows; the GEMM adds to it (beta = 1)
      g.gemm(1.0);
    }
  } else {
    g.gemm(0.0);
  }
  g.finish(out);
}

void matmul_kernel(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) {
  if (out.numel() == 0) return;
  check_gemm_dtype("matmul", out, a, b);
  gemm_bias(out, a, b, bias);
}

void apply_activation(const Tensor& out, const Tensor& pre, Activation activation) {
  if (activation == Activation::Relu) get_kernel<Op::relu>(DeviceType::CUDA)(out, pre);
  else get_kernel<Op::gelu>(DeviceType::CUDA)(out, pre, activation == Activation::GeluTanh);
}

// out = activation(a @ b + bias); pre (when defined) = a @ b + bias. The ops layer allocates out
// and pre contiguous.
void linear_activation_kernel(const Tensor& out, const Tensor& pre, const Tensor& a, const Tensor& b,
                              const Tensor& bias, Activation activation) {
  if (out.numel() == 0) return;
  check_gemm_dtype("linear_activation", out, a, b);
  const int64_t n = out.size(2);
  // No RELU_BIAS epilogue: cuBLASLt computes its relu as max(x, 0) with a NaN going to 0 (as its
  // users report), while relu on the CPU, in Loom's kernel and in PyTorch keeps NaN. Fused, a
  // layer whose weights went NaN would hand finite zeros on, and the loss would stay finite on
  // the GPU while it is NaN on the CPU. The relu kernel after the GEMM costs one pass over out.
  // cuBLASLt's aux matrix (the GELU input) needs a leading dimension that is a multiple of 8.
  const bool fusable = activation == Activation::GeluTanh && (!pre.defined() || n % 8 == 0);
  if (fusable && a.size(2) > 0) {
    RowMajorGemm g(out, a, b);
    Tensor packed = bias.defined() ? contiguous(bias) : Tensor();
    g.lt.epilogue = LtEpilogue::kGeluTanhBias;
    g.lt.bias = packed.defined() ? packed.data_ptr() : nullptr;
    if (pre.defined()) {
      g.lt.aux = pre.data_ptr();
      g.lt.aux_ld = n;
      g.lt.aux_stride = out.size(0) <= 1 ? 0 : out.size(1) * n;
    }
    if (g.direct && lt_matmul(g.lt)) return;
  }
  // Without a pre-activation to keep, the activation runs in place on the GEMM's output.
  const Tensor& h = pre.defined() ? pre : out;
  gemm_bias(h, a, b, bias);
  apply_activation(out, h, activation);
}

// grad_weight [N, K] = grad [R, N]^T x [R, K]; grad_bias [N] = the column sums of grad.
// In cuBLAS's terms grad_weight^T (K x N) = op(A) op(B) with op(A) = x^T, op(B) = grad, so
// BGRADB's sums of op(B) over k are the bias gradient.
void linear_weight_grad_kernel(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad,
                               const Tensor& x) {
  if (grad_weight.numel() == 0 && (!grad_bias.defined() || grad_bias.numel() == 0)) return;
  check_gemm_dtype("linear_weight_grad", grad_weight, grad, x);
  const int64_t r = grad.size(0), n = grad.size(1), k = x.size(1);
  if (r > 0 && grad_weight.numel() > 0) {
    // grad_weight^T as cuBLAS's D: K x N column-major, ld = grad_weight's row stride (contiguous).
    const Operand X = prepare(x.unsqueeze(0));     // op(stored) = x^T, K x R
    const Operand G = prepare(grad.unsqueeze(0));  // op(stored) = grad^T: flip it to read grad
    LtGemm lt;
    lt.transa = X.layout.op;
    lt.transb = G.layout.op == BlasOp::kN ? BlasOp::kT : BlasOp::kN;
    lt.m = k;
    lt.n = n;
    lt.k = r;
    lt.a = X.t.data_ptr();
    lt.lda = X.layout.ld;
    lt.b = G.t.data_ptr();
    lt.ldb = G.layout.ld;
    lt.d = grad_weight.data_ptr();
    lt.ldd = std::max<int64_t>(1, k);
    lt.dtype = grad_weight.dtype();
    if (grad_bias.defined()) {
      lt.epilogue = LtEpilogue::kBiasGradB;
      lt.bias = grad_bias.data_ptr();
      if (lt_matmul(lt)) return;
      lt.epilogue = LtEpilogue::kNone;
      lt.bias = nullptr;
    }
    if (!lt_matmul(lt))
      gemm_strided_batched(lt.transa, lt.transb, k, n, r, 1.0, lt.a, lt.lda, 0, lt.b, lt.ldb, 0, 0.0, lt.d,
                           lt.ldd, 0, 1, lt.dtype, op_stream());
  } else if (grad_weight.numel() > 0) {
    fill_(grad_weight, 0);
  }
  if (grad_bias.defined()) copy_(grad_bias, sum(grad, {0}));
}

// grad_pre [R, H] = (grad [R, N] @ weight [N, H]) * activation'(...), grad_bias = its column
// sums. In cuBLAS's terms grad_pre^T (H x R) = weight^T grad^T, so the pre-activation, row-major
// [R, H], is DGELU's aux with ld H, and DGELU_BGRAD's sums over D's columns are over the rows R.
// cuBLASLt has the tanh GELU's derivative only; relu's (DRELU_BGRAD) reads a bit mask in a
// format only RELU_AUX writes, so relu, the erf GELU, an aux leading dimension cuBLASLt refuses
// (not a multiple of 8) or no algorithm take the GEMM, then the activation's backward and the
// sums, as the CPU does.
void linear_input_grad_activation_kernel(const Tensor& grad_pre, const Tensor& grad_bias, const Tensor& grad,
                                         const Tensor& weight, const Tensor& pre, const Tensor& hidden,
                                         Activation activation) {
  check_gemm_dtype("linear_input_grad_activation", grad_pre, grad, weight);
  const int64_t h = grad_pre.size(1);
  if (activation == Activation::GeluTanh && h % 8 == 0 && grad.size(1) > 0) {
    RowMajorGemm g(grad_pre.unsqueeze(0), grad.unsqueeze(0), weight.unsqueeze(0));
    g.lt.epilogue = LtEpilogue::kDGeluTanh;
    g.lt.aux = pre.data_ptr();
    g.lt.aux_ld = h;
    g.lt.bias = grad_bias.defined() ? grad_bias.data_ptr() : nullptr;
    if (g.direct && lt_matmul(g.lt)) return;
  }
  Tensor grad_hidden = empty(grad_pre.sizes(), grad_pre.options());
  gemm_bias(grad_hidden.unsqueeze(0), grad.unsqueeze(0), weight.unsqueeze(0), Tensor());
  copy_(grad_pre, activation_backward(grad_hidden, pre, hidden, activation));
  if (grad_bias.defined()) copy_(grad_bias, sum(grad_pre, {0}));
}

}  // namespace

void register_linalg_cuda_kernels() {
  register_kernel<Op::matmul>(DeviceType::CUDA, matmul_kernel);
  register_kernel<Op::linear_activation>(DeviceType::CUDA, linear_activation_kernel);
  register_kernel<Op::linear_weight_grad>(DeviceType::CUDA, linear_weight_grad_kernel);
  register_kernel<Op::linear_input_grad_activation>(DeviceType::CUDA, linear_input_grad_activation_kernel);
}

}  // namespace loom::cuda
