/*
 * CPU kernels of the elementwise ops (unary, binary, comparisons, where, clamp, gelu).
 *
 * One generic apply per arity (elementwise_apply.h): contiguous operands run as one flat
 * range split over the OpenMP pool, anything else through the strided engine of loops.h.
 * Inside a run the scalar functor of elementwise_functors.h is applied by loops the compiler
 * vectorises (unit stride, scalar operand, strided).
 * Transcendental ops on float and double use Eigen's vectorised array functions (exp, log,
 * log1p, sin, cos, tanh, erf) on contiguous runs, in the copy compiled for the CPU's vector
 * instructions (array_kernels.h); strided inputs are gathered into a block first. Half and
 * BFloat16 operands are converted to float blocks (hardware conversions for Half), computed in
 * float and rounded back. Large outputs that no input shares are written
 * with streaming stores through an L1 block (write_out, elementwise_apply.h).
 */
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "ops/cpu/array_kernels.h"
#include "ops/cpu/block_conversion.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/elementwise_apply.h"
#include "ops/cpu/elementwise_functors.h"
#include "ops/cpu/loops.h"
#include "ops/dispatch.h"

namespace loom::cpu {

namespace {

// Transcendental functions cost ~10x a simple op: parallelise smaller tensors.
constexpr int64_t kHeavyGrain = kParallelGrain / 8;

// ---- 16-bit floats: through float blocks (block_conversion.h) --------------------------------

constexpr int64_t kConvertBlock = 256;

// o[j] = f(x[j]) for a 16-bit In, through float blocks; Out is In or bool.
template <class Out, class In, class F>
void unary_blocked(Out* o, int64_t so, const In* x, int64_t sx, int64_t n, const F& f) {
  alignas(64) float xb[kConvertBlock];
  for (int64_t i = 0; i < n; i += kConvertBlock) {
    const int64_t len = std::min(kConvertBlock, n - i);
    widen_block(x + i * sx, sx, xb, len);
    if constexpr (kIsReducedFloat<Out>) {
      for (int64_t j = 0; j < len; ++j) xb[j] = static_cast<float>(f(xb[j]));
      narrow_block(xb, o + i * so, so, len);
    } else {
      Out* oi = o + i * so;
      for (int64_t j = 0; j < len; ++j) oi[j * so] = static_cast<Out>(f(xb[j]));
    }
  }
}

// o[j] = f(x[j], y[j]) for a 16-bit In, through float blocks; Out is In or bool.
template <class Out, class In, class F>
void binary_blocked(Out* o, int64_t so, const In* x, int64_t sx, const In* y, int64_t sy, int64_t n, const F& f) {
  alignas(64) float xb[kConvertBlock];
  alignas(64) float yb[kConvertBlock];
  for (int64_t i = 0; i < n; i += kConvertBlock) {
    const int64_t len = std::min(kConvertBlock, n - i);
    widen_block(x + i * sx, sx, xb, len);
    widen_block(y + i * sy, sy, yb, len);
    if constexpr (kIsReducedFloat<Out>) {
      for (int64_t j = 0; j < len; ++j) xb[j] = static_cast<float>(f(xb[j], yb[j]));
      narrow_block(xb, o + i * so, so, len);
    } else {
      Out* oi = o + i * so;
      for (int64_t j = 0; j < len; ++j) oi[j * so] = static_cast<Out>(f(xb[j], yb[j]));
    }
  }
}

// ---- unary: scalar functor -------------------------------------------------------------------
template <class Out, class In, class F>
void unary_contig(Out* __restrict o, const In* __restrict x, int64_t n, const F& f) {
  using M = opmath_t<In>;
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<Out>(f(static_cast<M>(x[i])));
}

// out[i] = f(in[i]); f maps opmath values of In to values convertible to Out.
template <class Out, class In, class F>
void unary_typed(const Tensor& out, const Tensor& in, const F& f, int64_t grain = kParallelGrain) {
  using M = opmath_t<In>;
  const bool stream = should_stream(out, {&in});
  apply<2>({&out, &in}, grain, [&](char* const* p, const int64_t* s, int64_t n) {
    Out* o = reinterpret_cast<Out*>(p[0]);
    const In* x = reinterpret_cast<const In*>(p[1]);
    constexpr int64_t so1 = sizeof(Out), si1 = sizeof(In);
    if constexpr (kIsReducedFloat<In>) {
      unary_blocked<Out, In>(o, s[0] / so1, x, s[1] / si1, n, f);
    } else if (s[0] == so1 && s[1] == si1) {
      write_out(o, n, stream, [&](Out* d, int64_t i, int64_t len) { unary_contig<Out, In>(d, x + i, len, f); });
    } else {
      const int64_t so = s[0] / so1, sx = s[1] / si1;
      for (int64_t i = 0; i < n; ++i) o[i * so] = static_cast<Out>(f(static_cast<M>(x[i * sx])));
    }
  });
}

// ---- unary: vectorised array functions (float and double) -----------------------------------
// The functions of array_kernels.h: Eigen's packet math, in the copy compiled for the CPU's ISA.
template <class M>
using UnaryArrayKernel = typename ArrayKernels<M>::Unary ArrayKernels<M>::*;

// out[i] = kernel(in[i]) for a floating T (out and in both T). Contiguous float/double runs call
// the kernel in place of the output; other runs gather blocks into an opmath buffer.
template <class T>
void unary_array_typed(const Tensor& out, const Tensor& in, UnaryArrayKernel<opmath_t<T>> kernel) {
  using M = opmath_t<T>;
  const auto run = array_kernels<M>().*kernel;
  const bool stream = should_stream(out, {&in});
  apply<2>({&out, &in}, kHeavyGrain, [&](char* const* p, const int64_t* s, int64_t n) {
    T* o = reinterpret_cast<T*>(p[0]);
    const T* x = reinterpret_cast<const T*>(p[1]);
    constexpr int64_t s1 = sizeof(T);
    if constexpr (std::is_same_v<T, M>) {
      if (s[0] == s1 && s[1] == s1) {
        write_out(o, n, stream, [&](T* d, int64_t i, int64_t len) { run(x + i, d, len); });
        return;
      }
    }
    constexpr int64_t kBlock = kBlockBytes / static_cast<int64_t>(sizeof(M));
    alignas(64) M buf[kBlock];
    const int64_t so = s[0] / s1, sx = s[1] / s1;
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t len = std::min(kBlock, n - i);
      const T* xi = x + i * sx;
      T* oi = o + i * so;
      if constexpr (kIsReducedFloat<T>) {
        widen_block(xi, sx, buf, len);
        run(buf, buf, len);
        narrow_block(buf, oi, so, len);
      } else {
        for (int64_t j = 0; j < len; ++j) buf[j] = xi[j * sx];
        run(buf, buf, len);
        for (int64_t j = 0; j < len; ++j) oi[j * so] = buf[j];
      }
    }
  });
}

// The member pointer names the same function in the float and the double table.
#define LOOM_FLOATING_UNARY(name)                                      \
  void name##_kernel(const Tensor& out, const Tensor& in) {            \
    visit_floating_dtype(out.dtype(), #name, [&](auto tag) {           \
      using T = typename decltype(tag)::type;                          \
      unary_array_typed<T>(out, in, &ArrayKernels<opmath_t<T>>::name); \
    });                                                                \
  }
LOOM_FLOATING_UNARY(exp)
LOOM_FLOATING_UNARY(log)
LOOM_FLOATING_UNARY(log1p)
LOOM_FLOATING_UNARY(sqrt)
LOOM_FLOATING_UNARY(rsqrt)
LOOM_FLOATING_UNARY(sin)
LOOM_FLOATING_UNARY(cos)
LOOM_FLOATING_UNARY(tanh)
LOOM_FLOATING_UNARY(sigmoid)
LOOM_FLOATING_UNARY(silu)
#undef LOOM_FLOATING_UNARY

void gelu_kernel(const Tensor& out, const Tensor& in, bool tanh_approximation) {
  visit_floating_dtype(out.dtype(), "gelu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    unary_array_typed<T>(out, in, tanh_approximation ? &ArrayKernels<M>::gelu_tanh : &ArrayKernels<M>::gelu);
  });
}

void gelu_backward_kernel(const Tensor& out, const Tensor& grad, const Tensor& x, bool tanh_approximation) {
  visit_floating_dtype(out.dtype(), "gelu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    const auto gelu_backward = array_kernels<M>().gelu_backward;
    apply<3>({&out, &grad, &x}, kHeavyGrain, [&](char* const* p, const int64_t* s, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      const T* g = reinterpret_cast<const T*>(p[1]);
      const T* xs = reinterpret_cast<const T*>(p[2]);
      constexpr int64_t s1 = sizeof(T);
      if constexpr (std::is_same_v<T, M>) {
        if (s[0] == s1 && s[1] == s1 && s[2] == s1) {
          gelu_backward(g, xs, o, n, tanh_approximation);
          return;
        }
      }
      // Strided or 16-bit: gather blocks into opmath buffers.
      constexpr int64_t kBlock = kConvertBlock;
      alignas(64) M gb[kBlock], xb[kBlock];
      const int64_t so = s[0] / s1, sg = s[1] / s1, sx = s[2] / s1;
      for (int64_t i = 0; i < n; i += kBlock) {
        const int64_t len = std::min(kBlock, n - i);
        for (int64_t j = 0; j < len; ++j) {
          gb[j] = static_cast<M>(g[(i + j) * sg]);
          xb[j] = static_cast<M>(xs[(i + j) * sx]);
        }
        gelu_backward(gb, xb, gb, len, tanh_approximation);
        for (int64_t j = 0; j < len; ++j) o[(i + j) * so] = static_cast<T>(gb[j]);
      }
    });
  });
}

// Simple unary ops on numeric dtypes (bool only where `allow_bool`).
template <class F>
void simple_unary(const Tensor& out, const Tensor& in, std::string_view op, bool allow_bool) {
  LOOM_CHECK(allow_bool || out.dtype() != DType::Bool, op, ": not supported for bool tensors");
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool> && !std::is_same_v<F, fn::Sign>) {
      LOOM_FAIL(op, ": not supported for bool tensors");
    } else {
      unary_typed<T, T>(out, in, F{});
    }
  });
}

void neg_kernel(const Tensor& out, const Tensor& in) { simple_unary<fn::Neg>(out, in, "neg", false); }
void abs_kernel(const Tensor& out, const Tensor& in) { simple_unary<fn::Abs>(out, in, "abs", false); }
void sign_kernel(const Tensor& out, const Tensor& in) { simple_unary<fn::Sign>(out, in, "sign", true); }
void relu_kernel(const Tensor& out, const Tensor& in) { simple_unary<fn::Relu>(out, in, "relu", false); }

void logical_not_kernel(const Tensor& out, const Tensor& in) {
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    unary_typed<bool, T>(out, in, [](M v) { return !(v != M(0)); });
  });
}

template <class T>
void clamp_typed(const Tensor& out, const Tensor& in, const Scalar* min, const Scalar* max) {
  using M = opmath_t<T>;
  if constexpr (std::is_floating_point_v<M>) {
    // A NaN bound makes every result NaN (torch.clamp propagates NaN from the bounds too).
    if ((min && std::isnan(min->to_double())) || (max && std::isnan(max->to_double()))) {
      unary_typed<T, T>(out, in, [](M) { return std::numeric_limits<M>::quiet_NaN(); });
      return;
    }
  }
  const M lo = min ? min->to<M>() : std::numeric_limits<M>::lowest();
  const M hi = max ? max->to<M>() : std::numeric_limits<M>::max();
  // max(x, lo) then min(., hi): hi wins when lo > hi; NaN inputs stay NaN.
  unary_typed<T, T>(out, in, [lo, hi](M x) {
    const M t = x < lo ? lo : x;
    return t > hi ? hi : t;
  });
}

void clamp_kernel(const Tensor& out, const Tensor& in, const Scalar* min, const Scalar* max) {
  visit_numeric_dtype(out.dtype(), "clamp", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      LOOM_FAIL("clamp: not supported for bool tensors");
    } else {
      clamp_typed<T>(out, in, min, max);
    }
  });
}

// ---- binary --------------------------------------------------------------------------------
template <class Out, class In, class F>
void binary_contig(Out* __restrict o, const In* __restrict x, const In* __restrict y, int64_t n, const F& f) {
  using M = opmath_t<In>;
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<Out>(f(static_cast<M>(x[i]), static_cast<M>(y[i])));
}

template <class Out, class In, class F>
void binary_scalar_b(Out* __restrict o, const In* __restrict x, opmath_t<In> y, int64_t n, const F& f) {
  using M = opmath_t<In>;
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<Out>(f(static_cast<M>(x[i]), y));
}

template <class Out, class In, class F>
void binary_scalar_a(Out* __restrict o, opmath_t<In> x, const In* __restrict y, int64_t n, const F& f) {
  using M = opmath_t<In>;
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<Out>(f(x, static_cast<M>(y[i])));
}

// out[i] = f(a[i], b[i]) with unit-stride, scalar-operand and strided paths.
template <class Out, class In, class F>
void binary_typed(const Tensor& out, const Tensor& a, const Tensor& b, const F& f) {
  using M = opmath_t<In>;
  const bool stream = should_stream(out, {&a, &b});
  apply<3>({&out, &a, &b}, kParallelGrain, [&](char* const* p, const int64_t* s, int64_t n) {
    Out* o = reinterpret_cast<Out*>(p[0]);
    const In* x = reinterpret_cast<const In*>(p[1]);
    const In* y = reinterpret_cast<const In*>(p[2]);
    constexpr int64_t so1 = sizeof(Out), si1 = sizeof(In);
    if constexpr (kIsReducedFloat<In>) {
      binary_blocked<Out, In>(o, s[0] / so1, x, s[1] / si1, y, s[2] / si1, n, f);
    } else if (s[0] == so1 && s[1] == si1 && s[2] == si1) {
      write_out(o, n, stream, [&](Out* d, int64_t i, int64_t len) { binary_contig<Out, In>(d, x + i, y + i, len, f); });
    } else if (s[0] == so1 && s[1] == si1 && s[2] == 0) {
      const M yv = static_cast<M>(*y);
      write_out(o, n, stream, [&](Out* d, int64_t i, int64_t len) { binary_scalar_b<Out, In>(d, x + i, yv, len, f); });
    } else if (s[0] == so1 && s[1] == 0 && s[2] == si1) {
      const M xv = static_cast<M>(*x);
      write_out(o, n, stream, [&](Out* d, int64_t i, int64_t len) { binary_scalar_a<Out, In>(d, xv, y + i, len, f); });
    } else {
      const int64_t so = s[0] / so1, sx = s[1] / si1, sy = s[2] / si1;
      for (int64_t i = 0; i < n; ++i)
        o[i * so] = static_cast<Out>(f(static_cast<M>(x[i * sx]), static_cast<M>(y[i * sy])));
    }
  });
}

// Ops whose output has the input dtype, for every dtype.
template <class F>
void same_type_binary(const Tensor& out, const Tensor& a, const Tensor& b) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_typed<T, T>(out, a, b, F{});
  });
}

// Comparisons and logical ops: bool output, inputs of any (common) dtype.
template <class F>
void bool_binary(const Tensor& out, const Tensor& a, const Tensor& b) {
  visit_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_typed<bool, T>(out, a, b, F{});
  });
}

void add_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { same_type_binary<fn::Add>(out, a, b); }
void sub_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  LOOM_CHECK(out.dtype() != DType::Bool, "sub: not supported for bool tensors");
  same_type_binary<fn::Sub>(out, a, b);
}
void mul_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { same_type_binary<fn::Mul>(out, a, b); }
void maximum_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  same_type_binary<fn::Maximum>(out, a, b);
}
void minimum_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  same_type_binary<fn::Minimum>(out, a, b);
}

void div_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  visit_floating_dtype(out.dtype(), "div", [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_typed<T, T>(out, a, b, fn::Div{});
  });
}

// pow with a broadcast scalar exponent takes the usual shortcuts (as PyTorch): x*x for 2,
// sqrt for 0.5, reciprocals for -1, -0.5 and -2; integers use exponentiation by squaring.
void pow_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  visit_numeric_dtype(out.dtype(), "pow", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    if constexpr (std::is_same_v<T, bool>) {
      LOOM_FAIL("pow: not supported for bool tensors");
    } else if constexpr (std::is_floating_point_v<M>) {
      if (all_strides_zero(b)) {
        const M e = static_cast<M>(*static_cast<const T*>(b.data_ptr()));
        if (e == M(2)) return unary_typed<T, T>(out, a, [](M x) { return x * x; });
        if (e == M(3)) return unary_typed<T, T>(out, a, [](M x) { return x * x * x; });
        if (e == M(1)) return unary_typed<T, T>(out, a, [](M x) { return x; });
        if (e == M(-1)) return unary_typed<T, T>(out, a, [](M x) { return M(1) / x; });
        if (e == M(-2)) return unary_typed<T, T>(out, a, [](M x) { return M(1) / (x * x); });
        if (e == M(0.5)) return unary_array_typed<T>(out, a, &ArrayKernels<M>::sqrt);
        if (e == M(-0.5)) return unary_array_typed<T>(out, a, &ArrayKernels<M>::rsqrt);
      }
    }
    if constexpr (!std::is_same_v<T, bool>) binary_typed<T, T>(out, a, b, fn::Pow{});
  });
}

void eq_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { bool_binary<fn::Eq>(out, a, b); }
void ne_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { bool_binary<fn::Ne>(out, a, b); }
void lt_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { bool_binary<fn::Lt>(out, a, b); }
void le_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { bool_binary<fn::Le>(out, a, b); }
void gt_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { bool_binary<fn::Gt>(out, a, b); }
void ge_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { bool_binary<fn::Ge>(out, a, b); }
void logical_and_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  bool_binary<fn::LogicalAnd>(out, a, b);
}
void logical_or_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  bool_binary<fn::LogicalOr>(out, a, b);
}

// ---- where ---------------------------------------------------------------------------------
// The select is done on bits with a mask made from the condition, so that it vectorises: GCC
// turns `c ? x : y` back into a branch per element, even under `omp simd`.
template <class T>
inline T select_bits(bool c, T x, T y) {
  using U = std::conditional_t<sizeof(T) == 1, uint8_t,
                               std::conditional_t<sizeof(T) == 2, uint16_t,
                                                  std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
  static_assert(sizeof(U) == sizeof(T));
  const U mask = static_cast<U>(U(0) - static_cast<U>(c));
  return std::bit_cast<T>(static_cast<U>((std::bit_cast<U>(x) & mask) | (std::bit_cast<U>(y) & ~mask)));
}

template <class T>
void where_contig(T* __restrict o, const bool* __restrict c, const T* __restrict x, const T* __restrict y,
                  int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = select_bits(c[i], x[i], y[i]);
}

template <class T>
void where_scalar_a(T* __restrict o, const bool* __restrict c, T x, const T* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = select_bits(c[i], x, y[i]);
}

template <class T>
void where_scalar_b(T* __restrict o, const bool* __restrict c, const T* __restrict x, T y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = select_bits(c[i], x[i], y);
}

void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  LOOM_CHECK(cond.dtype() == DType::Bool, "where: expected a bool condition, got ", cond.dtype());
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool stream = should_stream(out, {&cond, &a, &b});
    apply<4>({&out, &cond, &a, &b}, kParallelGrain, [&](char* const* p, const int64_t* s, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      const bool* c = reinterpret_cast<const bool*>(p[1]);
      const T* x = reinterpret_cast<const T*>(p[2]);
      const T* y = reinterpret_cast<const T*>(p[3]);
      constexpr int64_t s1 = sizeof(T);
      if (s[0] == s1 && s[1] == 1 && s[2] == s1 && s[3] == s1) {
        write_out(o, n, stream, [&](T* d, int64_t i, int64_t len) { where_contig<T>(d, c + i, x + i, y + i, len); });
      } else if (s[0] == s1 && s[1] == 1 && s[2] == 0 && s[3] == s1) {  // masked_fill
        const T xv = *x;
        write_out(o, n, stream, [&](T* d, int64_t i, int64_t len) { where_scalar_a<T>(d, c + i, xv, y + i, len); });
      } else if (s[0] == s1 && s[1] == 1 && s[2] == s1 && s[3] == 0) {  // relu's backward: where(mask, g, 0)
        const T yv = *y;
        write_out(o, n, stream, [&](T* d, int64_t i, int64_t len) { where_scalar_b<T>(d, c + i, x + i, yv, len); });
      } else {
        const int64_t so = s[0] / s1, sc = s[1], sx = s[2] / s1, sy = s[3] / s1;
        for (int64_t i = 0; i < n; ++i) o[i * so] = c[i * sc] ? x[i * sx] : y[i * sy];
      }
    });
  });
}

// relu's gradient, as PyTorch computes it: one pass over grad and the output, where
// where(y > 0, g, 0) took two and a bool mask. `!(x <= t)`, so that a NaN passes grad on.
template <class T>
void threshold_backward_contig(T* __restrict o, const T* __restrict g, const T* __restrict x, opmath_t<T> t,
                               int64_t n) {
  using M = opmath_t<T>;
  const T zero = static_cast<T>(M(0));
  for (int64_t i = 0; i < n; ++i) o[i] = select_bits(!(static_cast<M>(x[i]) <= t), g[i], zero);
}

void threshold_backward_kernel(const Tensor& out, const Tensor& grad, const Tensor& self, double threshold) {
  visit_floating_dtype(out.dtype(), "threshold_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    // Compared in the operands' dtype, as PyTorch does: the threshold is rounded to it first.
    const M t = static_cast<M>(static_cast<T>(threshold));
    const bool stream = should_stream(out, {&grad, &self});
    apply<3>({&out, &grad, &self}, kParallelGrain, [&](char* const* p, const int64_t* s, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      const T* g = reinterpret_cast<const T*>(p[1]);
      const T* x = reinterpret_cast<const T*>(p[2]);
      constexpr int64_t s1 = sizeof(T);
      if (s[0] == s1 && s[1] == s1 && s[2] == s1) {
        write_out(o, n, stream, [&](T* d, int64_t i, int64_t len) {
          threshold_backward_contig<T>(d, g + i, x + i, t, len);
        });
      } else {
        const int64_t so = s[0] / s1, sg = s[1] / s1, sx = s[2] / s1;
        for (int64_t i = 0; i < n; ++i)
          o[i * so] = static_cast<M>(x[i * sx]) <= t ? static_cast<T>(M(0)) : g[i * sg];
      }
    });
  });
}

}  // namespace

void register_elementwise_kernels() {
  constexpr DeviceType cpu = DeviceType::CPU;
  register_kernel<Op::neg>(cpu, neg_kernel);
  register_kernel<Op::exp>(cpu, exp_kernel);
  register_kernel<Op::log>(cpu, log_kernel);
  register_kernel<Op::log1p>(cpu, log1p_kernel);
  register_kernel<Op::sqrt>(cpu, sqrt_kernel);
  register_kernel<Op::rsqrt>(cpu, rsqrt_kernel);
  register_kernel<Op::abs>(cpu, abs_kernel);
  register_kernel<Op::sign>(cpu, sign_kernel);
  register_kernel<Op::sin>(cpu, sin_kernel);
  register_kernel<Op::cos>(cpu, cos_kernel);
  register_kernel<Op::tanh>(cpu, tanh_kernel);
  register_kernel<Op::sigmoid>(cpu, sigmoid_kernel);
  register_kernel<Op::relu>(cpu, relu_kernel);
  register_kernel<Op::silu>(cpu, silu_kernel);
  register_kernel<Op::logical_not>(cpu, logical_not_kernel);
  register_kernel<Op::gelu>(cpu, gelu_kernel);
  register_kernel<Op::gelu_backward>(cpu, gelu_backward_kernel);
  register_kernel<Op::threshold_backward>(cpu, threshold_backward_kernel);
  register_kernel<Op::clamp>(cpu, clamp_kernel);
  register_kernel<Op::add>(cpu, add_kernel);
  register_kernel<Op::sub>(cpu, sub_kernel);
  register_kernel<Op::mul>(cpu, mul_kernel);
  register_kernel<Op::div>(cpu, div_kernel);
  register_kernel<Op::pow>(cpu, pow_kernel);
  register_kernel<Op::maximum>(cpu, maximum_kernel);
  register_kernel<Op::minimum>(cpu, minimum_kernel);
  register_kernel<Op::eq>(cpu, eq_kernel);
  register_kernel<Op::ne>(cpu, ne_kernel);
  register_kernel<Op::lt>(cpu, lt_kernel);
  register_kernel<Op::le>(cpu, le_kernel);
  register_kernel<Op::gt>(cpu, gt_kernel);
  register_kernel<Op::ge>(cpu, ge_kernel);
  register_kernel<Op::logical_and>(cpu, logical_and_kernel);
  register_kernel<Op::logical_or>(cpu, logical_or_kernel);
  register_kernel<Op::where>(cpu, where_kernel);
}

}  // namespace loom::cpu
