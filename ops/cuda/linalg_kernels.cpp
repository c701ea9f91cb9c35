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
 * Bias: copied (broadcast) into the output first and added by the GEMM with beta = 1, so the sum
 * a b + bias is formed in the compute type and rounded to a 16-bit output once, as the CPU kernel's
 * fused bias does; no extra kernel is needed.
 */
#include <algorithm>
#include <optional>

#include "ops/copy_ops.h"
#include "ops/cuda/blas.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/dispatch.h"

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

void matmul_kernel(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) {
  if (out.numel() == 0) return;
  const DType dtype = out.dtype();
  LOOM_CHECK(is_floating(dtype),
             "matmul: CUDA supports float32, float64, float16 and bfloat16 (cuBLAS has no ", dtype,
             " GEMM), got operands ", a.sizes(), " and ", b.sizes(), " of dtype ", dtype);
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);

  // out^T (N x M column-major) must be writable directly: unit column stride, ld = row stride.
  const bool out_direct = (out.stride(2) == 1 || n <= 1) &&
                          (m <= 1 || out.stride(1) >= std::max<int64_t>(1, n)) &&
                          (batch <= 1 || out.stride(0) != 0);
  Tensor c = out_direct ? out : empty(out.sizes(), out.options());
  const int64_t ldc = m <= 1 ? std::max<int64_t>(1, n) : c.stride(1);
  const int64_t stride_c = batch <= 1 ? 0 : c.stride(0);

  if (bias.defined()) {
    copy_(c, bias);  // broadcast over batches and rows; the GEMM adds to it (beta = 1)
  } else if (k == 0) {
    fill_(c, 0);
  }
  if (k > 0) {
    const Operand A = prepare(b);  // cuBLAS's A: op(A) = b^T, N x K
    const Operand B = prepare(a);  // cuBLAS's B: op(B) = a^T, K x M
    gemm_strided_batched(A.layout.op, B.layout.op, n, m, k, 1.0, A.t.data_ptr(), A.layout.ld, A.batch_stride,
                         B.t.data_ptr(), B.layout.ld, B.batch_stride, bias.defined() ? 1.0 : 0.0,
                         c.data_ptr(), ldc, stride_c, batch, dtype, nullptr);
  }
  if (!out_direct) copy_(out, c);
}

}  // namespace

void register_linalg_cuda_kernels() {
  register_kernel<Op::matmul>(DeviceType::CUDA, matmul_kernel);
}

}  // namespace loom::cuda
