/*
 * CPU kernels for softmax, log_softmax, their backward functions, and the negative
 * log-likelihood loss.
 *
 * The softmax family sees a contiguous tensor as [outer, D, inner] around `dim`.
 *  - dim last (inner == 1): one row of D contiguous values at a time, parallel over rows:
 *    max, then one fused vectorised loop that stores exp(x - max) and sums it (a
 *    polynomial exp for float, array_kernels.h's for double), then a scale. The row stays in L1
 *    between the passes, so memory sees one read of x and one write of out.
 *  - other dims: a block of up to kBlock inner columns at a time; the D rows of the block
 *    are walked three times (max, exp-sum, write) with unit stride over the columns.
 * Numerically stable: softmax(x) = exp(x - max) / sum(exp(x - max)). 16-bit floats are
 * converted to float row by row and accumulate in float; float64 stays in double.
 */
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/array_kernels.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/eigen_arrays.h"
#include "ops/cpu/parallel_grain.h"
#include "ops/cpu/row_buffers.h"
#include "ops/cpu/softmax_loops.h"
#include "ops/cpu/vector_isa.h"
#include "ops/dim_geometry.h"
#include "ops/dispatch.h"

namespace loom::cpu {

namespace {

using namespace softmax_loops;

// Inner columns handled together when softmax runs along a non-last dim: 1 KiB of floats per
// row keeps the hardware prefetchers and the TLB effective (narrower blocks that would fit
// in L2 measured several times slower: every row of a block lies on another page).
constexpr int64_t kBlock = 256;

// ---- exp(x - m) and its sum over a row ----------------------------------------------------------
// The last-dim softmax spends its time here. For float, one fused loop computes, stores and
// sums exp(x - m) with a polynomial exp that GCC vectorises (OpenMP simd reduction): a pass
// fewer than Eigen's exp followed by a sum. Arguments are <= 0 after the max is subtracted.

// exp(x) = 2^k * exp(r), x = k ln2 + r, |r| <= ln2 / 2; exp(r) by its degree-7 Taylor-like
// minimax polynomial (Cephes expf); max relative error ~1.2e-7. Below -87.3 (where 2^k would
// leave the normal range) the result is 0; NaN stays NaN.
#pragma omp declare simd notinbranch
inline float exp_nonpositive(float x) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693145751953125f,
                  kLn2Lo = 1.428606765330187045e-6f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the low bits
  const float xc = x < -87.3f ? -87.3f : x;
  const float t = xc * kLog2e + kRound;
  const float k = t - kRound;
  const int32_t ki = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  float r = xc - k * kLn2Hi;
  r = r - k * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const float two_k = std::bit_cast<float>((ki + 127) << 23);
  const float y = p * two_k;
  return x < -87.3f ? 0.0f : y;  // two selects, no branch: vectorises without AVX-512's masks
}

// exp over n contiguous values in place: array_kernels.h's, which flushes results below the
// smallest normal number to 0, so that masked (-inf) logits give exactly 0 (Eigen's AVX2 exp
// clamps its argument: 2.9e-39 for float, 5.6e-309 for double), and which stays vectorised
// (an Eigen select() would not be).
template <class A>
void exp_in_place(A* x, int64_t n) {
  array_kernels<A>().exp(x, x, n);
}

// out[i] = exp(x[i] - m); returns the sum. The loops take their operands as restrict
// parameters, not through a lambda's references, which would hide that out aliases nothing.
inline float exp_store_sum_loop(float* __restrict out, const float* __restrict x, float m, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) {
    const float e = exp_nonpositive(x[i] - m);
    out[i] = e;
    s += e;
  }
  return s;
}
float exp_store_sum(float* out, const float* x, float m, int64_t n) {
  return with_vector_isa([=] { return exp_store_sum_loop(out, x, m, n); });
}
double exp_store_sum(double* out, const double* x, double m, int64_t n) {
  shifted_row(x, out, m, n);
  exp_in_place(out, n);
  return with_vector_isa([=] { return sum_loop(out, n); });
}

// sum(exp(x[i] - m))
inline float exp_sum_loop(const float* __restrict x, float m, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += exp_nonpositive(x[i] - m);
  return s;
}
float exp_sum(const float* x, float m, int64_t n) {
  return with_vector_isa([=] { return exp_sum_loop(x, m, n); });
}
double exp_sum(const double* x, double m, int64_t n) {
  constexpr int64_t kExpBlock = 256;
  alignas(64) double e[kExpBlock];
  double s = 0;
  for (int64_t i = 0; i < n; i += kExpBlock) {
    const int64_t len = std::min(kExpBlock, n - i);
    shifted_row(x + i, e, m, len);
    exp_in_place(e, len);
    s += with_vector_isa([&] { return sum_loop(e, len); });
  }
  return s;
}

// Per-thread row buffers of the blocked (non-last dim) loops.
template <class A>
struct BlockBuffers {
  std::vector<A> in, in2, out, max, sum;
};

// The [outer, size, inner] tensor cut into tasks of one outer index and up to kBlock inner
// columns, in parallel: body(buffers, base, w) for each, base the element offset of the task's
// first column in row d = 0 (row d starts at base + d * g.inner) and w its width.
template <class A, class Body>
void for_each_column_block(const DimGeometry& g, const Body& body) {
  const int64_t bw = std::min(kBlock, g.inner);
  const int64_t blocks = (g.inner + bw - 1) / bw, tasks = g.outer * blocks;
  parallel_for(0, tasks, grain_for(g.size * bw), [&](int64_t begin, int64_t end) {
    BlockBuffers<A> buffers;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t o = task / blocks, j0 = (task % blocks) * bw;
      body(buffers, o * g.size * g.inner + j0, std::min(bw, g.inner - j0));
    }
  });
}

// ---- softmax / log_softmax forward ----------------------------------------------------------

template <class T, bool kLog>
void softmax_last_dim(T* out, const T* x, int64_t rows, int64_t n) {
  using A = opmath_t<T>;
  parallel_for(0, rows, grain_for(n), [&](int64_t begin, int64_t end) {
    std::vector<A> in_buf, out_buf;
    for (int64_t r = begin; r < end; ++r) {
      const A* xp = load<A>(x + r * n, n, in_buf);
      A* o = scratch<A>(out + r * n, n, out_buf);
      const A m = row_max(xp, n);
      if constexpr (kLog) {
        shifted_row(xp, o, m + std::log(exp_sum(xp, m, n)), n);
      } else {
        scale_row(o, A(1) / exp_store_sum(o, xp, m, n), n);
      }
      store(out + r * n, o, n);
    }
  });
}

// Along a non-last dim: for each outer index, blocks of inner columns.
template <class T, bool kLog>
void softmax_inner_dim(T* out, const T* x, const DimGeometry& g) {
  using A = opmath_t<T>;
  for_each_column_block<A>(g, [&](BlockBuffers<A>& buf, int64_t base, int64_t w) {
    const T* xb = x + base;
    T* ob = out + base;
    buf.max.assign(static_cast<size_t>(w), -std::numeric_limits<A>::infinity());
    buf.sum.assign(static_cast<size_t>(w), A(0));
    buf.in2.resize(static_cast<size_t>(w));
    A* mx = buf.max.data();
    A* sum = buf.sum.data();
    A* e = buf.in2.data();
    for (int64_t d = 0; d < g.size; ++d) {
      const A* xr = load<A>(xb + d * g.inner, w, buf.in);
      with_vector_isa([=] { max_into_loop(mx, xr, w); });
    }
    for (int64_t d = 0; d < g.size; ++d) {
      const A* xr = load<A>(xb + d * g.inner, w, buf.in);
      with_vector_isa([=] { subtract_loop(xr, mx, e, w); });
      exp_in_place(e, w);
      with_vector_isa([=] { add_into_loop(sum, e, w); });
    }
    // Once per block: the log-sum-exp per column, or the reciprocal of the sum.
    ArrayMap<A> sums(sum, w);
    if constexpr (kLog) {
      sums = ConstArrayMap<A>(mx, w) + sums.log();
    } else {
      sums = sums.inverse();
    }
    for (int64_t d = 0; d < g.size; ++d) {
      const A* xr = load<A>(xb + d * g.inner, w, buf.in);
      A* o_row = scratch<A>(ob + d * g.inner, w, buf.out);
      if constexpr (kLog) {
        with_vector_isa([=] { subtract_loop(xr, sum, o_row, w); });
      } else {
        with_vector_isa([=] { subtract_loop(xr, mx, o_row, w); });
        exp_in_place(o_row, w);
        with_vector_isa([=] { multiply_by_loop(o_row, sum, w); });
      }
      store(ob + d * g.inner, o_row, w);
    }
  });
}

// out, x contiguous, same shape and dtype; dim already wrapped.
template <bool kLog>
void softmax_kernel(const Tensor& out, const Tensor& x, int64_t dim) {
  const DimGeometry g = geometry_around(x, dim);
  if (x.numel() == 0) return;
  visit_floating_dtype(x.dtype(), kLog ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out.data_ptr());
    const T* xp = static_cast<const T*>(x.data_ptr());
    if (g.inner == 1) {
      softmax_last_dim<T, kLog>(o, xp, g.outer, g.size);
    } else {
      softmax_inner_dim<T, kLog>(o, xp, g);
    }
  });
}

// ---- backward -----------------------------------------------------------------------------
// softmax:     gx = y * (gy - sum(gy * y))
// log_softmax: gx = gy - exp(y) * sum(gy)

template <class T, bool kLog>
void softmax_backward_last_dim(T* gx, const T* gy, const T* y, int64_t rows, int64_t n) {
  using A = opmath_t<T>;
  parallel_for(0, rows, grain_for(n), [&](int64_t begin, int64_t end) {
    std::vector<A> gy_buf, y_buf, out_buf;
    for (int64_t r = begin; r < end; ++r) {
      const A* gyr = load<A>(gy + r * n, n, gy_buf);
      const A* yr = load<A>(y + r * n, n, y_buf);
      A* o = scratch<A>(gx + r * n, n, out_buf);
      if constexpr (kLog) {
        array_kernels<A>().exp(yr, o, n);
        with_vector_isa([=] { log_softmax_grad_row_loop(gyr, o, sum_loop(gyr, n), n); });
      } else {
        with_vector_isa([=] { softmax_grad_row_loop(gyr, yr, o, dot_loop(gyr, yr, n), n); });
      }
      store(gx + r * n, o, n);
    }
  });
}

template <class T, bool kLog>
void softmax_backward_inner_dim(T* gx, const T* gy, const T* y, const DimGeometry& g) {
  using A = opmath_t<T>;
  for_each_column_block<A>(g, [&](BlockBuffers<A>& buf, int64_t base, int64_t w) {
    buf.sum.assign(static_cast<size_t>(w), A(0));
    A* sum = buf.sum.data();
    for (int64_t d = 0; d < g.size; ++d) {
      const A* gyr = load<A>(gy + base + d * g.inner, w, buf.in);
      if constexpr (kLog) {
        with_vector_isa([=] { add_into_loop(sum, gyr, w); });
      } else {
        const A* yr = load<A>(y + base + d * g.inner, w, buf.in2);
        with_vector_isa([=] { add_products_loop(sum, gyr, yr, w); });
      }
    }
    for (int64_t d = 0; d < g.size; ++d) {
      const A* gyr = load<A>(gy + base + d * g.inner, w, buf.in);
      const A* yr = load<A>(y + base + d * g.inner, w, buf.in2);
      A* o_row = scratch<A>(gx + base + d * g.inner, w, buf.out);
      if constexpr (kLog) {
        array_kernels<A>().exp(yr, o_row, w);
        with_vector_isa([=] { log_softmax_grad_columns_loop(gyr, sum, o_row, w); });
      } else {
        with_vector_isa([=] { softmax_grad_columns_loop(gyr, yr, sum, o_row, w); });
      }
      store(gx + base + d * g.inner, o_row, w);
    }
  });
}

// grad_input, grad_out, out contiguous, same shape and dtype.
template <bool kLog>
void softmax_backward_kernel(const Tensor& grad_input, const Tensor& grad_out, const Tensor& out,
                             int64_t dim) {
  const DimGeometry g = geometry_around(out, dim);
  if (out.numel() == 0) return;
  visit_floating_dtype(out.dtype(), kLog ? "log_softmax_backward" : "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* gx = static_cast<T*>(grad_input.data_ptr());
    const T* gy = static_cast<const T*>(grad_out.data_ptr());
    const T* y = static_cast<const T*>(out.data_ptr());
    if (g.inner == 1) {
      softmax_backward_last_dim<T, kLog>(gx, gy, y, g.outer, g.size);
    } else {
      softmax_backward_inner_dim<T, kLog>(gx, gy, y, g);
    }
  });
}

// ---- nll_loss ---------------------------------------------------------------------------------
// logp [N, C] (any strides), target [N] int64, weight undefined or [C] in logp's dtype.
// Sums accumulate in double.

template <class T>
double class_weight(const Tensor& weight, int64_t c) {
  if (!weight.defined()) return 1.0;
  return static_cast<double>(static_cast<const T*>(weight.data_ptr())[c * weight.strides()[0]]);
}

void nll_loss_kernel(const Tensor& out, const Tensor& total_weight, const Tensor& logp, const Tensor& target,
                     const Tensor& weight, Reduction reduction, int64_t ignore_index) {
  visit_floating_dtype(logp.dtype(), "nll_loss", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = logp.sizes()[0], classes = logp.sizes()[1];
    const int64_t s0 = logp.strides()[0], s1 = logp.strides()[1], st = target.strides()[0];
    const T* lp = static_cast<const T*>(logp.data_ptr());
    const int64_t* tg = target.data_ptr<int64_t>();
    T* o = static_cast<T*>(out.data_ptr());
    const int64_t so = reduction == Reduction::None ? out.strides()[0] : 0;
    double loss_sum = 0, weight_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = tg[i * st];
      double loss = 0;
      if (t != ignore_index) {
        LOOM_CHECK(t >= 0 && t < classes, "nll_loss: target ", t, " is out of bounds for ", classes,
                   " classes (at batch index ", i, ")");
        const double w = class_weight<T>(weight, t);
        loss = -w * static_cast<double>(lp[i * s0 + t * s1]);
        weight_sum += w;
      }
      if (reduction == Reduction::None) o[i * so] = static_cast<T>(loss);
      loss_sum += loss;
    }
    // Mean of no counted targets is 0/0 = NaN, as PyTorch.
    if (reduction == Reduction::Mean) *o = static_cast<T>(loss_sum / weight_sum);
    if (reduction == Reduction::Sum) *o = static_cast<T>(loss_sum);
    *static_cast<T*>(total_weight.data_ptr()) = static_cast<T>(weight_sum);
  });
}

// grad_logp [N, C] contiguous, zero-filled by the caller; grad_out 0-dim or [N].
void nll_loss_backward_kernel(const Tensor& grad_logp, const Tensor& grad_out, const Tensor& target,
                              const Tensor& weight, const Tensor& total_weight, Reduction reduction,
                              int64_t ignore_index) {
  visit_floating_dtype(grad_logp.dtype(), "nll_loss_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t n = grad_logp.sizes()[0], classes = grad_logp.sizes()[1];
    T* g = static_cast<T*>(grad_logp.data_ptr());
    const int64_t* tg = target.data_ptr<int64_t>();
    const int64_t st = target.strides()[0];
    const T* go = static_cast<const T*>(grad_out.data_ptr());
    const int64_t sgo = reduction == Reduction::None ? grad_out.strides()[0] : 0;
    double scale = 1.0;
    if (reduction == Reduction::Mean)
      scale = 1.0 / static_cast<double>(*static_cast<const T*>(total_weight.data_ptr()));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = tg[i * st];
      if (t == ignore_index) continue;
      LOOM_CHECK(t >= 0 && t < classes, "nll_loss_backward: target ", t, " is out of bounds for ", classes,
                 " classes (at batch index ", i, ")");
      g[i * classes + t] =
          static_cast<T>(-class_weight<T>(weight, t) * static_cast<double>(go[i * sgo]) * scale);
    }
  });
}

}  // namespace

void register_nn_kernels() {
  register_kernel<Op::softmax>(DeviceType::CPU, softmax_kernel<false>);
  register_kernel<Op::log_softmax>(DeviceType::CPU, softmax_kernel<true>);
  register_kernel<Op::softmax_backward>(DeviceType::CPU, softmax_backward_kernel<false>);
  register_kernel<Op::log_softmax_backward>(DeviceType::CPU, softmax_backward_kernel<true>);
  register_kernel<Op::nll_loss>(DeviceType::CPU, nll_loss_kernel);
  register_kernel<Op::nll_loss_backward>(DeviceType::CPU, nll_loss_backward_kernel);
}

}  // namespace loom::cpu
