/*
 * CPU matmul kernel: out[b] = a[b] @ b[b] (+ bias) for a [B, M, K], b [B, K, N], out [B, M, N].
 *
 *  - f32, bf16: oneDNN's matmul primitive, given each operand's own strides, so a transposed
 *    view (x.t(), W^T in linear) is read in place; a batch of stride 0 (one matrix broadcast over
 *    the batch) becomes a batch dim of 1, which oneDNN broadcasts. The bias is fused (matmul
 *    with a [1, 1, N] bias). A product runs on the threads its size pays for (ProductTeam), and
 *    primitives are cached by shapes, strides, dtype and that thread count.
 *  - f16: oneDNN 2.6 has no f16 matmul for CPUs, so the operands are converted to f32 and the
 *    result rounded back (PyTorch's CPU half matmul also accumulates in f32); so is bf16 on CPUs
 *    without AVX-512, where oneDNN has no bf16 kernels.
 *  - f64 and integers: Eigen's GEMM (blocked, vectorised, OpenMP-parallel), one batch at a time,
 *    or batches in parallel when the matrices are small. Integers wrap around like PyTorch's.
 * linear_activation, linear_weight_grad and linear_input_grad_activation are the unfused
 * computations, op for op, so that CPU results do not depend on whether a model uses the fused ops.
 */
#include <Eigen/Core>

#include "core/parallel.h"
#include "ops/copy_ops.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/onednn_utils.h"
#include "ops/cpu/parallel_grain.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/reduction.h"
#include "ops/view_ops.h"

namespace loom::cpu {

namespace {

namespace dn = onednn;

// True when oneDNN (or a BLAS) can read a rows x cols matrix with these element strides: one dim
// is unit-stride and the other a leading dimension at least as long as that dim.
bool blas_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if (rows <= 1) row_stride = cols;
  if (cols <= 1) col_stride = 1;
  if (rows > 1 && cols <= 1 && row_stride == 1) return true;  // a column vector
  return (col_stride == 1 && row_stride >= cols) || (row_stride == 1 && col_stride >= rows);
}

// The operand as a 3-D tensor oneDNN accepts: itself when its matrix strides fit and its batch is
// either dense or broadcast (stride 0), else a contiguous copy.
Tensor blas_ready(const Tensor& t) {
  const int64_t rows = t.size(1), cols = t.size(2);
  bool ok = blas_layout(rows, cols, t.stride(1), t.stride(2));
  if (ok) return t;
  if (t.size(0) > 1 && t.stride(0) == 0) {  // keep the broadcast: copy one matrix only
    Tensor one = contiguous(t.narrow(0, 0, 1));
    return expand(one, t.sizes());
  }
  return contiguous(t);
}

// oneDNN descriptor of a [B, R, C] operand; a stride-0 (or single) batch is described as batch 1.
dnnl::memory::desc operand_md(const Tensor& t, bool& broadcast) {
  broadcast = t.size(0) == 1 || t.stride(0) == 0;
  int64_t rows = t.size(1), cols = t.size(2);
  // Size-1 dims get the strides of the plain row-major layout, which oneDNN's fast kernels expect.
  int64_t sr = rows <= 1 ? cols : t.stride(1), sc = cols <= 1 ? 1 : t.stride(2);
  int64_t batch_stride = broadcast ? std::max(sr * rows, sc * cols) : t.stride(0);
  return dnnl::memory::desc({broadcast ? 1 : t.size(0), rows, cols}, dn::data_type(t.dtype()),
                            {batch_stride, sr, sc});
}

struct MatmulPrimitive {
  dnnl::matmul prim;
  dnnl::memory::desc a_md, b_md, c_md, bias_md, scratch_md;
};

void onednn_matmul(const Tensor& out, const Tensor& a_in, const Tensor& b_in, const Tensor& bias) {
  static dn::LruCache<MatmulPrimitive> cache(512);
  Tensor a = blas_ready(a_in), b = blas_ready(b_in);
  const bool out_direct =
      blas_layout(out.size(1), out.size(2), out.stride(1), out.stride(2)) && out.stride(0) != 0;
  Tensor c = out_direct ? out : empty(out.sizes(), out.options());
  bool a_bcast = false, b_bcast = false, c_bcast = false;
  // Both operands broadcast over a batch > 1: materialise one so that dst's batch is produced.
  if (c.size(0) > 1 && (a.size(0) == 1 || a.stride(0) == 0) && (b.size(0) == 1 || b.stride(0) == 0))
    a = contiguous(a);

  dn::ProductTeam team(c.size(0) * c.size(1) * c.size(2) * a.size(2));
  dn::Key key;
  key.add(omp_get_max_threads()).add(a).add(b).add(c).add(bias);
  auto entry = cache.get(key, [&] {
    MatmulPrimitive p;
    p.a_md = operand_md(a, a_bcast);
    p.b_md = operand_md(b, b_bcast);
    p.c_md = operand_md(c, c_bcast);
    const int64_t n = c.size(2);
    if (bias.defined()) {
      const int64_t s = n <= 1 ? 1 : bias.stride(0);
      p.bias_md = dnnl::memory::desc({1, 1, n}, dn::data_type(bias.dtype()), {n * s, n * s, s});
    }
    dnnl::matmul::desc desc = bias.defined() ? dnnl::matmul::desc(p.a_md, p.b_md, p.bias_md, p.c_md)
                                             : dnnl::matmul::desc(p.a_md, p.b_md, p.c_md);
    dnnl::matmul::primitive_desc pd(desc, dn::user_scratchpad_attr(), dn::engine());
    p.scratch_md = pd.scratchpad_desc();
    p.prim = dnnl::matmul(pd);
    return p;
  });

  std::unordered_map<int, dnnl::memory> args;
  args[DNNL_ARG_SRC] = dn::wrap(entry->a_md, a);
  args[DNNL_ARG_WEIGHTS] = dn::wrap(entry->b_md, b);
  args[DNNL_ARG_DST] = dn::wrap(entry->c_md, c);
  if (bias.defined()) args[DNNL_ARG_BIAS] = dn::wrap(entry->bias_md, bias);
  dn::execute(entry->prim, args, entry->scratch_md);
  if (!out_direct) copy_(out, c);
}

template <class T>
void eigen_matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Row = Eigen::Matrix<T, 1, Eigen::Dynamic>;
  using Str = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>;
  const int64_t batch = out.size(0), m = out.size(1), k = a.size(2), n = out.size(2);
  const T* ap = a.data_ptr<T>();
  const T* bp = b.data_ptr<T>();
  T* cp = out.data_ptr<T>();
  const T* biasp = bias.defined() ? bias.data_ptr<T>() : nullptr;
  const int64_t bias_stride = bias.defined() ? bias.stride(0) : 0;

  auto one = [&](int64_t i) {
    Eigen::Map<const Mat, Eigen::Unaligned, Str> A(ap + i * a.stride(0), m, k, Str(a.stride(1), a.stride(2)));
    Eigen::Map<const Mat, Eigen::Unaligned, Str> B(bp + i * b.stride(0), k, n, Str(b.stride(1), b.stride(2)));
    Eigen::Map<Mat, Eigen::Unaligned, Str> C(cp + i * out.stride(0), m, n, Str(out.stride(1), out.stride(2)));
    if (k == 0) {
      C.setZero();
    } else {
      C.noalias() = A * B;
    }
    if (biasp) {
      Eigen::Map<const Row, Eigen::Unaligned, Eigen::InnerStride<>> bias_row(
          biasp, 1, n, Eigen::InnerStride<>(bias_stride));
      C.rowwise() += bias_row;
    }
  };
  // Small matrices: one per thread (Eigen then runs serially inside the parallel region).
  // Large ones: one after the other, each with Eigen's own OpenMP-parallel GEMM on the threads
  // its size pays for.
  const int64_t flops_per_matrix = std::max<int64_t>(m * n * std::max<int64_t>(k, 1), 1);
  if (batch > 1 && flops_per_matrix < (int64_t{1} << 20)) {
    // Chunks of about 2^18 multiply-adds.
    parallel_for(0, batch, grain_for(flops_per_matrix, int64_t{1} << 18), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) one(i);
    });
  } else {
    onednn::ProductTeam team(flops_per_matrix);
    for (int64_t i = 0; i < batch; ++i) one(i);
  }
}

void matmul_kernel(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) {
  if (out.numel() == 0) return;
  const DType t = out.dtype();
  if (a.size(2) == 0 && t != DType::Float64 && is_floating(t)) {  // oneDNN rejects K = 0: the sum is empty
    if (bias.defined()) {
      copy_(out, bias.unsqueeze(0).unsqueeze(0).expand(out.sizes()));
    } else {
      fill_(out, 0);
    }
    return;
  }
  if (dn::computes_in_f32(t)) {
    // f16 (and bf16 on CPUs without AVX-512), which oneDNN cannot multiply here: compute in f32
    // and round once at the end.
    auto widen = [](const Tensor& x) -> Tensor {
      if (!x.defined()) return x;
      if (x.dim() == 3 && x.size(0) > 1 && x.stride(0) == 0)  // convert one matrix, keep the broadcast
        return expand(to(x.narrow(0, 0, 1), DType::Float32), x.sizes());
      return to(x, DType::Float32);
    };
    Tensor out32 = empty(out.sizes(), out.options().dtype(DType::Float32));
    dn::guarded("matmul", [&] { onednn_matmul(out32, widen(a), widen(b), widen(bias)); });
    copy_(out, out32);
    return;
  }
  switch (t) {
    case DType::Float32:
    case DType::BFloat16:
      dn::guarded("matmul", [&] { onednn_matmul(out, a, b, bias); });
      return;
    default:
      visit_numeric_dtype(t, "matmul", [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
          LOOM_FAIL("matmul: unexpected dtype ", out.dtype());  // handled above
        } else {
          eigen_matmul<T>(out, a, b, bias);
        }
      });
  }
}

// Exactly linear followed by the activation op, so that fusing a model's Linear and activation
// does not change a CPU result: the matmul kernel, then relu / gelu as the public ops compute them.
void linear_activation_kernel(const Tensor& out, const Tensor& pre, const Tensor& a, const Tensor& b,
                              const Tensor& bias, Activation activation) {
  Tensor h = pre.defined() ? pre : empty(out.sizes(), out.options());
  matmul_kernel(h, a, b, bias);
  copy_(out, activation == Activation::Relu ? relu(h) : gelu(h, activation == Activation::GeluTanh ? "tanh" : "none"));
}

// Exactly linear's unfused gradients: matmul(grad^T, x) and grad.sum({0}).
void linear_weight_grad_kernel(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad,
                               const Tensor& x) {
  if (grad_weight.numel() > 0) matmul_kernel(grad_weight.unsqueeze(0), grad.t().unsqueeze(0), x.unsqueeze(0), Tensor());
  if (grad_bias.defined()) copy_(grad_bias, sum(grad, {0}));
}

// Exactly the unfused gradient: matmul(grad, weight), then relu's or gelu's backward as their
// formulas compute it, then the column sums.
void linear_input_grad_activation_kernel(const Tensor& grad_pre, const Tensor& grad_bias, const Tensor& grad,
                                         const Tensor& weight, const Tensor& pre, const Tensor& hidden,
                                         Activation activation) {
  Tensor grad_hidden = empty(grad_pre.sizes(), grad_pre.options());
  matmul_kernel(grad_hidden.unsqueeze(0), grad.unsqueeze(0), weight.unsqueeze(0), Tensor());
  copy_(grad_pre, activation_backward(grad_hidden, pre, hidden, activation));
  if (grad_bias.defined()) copy_(grad_bias, sum(grad_pre, {0}));
}

}  // namespace

void register_linalg_kernels() {
  register_kernel<Op::matmul>(DeviceType::CPU, matmul_kernel);
  register_kernel<Op::linear_activation>(DeviceType::CPU, linear_activation_kernel);
  register_kernel<Op::linear_weight_grad>(DeviceType::CPU, linear_weight_grad_kernel);
  register_kernel<Op::linear_input_grad_activation>(DeviceType::CPU, linear_input_grad_activation_kernel);
}

}  // namespace loom::cpu
