/*
 * The Eigen-array loops of array_kernels.h, for one instruction set: the build's own
 * (LOOM_ARRAY_KERNELS_ISA unset: namespace `compiled`) or one that ops/CMakeLists.txt compiles
 * this file for again (namespace `avx2` or `avx512`). Everything here has internal linkage or
 * lives in that namespace, and each extra copy renames Eigen's, so the linker never picks one
 * copy's code for another.
 */
#include <cmath>
#include <cstdint>
#include <type_traits>

// GCC 12 reports the `__m512i __Y = __Y;` idiom of its own AVX-512 intrinsics, inlined into
// Eigen's sin/cos, as uninitialised (a false positive in system headers).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>
#pragma GCC diagnostic pop

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "ops/cpu/array_kernels.h"

#ifndef LOOM_ARRAY_KERNELS_ISA
#define LOOM_ARRAY_KERNELS_ISA compiled
#endif

namespace loom::cpu::LOOM_ARRAY_KERNELS_ISA {

namespace {

template <class A>
using ArrayMap = Eigen::Map<Eigen::Array<A, Eigen::Dynamic, 1>>;
template <class A>
using ConstArrayMap = Eigen::Map<const Eigen::Array<A, Eigen::Dynamic, 1>>;

// ---- elementwise functions -------------------------------------------------------------------
//
// Eigen 3.4 does not vectorise select(): an expression with one in it runs coefficient by
// coefficient, with the scalar exp or tanh. Where a result needs a fix-up (exp's underflow, tanh's
// saturation), it is applied by a plain loop over a block, which GCC vectorises for this copy's ISA.

#define LOOM_EIGEN_UNARY(name, expression)                \
  template <class A>                                      \
  void name(const A* xp, A* yp, int64_t n) {              \
    ConstArrayMap<A> x(xp, static_cast<Eigen::Index>(n)); \
    ArrayMap<A> y(yp, static_cast<Eigen::Index>(n));      \
    y = expression;                                       \
  }

LOOM_EIGEN_UNARY(log_array, x.log())
LOOM_EIGEN_UNARY(log1p_array, x.log1p())
LOOM_EIGEN_UNARY(sin_array, x.sin())
LOOM_EIGEN_UNARY(cos_array, x.cos())
// Eigen's logistic() for float is a coarse approximation (8e-4 relative error in the tail);
// 1 / (1 + exp(-x)) with its exp is within 3e-7.
LOOM_EIGEN_UNARY(sigmoid_array, (A(1) + (-x).exp()).inverse())
LOOM_EIGEN_UNARY(silu_array, x / (A(1) + (-x).exp()))
LOOM_EIGEN_UNARY(gelu_array, A(0.5) * x * (A(1) + (x * A(0.70710678118654752440)).erf()))
#undef LOOM_EIGEN_UNARY

// Blocks of kBlock values: small enough for the stack and L1, long enough for the vector loops.
constexpr int64_t kBlock = 256;

// body(i, len) for consecutive blocks [i, i + len) of [0, n).
template <class Body>
void for_each_block(int64_t n, const Body& body) {
  for (int64_t i = 0; i < n; i += kBlock) body(i, n - i < kBlock ? n - i : kBlock);
}

// Eigen's AVX2 exp clamps its input, so exp(-inf) would come out as 2.9e-39: results below the
// smallest normal number are flushed to 0 instead (as its AVX-512 path does).
template <class A>
void exp_array(const A* x, A* y, int64_t n) {
  const A lowest = A(std::is_same_v<A, float> ? -87.33654 : -708.39641);
  for_each_block(n, [&](int64_t i, int64_t len) {
    alignas(64) A e[kBlock];
    ArrayMap<A>(e, len) = ConstArrayMap<A>(x + i, len).exp();
    for (int64_t j = 0; j < len; ++j) y[i + j] = x[i + j] < lowest ? A(0) : e[j];  // x may be y
  });
}

// t[j] = tanh(u[j]), exactly +-1 where the correctly rounded value is (|u| > 9.1 in float, 19.1 in
// double): Eigen's rational approximation stops short of 1 in some builds (SSE2), and the GELU's
// 1 + tanh(u) would then be 6e-8 instead of 0, making gelu(-inf) -inf instead of NaN (PyTorch's).
template <class A>
void saturating_tanh(const A* u, A* t, int64_t len) {
  const A edge = std::is_same_v<A, float> ? A(9.1) : A(19.1);
  ArrayMap<A>(t, len) = ConstArrayMap<A>(u, len).tanh();
  for (int64_t j = 0; j < len; ++j) t[j] = std::abs(u[j]) > edge ? std::copysign(A(1), u[j]) : t[j];
}

template <class A>
void tanh_array(const A* x, A* y, int64_t n) {
  for_each_block(n, [&](int64_t i, int64_t len) {
    alignas(64) A t[kBlock];
    saturating_tanh(x + i, t, len);
    for (int64_t j = 0; j < len; ++j) y[i + j] = t[j];
  });
}

// The tanh GELU's inner argument, k (x + a x^3).
constexpr double kGeluK = 0.79788456080286535588, kGeluA = 0.044715;

template <class A>
void gelu_tanh_array(const A* xp, A* yp, int64_t n) {
  for_each_block(n, [&](int64_t i, int64_t len) {
    alignas(64) A u[kBlock], t[kBlock];
    ConstArrayMap<A> x(xp + i, len);
    ArrayMap<A>(u, len) = A(kGeluK) * (x + A(kGeluA) * x.cube());
    saturating_tanh(u, t, len);
    ArrayMap<A>(yp + i, len) = A(0.5) * x * (A(1) + ConstArrayMap<A>(t, len));
  });
}

// Correctly rounded square roots (Eigen's fast-math sqrt loses 1-2 bits): the hardware
// instruction on AVX-512/AVX2, otherwise std::sqrt, which vectorises because this file is
// compiled with -fno-math-errno.
template <bool kReciprocal, class A>
void sqrt_array(const A* x, A* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<A, float>) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (; i + 16 <= n; i += 16) {
      __m512 r = _mm512_sqrt_ps(_mm512_loadu_ps(x + i));
      _mm512_storeu_ps(y + i, kReciprocal ? _mm512_div_ps(one, r) : r);
    }
  } else {
    const __m512d one = _mm512_set1_pd(1.0);
    for (; i + 8 <= n; i += 8) {
      __m512d r = _mm512_sqrt_pd(_mm512_loadu_pd(x + i));
      _mm512_storeu_pd(y + i, kReciprocal ? _mm512_div_pd(one, r) : r);
    }
  }
#elif defined(__AVX2__)
  if constexpr (std::is_same_v<A, float>) {
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
      __m256 r = _mm256_sqrt_ps(_mm256_loadu_ps(x + i));
      _mm256_storeu_ps(y + i, kReciprocal ? _mm256_div_ps(one, r) : r);
    }
  } else {
    const __m256d one = _mm256_set1_pd(1.0);
    for (; i + 4 <= n; i += 4) {
      __m256d r = _mm256_sqrt_pd(_mm256_loadu_pd(x + i));
      _mm256_storeu_pd(y + i, kReciprocal ? _mm256_div_pd(one, r) : r);
    }
  }
#endif
  for (; i < n; ++i) y[i] = kReciprocal ? A(1) / std::sqrt(x[i]) : std::sqrt(x[i]);
}

// gelu'(x) times the incoming gradient, in one pass:
//   erf form:  Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
//   tanh form: 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 a x^2), t = tanh(k (x + a x^3))
template <class A>
void gelu_backward_array(const A* gp, const A* xp, A* outp, int64_t n, bool tanh_approximation) {
  if (tanh_approximation) {
    const A k = A(kGeluK), a = A(kGeluA);
    for_each_block(n, [&](int64_t i, int64_t len) {
      alignas(64) A u[kBlock], tb[kBlock];
      ConstArrayMap<A> g(gp + i, len), x(xp + i, len), t(tb, len);
      ArrayMap<A>(u, len) = k * (x + a * x.cube());
      saturating_tanh(u, tb, len);
      ArrayMap<A>(outp + i, len) =
          g * (A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t.square()) * k * (A(1) + A(3) * a * x.square()));
    });
    return;
  }
  // phi through exp_array, whose exp(-inf) is exactly 0: with Eigen's clamped exp (SSE2, AVX2)
  // phi(inf) was 1e-39 and gelu'(inf) = 1 + inf * phi came out inf instead of NaN (PyTorch's, and
  // the AVX-512 build's and the GPU's).
  const A inv_sqrt_2pi = A(0.39894228040143267794);
  for_each_block(n, [&](int64_t i, int64_t len) {
    alignas(64) A e[kBlock];
    ConstArrayMap<A> g(gp + i, len), x(xp + i, len);
    ArrayMap<A>(e, len) = A(-0.5) * x.square();
    exp_array(e, e, len);
    ArrayMap<A>(outp + i, len) = g * (A(0.5) * (A(1) + (x * A(0.70710678118654752440)).erf()) +
                                      x * inv_sqrt_2pi * ConstArrayMap<A>(e, len));
  });
}

// ---- layer norm rows -------------------------------------------------------------------------

// Two passes (the mean, then the mean of squared deviations): exact enough in float for large
// rows, unlike E[x^2] - E[x]^2.
template <class A>
void layer_norm_row(const A* xp, A* yp, const A* w, const A* b, int64_t d, A eps, A* mu_out, A* rs_out) {
  ConstArrayMap<A> x(xp, d);
  const A mu = x.sum() / static_cast<A>(d);
  const A var = (x - mu).square().sum() / static_cast<A>(d);
  const A rs = A(1) / std::sqrt(var + eps);
  *mu_out = mu;
  *rs_out = rs;
  ArrayMap<A> y(yp, d);
  if (w && b) {
    y = (x - mu) * rs * ConstArrayMap<A>(w, d) + ConstArrayMap<A>(b, d);
  } else if (w) {
    y = (x - mu) * rs * ConstArrayMap<A>(w, d);
  } else if (b) {
    y = (x - mu) * rs + ConstArrayMap<A>(b, d);
  } else {
    y = (x - mu) * rs;
  }
}

template <class A>
void layer_norm_backward_row(const A* xp, const A* gyp, const A* w, A mu, A rs, A* xhat_p, A* gxp,
                             int64_t d) {
  ConstArrayMap<A> x(xp, d), gy(gyp, d);
  ArrayMap<A> xhat(xhat_p, d), gx(gxp, d);
  xhat = (x - mu) * rs;
  if (w) {
    ConstArrayMap<A> wr(w, d);
    const A a = (gy * wr).sum() / static_cast<A>(d);
    const A bb = (gy * wr * xhat).sum() / static_cast<A>(d);
    gx = rs * (gy * wr - a - xhat * bb);
  } else {
    const A a = gy.sum() / static_cast<A>(d);
    const A bb = (gy * xhat).sum() / static_cast<A>(d);
    gx = rs * (gy - a - xhat * bb);
  }
}

template <class A>
void layer_norm_parameter_sums(const A* const* gy_rows, const A* xhat, int64_t d, int64_t group, int64_t j0,
                               int64_t width, A* sw, A* sb) {
  ArrayMap<A> sum_w(sw, width), sum_b(sb, width);
  for (int64_t k = 0; k < group; ++k) {  // Eigen: GCC's unroll-and-jam would scalarise
    ConstArrayMap<A> gy_k(gy_rows[k] + j0, width);
    sum_w += gy_k * ConstArrayMap<A>(xhat + k * d + j0, width);
    sum_b += gy_k;
  }
}

template <class A>
constexpr ArrayKernels<A> kTable{
    exp_array<A>,
    log_array<A>,
    log1p_array<A>,
    sqrt_array<false, A>,
    sqrt_array<true, A>,
    sin_array<A>,
    cos_array<A>,
    tanh_array<A>,
    sigmoid_array<A>,
    silu_array<A>,
    gelu_array<A>,
    gelu_tanh_array<A>,
    gelu_backward_array<A>,
    layer_norm_row<A>,
    layer_norm_backward_row<A>,
    layer_norm_parameter_sums<A>,
};

}  // namespace

template <class A>
const ArrayKernels<A>& array_kernels_table() {
  return kTable<A>;
}

template const ArrayKernels<float>& array_kernels_table<float>();
template const ArrayKernels<double>& array_kernels_table<double>();

}  // namespace loom::cpu::LOOM_ARRAY_KERNELS_ISA
